"""The probes against real SGLang releases from PyPI, and against forks made from them."""

from pathlib import Path

import pytest

from probes.duties_38935 import SPACE as ADMISSION
from runner import cli, fixids
from runner.app import pipeline
from runner.commands import options
from runner.evidence import bundle, compare, pins
from tests import forks
from tests.records import checked

pytestmark = pytest.mark.slow  # real releases, environments and SGLang imports

EVIDENCE = Path(__file__).resolve().parents[2] / "evidence"


@pytest.fixture(scope="session")
def opts(cache):
    return pipeline.Options(cache=cache, probe=options.ProbeOptions(jobs=2, case_timeout=10))


@pytest.fixture(scope="session")
def run_bundle(tmp_path_factory, cache):
    """One `diffprobe run --via releases`, shared by the tests that read it."""
    out = tmp_path_factory.mktemp("run") / "bundle"
    code = cli.main(["run", "--via", "releases", "--out", str(out), "--cache-dir", str(cache.root), "-j", "2"])
    return code, out


def _cases(root, name):
    _, receipts, _ = bundle.load(root)
    return {c.id: c for c in receipts[name].cases}


def test_run_observes_both_fixes(run_bundle):
    code, out = run_bundle
    assert code == 0
    assert bundle.verify(out) == []
    _, _, diffs = bundle.load(out)
    assert {d.fix: d.verdict for d in diffs.values()} == dict.fromkeys(pins.load().fixes, "fix observed")
    # upstream's pull requests by number, then the local ids: the incident's own fixes head the screen
    assert checked(out)["fixes"] == sorted(pins.load().fixes, key=fixids.order)


def test_admission_bug_at_0_5_20_not_at_0_5_21(run_bundle):
    _, out = run_bundle
    base, head = _cases(out, "receipts/sglang-0.5.20.admission.json"), _cases(out, "receipts/sglang-0.5.21.admission.json")
    for door, queue in (("prefill", "bootstrap"), ("decode", "prealloc")):
        b, h = base[f"{door}-door-rejected"], head[f"{door}-door-rejected"]
        assert (b.classification, h.classification) == ("bug", "clean")
        assert b.effects["kv_endpoints"] and not h.effects["kv_endpoints"]  # sender/receiver only before
        assert h.effects["retired"] == [f"{door}-door-rejected".replace(f"{door}-door-", "")] or h.effects["retired"]
    # valid and re-entering requests stay admitted on both sides; a generated case whose state the
    # release's code cannot produce (a prefill door with no is_retracted/is_rebootstrap) is not
    # applicable, naming what the tree lacks, and never counts as observed
    for cases in (base, head):
        guards = [c for c in cases.values() if c.role == "guard"]
        for case in guards:
            if case.outcome == "not_applicable":
                assert case.missing and case.classification == "inconclusive", case.id
            else:
                assert case.outcome == "observed" and case.classification == "clean", case.id
        assert {"prefill-door-valid", "decode-door-valid", "decode-door-retracted"} <= {
            c.id for c in guards if c.outcome == "observed"}


def test_prefill_cleanup_bug_at_0_5_19_not_at_0_5_20(run_bundle):
    _, out = run_bundle
    base = _cases(out, "receipts/sglang-0.5.19.prefill-cleanup.json")
    head = _cases(out, "receipts/sglang-0.5.20.prefill-cleanup.json")
    b, h = base["aborted-final-result"].effects["results"][-1], head["aborted-final-result"].effects["results"][-1]
    assert b["inflight_queue"] and b["kv_chunks_sent"]  # re-queued and sent before the fix
    assert not h["inflight_queue"] and not h["kv_chunks_sent"] and h["sender_calls"] == ["abort"]
    late = head["late-result-after-retire"].effects["results"][-1]
    assert not late["kv_chunks_sent"] and not late["inflight_queue"]
    assert base["late-result-after-retire"].classification == "bug"


def test_a_second_run_observes_the_same(run_bundle, tmp_path, cache):
    _, first = run_bundle
    second = tmp_path / "second"
    assert cli.main(["run", "--via", "releases", "--pr", "38935", "--out", str(second), "--cache-dir", str(cache.root)]) == 0
    only_admission = [line for line in compare.compare(first, second) if "only in A" not in line]
    assert only_admission == []


def test_reference_bundle_is_current(run_bundle):
    """The committed evidence was produced by these probes and observes what they observe now (the
    release-line sweep is checked on its own, tests/evidence/test_release_line.py)."""
    _, out = run_bundle
    references = [p for p in EVIDENCE.glob("releases-*") if (p / bundle.MANIFEST).is_file()]
    assert references, "no reference bundle committed under evidence/"
    for ref in references:
        assert bundle.verify(ref) == []
        assert compare.compare(ref, out) == []


SET_FINISH_RAISES = [(forks.SCHEDULE_BATCH, "    def set_finish_with_abort(\n",
                      "    def set_finish_with_abort(*a, **k):\n        raise ValueError('fork refuses')\n\n    def _unused(\n")]
# forks of 0.5.21 probed with admission: name -> edits
FORKS = {"without-prefill-gate": forks.WITHOUT_PREFILL_GATE, "hang-and-crash": forks.HANG_AT_PREFILL_DOOR + forks.CRASH_AT_DECODE_DOOR,
         "setup-raises": SET_FINISH_RAISES}


@pytest.fixture(scope="module")
def forked(tmp_path_factory, release_tree, opts) -> dict[str, dict]:
    """Every fork of ``FORKS`` probed in one run, two trees at a time: name -> {case id: case}."""
    work = tmp_path_factory.mktemp("forks")
    texts = {name: f"path:{forks.make(release_tree('0.5.21').root, work / name, edits)}" for name, edits in FORKS.items()}
    _, got = pipeline.probe_sources({text: ["admission"] for text in texts.values()}, opts)
    return {name: {c.id: c for c in got[(text, "admission")].cases} for name, text in texts.items()}


def test_fork_without_the_prefill_gate_shows_the_bug_at_that_door_only(forked):
    cases = forked["without-prefill-gate"]
    assert cases["prefill-door-rejected"].classification == "bug"
    assert cases["decode-door-rejected"].classification == "clean"


def test_hanging_and_crashing_cases_are_timeout_and_error_while_the_rest_completes(forked):
    cases = forked["hang-and-crash"]
    rejected = {door: {ADMISSION.case_id(p) for p in ADMISSION.points() if p["door"] == door and p["abort"] == "rejected"}
                for door in ("prefill", "decode")}  # every rejection the case space generates at each door
    assert len(rejected["prefill"]) >= 3 and len(rejected["decode"]) >= 3
    assert all(cases[i].outcome == "timeout" for i in rejected["prefill"])
    for crashed in (cases[i] for i in rejected["decode"]):
        assert crashed.outcome == "error" and crashed.error.type == "Signal" and "SIGSEGV" in crashed.error.message
        assert crashed.classification == "inconclusive"
    rest = [c for c in cases.values() if c.id not in rejected["prefill"] | rejected["decode"]]
    observed = [c for c in rest if c.outcome != "not_applicable"]
    assert len(observed) >= 6 and all(c.outcome == "observed" and c.classification == "clean" for c in observed)


def test_an_error_in_the_probes_own_setup_is_an_error_not_a_behaviour(forked):
    """set_finish_with_abort is how a case prepares a rejected request, before SGLang is driven."""
    cases = forked["setup-raises"]
    rejected = cases["prefill-door-rejected"]
    assert rejected.outcome == "error" and rejected.classification == "inconclusive"
    assert rejected.error.type == "ValueError" and rejected.error.where == "setup"
