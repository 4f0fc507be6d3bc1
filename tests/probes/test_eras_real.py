"""The probes on one real release of each API era before the fixes (cached PyPI wheels).

Each era differs in how a request holds KV and marks an abort, how the scheduler rejects a prompt
at intake, where the transfer classes and the batch result come from. On every one: each case is
observed or not applicable; `not_applicable` names an API the tree's own source lacks; the rejected
request was rejected by the tree's own intake; the pre-fix bugs are seen. And an audit of an old tree
says "not fixed" for both fixes, from behaviour (the later defences: not applicable, an API it lacks).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from runner import cli
from runner.app import pipeline
from tests import forks
from tests.conftest import probe_options

pytestmark = pytest.mark.slow

# release -> what sets its era apart (and the not-applicable cases that follow from it)
ERAS = {
    "0.4.5": "first PD release: KVSender named in the door module, 'infight' queue, rejection by "
    "validate_input_length alone, to_abort, is_chunked, GenerationBatchResult in the scheduler",
    "0.4.7": "set_finish_with_abort (finished at once), get_kv_class, kv_cache_cpu backup",
    "0.5.5": "to_finish (abort pending), GenerationBatchResult in managers.utils, Mamba slot",
    "0.5.13": "kv_allocated_len on the request, release_kv_cache, no runtime_context",
    "0.5.18": "optional req.kv record beside req_pool_idx, runtime_context",
}
# a request names its session by id only before 0.5.10: no session of its own to release or keep
SESSION = dict.fromkeys(("prefill-door-rejected-session", "prefill-door-rejected-plain-session"),
                        "sglang.srt.managers.schedule_batch.Req.session")
OPTIMISTIC = dict.fromkeys(
    ("aborted-yielded-chunk", "healthy-yielded-result", "healthy-optimistic-chunked", "healthy-optimistic-result"),
    "sglang.srt.managers.schedule_batch.Req.pending_bootstrap",
)
# the cases each era cannot run, at least (every not-applicable case must name an API its source lacks)
NOT_APPLICABLE = {
    "0.4.5": {
        "prefill-door-reentry-backup": "sglang.srt.managers.schedule_batch.Req.offload_kv_cache",
        "prefill-door-reentry-mamba": "sglang.srt.managers.schedule_batch.Req.mamba_pool_idx",
        "mamba-before-kv": "sglang.srt.managers.schedule_batch.Req.mamba_pool_idx",
        "decode-door-retracted": "sglang.srt.disaggregation.decode.DecodePreallocQueue.add(is_retracted)",
        "decode-door-rebootstrap": "sglang.srt.disaggregation.decode.DecodePreallocQueue.add(is_rebootstrap)",
        **OPTIMISTIC,
        **SESSION,
    },
    "0.4.7": {
        "prefill-door-reentry-mamba": "sglang.srt.managers.schedule_batch.Req.mamba_pool_idx",
        "mamba-before-kv": "sglang.srt.managers.schedule_batch.Req.mamba_pool_idx",
        "decode-door-retracted": "sglang.srt.disaggregation.decode.DecodePreallocQueue.add(is_retracted)",
        "decode-door-rebootstrap": "sglang.srt.disaggregation.decode.DecodePreallocQueue.add(is_rebootstrap)",
        **OPTIMISTIC,
        **SESSION,
    },
    "0.5.5": {
        "decode-door-rebootstrap": "sglang.srt.disaggregation.decode.DecodePreallocQueue.add(is_rebootstrap)",
        **OPTIMISTIC,
        **SESSION,
    },
    "0.5.13": {
        "decode-door-rebootstrap": "sglang.srt.disaggregation.decode.DecodePreallocQueue.add(is_rebootstrap)",
        # its process_prefill_chunk stops a chunked request whose bootstrap is pending: no later chunk in flight
        "healthy-optimistic-chunked": "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin"
        ".has_bootstrapped_waiting_req",
    },
    "0.5.18": {},
}


@pytest.fixture(scope="module")
def audited(tmp_path_factory, cache, warm):
    """One `diffprobe audit` per release, shared by the tests: (exit code, {case id: case}). Every
    release is probed first, two at a time (``warm``): each audit reuses its receipts."""
    done: dict[str, tuple[int, dict, Path]] = {}

    def get(version: str) -> tuple[int, dict, Path]:
        warm([f"pypi:sglang=={v}" for v in [*sorted(ERAS), "0.4.10"]])
        if version not in done:
            out = tmp_path_factory.mktemp("audit") / version
            code = cli.main(["audit", f"pypi:sglang=={version}", "--out", str(out), "--cache-dir", str(cache.root)])
            cases = {}
            for receipt in sorted((out / "receipts").glob("*.json")):
                cases.update({c["id"]: c for c in json.loads(receipt.read_text())["cases"]})
            done[version] = (code, cases, out)
        return done[version]

    return get


def _absent_from(api: str, root: Path) -> bool:
    """True when the tree's own source lacks ``api`` (``pkg.mod.Class.member`` or
    ``pkg.mod.Class.method(param)``): read with ``ast``, never imported."""
    path, _, param = api.partition("(")
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        source = root.joinpath(*parts[:cut]).with_suffix(".py")
        if source.is_file():
            break
    else:
        return True
    tree = ast.parse(source.read_text())
    names = parts[cut:]
    if param:
        cls, method = names
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == cls:
                for fn in node.body:
                    if isinstance(fn, ast.FunctionDef) and fn.name == method:
                        args = fn.args.args + fn.args.kwonlyargs
                        return param.rstrip(")") not in {a.arg for a in args}
        return True
    member = names[-1]
    used = {getattr(node, "attr", None) or getattr(node, "name", None) or getattr(node, "id", None) for node in ast.walk(tree)}
    return member not in used


@pytest.mark.parametrize("version", sorted(ERAS))
def test_every_case_is_observed_or_names_a_missing_api(version, audited, release_tree):
    _, cases, _ = audited(version)
    errors = {cid: c["error"] for cid, c in cases.items() if c["outcome"] not in ("observed", "not_applicable")}
    assert errors == {}, f"{version} ({ERAS[version]})"
    missing = {cid: c["missing"] for cid, c in cases.items() if c["outcome"] == "not_applicable"}
    assert NOT_APPLICABLE[version].items() <= missing.items()
    root = release_tree(version).root
    assert all(_absent_from(api, root) for api in missing.values())


@pytest.mark.parametrize("version", sorted(ERAS))
def test_the_pre_fix_bugs_are_observed(version, audited):
    _, cases, _ = audited(version)
    for cid in ("prefill-door-rejected", "decode-door-rejected", "aborted-final-result", "late-result-after-retire"):
        assert cases[cid]["classification"] == "bug", (version, cid)


def test_the_rejected_request_went_through_each_eras_own_intake(audited):
    """0.4.5: the length check itself finishes the request and the scheduler cuts the prompt;
    0.4.7: set_finish_with_abort finishes it at once; 0.5.5 on: the abort waits in to_finish."""
    states = {v: audited(v)[1]["prefill-door-rejected"]["effects"]["before"] for v in ERAS}
    for version, state in states.items():
        assert state["prompt_tokens"] == 1, version
    assert states["0.4.5"]["finished"] and "allow-auto-truncate" in json.dumps(states["0.4.5"]["finished_reason"])
    assert states["0.4.7"]["finished"] and states["0.4.7"]["to_finish"] is None
    for version in ("0.5.5", "0.5.13", "0.5.18"):
        assert not states[version]["finished"] and states[version]["to_finish"]["status_code"] == 400, version


def test_audit_of_an_old_tree_says_not_fixed_from_behaviour(audited):
    code, cases, out = audited("0.4.7")
    assert code == 1
    rows = json.loads((out / "bundle.json").read_text())["extra"]["rows"]
    # the later defences' probes name the API an old tree lacks (it commits a transfer inline): not applicable
    later = dict.fromkeys((39500, 40645, 41023, 41402, 41404, *range(1, 7)), "not applicable")  # L1-L6 too
    assert {f["fix"]: f["status"] for f in rows[0]["fixes"]} == {36988: "not fixed", 38935: "not fixed", **later}


def test_guards_read_what_each_era_does(audited):
    """Guards that read the bug in the first release-line sweep, each observed as its era works.

    0.4.5 has no overlap loop for the PD prefill worker (scheduler.py:2014-2015 start only
    ``event_loop_normal_disagg_prefill``): ``process_prefill_chunk`` sends a middle chunk's KV
    (prefill.py:226) and result processing only counts it down (prefill.py:172-180): the case under
    overlap is not applicable there, naming the loop it lacks, and the one without overlap sends only
    the last chunk from result processing. 0.5.13 polls an optimistic
    request's sender at its final result (prefill.py:546-577); told the bootstrap is still in
    progress it releases and re-queues the request for another attempt (prefill.py:841-843,
    1005-1040): a retry, not a retirement.
    """
    overlap = audited("0.4.5")[1]["healthy-chunked-result"]
    assert overlap["missing"] == "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin.event_loop_overlap_disagg_prefill"
    early = audited("0.4.5")[1]["healthy-chunked"]
    assert early["classification"] == "clean" and early["effects"]["overlap"] is False
    assert [c["kwargs"] for c in early["effects"]["results"][-1]["kv_chunks_sent"]] == [{"token_id": 11}]
    later = audited("0.5.18")[1]["healthy-chunked-result"]
    assert later["classification"] == "clean" and later["effects"]["overlap"] is True
    assert len(later["effects"]["results"][-1]["kv_chunks_sent"]) == 2  # the middle chunk sent from here too
    retried = audited("0.5.13")[1]["healthy-optimistic-result"]
    final = retried["effects"]["results"][-1]
    assert retried["classification"] == "clean"
    assert final["sender_calls"] == ["poll"] and final["requeued"] == ["healthy-optimistic-result"]
    assert not final["kv_chunks_sent"] and not final["streamed"] and not final["metadata_frees"]


# single-statement forks of those eras that break what the guards protect: each must read the bug
# (0.4.5: the last chunk is never sent; 0.5.13: a request still bootstrapping is neither retried nor queued, lost)
GUARD_MUTANTS = {
    "0.4.5": ("healthy-chunked", "result-last-chunk-sent",
              [(forks.PREFILL, "                self.send_kv_chunk(req, token_id=next_token_id)\n", "")]),
    "0.5.13": ("healthy-optimistic-result", "result-kept-for-bootstrap",
               [(forks.PREFILL, "            if not defer_release:\n                self.optimistic_release_and_requeue(req)\n"
                 "            return False\n        elif poll == KVPoll.WaitingForInput:",
                 "            if not defer_release:\n                pass\n"
                 "            return False\n        elif poll == KVPoll.WaitingForInput:")]),
}


@pytest.fixture(scope="module")
def guard_forks(release_tree, cache, tmp_path_factory) -> dict[str, dict]:
    """Each guard mutant's prefill-cleanup receipt (the probe its case belongs to), both forks probed
    in one run, two at a time: version -> {case id: case}."""
    work = tmp_path_factory.mktemp("guard-forks")
    texts = {v: f"path:{forks.make(release_tree(v).root, work / v, edits)}" for v, (_, _, edits) in GUARD_MUTANTS.items()}
    _, got = pipeline.probe_sources({t: ["prefill-cleanup"] for t in texts.values()}, probe_options(cache))
    return {v: {c.id: c.model_dump(mode="json") for c in got[(t, "prefill-cleanup")].cases} for v, t in texts.items()}


@pytest.mark.parametrize("version", sorted(GUARD_MUTANTS))
def test_a_fork_that_breaks_the_guard_reads_the_bug(version, guard_forks):
    case_id, duty, _ = GUARD_MUTANTS[version]
    cases = guard_forks[version]
    assert cases[case_id]["classification"] == "bug"
    assert cases[case_id]["duties"][duty] is False


def test_a_release_that_does_not_import_says_why(audited, release_tree, capsys):
    """0.4.10's wheel lacks a file its own scheduler reads at import: the receipt names that file by
    its path in the tree and the tree's line that reads it (not only torch's frame that raised), the
    stored tree indeed lacks it (nothing is faked), and the report's matrix says so."""
    _, _, out = audited("0.4.10")
    receipt = json.loads(next((out / "receipts").glob("*admission*.json")).read_text())
    failed = receipt["import_result"]["error"]
    missing, reader = "sglang/srt/mem_cache/storage/hf3fs/hf3fs_utils.cpp", "sglang/srt/mem_cache/storage/hf3fs/client_hf3fs.py"
    assert failed["type"] == "FileNotFoundError" and failed["message"].endswith(f"'{missing}'")
    assert f", called from {reader}:" in failed["frame"]
    root = release_tree("0.4.10").root
    assert (root / reader).is_file() and not (root / missing).exists()
    capsys.readouterr()
    cli.main(["report", str(out), "--all"])
    assert "the tree did not import: FileNotFoundError" in capsys.readouterr().out
