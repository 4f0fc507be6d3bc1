"""`diffprobe upstream-tests` on real releases: a test file of our own, written the way upstream
writes its unit tests, taken from a local path or from a git commit, graded per test and subtest."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import jsonschema
import orjson
import pytest

from runner import cli
from runner.commands import upstream_tests
from runner.evidence import bundle, schema
from runner.evidence.upstream import UpstreamTestsRecord
from runner.store import envs, seal
from runner.app.upstream_layout import UpstreamFile
from tests import tools

# Upstream-style and self-contained: imports only the tree's sglang, pytest and the standard library.
# At 0.5.20 the door builds a KV sender through `self.create_sender`, which the stub lacks: an
# AttributeError raised on the stub. At 0.5.21 the door retires the request before touching it.
DOOR_TESTS = '''\
"""The prefill door retires a request rejected at intake instead of handing it off."""

import types
import unittest
from array import array

import pytest

from sglang.srt.disaggregation.prefill import PrefillBootstrapQueue
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.runtime_context import get_parallel
from sglang.srt.sampling.sampling_params import SamplingParams
{extra_import}

def rejected_request(rid):
    req = Req(rid=rid, origin_input_text="", origin_input_ids=array("q", range(1500)),
              sampling_params=SamplingParams(max_new_tokens=8), bootstrap_host="192.0.2.10",
              bootstrap_port=8998, bootstrap_room=7)
    with get_parallel().override(tp_rank=0):  # no TP group exists on CPU
        req.set_finish_with_abort("Input length (1500 tokens) exceeds the maximum allowed length (1018 tokens).")
    return req


def stub_door():
    """Only what a fixed door needs: a queue and a scheduler that can retire a request."""
    retired = []
    scheduler = types.SimpleNamespace(retire_unadmitted_request=retired.append)
    return types.SimpleNamespace(queue=[], scheduler=scheduler), retired


def test_rejected_request_is_retired_not_enqueued():
    """A rejected request is retired at the door and never queued."""
    door, retired = stub_door()
    req = rejected_request("r1")
    PrefillBootstrapQueue.add(door, req, num_kv_heads=8)
    assert retired == [req]
    assert door.queue == []


def test_rejection_leaves_the_request_unfinished():
    """The incident's premise, true before and after the fix."""
    req = rejected_request("r2")
    assert not req.finished()
    assert len(req.origin_input_ids) == 1


def test_each_rejected_request_is_retired(subtests):
    for rid in ("a", "b"):
        with subtests.test(rid=rid):
            door, retired = stub_door()
            PrefillBootstrapQueue.add(door, rejected_request(rid), num_kv_heads=8)
            assert [r.rid for r in retired] == [rid]


class TestRejectionState(unittest.TestCase):
    def test_prompt_shrinks_to_one_token(self):
        for rid in ("x", "y"):
            with self.subTest(rid=rid):
                self.assertEqual(len(rejected_request(rid).origin_input_ids), 1)


@pytest.mark.skip(reason="needs a GPU")
def test_on_gpu():
    pass
'''
LOCAL = DOOR_TESTS.format(extra_import="")
# The fix's own helper imported at module level: an older tree cannot even collect the file.
WITH_FIX_IMPORT = DOOR_TESTS.format(extra_import="from sglang.srt.disaggregation.utils import is_unadmitted_reject\n")
NAME = "test_door_rejects.py"
F2P = f"{NAME}::test_rejected_request_is_retired_not_enqueued"
SUBTESTS = f"{NAME}::test_each_rejected_request_is_retired"


def _run(tmp_path: Path, cache, *args: str) -> tuple[int, Path]:
    out = tmp_path / "bundle"
    return cli.main(["upstream-tests", *args, "--out", str(out), "--cache-dir", str(cache.root)]), out


def _grading(out: Path) -> tuple[upstream_tests.Grading, dict]:
    """The bundle's grading, its record checked against the committed schema first."""
    index, receipts, _ = bundle.load(out)
    jsonschema.Draft202012Validator(orjson.loads((schema.DIR / "upstream-tests.schema.json").read_bytes())).validate(index.extra)
    return UpstreamTestsRecord.model_validate(index.extra).grading, receipts


@pytest.mark.slow
def test_local_file_fail_to_pass_across_the_fix(tmp_path, cache, capsys):
    tests = tmp_path / NAME
    tests.write_text(LOCAL)
    code, out = _run(tmp_path, cache, "--tests", str(tests), "--base", "pypi:sglang==0.5.20",
                     "--head", "pypi:sglang==0.5.21")
    printed = capsys.readouterr().out
    assert code == 0
    assert bundle.verify(out) == []
    grading, receipts = _grading(out)
    grades = {t.id: t.grade for t in grading.tests}
    assert grades[F2P] == "fail-to-pass"
    assert grades[f"{SUBTESTS} (rid='a')"] == grades[f"{SUBTESTS} (rid='b')"] == grades[SUBTESTS] == "fail-to-pass"
    assert grades[f"{NAME}::test_rejection_leaves_the_request_unfinished"] == "pass-to-pass"
    assert grades[f"{NAME}::TestRejectionState::test_prompt_shrinks_to_one_token (rid='x')"] == "pass-to-pass"
    assert grades[f"{NAME}::test_on_gpu"] == "never ran"
    assert grading.counts == {"fail-to-pass": 4, "pass-to-pass": 4, "pass-to-fail": 0, "fail-to-fail": 0,
                              "incompatible (test era)": 0, "never ran": 1}
    # failures are counted by exception type and origin, never as a bare "failed"
    assert grading.base.tests == {"passed": 2, "AttributeError (stub)": 1, "failed through its subtests": 1, "skipped": 1}
    assert grading.base.subtests == {"passed": 2, "AttributeError (stub)": 2}
    assert grading.head.tests == {"passed": 4, "skipped": 1} and grading.passed
    assert "tests 2 passed, 1 AttributeError (stub), 1 failed through its subtests, 1 skipped" in printed
    # the receipts: a stub the old code fell through to is a harness gap (error, double), never a bug
    base = receipts["receipts/sglang-0.5.20.upstream-tests.json"]
    head = receipts["receipts/sglang-0.5.21.upstream-tests.json"]
    failed = base.case(F2P)
    assert (failed.outcome, failed.classification) == ("error", "inconclusive")
    assert (failed.error.type, failed.error.where) == ("AttributeError", "double")
    assert failed.error.frame.startswith("sglang/srt/disaggregation/prefill.py:")
    assert head.case(F2P).effects == {"pytest": "passed"} and head.case(F2P).classification == "clean"
    skipped = head.case(f"{NAME}::test_on_gpu")
    assert (skipped.outcome, skipped.missing) == ("not_applicable", "skipped: needs a GPU")
    assert base.probe.sha256 == head.probe.sha256 and f"upstream/{NAME}" in base.probe.files
    assert "sglang/srt/disaggregation/prefill.py" in base.materials


def _commit_file(repo: Path, parent: str, path: str, content: str, tmp_path: Path) -> str:
    """A commit on its own ref that adds ``path`` on top of ``parent``; no branch or tag moves."""
    env = {**os.environ, "GIT_INDEX_FILE": str(tmp_path / "index")}

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                              env=env).stdout.strip()

    source = tmp_path / "blob"
    source.write_text(content)
    git("read-tree", parent)
    git("update-index", "--add", "--cacheinfo", f"100644,{git('hash-object', '-w', str(source))},{path}")
    commit = git("commit-tree", git("write-tree"), "-p", parent, "-m", f"add {path}")
    git("update-ref", "refs/heads/upstream-tests-fixture", commit)
    return commit


@pytest.mark.slow
def test_an_unsandboxed_run_writes_nothing_into_the_shared_layer(tmp_path, cache, interp):
    """pytest rewrites assertions into byte-code next to each plugin it loads (some live in the
    shared layer): outside the sandbox that would break the layer's seal and refuse every later run."""
    tests = tmp_path / NAME
    tests.write_text(LOCAL)
    layer = envs.layer(cache, interp)[0]
    before = seal.seal(layer, exclude=envs.LAYER_STAMPS)
    code, _ = _run(tmp_path, cache, "--tests", str(tests), "--base", "pypi:sglang==0.5.20", "--head", "pypi:sglang==0.5.21",
                   "--unsandboxed")
    assert code == 0 and seal.seal(layer, exclude=envs.LAYER_STAMPS) == before


@pytest.mark.slow
def test_git_path_from_head_commit_a_base_lacking_the_import_fails_there(tmp_path, cache, upstream_repo):
    repo, commits = upstream_repo["path"], upstream_repo["commits"]
    path = f"test/registered/unit/disaggregation/{NAME}"
    head = _commit_file(repo, commits["0.5.21"], path, WITH_FIX_IMPORT, tmp_path)
    code, out = _run(tmp_path, cache, "--tests", path, "--base", "pypi:sglang==0.5.20", "--head", f"git+{repo}@{head}")
    assert code == 0  # nothing failed at head, and nothing that ran at base is missing there
    index, receipts, _ = bundle.load(out)
    assert index.extra["tests"]["from"] == f"git:{head}:{path}"
    grading, _ = _grading(out)
    assert grading.verdict == "passes"
    # 0.5.20 lacks is_unadmitted_reject: the file does not collect there, and that is the tree's lack,
    # so every test fails at base for that reason (SWE-bench: absent from the base's log, F2P) and is
    # of another era there: nothing of the base ran, so nothing reads fail-to-pass; the one skipped
    # at head never ran there
    assert grading.base.collection_errors == ["ImportError (target missing)"]
    assert grading.counts["incompatible (test era)"] == 8 and grading.counts["fail-to-pass"] == 0
    assert grading.counts["never ran"] == 1
    assert all(t.base.status == "failed" and t.base.cause == "target missing" for t in grading.tests)
    assert grading.head.tests == {"passed": 4, "skipped": 1}
    base = receipts["receipts/sglang-0.5.20.upstream-tests.json"]
    assert base.import_result.outcome == "error" and base.import_result.error.where == "import"
    assert base.import_result.error.message.startswith("the tree lacks sglang.srt.disaggregation.utils.is_unadmitted_reject")
    assert [(c.id, c.outcome) for c in base.cases] == [(path, "error")]  # laid out at its repository path
    assert base.summary.classifications["clean"] == 0


@pytest.mark.slow
def test_a_file_missing_from_the_head_commit_is_bad_input(tmp_path, cache, upstream_repo, capsys):
    repo, commits = upstream_repo["path"], upstream_repo["commits"]
    code, out = _run(tmp_path, cache, "--tests", "test/nowhere/test_x.py", "--base", f"git+{repo}@{commits['0.5.20']}",
                     "--head", f"git+{repo}@{commits['0.5.21']}")
    assert code == 2 and "no file test/nowhere/test_x.py" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("tests", ["test/unit/test_x.py", "../outside.py"])
def test_without_git_history_a_local_file_is_required(tmp_path, cache, capsys, tests):
    code, _ = _run(tmp_path, cache, "--tests", tests, "--base", "pypi:sglang==0.5.20", "--head", "pypi:sglang==0.5.21")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("diffprobe: error: --tests")


# --- the plugin's attribution and the grading rules, on a test file that needs no sglang ---------

MECHANICS = '''\
import time
import types
import unittest
from unittest import mock

import pytest


class Fake:
    pass


@pytest.fixture
def broken():
    raise TypeError("fixture broke")


def test_assertion():
    assert 1 == 2


def test_mock_assertion():
    mock.Mock().assert_called_once_with(3)


def test_stub_of_our_own_class():
    Fake().missing


def test_raised_by_the_test():
    raise ValueError("not enough values")


def test_fixture_error(broken):
    pass


@pytest.mark.xfail(reason="known")
def test_expected_failure():
    assert False


class TestSub(unittest.TestCase):
    def test_sub(self):
        for i in range(2):
            with self.subTest(i=i):
                self.assertEqual(i, 0)


def test_hangs():
    time.sleep(60)


def test_after_the_hang():
    pass
'''


@pytest.fixture(scope="module")
def mechanics(request, tmp_path_factory, cache, release_tree, interp):
    environment = envs.env(release_tree("0.5.21"), cache, interp)
    test = UpstreamFile("test_mechanics.py", "local:test_mechanics.py", MECHANICS.encode())
    side = upstream_tests.run_side("head", "pypi:sglang==0.5.21", release_tree("0.5.21"), environment, test, timeout=12,
                                   sandboxed=tools.sandboxed(request))
    return side, {e.id.removeprefix("test_mechanics.py::"): e for e in upstream_tests.entries(side)}


@pytest.mark.slow
def test_failures_say_where_they_came_from(mechanics):
    _, got = mechanics
    kinds = {name: e.kind for name, e in got.items()}
    assert kinds["test_assertion"] == "AssertionError (assertion)"
    assert kinds["test_mock_assertion"] == "AssertionError (assertion)"  # a mock's assert_* is the test's verdict
    assert kinds["test_stub_of_our_own_class"] == "AttributeError (stub)"
    assert kinds["test_raised_by_the_test"] == "ValueError (test)"
    assert kinds["test_fixture_error"] == "TypeError (test, in setup)"
    assert kinds["test_expected_failure"] == "xfailed"
    assert kinds["TestSub::test_sub (i=1)"] == "AssertionError (assertion)"
    assert kinds["TestSub::test_sub"] == "passed"  # as pytest says: a unittest test's failed subTest fails alone
    assert got["test_assertion"].detail == "assert 1 == 2"


@pytest.mark.slow
def test_a_deadline_is_a_timeout_and_what_follows_never_ran(mechanics):
    side, got = mechanics
    assert side.timed_out
    assert (got["test_hangs"].status, got["test_hangs"].kind) == ("failed", "timeout")
    assert (got["test_after_the_hang"].status, got["test_after_the_hang"].kind) == ("never ran", "not reached")


@pytest.mark.slow
def test_case_mapping_is_honest(mechanics):
    side, _ = mechanics
    test = UpstreamFile("test_mechanics.py", "local:test_mechanics.py", MECHANICS.encode())
    cases = {c.id.removeprefix("test_mechanics.py::"): c for c in upstream_tests.cases(side, test)}
    assert (cases["test_assertion"].outcome, cases["test_assertion"].classification) == ("observed", "bug")
    assert cases["TestSub::test_sub (i=1)"].classification == "bug"  # the failed subtest failed on an assertion
    assert (cases["test_stub_of_our_own_class"].error.where, cases["test_raised_by_the_test"].error.where) == ("double", "setup")
    assert cases["test_hangs"].outcome == "timeout"
    assert cases["test_after_the_hang"].outcome == "not_applicable"


@pytest.mark.slow
def test_grading_never_counts_never_ran_as_passed(mechanics):
    side, _ = mechanics
    grading = upstream_tests.grade(side, side)
    by_id = {t.id.removeprefix("test_mechanics.py::"): t for t in grading.tests}
    assert by_id["test_after_the_hang"].grade == "never ran"
    assert by_id["test_expected_failure"].grade == "pass-to-pass"  # xfail passes, as in SWE-bench
    assert by_id["test_assertion"].grade == "fail-to-fail"
    assert not grading.passed and any("test_hangs: timeout at head" in b for b in grading.blockers)


ERA_OLD = ("from sglang.srt.disaggregation.utils import DisaggregationMode\n\n\n"
           "def test_modes():\n    assert DisaggregationMode.PREFILL.value\n")
ERA_NEW = ("from sglang.srt.disaggregation.utils import DisaggregationMode, is_unadmitted_reject\n\n\n"
           "def test_modes():\n    assert DisaggregationMode.PREFILL.value\n\n\n"
           "def test_reject_predicate_exists():\n    assert callable(is_unadmitted_reject)\n")


@pytest.mark.slow
def test_era_takes_each_trees_revision_and_says_which_graded_which(tmp_path, cache, upstream_repo, capsys):
    """--era (issue 40 item 2): the head, a commit of the repository, runs its own revision; the base,
    a release lacking the name the newest revision imports, runs the newest revision whose imports it
    defines. Without --era the base would run the head's revision and fail every test there."""
    repo, commits = upstream_repo["path"], upstream_repo["commits"]
    path = "test/registered/unit/disaggregation/test_era.py"
    old = _commit_file(repo, commits["0.5.21"], path, ERA_OLD, tmp_path)
    new = _commit_file(repo, old, path, ERA_NEW, tmp_path)
    code, out = _run(tmp_path, cache, "--tests", path, "--era", "--repo", str(repo), "--base", "pypi:sglang==0.5.20",
                     "--head", f"git+{repo}@{new}")
    printed = capsys.readouterr().out
    assert code == 0 and bundle.verify(out) == []
    record = UpstreamTestsRecord.model_validate(bundle.load(out)[0].extra)
    assert record.eras["base"].tests.from_ == f"git:{old}:{path}"
    assert record.eras["base"].why == f"the newest revision up to {new[:12]} whose imports this tree defines"
    assert (record.eras["head"].tests.from_, record.eras["head"].why) == (f"git:{new}:{path}", "the tree's own commit")
    assert f"base pypi:sglang==0.5.20: graded by git:{old}:{path} (the newest revision" in printed
    grades = {r.id.split("::")[1]: r.grade for r in record.grading.tests}
    assert grades == {"test_modes": "pass-to-pass", "test_reject_predicate_exists": "never ran"}
