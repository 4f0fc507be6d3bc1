"""Per-case line coverage inside the harness (probes/coverage.py): exactly the tree's lines a case
ran, nothing outside the tree, and no record rather than a partial one (no SGLang needed: a small
module under a fake tree root stands in for the tree)."""

from __future__ import annotations

import importlib.util
import sys
import threading

import pytest
from hypothesis import given, strategies as st

from probes import coverage, duties, harness
from probes.case import Case, Places

GOOD = {"outcome": "observed", "classification": "clean", "effects": {}, "error": None, "missing": None}

MODULE = """\
def door(rejected):
    if rejected:
        return "retired"
    return "queued"


def spawn():
    worker = threading.Thread(target=door, args=(True,))
    worker.start()
    worker.join()
"""


@pytest.fixture
def tree(tmp_path):
    """A module under ``<root>/sglang/``, imported by file location (as the tree's are)."""
    root = tmp_path / "tree"
    (root / "sglang").mkdir(parents=True)
    path = root / "sglang" / "door.py"
    path.write_text("import threading\n\n" + MODULE)
    spec = importlib.util.spec_from_file_location("fake_tree_door", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    outside = tmp_path / "outside.py"
    outside.write_text(MODULE)
    spec = importlib.util.spec_from_file_location("fake_outside", outside)
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    return root, module, other


def test_the_lines_a_call_ran_are_recorded_and_nothing_outside_the_tree(tree):
    root, module, other = tree
    recorder = coverage.Recorder(str(root)).start()
    module.door(False)
    other.door(True)  # the same code outside the root: not the tree's
    lines = recorder.stop()
    # the def line (entered), the test, the second return; the first return did not run
    assert lines == {"sglang/door.py": [[3, 4], [6, 6]]}


def test_threads_the_case_starts_are_recorded(tree):
    root, module, _ = tree
    recorder = coverage.Recorder(str(root)).start()
    module.spawn()
    lines = recorder.stop()
    assert coverage.expand(lines["sglang/door.py"]) == {3, 4, 5, 9, 10, 11, 12}


def test_a_tracer_displaced_by_the_tree_leaves_no_record(tree):
    """A tree that swaps the tracer out would make lines it ran read as not run: no claim instead."""
    root, module, _ = tree
    recorder = coverage.Recorder(str(root)).start()
    module.door(True)
    sys.settrace(None)
    assert recorder.stop() is None


@given(st.sets(st.integers(min_value=1, max_value=500)))
def test_ranges_are_canonical_and_expand_back(lines):
    spans = coverage.ranges(lines)
    assert coverage.expand(spans) == lines
    assert coverage.canonical(spans) == bool(lines)


@pytest.mark.parametrize("spans", [[], [[0, 1]], [[2, 1]], [[1, 2], [3, 4]], [[3, 4], [1, 1]], [[1, 2, 3]],
                                   [[1.0, 2]], [["1", 2]], [[1, 2], [2, 5]], "1-2"])
def test_anything_else_is_not_canonical(spans):
    assert not coverage.canonical(spans)


def _case(case_id: str = "c") -> Case:
    return Case(id=case_id, site="prefill-door", role="bug", title="t", duties=("door-returns",),
                build=lambda journal: None, requires=(), checks=duties.DUTIES)


def _run(monkeypatch, root, body, timeout: float = 10) -> dict:
    monkeypatch.setattr(harness, "run_case", lambda case, places: body())
    result, _ = harness.run_forked(_case(), Places(sglang_root=str(root), probes_dir=harness.HERE), timeout,
                                   harness.ImportLog(frozenset()))
    return result


def test_each_case_result_carries_the_lines_its_process_ran(monkeypatch, tree):
    root, module, _ = tree
    result = _run(monkeypatch, root, lambda: (module.door(True), GOOD)[1])
    assert result["outcome"] == "observed" and result["lines"] == {"sglang/door.py": [[3, 5]]}


def test_no_lines_for_a_case_not_applicable_or_one_that_sent_nothing(monkeypatch, tree):
    root, module, _ = tree
    na = {**GOOD, "outcome": "not_applicable", "classification": "inconclusive", "effects": None, "missing": "sglang.x"}
    assert _run(monkeypatch, root, lambda: (module.door(True), na)[1])["lines"] is None
    assert _run(monkeypatch, root, lambda: (module.door(True), sys.settrace(None), GOOD)[2])["lines"] is None
    hang = _run(monkeypatch, root, lambda: threading.Event().wait(), timeout=1)
    assert hang["outcome"] == "timeout" and hang["lines"] is None


@pytest.mark.parametrize("lines", [{"a.py": [[1, 2], [3, 3]]}, {"a.py": []}, {"a.py": [[5, 2]]}, [["a.py", 1]], {"a.py": "1-2"}])
def test_lines_outside_the_format_make_the_message_malformed(lines):
    message, why = harness.well_formed(harness.json.dumps({"result": GOOD, "lines": lines, "modules": [], "standins": []}).encode())
    assert message is None and "line ranges" in why


def test_renamed_files_must_be_files_whose_lines_were_recorded():
    message = {"result": GOOD, "lines": {"sglang/a.py": [[1, 2]]}, "renamed": ["sglang/b.py"], "modules": [], "standins": []}
    assert harness.well_formed(harness.json.dumps(message).encode())[0] is None
    assert harness.well_formed(harness.json.dumps({**message, "renamed": "sglang/a.py"}).encode())[0] is None
    assert harness.well_formed(harness.json.dumps({**message, "renamed": ["sglang/a.py"]}).encode())[0] is not None
    assert harness.well_formed(harness.json.dumps({**message, "renamed": None, "lines": None}).encode())[0] is not None


def _renamed(function, filename: str):
    """``function`` with its code object renamed, as a tree could at import (``co_filename`` replaced)."""
    function.__code__ = function.__code__.replace(co_filename=filename)
    return function


def test_code_renamed_after_a_file_outside_the_tree_is_recorded_under_the_module_that_runs_it(monkeypatch, tree, tmp_path):
    """A tree module's function renamed after a library's file still runs with its module's globals:
    its lines are the module's, and the case says its module ran code under another file's name."""
    root, module, other = tree
    _renamed(module.door, other.__file__)  # a real file outside the tree
    recorder = coverage.Recorder(str(root)).start()
    module.door(False)
    other.door(True)  # the library's own code, under the same file name: not the tree's
    lines = recorder.stop()
    assert lines == {"sglang/door.py": [[3, 4], [6, 6]]} and recorder.renamed() == ["sglang/door.py"]
    result = _run(monkeypatch, root, lambda: (module.door(True), GOOD)[1])
    assert result["lines"] == {"sglang/door.py": [[3, 5]]} and result["renamed"] == ["sglang/door.py"]


def test_generated_code_run_with_a_modules_globals_is_not_renamed_code(tree):
    """A dataclass's ``__init__`` is compiled from text (``<string>``) with its module's globals:
    generated, not renamed, and no line of the module is claimed for it."""
    root, module, _ = tree
    namespace: dict = {}
    exec(compile("def made(x):\n    return x\n", "<string>", "exec"), vars(module), namespace)
    recorder = coverage.Recorder(str(root)).start()
    namespace["made"](1)
    assert recorder.stop() == {} and recorder.renamed() == []


def test_a_tracer_turned_off_and_on_again_leaves_no_record(tree):
    """Lines hidden by switching the tracer off around some code would read as not run."""
    root, module, _ = tree
    recorder = coverage.Recorder(str(root)).start()
    mine = sys.gettrace()
    sys.settrace(None)
    module.door(True)
    sys.settrace(mine)
    assert recorder.stop() is None


def test_a_module_the_case_imports_records_its_lines_and_no_line_0(tree):
    """A module's code object starts at line 0 on 3.11 (it is reported when the module runs)."""
    root, _, _ = tree
    path = root / "sglang" / "late.py"
    path.write_text("X = 1\nY = X + 1\n")
    recorder = coverage.Recorder(str(root)).start()
    spec = importlib.util.spec_from_file_location("fake_tree_late", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert recorder.stop() == {"sglang/late.py": [[1, 2]]}
