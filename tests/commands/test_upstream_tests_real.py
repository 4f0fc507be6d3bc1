"""``upstream-tests`` on real releases with test files written here in upstream's style
(``tests/commands/upstream_style``: CustomTestCase, SimpleNamespace stand-ins, subTest, MagicMock,
a conftest.py and a sibling helper module).

The key claim: per test id, per failed subtest and in its own summary line, what diffprobe records
is what plain ``pytest -rA`` says in the same environment, on every pinned release (each of which
therefore imports ``sglang.test.test_utils``)."""

from __future__ import annotations

import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from runner import cli
from runner.judge import upstream as judge_upstream
from runner.app import upstream_layout
from runner.commands import upstream_tests
from runner.commands.sweep import version_key
from runner.evidence import bundle, pins
from runner.store import envs
from runner.evidence.upstream import Grading
from tests import tools
from tests.commands import plain_pytest

STYLE = Path(__file__).resolve().parent / "upstream_style"
HELPERS = {"conftest.py": (STYLE / "conftest.py").read_bytes(), "door_stubs.py": (STYLE / "door_stubs.py").read_bytes()}
# The oldest and the newest pinned release: the grading does not change between them (every run is
# one pytest process importing SGLang; the three between cost six more and showed the same).
PINNED = sorted(pins.load().releases, key=version_key)
RELEASES = [PINNED[0], PINNED[-1]]
DOOR = "test_admission_door.py"


def style_file(name: str, path: str, source: bytes | None = None) -> upstream_layout.UpstreamFile:
    data = source if source is not None else (STYLE / f"{name}.py").read_bytes()
    return upstream_layout.build("--tests", path, f"local:{path}", data, HELPERS)


def ours(o: upstream_tests.Outcomes) -> tuple[dict[str, str], Counter]:
    """diffprobe's records in pytest's words: outcome per test id, failed subtests by description."""
    outcomes = {r.id: plain_pytest.WORDS[r.outcome] for r in o.results if r.parent is None}
    outcomes |= {c.id: "ERROR" for c in o.collection_errors}
    failed = Counter((r.parent, re.sub(r" #\d+$", "", r.id[len(r.parent) + 1:]))
                     for r in o.results if r.parent is not None and r.outcome == "failed")
    return outcomes, failed


def _diffprobes(version: str, test: upstream_layout.UpstreamFile, tree, environment, sandboxed: bool):
    return upstream_tests.run_side("head", f"pypi:sglang=={version}", tree, environment, test, timeout=900, sandboxed=sandboxed)


def _plain(test: upstream_layout.UpstreamFile, environment, tmp_path: Path):
    """The same layout, run by plain pytest in the same environment."""
    directory = tmp_path / "plain" / "tests"
    for path, data in {**test.files(), "pytest.ini": b"[pytest]\n"}.items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_bytes(data)
    (tmp_path / "home").mkdir()
    return plain_pytest.run(environment.python, directory, test.path, envs.scrubbed_env(tmp_path / "home"))


def assert_identical(version: str, test: upstream_layout.UpstreamFile, tmp_path: Path, cache, release_tree, interp,
                     sandboxed: bool):
    tree = release_tree(version)
    environment = envs.env(tree, cache, interp)
    return assert_same(_diffprobes(version, test, tree, environment, sandboxed), _plain(test, environment, tmp_path))


def assert_same(side, plain):
    outcomes, failed_subtests = ours(side.outcomes)
    assert outcomes == plain.outcomes
    assert failed_subtests == plain.failed_subtests
    assert side.outcomes.summary == plain.summary and side.outcomes.exit_status == plain.exit_status
    count = judge_upstream.pytest_count(side.outcomes)
    assert count.agrees  # and the records add up to pytest's own failed and passed counts
    return side


@pytest.fixture(scope="module")
def door_runs(request, tmp_path_factory, cache, release_tree, interp) -> dict:
    """version -> (diffprobe's run, plain pytest's run) of the style file, on the oldest and newest
    pinned release: the environments built in turn, then the four runs two at a time (each is one process)."""
    test, sandboxed = style_file("admission_door", DOOR), tools.sandboxed(request)
    built = {v: (release_tree(v), envs.env(release_tree(v), cache, interp)) for v in RELEASES}
    with ThreadPoolExecutor(max_workers=2) as pool:
        sides = {v: pool.submit(_diffprobes, v, test, tree, environment, sandboxed) for v, (tree, environment) in built.items()}
        plains = {v: pool.submit(_plain, test, environment, tmp_path_factory.mktemp(f"plain-{v}")) for v, (_, environment) in built.items()}
        return {v: (sides[v].result(), plains[v].result()) for v in RELEASES}


@pytest.mark.slow
@pytest.mark.parametrize("version", RELEASES)
def test_the_oldest_and_newest_pinned_release_grade_the_style_file_as_plain_pytest_does(version, door_runs):
    side = assert_same(*door_runs[version])
    o = side.outcomes
    assert not o.collection_errors  # sglang.test.test_utils (CustomTestCase) imports in this release's environment
    by_id = {r.id.removeprefix(f"{DOOR}::"): r for r in o.results}
    # exceptions and asserts raised inside the tree's own code are the tree's, never the test's verdict
    raises = by_id["TestTreeRaises::test_sampling_params_accept_top_p_above_one"].exception
    assert (raises.type, raises.origin, raises.assertion) == ("ValueError", "sglang", False)
    assert raises.frame.startswith("sglang/srt/sampling/sampling_params.py:")
    assert raises.raised_as == "Exception: retry() exceed maximum number of retries."  # CustomTestCase's wrapper
    asserted = by_id["TestTreeRaises::test_layers_split_over_more_ranks_than_layers (pp_size=4)"].exception
    assert (asserted.type, asserted.origin, asserted.assertion) == ("AssertionError", "sglang", False)
    assert asserted.frame.startswith("sglang/srt/utils/common.py:")


@pytest.mark.slow
def test_a_file_that_does_not_collect_is_identical_too(request, tmp_path, cache, release_tree, interp):
    side = assert_identical("0.5.20", style_file("reject_predicate", "test_reject_predicate.py"), tmp_path, cache,
                            release_tree, interp, tools.sandboxed(request))
    (error,) = side.outcomes.collection_errors
    assert (error.exception.type, error.exception.origin) == ("ImportError", "test")  # the tree lacks the name


def _run(tmp_path: Path, cache, *args: str) -> tuple[int, Path]:
    out = tmp_path / "bundle"
    return cli.main(["upstream-tests", *args, "--out", str(out), "--cache-dir", str(cache.root)]), out


def _commit(repo: Path, parent: str, files: dict[str, bytes], tmp_path: Path) -> str:
    from tests.commands.test_upstream_tests import _commit_file

    commit = parent
    for path, data in files.items():
        commit = _commit_file(repo, commit, path, data.decode(), tmp_path)
    return commit


@pytest.mark.slow
def test_from_git_with_its_conftest_and_helpers_graded_by_cause(tmp_path, cache, upstream_repo, capsys):
    """Upstream's layout at the head commit: conftest.py beside the test, one above, the sibling helper;
    a stub fall-through at head reads as what it is, never as a regression."""
    repo, commits = upstream_repo["path"], upstream_repo["commits"]
    where = "test/registered/unit/disaggregation"
    head = _commit(repo, commits["0.5.21"], {
        f"{where}/{DOOR}": (STYLE / "admission_door.py").read_bytes(), f"{where}/conftest.py": HELPERS["conftest.py"],
        f"{where}/door_stubs.py": HELPERS["door_stubs.py"], "test/conftest.py": b"import pytest\n",
        f"{where}/unrelated_helper.py": b"raise SystemExit('never imported by the test')\n",
    }, tmp_path)
    code, out = _run(tmp_path, cache, "--tests", f"{where}/{DOOR}", "--base", "pypi:sglang==0.5.20",
                     "--head", f"git+{repo}@{head}")
    printed = capsys.readouterr().out
    assert code == 1 and bundle.verify(out) == []
    index, _, _ = bundle.load(out)
    assert set(index.extra["tests"]["helpers"]) == {f"{where}/conftest.py", f"{where}/door_stubs.py", "test/conftest.py"}
    grading = Grading.model_validate(index.extra["grading"])
    rows = {r.id.removeprefix(f"{where}/{DOOR}::"): r for r in grading.tests}
    retired = "TestPrefillDoor::test_rejected_request_is_retired_at_the_door"
    assert [(rows[f"{retired} (variant='{v}')"].grade, rows[f"{retired} (variant='{v}')"].cause)
            for v in ("mock sender", "recording sender", "no sender")] == [
        ("fail-to-pass", "assertion"), ("fail-to-pass", "assertion"), ("fail-to-pass", "stub")]
    old = rows["TestPrefillDoor::test_door_of_old_releases_sends_rejected_requests"]
    assert (old.grade, old.cause, old.head.kind) == ("pass-to-fail", "stub", "AttributeError (stub)")
    assert grading.by_cause == {"fail-to-pass": {"assertion": 2, "stub": 1}, "pass-to-fail": {"stub": 1},
                                "fail-to-fail": {"sglang": 2}, "incompatible (test era)": {}}
    assert grading.verdict == "fails at head"  # the tree's own ValueError and assert, not the stub
    assert "1 pass-to-fail (1 stub: not a regression)" in printed
    assert "pytest's own count: 5 failed, 5 passed" in printed
    # report shows the same grading table, per test and subtest, with origins
    assert cli.main(["report", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "(variant='no sender')" in shown and "fail-to-pass (stub)" in shown and "seven steps" not in shown
    assert "fail-to-fail (sglang)" in shown and "origins:" in shown
    page = tmp_path / "report.html"
    assert cli.main(["report", str(out), "--html", str(page)]) == 0
    html = page.read_text()
    assert "Upstream tests, graded per test and subtest" in html and "The incident, step by step" not in html
    assert "fail-to-pass (stub)" in html and "pass-to-fail (stub)" in html and "not a regression" in html


@pytest.mark.slow
def test_a_module_the_environment_lacks_is_an_environment_problem(tmp_path, cache, capsys):
    tests = tmp_path / "test_speculative_kernels.py"
    tests.write_bytes((STYLE / "speculative_kernels.py").read_bytes())
    code, out = _run(tmp_path, cache, "--tests", str(tests), "--base", "pypi:sglang==0.5.21",
                     "--head", "pypi:sglang==0.5.22")
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("diffprobe: error:")]
    assert code == 3 and not out.exists()  # the base side says it all: head is not run
    assert line.startswith("diffprobe: error: pypi:sglang==0.5.21: the environment lacks module 'flashinfer' "
                           "(imported at sglang/srt/speculative/uno_utils.py:")
    assert "not the test's fault" in line


@pytest.mark.slow
def test_a_file_importing_what_neither_tree_has_fails_on_both_for_that_reason(tmp_path, cache):
    """Its tests are listed from its source; each fails on both sides because the trees lack the
    name it imports: incompatible (test era), inconclusive, never a missing fix."""
    source = (STYLE / "reject_predicate.py").read_text().replace("import is_unadmitted_reject",
                                                                  "import is_unadmitted_reject, no_such_helper")
    tests = tmp_path / "test_reject_predicate.py"
    tests.write_text(source)
    code, out = _run(tmp_path, cache, "--tests", str(tests), "--with", str(STYLE / "door_stubs.py"),
                     "--with", str(STYLE / "conftest.py"), "--base", "pypi:sglang==0.5.21", "--head", "pypi:sglang==0.5.22")
    assert code == 1
    grading = Grading.model_validate(bundle.load(out)[0].extra["grading"])
    assert [r.id.split("::", 1)[1] for r in grading.tests] == [
        "TestUnadmittedReject::test_rejected_at_intake", "TestUnadmittedReject::test_not_rejected",
        "TestUnadmittedReject::test_reentering_request_is_not_unadmitted"]
    assert grading.counts["incompatible (test era)"] == 3 and grading.by_cause["incompatible (test era)"] == {"target missing": 3}
    assert grading.verdict == "inconclusive"
