"""A bundle's mutation reports are checked by ``verify`` (issue #11): a score that does not count its
mutants, a survivor taken out of ``bundle.json``'s scores, or a report whose unmutated cases do not read
as the receipt of the same tree (not the evidence the verdict rests on) fails; a case the tree already
fails never kills a mutant; only a fixed tree has a score. Hand-made bundles: no SGLang involved."""

from __future__ import annotations

import orjson
import pytest

from runner import cli
from runner.evidence import bundle, mutation, receipts
from runner.judge import judging
from tests import helpers

TREE = helpers.tree("0.5.21")


def _mutant(n: int, status: str, why: str = "prefill-door-rejected: door-not-queued") -> mutation.Mutant:
    return mutation.Mutant(id=f"add:{n}:delete:{n}", function="sglang.srt.disaggregation.prefill.PrefillBootstrapQueue.add",
                           file="sglang/srt/disaggregation/prefill.py", line=n, operator="delete", before="x()",
                           after="pass", status=status, why=why)


def _report(baseline=(("prefill-door-rejected", "bug", "clean"), ("prefill-door-valid", "guard", "clean")),
            statuses=("killed", "killed", "survived"), probe_sha256=helpers.PROBE.sha256) -> mutation.Mutation:
    cases = [mutation.BaselineCase(id=i, role=r, state=s) for i, r, s in baseline]
    mutants = [_mutant(n, s, "" if s in ("survived", "not covered") else "prefill-door-rejected: door-not-queued")
               for n, s in enumerate(statuses)]
    score = judging.score_of("admission", 38935, [(c.role, c.state) for c in cases], [m.status for m in mutants])
    return mutation.Mutation(source=TREE.source, tree_digest=TREE.tree_digest, probe="admission", probe_sha256=probe_sha256,
                             score=score, baseline=cases, targets=[], missing=[], mutants=mutants)


def _write(tmp_path, report: mutation.Mutation, scores: list[dict] | None = None, kind: str = "run"):
    receipt = receipts.make(helpers.PROBE, TREE, receipts.host_environment(),
                            [helpers.case("prefill-door-rejected"), helpers.case("prefill-door-valid", role="guard")],
                            started_at="t0", finished_at="t1")
    stated = scores if scores is not None else [report.score.model_dump(mode="json") | {"source": report.source}]
    files = {f"{mutation.DIR}sglang-0.5.21.admission.json": orjson.dumps(report.model_dump(mode="json"))}
    return bundle.write(tmp_path / "b", kind=kind, created_at="t0", receipts=[receipt], differentials=[],
                        pins_sha256=None, files=files, extra={"scores": stated})


def test_a_consistent_report_verifies(tmp_path):
    assert bundle.verify(_write(tmp_path, _report())) == []


def test_a_score_that_does_not_count_its_mutants_fails(tmp_path):
    report = _report()
    lied = report.model_copy(update={"score": report.score.model_copy(update={"killed": 3, "survived": 0})})
    problems = bundle.verify(_write(tmp_path, lied))
    assert any("does not count its mutants" in p for p in problems), problems
    assert cli.main(["verify", str(tmp_path / "b")]) == 1


def test_a_survivor_hidden_from_the_bundle_scores_fails(tmp_path):
    report = _report()
    hidden = report.score.model_dump(mode="json") | {"source": report.source, "killed": 3, "survived": 0}
    problems = bundle.verify(_write(tmp_path, report, scores=[hidden]))
    assert problems == ["bundle.json: its scores are not those of the bundle's mutation reports"]


def test_a_report_whose_unmutated_cases_read_otherwise_than_the_receipt_fails(tmp_path):
    """The receipt says the valid request was clean; a report measured on a tree where it was not is
    not a measure of the evidence the verdict rests on."""
    report = _report(baseline=(("prefill-door-rejected", "bug", "clean"), ("prefill-door-valid", "guard", "error")))
    problems = bundle.verify(_write(tmp_path, report))
    assert problems == [f"{mutation.DIR}sglang-0.5.21.admission.json: its cases unmutated do not read as the receipt of its tree does"]


def test_a_report_of_another_probe_version_than_the_receipt_fails(tmp_path):
    problems = bundle.verify(_write(tmp_path, _report(probe_sha256="f" * 64)))
    assert any("another version of probe admission" in p for p in problems), problems


def test_only_a_fixed_tree_has_a_score():
    report = _report(baseline=(("prefill-door-rejected", "bug", "bug"), ("prefill-door-valid", "guard", "clean")))
    assert report.score.baseline == "not fixed"
    assert report.score.strength() == "not measured: the tree unmutated reads not fixed"
    assert _report().score.strength() == "2 of 3 mutants of the fix's code paths detected (66.7%)"


def _raw(case_id: str, classification: str) -> dict:
    case = helpers.case(case_id, bug=classification == "bug", duties={"door-not-queued": classification != "bug"})
    return case.model_dump(mode="json")


@pytest.mark.parametrize("held, expected", [
    ({"prefill-door-rejected", "prefill-door-valid"}, "killed"),
    ({"prefill-door-valid"}, "survived"),  # the only case that "caught" it already fails unmutated
    (set(), "error"),
])
def test_only_a_case_that_held_unmutated_can_kill_a_mutant(held, expected):
    mutant = {"function": "sglang.x.Door.add", "operator": "delete", "before": "x()",
              "reached_by": ["prefill-door-rejected", "prefill-door-valid"],
              "cases": [_raw("prefill-door-rejected", "bug"), _raw("prefill-door-valid", "clean")]}
    status, why = judging.mutant_status("other-probe", mutant, held)
    assert status == expected, why


def test_a_mutant_no_case_reaches_is_not_covered_and_counts_against_the_score(capsys):
    """Every statement of the fix's code is a site: one on a line no case runs is never run, never
    passes for killed, and is listed first."""
    mutant = {"function": "sglang.x.Door.add", "operator": "delete", "before": "x()", "reached_by": [], "cases": []}
    assert judging.mutant_status("other-probe", mutant, {"prefill-door-valid"}) == ("not covered", "")
    only_failing = dict(mutant, reached_by=["prefill-door-rejected"])
    assert judging.mutant_status("other-probe", only_failing, {"prefill-door-valid"})[0] == "error"
    report = _report(statuses=("killed", "killed", "not covered"))
    assert report.score.not_covered == 1 and report.unexplained() == [report.mutants[2]] and not report.holds()
    assert report.score.strength() == "2 of 3 mutants of the fix's code paths detected (66.7%), 1 on lines no case runs"
    from runner.commands import mutate

    mutate.show([_report(statuses=("survived", "killed", "not covered"))])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "x() -> pass" in line]
    assert [r.split()[1] for r in rows] == ["not", "survived"]  # uncovered sites first


def test_what_a_tree_with_a_change_reads():
    """A hunk's reading: its cases judged on the changed tree in place of their unchanged results; a guard
    the changed tree's own code raised on is a regression, as a mutant it raised on is killed."""
    baseline = [helpers.case("prefill-door-rejected"), helpers.case("prefill-door-valid", role="guard")]
    crashed = helpers.case("prefill-door-valid", role="guard", outcome="error").model_dump(mode="json")
    crashed["error"]["where"] = "sglang"
    assert judging.status_with("other-probe", baseline, [crashed]) == (
        "regression", ["prefill-door-valid: the tree's code raised AttributeError"])
    broken = _raw("prefill-door-rejected", "bug")
    assert judging.status_with("other-probe", baseline, [broken]) == ("not fixed", ["prefill-door-rejected: door-not-queued"])
    assert judging.status_with("other-probe", baseline, []) == ("fixed", [])


def test_a_change_is_read_configuration_by_configuration(monkeypatch):
    """A hunk that breaks a duty under one configuration only reads "not fixed" there and as the tree unchanged
    elsewhere (reads_by_site); its reading over the configurations the fix is pinned in is the pinned ones'."""
    from runner.commands import mutate

    monkeypatch.setattr(mutate.catalog, "probe_digest", lambda probe: "0" * 64)
    baseline = [helpers.case("rejected-default", site="default"), helpers.case("valid-default", role="guard", site="default"),
                helpers.case("rejected-with-option", site="with-option"),
                helpers.case("valid-with-option", role="guard", site="with-option")]
    broken = helpers.case("rejected-default", site="default", bug=True, duties={"door-not-queued": False})
    hunk = {"id": "h", "function": "sglang.x.Door.add", "file": "x.py", "line": 3, "operator": "hunk", "before": "a",
            "after": "b", "reached_by": ["rejected-default"], "cases": [broken.model_dump(mode="json")]}
    raw = mutate._Run.model_construct(schema_="diffprobe.mutation/1", probe="other-probe", fix=1, targets=[], missing=[],
                                      operators=[], baseline=baseline, mutants=[hunk])
    report = mutate.judge("pypi:sglang==0.5.21", "h1:x", raw)
    [m] = report.mutants
    assert m.reads_by_site == {"default": "not fixed", "with-option": "fixed"} and m.reads == "not fixed"
    [m] = mutate.judge("pypi:sglang==0.5.21", "h1:x", raw, sites=["with-option"]).mutants
    assert m.reads_by_site == {"default": "not fixed", "with-option": "fixed"} and m.reads == "fixed"
