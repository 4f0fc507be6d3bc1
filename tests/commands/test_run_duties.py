"""``run --via releases`` checks pins.toml's duty-level brackets (issue 40): the part of #41404 that is
in 0.5.21 (a failure decode did not initiate holds the pages) is reproduced case by case on 0.5.20 and
0.5.21, and a bracket the behaviour does not show is "NOT as pinned", exit 1, naming each case."""

from __future__ import annotations

import pytest

from runner import cli
from runner.evidence import pins
from tests.records import checked

pytestmark = pytest.mark.slow  # real releases, environments and SGLang imports


def test_a_duty_bracket_is_reproduced_and_one_the_behaviour_contradicts_is_not(release_tree, cache, tmp_path, capsys):
    for v in ("0.5.20", "0.5.21", "0.5.22"):
        release_tree(v)
    out = tmp_path / "run"
    assert cli.main(["run", "--via", "releases", "--fix", "41404", "--out", str(out), "--cache-dir", str(cache.root)]) == 0
    (check,) = checked(out)["duties"]
    assert (check["as_pinned"], check["without"], check["with"]) == (True, "pypi:sglang==0.5.20", "pypi:sglang==0.5.21")
    assert "as pinned #41404 part: a failure decode did not initiate" in capsys.readouterr().out
    # The same part pinned one release later: at 0.5.21 it already holds, case by case
    moved = tmp_path / "pins.toml"
    text = pins.default_path().read_text()
    marker = 'cases = ["other-rank-fails-while-writing"'
    head, tail = text.split(marker)
    moved.write_text(head + marker + tail.replace('releases = { without = "0.5.20", with = "0.5.21" }',
                                                  'releases = { without = "0.5.21", with = "0.5.22" }', 1))
    out2 = tmp_path / "run2"
    assert cli.main(["run", "--via", "releases", "--fix", "41404", "--pins", str(moved), "--out", str(out2),
                     "--cache-dir", str(cache.root)]) == 1
    (check,) = checked(out2)["duties"]
    assert not check["as_pinned"]
    assert "lifetime-no-early-release already holds in other-rank-fails-while-writing on the tree without" in check["why"]
    assert "NOT as pinned #41404 part" in capsys.readouterr().out
