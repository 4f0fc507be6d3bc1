"""The host judges every case again from its effects (issue #11): a classification its effects do
not bear out is an error, never a verdict, and a resealed bundle whose verdicts do not follow from
its effects fails verify (exit 1)."""

from __future__ import annotations

import json

from runner import cli
from runner.evidence import bundle, catalog, receipts
from runner.judge import judging
from runner.judge.observations import Case
from runner.files import sha256_file
from runner.store.sources import TreeIdentity

ABORT = {"type": "abort", "message": "too long", "status_code": 400, "err_type": "BadRequestError"}


def _state(**fields):
    return {"rid": "rejected", "finished": False, "to_finish": None, "finished_reason": None, "pending_bootstrap": False,
            "metadata_buffer_index": -1, "holds_kv": False, "holds_mamba": False, "has_kv_sender": False,
            "holds_backup": False, "has_session": False, "output_ids": []} | fields


RETIRED = {"before": _state(), "queues": {"bootstrap": []}, "kv_endpoints": [], "kv_calls": [], "retired": ["rejected"],
           "cache_release": True, "beam_groups": True, "beam_retired": ["rejected"], "session_aborted": [],
           "streamed": [[{"rid": "rejected", "finished_reason": ABORT}]],
           "tree_cache_calls": [{"call": "finish", "args": [{"CacheRequestHandle": {"rid": "rejected", "attempt_id": 0}},
                                                            "CacheRequestOutcome.ABORT"], "kwargs": {}}],
           "request": _state(finished=True, finished_reason=ABORT)}
ADMITTED = RETIRED | {"queues": {"bootstrap": ["rejected"]}}


def _case(effects, classification) -> Case:
    return Case(id="prefill-door-rejected", site="prefill-door", role="bug", title="t", signature="s",
                outcome="observed", classification=classification, effects=effects, duration_ms=1)


def test_duties_are_judged_on_the_host():
    judged = judging.rejudge("admission", _case(ADMITTED, "bug"))
    assert judged.outcome == "observed" and judging.failed_duties(judged) == ["door-not-queued"]
    assert judging.rejudge("admission", _case(RETIRED, "clean")).duties["door-retired-by-tree"] is True


def test_a_clean_claim_the_effects_contradict_is_an_error():
    judged = judging.rejudge("admission", _case(ADMITTED, "clean"))
    assert judged.outcome == "error" and judged.error.type == "Misjudged" and judged.error.where == "process"
    assert "door-not-queued" in judged.error.message


def _bundle(tmp_path):
    probe = receipts.ProbeRef(id="admission", fix=38935, sha256=catalog.probe_digest("admission"),
                              files={name: "0" * 64 for name in catalog.probe_files("admission")})
    tree = TreeIdentity(kind="pypi", source="pypi:sglang==0.5.21", version="0.5.21", artifact="sglang.whl",
                        artifact_sha256="c" * 64, tree_digest="h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", files=3)
    case = judging.rejudge("admission", _case(ADMITTED, "bug"))
    receipt = receipts.make(probe, tree, receipts.host_environment(), [case], started_at="t0", finished_at="t1")
    return bundle.write(tmp_path / "b", kind="audit", created_at="t0", receipts=[receipt], differentials=[], pins_sha256=None)


def test_a_resealed_bundle_whose_verdict_does_not_follow_from_its_effects_fails_verify(tmp_path):
    root = _bundle(tmp_path)
    assert bundle.verify(root) == []
    path = next((root / "receipts").iterdir())
    raw = json.loads(path.read_bytes())
    case = raw["cases"][0]
    case["classification"], case["duties"] = "clean", {d: True for d in case["duties"]}  # a "fixed" claim
    raw["summary"]["classifications"] = {"bug": 0, "clean": 1, "inconclusive": 0}
    cases = [Case.model_validate(c) for c in raw["cases"]]
    source = receipts.Receipt.model_validate(raw | {"digest": "0" * 64}).source
    raw["observation_digest"] = receipts.observation_digest(raw["probe"]["sha256"], receipts.source_key(source), cases)
    raw["digest"] = receipts.seal(raw)
    path.write_bytes(json.dumps(raw).encode())
    manifest = root / bundle.MANIFEST
    lines = {n: d for d, n in (l.split("  ", 1) for l in manifest.read_text().splitlines())}
    lines[f"receipts/{path.name}"] = sha256_file(path)
    manifest.write_text("".join(f"{lines[n]}  {n}\n" for n in sorted(lines)))
    problems = bundle.verify(root)
    assert any("door-not-queued" in p for p in problems), problems
    assert cli.main(["verify", str(root)]) == 1


def test_a_case_reported_at_another_site_or_role_is_an_error_where_its_probe_places_it():
    """A process that moves a bug case into a configuration a deployment does not run (or makes it a guard) would take
    it out of the status ``accept`` reads: the site and role are the probe's, by case id."""
    moved = _case(RETIRED, "clean").model_copy(update={"site": "decode-door"})
    judged = judging.rejudge("admission", moved)
    assert (judged.outcome, judged.error.type, judged.site, judged.role) == ("error", "Misjudged", "prefill-door", "bug")
    assert "reported at site decode-door" in judged.error.message
    demoted = judging.rejudge("admission", _case(ADMITTED, "bug").model_copy(update={"role": "guard"}))
    assert demoted.outcome == "error" and demoted.role == "bug"


def test_a_site_over_one_backend_reads_only_that_backends_conditions_and_the_shared_ones():
    """#40645's cases run over Mooncake and NIXL, each backend's site its own: a condition of NIXL's module no case saw
    both ways leaves NIXL's sites inconclusive, never Mooncake's; one of the shared code leaves both."""
    from types import SimpleNamespace as NS

    from runner.judge.conditions import Condition
    from runner.judge.fixcode import FixCoverage, FixFunction

    def function(name: str, file: str, seen: list[bool]) -> FixFunction:
        return FixFunction(function=name, file=file, conditions=[Condition(at=f"{file}:10:8", kind="truth", text="x",
                                                                           seen=seen)])

    def status(nixl: list[bool], common: list[bool], sites=("default", "default-nixl")) -> dict[str, str]:
        coverage = FixCoverage(fix=40645, functions=[
            function("sglang.srt.disaggregation.nixl.conn.NixlKVManager.transfer_worker",
                     "sglang/srt/disaggregation/nixl/conn.py", nixl),
            function("sglang.srt.disaggregation.common.conn.CommonKVSender.clear",
                     "sglang/srt/disaggregation/common/conn.py", common)])
        cases = [Case(id=f"c{i}", site=site, role="bug", title="t", signature="s", outcome="observed",
                      classification="clean", effects={}, duration_ms=1) for i, site in enumerate(sites)]
        [fs] = judging.fixes([NS(probe=NS(fix=40645), fix_code=coverage, cases=cases)])
        return {site: judging.at_site(fs, site).status for site in sites} | {"whole": fs.status}

    assert status([True, False], [True, False]) == {"default": "fixed", "default-nixl": "fixed", "whole": "fixed"}
    assert status([True], [True, False]) == {"default": "fixed", "default-nixl": "inconclusive", "whole": "inconclusive"}
    assert status([True, False], [False]) == {"default": "inconclusive", "default-nixl": "inconclusive",
                                              "whole": "inconclusive"}
    # a fix whose sites name no backend (L3: NIXL's code, its cases all NIXL's) keeps every condition at each site
    assert status([True], [True, False], sites=("default",)) == {"default": "inconclusive", "whole": "inconclusive"}
