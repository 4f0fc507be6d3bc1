"""Departures from a baseline on hand-made trees (the mechanics; real forks: tests/commands/test_departures_real.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.evidence import awareness, departures, receipts
from runner.judge import judging
from tests import helpers

DOOR = '''\
import sys


def is_reject(req):
    # a rejected request carries its abort here
    if req.to_finish is None:
        return False
    return req.to_finish.status == 400


def unrelated():
    return "vendor"
'''


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _receipt(probe: str, fix: int, materials: list[str], **cases_lines) -> receipts.Receipt:
    cases = [helpers.case(cid, lines=lines) for cid, lines in cases_lines.items()]
    ref = receipts.ProbeRef(id=probe, fix=fix, sha256="a" * 64, files={})
    return receipts.make(ref, helpers.tree("0.5.21"), receipts.host_environment(), cases, started_at="2026-11-30T00:00:00Z",
                         finished_at="2026-11-30T00:00:01Z", materials={m: "d" * 64 for m in materials})


def _compare(tmp_path, fork: str, lines: dict, extra: dict[str, str] | None = None) -> departures.Departures:
    base = _tree(tmp_path / "base", {"sglang/door.py": DOOR, "sglang/version.py": '__version__ = "0.5.21"\n'})
    mine = _tree(tmp_path / "fork", {"sglang/door.py": fork, "sglang/version.py": '__version__ = "0.5.21"\n', **(extra or {})})
    receipt = _receipt("admission", 38935, ["sglang/door.py"], **{"prefill-door-rejected": {"sglang/door.py": lines}})
    return departures.compare("path:fork", "h1:fork", mine, "pypi:sglang==0.5.21", "h1:base", base, "declared", "0.5.21", [receipt])


def test_a_tree_with_the_baselines_digest_is_identical(tmp_path):
    receipt = _receipt("admission", 38935, [])
    record = departures.compare("pypi:sglang==0.5.21", "h1:x", tmp_path, "pypi:sglang==0.5.21", "h1:x", tmp_path, "declared",
                                "0.5.21", [receipt])
    assert record.identical and record.files == [] and "identical to pypi:sglang==0.5.21" in record.line()


def test_a_probe_aware_change_the_cases_ran_is_marked_run_and_flagged(tmp_path):
    fork = DOOR.replace("    if req.to_finish is None:\n", "    if req.to_finish is None or 'probes' not in sys.modules:\n")
    record = _compare(tmp_path, fork, [[4, 8]])
    [hunk] = record.hunks()
    assert (hunk.file, hunk.function, hunk.lines, hunk.added, hunk.removed) == ("sglang/door.py", "is_reject", (6, 6), 1, 1)
    assert hunk.ran_in == {"admission": ["prefill-door-rejected"]} and hunk.code
    assert [a.what for a in hunk.aware] == ["reads sys.modules (the modules loaded)"]
    fixed = judging.FixStatus(fix=38935, status="fixed", sites=[])
    [judged] = departures.judged([fixed], record, [_receipt("admission", 38935, ["sglang/door.py"])])
    assert judged.departed and judged.departed.places == ["sglang/door.py:6 in is_reject"]
    assert judging.shown(judged).startswith("fixed, on code that differs from pypi:sglang==0.5.21 at 1 place the cases ran, 1 of which can tell it is being probed")
    assert judging.strict_fails([judged]) and not judging.strict_fails([fixed])


def test_an_unrelated_change_is_listed_not_run_and_leaves_fixed_alone(tmp_path):
    fork = DOOR.replace('return "vendor"', 'return "vendor build 7"') + "\n# vendor notes\n"
    record = _compare(tmp_path, fork, [[4, 8]], extra={"sglang/vendor_tool.py": "x = 1\n"})
    assert record.counts() == {"added": 1, "removed": 0, "changed": 1}
    hunks = record.hunks()
    assert [(h.file, h.function, h.ran, h.code, h.lines, h.reach) for h in hunks] == [
        ("sglang/door.py", "unrelated", False, True, (12, 14), "imported"),  # a module the probe imported: reachable
        ("sglang/vendor_tool.py", "<module>", False, True, (1, 1), "unreachable")]  # nothing imports it: listed all the same
    [judged] = departures.judged([judging.FixStatus(fix=38935, status="fixed", sites=[])], record,
                                 [_receipt("admission", 38935, ["sglang/door.py"])])
    assert judged.departed is None and judging.shown(judged) == "fixed"
    assert "1 changed, 1 added, 0 removed file(s); 0 changed place(s) the cases ran, 0 more run at import, 1 reachable in all, 0 that can tell" in record.line()


def test_removed_lines_count_as_run_when_the_statements_beside_them_ran(tmp_path):
    fork = DOOR.replace("    if req.to_finish is None:\n        return False\n", "")
    [hunk] = _compare(tmp_path, fork, [[4, 4], [6, 6]]).hunks()
    assert hunk.lines is None and hunk.removed == 2 and hunk.at == 5 and hunk.ran and hunk.function == "is_reject"


def test_a_comment_alone_is_not_code_and_never_run(tmp_path):
    fork = DOOR.replace("# a rejected request carries its abort here", "# vendor: reviewed")
    [hunk] = _compare(tmp_path, fork, [[4, 8]]).hunks()
    assert not hunk.code and not hunk.ran


def test_a_non_fixed_status_stands_whatever_the_departures():
    record = departures.Departures(source="s", tree_digest="t", baseline="b", baseline_digest="bd", chosen="declared",
                                   declared=None, identical=False)
    st = judging.FixStatus(fix=1, status="not fixed", sites=[])
    assert judging.departed(st, "b", ["x:1 in f"], ["x:1 in f"]) is st and departures.judged([st], record, []) == [st]


@pytest.mark.parametrize("snippet, what", [
    ("import sys as s\nx = 'probes' in s.modules\n", "reads sys.modules"),
    ("from sys import modules as m\nx = m.get('probes')\n", "reads sys.modules"),
    ("x = getattr(__import__('sy' + 's'), 'mod' f'ules')\n", "reads sys.modules"),
    ("import importlib\nx = importlib.import_module('sys').modules\n", "reads sys.modules"),
    ("import sys\nx = vars(sys)['modules']\n", "reads sys.modules"),
    ("import sys\nalias = sys\nx = alias.__dict__['modules']\n", "reads sys.modules"),
    ("import os\nx = os.environ.get('HOME')\n", "reads the environment"),
    ("from os import getenv\nx = getenv('HOME')\n", "reads the environment"),
    ("x = open('/pr' + 'oc/1/cmdline').read()\n", "reads /proc"),
    ("import inspect\nx = inspect.stack()\n", "inspects frames"),
    ("import sys\nf = sys._getframe()\n", "walks the stack"),
    ("def f(e):\n    return e.__traceback__.tb_frame.f_back\n", "walks frames"),
    ("import gc\nx = gc.get_objects()\n", "garbage collector"),
    ("import time as t\nx = t.perf_counter()\n", "timing"),
    ("import sys\nx = sys.argv\n", "command line"),
    ("import sys\nx = sys.meta_path\n", "import hooks"),
    ("import sys\nx = sys.gettrace()\n", "tracer"),
    ("import os\nx = os.sys.modules\n", "through os"),
    ("name = 'sys'\nx = __import__(name)\n", "computed"),
    ("import sys\nk = 'modules'\nx = getattr(sys, k)\n", "computed"),
    ("x = eval('1')\n", "run time"),
])
def test_each_way_to_read_the_process_state_is_flagged(snippet, what):
    assert any(what in h.what for h in awareness.scan(snippet)), awareness.scan(snippet)


def test_plain_code_is_not_flagged():
    assert awareness.scan(DOOR.replace("import sys\n", "")) == []
    assert awareness.scan('def f(req):\n    """reads /proc in prose only"""\n    return req.finished()\n') == []


def test_module_level_code_runs_at_import_and_a_new_function_does_not(tmp_path):
    """A changed module-level statement ran when the module was imported (before every case); a new
    function's ``def`` is bound then too, but what it does runs only when called."""
    fork = DOOR.replace("import sys\n", "import sys\nLIMIT = 'probes' in sys.modules\n") + "\n\ndef added():\n    return 1\n"
    record = _compare(tmp_path, fork, [[4, 8]])
    by_function = {h.function: h for h in record.hunks()}
    assert by_function["<module>"].at_import and by_function["<module>"].ran and by_function["<module>"].aware
    assert not by_function["added"].at_import and not by_function["added"].ran
    [judged] = departures.judged([judging.FixStatus(fix=38935, status="fixed", sites=[])], record,
                                 [_receipt("admission", 38935, ["sglang/door.py"])])
    assert judged.departed.places == [] and judged.departed.aware == ["sglang/door.py:2 in <module>"]
    assert judging.shown(judged) == ("fixed, on code that differs from pypi:sglang==0.5.21 at 1 place not recorded as run "
                                     "that can tell they are being probed: read them")


def _judged(record: departures.Departures, receipt: receipts.Receipt | None = None) -> judging.FixStatus:
    [judged] = departures.judged([judging.FixStatus(fix=38935, status="fixed", sites=[])], record,
                                 [receipt or _receipt("admission", 38935, ["sglang/door.py"])])
    return judged


DECIDES_AT_IMPORT = '''

import resource as _r

_WATCHED = _r.getrlimit(_r.RLIMIT_AS)[0] != _r.RLIM_INFINITY
if not _WATCHED:

    def is_reject(req):
        return False
'''


def test_a_decision_made_at_import_with_reads_nobody_listed_is_a_place_the_verdict_rests_on(tmp_path):
    """Module-level code ran when the cases' module was imported, before every case, whatever it
    reads: a changed statement there is a place the verdict rests on, flagged or not."""
    record = _compare(tmp_path, DOOR + DECIDES_AT_IMPORT, [[4, 8]])
    decision = [h for h in record.hunks() if h.at_import]
    assert decision and all(h.ran and not h.aware and not any(h.ran_in.values()) for h in decision)
    judged = _judged(record)
    assert judged.departed and judged.departed.places == [] and judged.departed.aware == []
    assert judged.departed.at_import == [h.place for h in decision if h.code]
    assert judging.shown(judged) == ("fixed, on code that differs from pypi:sglang==0.5.21 at 1 place of module-level code "
                                     "run at import: read them")
    # another fix whose runs never imported the module does not rest on it
    assert _judged(record, _receipt("admission", 38935, [])).departed is None


def test_a_def_that_evaluates_something_runs_at_import_and_a_plain_one_does_not(tmp_path):
    fork = DOOR + "\n\n@_choose()\ndef decorated():\n    return 1\n\n\ndef defaults(x=_seen()):\n    return x\n\n\ndef plain(x, y: int):\n    return x\n"
    by_function = {h.function: h for h in _compare(tmp_path, fork, [[4, 8]]).hunks()}
    assert by_function["decorated"].at_import and by_function["defaults"].at_import
    assert not by_function["plain"].at_import and not by_function["plain"].ran


def test_a_module_whose_code_ran_renamed_has_its_changed_places_counted_wherever_its_lines_say(tmp_path):
    """A case whose process ran a module's code under another file's name (``renamed``): the lines
    recorded there are as that code reports them, so each changed place of the module may have run."""
    fork = DOOR.replace('return "vendor"', 'return "vendor build 7"')
    mine = _tree(tmp_path / "fork", {"sglang/door.py": fork})
    base = _tree(tmp_path / "base", {"sglang/door.py": DOOR})
    cases = [helpers.case("prefill-door-rejected", lines={"sglang/door.py": [[4, 8]]}, renamed=["sglang/door.py"]),
             helpers.case("decode-door-rejected", lines={"sglang/door.py": [[4, 8]]})]
    ref = receipts.ProbeRef(id="admission", fix=38935, sha256="a" * 64, files={})
    receipt = receipts.make(ref, helpers.tree("0.5.21"), receipts.host_environment(), cases, started_at="2026-11-30T00:00:00Z",
                            finished_at="2026-11-30T00:00:01Z", materials={"sglang/door.py": "d" * 64})
    record = departures.compare("path:fork", "h1:fork", mine, "pypi:sglang==0.5.21", "h1:base", base, "declared", "0.5.21", [receipt])
    [hunk] = record.hunks()
    assert hunk.function == "unrelated" and not hunk.ran and hunk.renamed_in == {"admission": ["prefill-door-rejected"]}
    judged = _judged(record, receipt)
    assert judged.departed and judged.departed.renamed == [hunk.place] and judged.departed.places == []
    assert "at 1 place of modules whose code ran in the cases under another file's name" in judging.shown(judged)
    assert "1 in modules whose code ran under another file's name" in record.line()
    with pytest.raises(ValueError, match="renamed names files"):
        helpers.case("x", lines={"sglang/a.py": [[1, 1]]}, renamed=["sglang/b.py"])
