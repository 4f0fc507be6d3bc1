"""``upstream-tests`` without SGLang: tests listed from a file's source, upstream's layout, bad
files refused before anything runs, and grading by cause (pure functions of recorded outcomes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner import cli
from runner.judge import upstream as judge_upstream
from runner.app import upstream_layout
from runner.commands import upstream_tests
from runner.commands.upstream_tests import Outcomes, Side
from runner.judge import targets
from runner.errors import BadInput
from runner.views import grading

STYLE = Path(__file__).resolve().parent / "upstream_style"


def test_tests_are_listed_from_source_as_pytest_collects_them():
    source = b'''
import unittest
import pytest
from sglang.test.test_utils import CustomTestCase

def test_top(): pass
async def test_async(): pass
def helper(): pass

@pytest.mark.parametrize("x", [1, 2])
def test_param(x): pass

class TestPlain:
    def test_a(self): pass
    def helper(self): pass

class TestWithInit:
    def __init__(self): pass
    def test_never(self): pass

class Base(CustomTestCase):
    def test_inherited(self): pass

class Derived(Base):
    def test_own(self): pass

class TestOptedOut(unittest.TestCase):
    __test__ = False
    def test_hidden(self): pass

class _Stand_in:
    def test_not_a_test(self): pass
'''
    tree = upstream_layout.parsed("--tests x", "test_x.py", source)
    assert upstream_layout.declared_tests(tree, "d/test_x.py") == [
        "d/test_x.py::test_top", "d/test_x.py::test_async", "d/test_x.py::test_param", "d/test_x.py::TestPlain::test_a",
        "d/test_x.py::Base::test_inherited", "d/test_x.py::Derived::test_own", "d/test_x.py::Derived::test_inherited",
    ]


def test_the_style_files_list_their_tests():
    data = (STYLE / "admission_door.py").read_bytes()
    test = upstream_layout.build("--tests x", "test_admission_door.py", "local:x", data, {})
    assert "test_admission_door.py::TestPrefillDoor::test_rejected_request_is_retired_at_the_door" in test.declared
    assert len(test.declared) == 6


def test_a_file_that_does_not_parse_is_bad_input():
    with pytest.raises(BadInput, match=r"test_x.py does not parse \(line 1: "):
        upstream_layout.parsed("--tests test_x.py", "test_x.py", b"def test_x(:\n    pass\n")
    with pytest.raises(BadInput, match="conftest.py does not parse"):
        upstream_layout.build("--tests t", "test_x.py", "local:t", b"def test_x(): pass\n", {"conftest.py": b"import (\n"})


def test_git_layout_brings_the_conftest_chain_and_imported_siblings():
    repo = {
        "conftest.py": b"import pytest\n",
        "test/conftest.py": b"from fixtures_lib import thing\n",
        "test/unit/door/test_x.py": b"from door_stubs import make\nimport torch\nimport sglang\n",
        "test/unit/door/door_stubs.py": b"from door_more import x\n",
        "test/unit/door/door_more.py": b"x = 1\n",
        "test/unit/door/unrelated.py": b"y = 2\n",
        "test/unit/door/fixtures_lib.py": b"thing = 3\n",
    }
    asked = []

    def read(path: str) -> bytes | None:
        asked.append(path)
        return repo.get(path)

    got = upstream_layout.git_helpers("test/unit/door/test_x.py", repo["test/unit/door/test_x.py"], read)
    assert set(got) == {"conftest.py", "test/conftest.py", "test/unit/door/door_stubs.py", "test/unit/door/door_more.py",
                        "test/unit/door/fixtures_lib.py"}
    assert "test/unit/door/unrelated.py" not in asked and "test/unit/door/sglang.py" not in asked


def test_with_places_helpers_beside_a_local_file(tmp_path):
    test = tmp_path / "test_x.py"
    test.write_text("def test_x(): pass\n")
    pkg = tmp_path / "helpers_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "stubs.py").write_text("X = 1\n")
    got = upstream_layout.local_helpers(test, [str(STYLE / "conftest.py"), str(pkg)])
    assert set(got) == {"conftest.py", "helpers_pkg/__init__.py", "helpers_pkg/stubs.py"}
    with pytest.raises(BadInput, match="given twice"):
        upstream_layout.local_helpers(test, [str(STYLE / "conftest.py"), str(STYLE / "conftest.py")])


@pytest.mark.parametrize("args, message", [
    (["--tests", "BROKEN", "--base", "pypi:sglang==0.5.20", "--head", "pypi:sglang==0.5.21"], "does not parse"),
    (["--tests", "GOOD", "--with", "/nonexistent/conftest.py", "--base", "pypi:sglang==0.5.20", "--head",
      "pypi:sglang==0.5.21"], "--with /nonexistent/conftest.py: no such file"),
    (["--tests", "test/x/test_a.py", "--fix", "38935", "--base", "pypi:sglang==0.5.20", "--head", "pypi:sglang==0.5.21"],
     "--fix and --repo choose the test's revisions: only with --era"),
    (["--tests", "test/x/test_a.py", "--era", "--fix", "41402", "--base", "pypi:sglang==0.5.20", "--head",
      "pypi:sglang==0.5.21"], "--fix 41402: pinned by its release bracket only"),
    (["--tests", "/abs/test_a.py", "--era", "--base", "pypi:sglang==0.5.20", "--head", "pypi:sglang==0.5.21"],
     "not a local file, nor a repository path"),
])
def test_bad_files_exit_2_before_anything_runs(tmp_path, capsys, monkeypatch, args, message):
    (tmp_path / "test_broken.py").write_text("def test_x(:\n    pass\n")
    (tmp_path / "test_good.py").write_text("def test_x():\n    pass\n")
    args = [{"BROKEN": str(tmp_path / "test_broken.py"), "GOOD": str(tmp_path / "test_good.py")}.get(a, a) for a in args]
    monkeypatch.setenv("DIFFPROBE_CACHE", str(tmp_path / "empty-cache"))
    code = cli.main(["upstream-tests", *args, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0]
    assert not (tmp_path / "empty-cache").exists() and not (tmp_path / "out").exists()  # nothing downloaded or written


# --- grading: a pure function of what each side recorded -------------------------------------

def raised(origin: str, assertion: bool = False, type_: str = "AssertionError") -> dict:
    return {"type": type_, "message": "m", "origin": origin, "assertion": assertion, "frame": None}


def result(test_id: str, outcome: str, exc: dict | None = None, parent: str | None = None, failed_subtests: int = 0):
    return {"id": test_id, "parent": parent, "outcome": outcome, "phase": "call", "exception": exc, "reason": None,
            "failed_subtests": failed_subtests, "duration_ms": 1}


def side(name: str, results: list[dict], collection_errors: list[dict] = (), summary: list[str] = ()) -> Side:
    o = Outcomes.model_validate({
        "schema": "diffprobe.pytest-outcomes/3", "python": "3.11.7", "implementation": "CPython", "platform": "linux",
        "pytest": "9.2.0", "sglang_root": "/t", "complete": True, "exit_status": 1,
        "collected": [{"id": r["id"], "title": None} for r in results if r["parent"] is None],
        "collection_errors": list(collection_errors), "running": None, "results": results, "summary": list(summary),
        "materials": {}, "standins": []})
    run = type("Run", (), {"code": 1})()
    return Side(name, f"pypi:sglang=={name}", None, o, run)


def test_a_stub_fall_through_at_head_is_never_a_regression():
    base = side("base", [result("t::a", "passed"), result("t::b", "passed")])
    head = side("head", [result("t::a", "failed", raised("stub", type_="AttributeError")), result("t::b", "passed")])
    g = upstream_tests.grade(base, head)
    assert g.counts["pass-to-fail"] == 1 and g.by_cause["pass-to-fail"] == {"stub": 1}
    assert g.verdict == "inconclusive" and not g.passed
    assert "not a regression" in g.blockers[0] and "regression" not in g.blockers[0].replace("not a regression", "")
    assert "1 pass-to-fail (1 stub: not a regression)" in grading.grading_line(g)


def test_a_stub_fall_through_at_both_sides_is_not_a_missing_fix():
    base = side("base", [result("t::a", "failed", raised("stub", type_="AttributeError")), result("t::b", "passed")])
    head = side("head", [result("t::a", "failed", raised("stub", type_="AttributeError")), result("t::b", "passed")])
    g = upstream_tests.grade(base, head)
    assert g.by_cause["fail-to-fail"] == {"stub": 1} and g.verdict == "inconclusive"
    assert not any("fix missing" in b for b in g.blockers)


@pytest.mark.parametrize("head_exc, verdict", [
    (raised("test", assertion=True), "regression"),
    (raised("sglang", type_="ValueError"), "regression"),
    (raised("sglang"), "regression"),  # an assert inside SGLang's code is the tree's, never the test's verdict
])
def test_pass_to_fail_by_behaviour_is_a_regression(head_exc, verdict):
    g = upstream_tests.grade(side("base", [result("t::a", "passed")]), side("head", [result("t::a", "failed", head_exc)]))
    assert g.verdict == verdict and g.by_cause["pass-to-fail"] == {upstream_tests.cause_of(
        upstream_tests.Raised.model_validate(head_exc)): 1}


def test_fail_to_fail_on_the_tests_assertion_is_a_missing_fix_and_fail_to_pass_is_split_by_cause():
    base = side("base", [result("t::a", "failed", raised("test", True)), result("t::b", "failed", raised("stub", True)),
                         result("t::c", "failed", raised("stub", type_="AttributeError")), result("t::d", "passed")])
    head = side("head", [result("t::a", "failed", raised("test", True)), result("t::b", "passed"), result("t::c", "passed"),
                         result("t::d", "passed")])
    g = upstream_tests.grade(base, head)
    assert g.verdict == "fix missing"
    assert g.by_cause["fail-to-pass"] == {"assertion": 1, "stub": 1} and g.by_cause["fail-to-fail"] == {"assertion": 1}


def test_a_test_failing_through_its_subtests_fails_for_their_cause():
    parent = "t::s"
    base = side("base", [result(parent, "failed", None, failed_subtests=2),
                         result(f"{parent} (i=0)", "failed", raised("test", True), parent),
                         result(f"{parent} (i=1)", "failed", raised("stub", type_="AttributeError"), parent)])
    head = side("head", [result(parent, "passed"), result(f"{parent} (i=0)", "passed", None, parent),
                         result(f"{parent} (i=1)", "passed", None, parent)])
    g = upstream_tests.grade(base, head)
    rows = {r.id: r for r in g.tests}
    assert rows[parent].cause == "stub" and rows[f"{parent} (i=0)"].cause == "assertion"
    assert g.passed and g.verdict == "passes"


def test_tests_of_a_file_that_collects_nowhere_never_ran_on_either_side():
    error = {"id": "test_x.py", "exception": raised("test", type_="ImportError")}
    base, head = side("base", [], [error]), side("head", [], [error])
    declared = ("test_x.py::T::test_a", "test_x.py::test_b")
    g = upstream_tests.grade(base, head, declared)
    assert [(r.id, r.grade) for r in g.tests] == [(d, "never ran") for d in declared]
    assert g.counts["never ran"] == 2 and not g.passed
    assert all("listed from its source" in r.base.detail for r in g.tests)


def test_declared_parametrized_tests_pair_with_their_collected_cases():
    base = side("base", [], [{"id": "test_x.py", "exception": raised("test", type_="ImportError")}])
    head = side("head", [result("test_x.py::test_p[1]", "passed"), result("test_x.py::test_p[2]", "passed")])
    g = upstream_tests.grade(base, head, ("test_x.py::test_p",))
    assert [r.id for r in g.tests] == ["test_x.py::test_p[1]", "test_x.py::test_p[2]"]


def test_pytests_own_count_is_explained_by_the_records():
    parent = "t::s"
    o = side("head", [result("t::a", "failed", raised("test", True)), result(parent, "passed", failed_subtests=1),
                      result(f"{parent} (i=0)", "failed", raised("test", True), parent),
                      result(f"{parent} (i=1)", "passed", None, parent)],
             summary=["2 failed", "1 passed", "3 warnings"]).outcomes
    count = judge_upstream.pytest_count(o)
    assert (count.failed_tests, count.failed_subtests, count.passed_tests, count.passed_subtests) == (1, 1, 1, 1)
    assert count.agrees
    assert "its failed = 1 test + 1 subtest" in grading.pytest_line(count)
    wrong = judge_upstream.pytest_count(o.model_copy(update={"summary": ["1 failed", "1 passed"]}))
    assert not wrong.agrees and "do NOT add up" in grading.pytest_line(wrong)


def test_environment_failures_name_the_module():
    o = side("base", [], [{"id": "test_x.py", "exception": {**raised("environment", type_="ModuleNotFoundError"),
                                                              "module": "flashinfer", "frame": "sglang/x.py:7 in <module>"}}]).outcomes
    assert upstream_tests.missing_modules(o) == ["module 'flashinfer' (imported at sglang/x.py:7 in <module>)"]


# --- SWE-bench's grading, and where diffprobe's differs ------------------------------------------
# SWE-bench (swebench/harness/grading.py): test_passed = in the log as PASSED or XFAIL; test_failed =
# absent from the log, FAILED, ERROR or SKIPPED. A fix's F2P tests are those failing (absent
# included) before the fix and passing after. diffprobe: absent from the base fails only when the
# tree lacks what the test imports or patches; otherwise (and when skipped) it never ran.

def wanted_raised(name: str, how: str = "import", type_: str = "ImportError") -> dict:
    return {**raised("test", type_=type_), "wanted": {"name": name, "how": how, "at": "test_x.py:3 in <module>"}}


def lacking(names: dict[str, str]) -> targets.Code:
    """The code a side ran, as far as grading asks here: a tree whose source lacks ``names``."""
    return targets.Code(type("Tree", (), {"lacks": lambda self, name: names.get(name)})(), {})


def test_a_base_that_lacks_what_the_file_imports_fails_every_test_there_as_another_era_never_fail_to_pass():
    error = {"id": "test_x.py", "exception": wanted_raised("sglang.srt.x.is_unadmitted_reject")}
    base = side("base", [], [error])
    base = Side(base.name, base.text, None, base.outcomes, base.run, lacking({"sglang.srt.x.is_unadmitted_reject": "sglang.srt.x.is_unadmitted_reject"}))
    head = side("head", [result("test_x.py::T::test_a", "passed"), result("test_x.py::T::test_b", "failed", raised("test", True))])
    g = upstream_tests.grade(base, head)
    rows = {r.id: r for r in g.tests}
    assert (rows["test_x.py::T::test_a"].grade, rows["test_x.py::T::test_a"].cause) == (INCOMPATIBLE, "target missing")
    assert rows["test_x.py::T::test_a"].base.detail == ("the tree lacks sglang.srt.x.is_unadmitted_reject (import of "
                                                        "sglang.srt.x.is_unadmitted_reject at test_x.py:3 in <module>)")
    assert (rows["test_x.py::T::test_b"].grade, rows["test_x.py::T::test_b"].cause) == (INCOMPATIBLE, "target missing")
    assert g.verdict == "fails at head" and g.counts["fail-to-pass"] == 0  # an era's test at base compares nothing


@pytest.mark.parametrize("exception", [
    raised("test", type_="SyntaxError"),  # the file itself
    {**raised("environment", type_="ModuleNotFoundError"), "module": "flashinfer"},  # the environment
    raised("other", type_="ImportError"),  # a third-party module's own failure
    wanted_raised("sglang.srt.x.name"),  # a name the tree's source does define (or cannot tell): not missing
])
def test_a_base_that_cannot_collect_for_any_other_reason_never_ran(exception):
    base = side("base", [], [{"id": "test_x.py", "exception": exception}])
    head = side("head", [result("test_x.py::test_a", "passed")])
    (row,) = upstream_tests.grade(base, head).tests
    assert (row.grade, row.base.status, row.base.kind) == ("never ran", "never ran", "not collected")
    assert row.reason.startswith("never ran at base (not collected: collection error)") and row.reason.endswith("not compared")


def test_a_patch_target_missing_at_head_is_inconclusive_never_a_regression():
    base = side("base", [result("t::a", "passed")])
    head = side("head", [result("t::a", "failed", wanted_raised("sglang.srt.d.Q._release", "mock.patch", "AttributeError"))])
    head = Side(head.name, head.text, None, head.outcomes, head.run, lacking({"sglang.srt.d.Q._release": "sglang.srt.d.Q._release"}))
    g = upstream_tests.grade(base, head)
    (row,) = g.tests
    assert (row.grade, row.cause, row.head.kind) == (INCOMPATIBLE, "target missing", "AttributeError (target missing)")
    assert g.verdict == "inconclusive" and "neither a fix nor a regression" in row.reason and "another era" in row.reason
    assert all("regression" not in b.replace("not a regression", "") for b in g.blockers)


def test_a_head_that_lacks_what_the_file_imports_is_inconclusive():
    base = side("base", [result("test_x.py::test_a", "passed")])
    head = side("head", [], [{"id": "test_x.py", "exception": wanted_raised("sglang.srt.x.old_name")}])
    head = Side(head.name, head.text, None, head.outcomes, head.run, lacking({"sglang.srt.x.old_name": "sglang.srt.x.old_name"}))
    g = upstream_tests.grade(base, head)
    assert g.verdict == "inconclusive" and g.tests[0].grade == INCOMPATIBLE and g.tests[0].cause == "target missing"
    assert g.blockers[0].startswith("head: the file does not collect: ImportError (target missing): the tree lacks sglang.srt.x.old_name")


def test_skipped_never_ran_where_swe_bench_counts_it_failed():
    base = side("base", [result("t::a", "skipped")])
    head = side("head", [result("t::a", "passed")])
    (row,) = upstream_tests.grade(base, head).tests
    assert row.grade == "never ran"  # SWE-bench: SKIPPED is test_failed, so this would be F2P there


def test_nothing_is_said_of_tests_failing_at_base_when_none_ran_there():
    base = side("base", [], [{"id": "test_x.py", "exception": raised("test", type_="SyntaxError")}])
    head = side("head", [result("test_x.py::test_a", "passed")])
    g = upstream_tests.grade(base, head)
    line = grading.verdict_line(g)
    assert g.verdict == "passes" and "every test that fails at base" not in line
    assert "no test fails at base and passes at head: nothing here shows a fix" in line
    assert "1 never ran at base: not compared" in line


# --- every verdict message and every reason is true of the grading's own counts -----------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from runner.judge.pytest_records import INCOMPATIBLE, NOT_BEHAVIOUR  # noqa: E402

OUTCOMES = {
    "passed": ("passed", None), "xfailed": ("xfailed", None), "skipped": ("skipped", None),
    "assertion": ("failed", raised("test", True)), "stub": ("failed", raised("stub", type_="AttributeError")),
    "sglang": ("failed", raised("sglang", type_="ValueError")), "test": ("error", raised("test", type_="TypeError")),
    "target": ("failed", wanted_raised("sglang.gone.x", "mock.patch", "AttributeError")), "absent": None,
}
COLLECTION = {"none": None, "target": wanted_raised("sglang.gone.x"), "syntax": raised("test", type_="SyntaxError"),
              "environment": {**raised("environment", type_="ModuleNotFoundError"), "module": "m"}}


def _side(name: str, states: list[str], collection: str) -> Side:
    if COLLECTION[collection] is not None:
        built = side(name, [], [{"id": "test_x.py", "exception": COLLECTION[collection]}])
    else:
        results = [result(f"test_x.py::test_{i}", *OUTCOMES[s]) for i, s in enumerate(states) if OUTCOMES[s]]
        built = side(name, results)
    return Side(built.name, built.text, None, built.outcomes, built.run, lacking({"sglang.gone.x": "sglang.gone"}))


gradings = st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.lists(st.sampled_from(sorted(OUTCOMES)), min_size=n, max_size=n),
    st.lists(st.sampled_from(sorted(OUTCOMES)), min_size=n, max_size=n),
    st.sampled_from(sorted(COLLECTION)), st.sampled_from(sorted(COLLECTION))))


@settings(max_examples=300, deadline=None)
@given(gradings)
def test_every_verdict_message_and_reason_is_true_of_its_counts(case):
    base_states, head_states, base_collection, head_collection = case
    base, head = _side("base", base_states, base_collection), _side("head", head_states, head_collection)
    declared = tuple(f"test_x.py::test_{i}" for i in range(len(base_states)))
    g = upstream_tests.grade(base, head, declared)
    rows, line = g.tests, grading.verdict_line(g)
    at = {s: sum(r.head.status == s for r in rows) for s in ("passed", "failed", "never ran")}
    assert f"at head {at['passed']} passed, {at['failed']} failed, {at['never ran']} never ran" in line
    assert f"{g.counts['fail-to-pass']} fail-to-pass, {g.counts['pass-to-pass']} pass-to-pass" in line
    failed_at_base = [r for r in rows if r.base.status == "failed"]
    if "every test that fails at base" in line:
        assert failed_at_base and all(r.head.status == "passed" for r in failed_at_base)
    assert ("nothing here shows a fix" in line) == (g.counts["fail-to-pass"] == 0)
    if "none that passes at base fails at head" in line:
        assert g.counts["pass-to-fail"] == 0
    never = sum(r.base.status == "never ran" for r in rows)
    assert (f"{never} never ran at base: not compared" in line) == (never > 0)
    assert line.startswith(f"verdict: {g.verdict} (")
    if g.passed:
        assert g.verdict == "passes" and at["failed"] == 0 and at["passed"] > 0 and not head.outcomes.collection_errors
    if g.verdict == "fails at head":  # something failed at head for a reason that is the tree's or the test's
        assert any(r.head.status == "failed" and r.head.cause not in NOT_BEHAVIOUR for r in rows) or any(
            upstream_tests.cause_of(c.exception, head.code) not in NOT_BEHAVIOUR for c in head.outcomes.collection_errors)
    if g.verdict == "inconclusive":
        assert not g.passed and g.blockers
    behaviour_p2f = [r for r in rows if r.grade == "pass-to-fail" and r.cause not in NOT_BEHAVIOUR]
    assert (g.verdict == "regression") == bool(behaviour_p2f)
    if g.verdict == "fix missing":
        assert any(r.grade == "fail-to-fail" and r.head.cause == "assertion" for r in rows)
    for b in g.blockers:
        if "regression" in b.replace("not a regression", ""):
            assert any(b.startswith(r.id) and r in behaviour_p2f for r in rows)
    for r in rows:
        said = r.reason
        assert (f"fails at base (" in said) == (r.base.status == "failed" and r.grade != "never ran"), said
        assert said.startswith("passes at base") == (r.base.status == "passed" and r.grade != "never ran"), said
        assert ("never ran at base" in said) == (r.base.status == "never ran"), said
        assert ("never ran at head" in said) == (r.head.status == "never ran"), said
        if r.grade in ("fail-to-pass", "pass-to-pass"):
            assert said.endswith("passes at head") or said.endswith("at head")
        if "not a regression" in said:
            assert r.grade == "pass-to-fail" and r.head.cause in NOT_BEHAVIOUR
        # a failure of another era's test is never a fix, a regression or a missing fix
        assert (r.grade == INCOMPATIBLE) == (r.grade != "never ran" and "target missing" in (r.base.cause, r.head.cause)), said
        if r.cause == "target missing":
            assert r.grade != "pass-to-fail" or g.verdict != "regression" or r not in behaviour_p2f
