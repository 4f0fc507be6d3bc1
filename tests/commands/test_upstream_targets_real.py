"""The test's target missing, on real releases with upstream-style files (tests/commands/upstream_style):
a base that lacks the name the file imports fails every test there for that reason, and the test is of
another era there (SWE-bench would grade it fail-to-pass; nothing of the base ran); a patch target that
a later release moved is the test's era, never a regression; stand-ins that fit neither release stay a
stub fall-through on both sides."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.app import upstream_layout
from runner.commands import upstream_tests
from runner.judge.pytest_records import INCOMPATIBLE
from runner.store import envs
from runner.views import grading
from tests import tools

STYLE = Path(__file__).resolve().parent / "upstream_style"
HELPERS = {"conftest.py": (STYLE / "conftest.py").read_bytes(), "door_stubs.py": (STYLE / "door_stubs.py").read_bytes()}


def graded(name: str, path: str, base: str, head: str, cache, release_tree, interp, request):
    test = upstream_layout.build("--tests", path, f"local:{path}", (STYLE / f"{name}.py").read_bytes(), HELPERS)
    sides = [upstream_tests.run_side(side, f"pypi:sglang=={v}", release_tree(v), envs.env(release_tree(v), cache, interp), test,
                                     timeout=900, sandboxed=tools.sandboxed(request)) for side, v in (("base", base), ("head", head))]
    return upstream_tests.grade(*sides, test.declared)


def test_a_base_lacking_the_imported_symbol_fails_there_as_another_era(cache, release_tree, interp, request):
    g = graded("reject_predicate", "test_reject_predicate.py", "0.5.20", "0.5.21", cache, release_tree, interp, request)
    assert g.base.collection_errors == ["ImportError (target missing)"]
    assert {(r.grade, r.cause) for r in g.tests} == {(INCOMPATIBLE, "target missing")}
    assert len(g.tests) == 5  # 3 tests and the 2 subtests of one, each graded
    assert all(r.base.detail.startswith("the tree lacks sglang.srt.disaggregation.utils.is_unadmitted_reject (import of")
               for r in g.tests)
    assert g.verdict == "passes" and "5 incompatible (test era)" in grading.verdict_line(g)


def test_a_patch_target_moved_later_and_stand_ins_that_fit_neither_side(cache, release_tree, interp, request):
    g = graded("prefill_cache_patch", "test_prefill_cache_patch.py", "0.5.21", "0.5.22", cache, release_tree, interp, request)
    rows = {r.id.split("::")[-1]: r for r in g.tests}
    moved = rows["test_unfinished_cache_helper_can_be_stubbed"]
    assert (moved.grade, moved.cause, moved.head.kind) == (INCOMPATIBLE, "target missing", "AttributeError (target missing)")
    assert moved.head.detail.startswith("the tree lacks sglang.srt.disaggregation.prefill.maybe_cache_unfinished_req "
                                        "(mock.patch of sglang.srt.disaggregation.prefill.maybe_cache_unfinished_req at ")
    assert "neither a fix nor a regression" in moved.reason
    assert rows["test_release_helper_can_be_stubbed"].grade == "pass-to-pass"
    thin = rows["test_an_empty_batch_result_is_processed_without_side_effects"]
    assert (thin.grade, thin.base.cause, thin.head.cause) == ("fail-to-fail", "stub", "stub")
    assert g.verdict == "inconclusive" and not any("fix missing" in b for b in g.blockers)
    assert all("regression" not in b.replace("not a regression", "") for b in g.blockers)
