"""Which baseline a tree is compared with (runner/commands/baseline.py), on hand-made path: trees."""

from __future__ import annotations

import pytest

from runner import errors
from runner.commands import baseline, pipeline
from runner.store import sources, specs
from runner.store.cache import Store

WHEEL_STYLE = ("try:\n    from sglang._version import __version__\nexcept ImportError:\n"
               "    __version__ = '0.0.0.dev0'\n")


def _tree(tmp_path, name: str, files: dict[str, str]) -> sources.Tree:
    root = tmp_path / name
    for rel, text in {"sglang/__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return sources.resolve(specs.parse(f"path:{root}"), Store.at(tmp_path / "cache"))


@pytest.mark.parametrize("files, declared", [
    ({"sglang/version.py": '__version__ = "0.5.21"\n'}, "0.5.21"),
    ({"sglang/version.py": WHEEL_STYLE, "sglang/_version.py": "__version__ = version = '0.5.20'\n"}, "0.5.20"),
    ({"sglang/version.py": WHEEL_STYLE}, None),  # a git checkout: only the fallback, which is no declaration
    ({"sglang/version.py": "__version__ = compute()\n"}, None),
    ({}, None),
])
def test_the_declared_version_is_read_never_run(tmp_path, files, declared):
    assert baseline.declared_version(_tree(tmp_path, "t", files).root) == declared


def test_no_usable_declaration_is_said_in_one_line_and_the_audit_goes_on(tmp_path):
    opts = pipeline.Options(cache=Store.at(tmp_path / "cache"))
    none = baseline.of(_tree(tmp_path, "a", {}), None, opts)
    assert none.tree is None and "declares no version; give --against SOURCE" in none.unavailable
    local = baseline.of(_tree(tmp_path, "b", {"sglang/version.py": "__version__ = 'main-branch'\n"}), None, opts)
    assert local.tree is None and "'main-branch', which is not a release" in local.unavailable
    record = baseline.departures_of("path:b", _tree(tmp_path, "b", {}), local, [])
    assert record.baseline is None and record.line().startswith("path:b: no baseline: it declares version")


def test_against_names_any_source_and_an_identical_tree_says_so(tmp_path):
    opts = pipeline.Options(cache=Store.at(tmp_path / "cache"))
    files = {"sglang/version.py": '__version__ = "0.5.21+acme.3"\n', "sglang/door.py": "x = 1\n"}
    mine, theirs = _tree(tmp_path, "mine", files), _tree(tmp_path, "theirs", files)
    chosen = baseline.of(mine, f"path:{tmp_path / 'theirs'}", opts)
    assert (chosen.chosen, chosen.declared, chosen.tree.identity.tree_digest) == ("against", "0.5.21+acme.3", theirs.identity.tree_digest)
    record = baseline.departures_of("path:mine", mine, chosen, [])
    assert record.identical and record.line() == f"path:mine: identical to path:{tmp_path / 'theirs'} (given with --against)"
    with pytest.raises(errors.BadInput):
        baseline.check_against("pypi:sglang>=0.5")
