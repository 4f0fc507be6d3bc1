"""The case space follows the fix's code: every name the fix's code decides on, in the releases that carry
each fix, is an input some dimension varies or is declared incidental with why (read with ``ast`` from the
stored trees, never imported). A release whose fix code grows a new branch fails here until its case
space varies what the branch reads."""

from __future__ import annotations

import pytest

from probes import duties, fixcode

FIXES = {38935: duties.SPACES["admission"], 36988: duties.SPACES["prefill-cleanup"]}


@pytest.mark.parametrize("version", ["0.5.21", "0.5.22", "0.5.23"])
def test_every_decision_of_the_fix_code_is_a_dimension(version, release_tree):
    root = release_tree(version).root

    def read(rel: str) -> str | None:
        path = root / rel
        return path.read_text(encoding="utf-8") if path.is_file() else None

    for fix, space in FIXES.items():
        for qualified, names in duties.FIX_CODE[fix].items():
            found = fixcode.locate(read, qualified)
            assert found is not None, f"{version}: {qualified} not found"
            _, node = found
            assert space.undeclared(fixcode.decisions(node, names)) == [], (version, qualified)
