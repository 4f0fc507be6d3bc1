"""The synthetic incident model: the leak end to end, where each defence stops it, guards kept."""

from __future__ import annotations

import pytest

from runner.model import incident
from runner.model import observe


def cases(sw: incident.Switches) -> dict[str, dict]:
    """Every situation's case under one configuration, by id."""
    return {c.id: c for r in observe.run("test", sw) for c in r.cases}


def test_situation_counts_match_the_published_models():
    by_probe = {p: [s for s in incident.SITUATIONS if s.probe == p] for p in ("model-handoff", "model-admission")}
    assert len(by_probe["model-handoff"]) >= 6 and len(by_probe["model-admission"]) >= 9
    guards = {s.id for s in incident.SITUATIONS if s.role == "guard"}
    assert {"reentry-holding-metadata", "preempted-holding-pages", "preempted-with-abort"} <= guards


def test_incident_leaks_end_to_end():
    case = cases(incident.Switches())["over-pool-prompt"]
    e = case.effects
    assert case.classification == "bug"
    assert e["status"] == 200 and e["foreign_pages_read"] == {"tenant-A": 16} and e["own_pages_read"] == 1
    steps = [line.split(" step ")[1].split()[0] for line in e["trace"] if line.startswith("b-1 ")]
    assert steps == ["0", "1", "2", "3", "4", "5", "6", "7"]
    assert any("sent 1 of 28 reserved page(s)" in line for line in e["trace"])


@pytest.mark.parametrize("defence,step,status", [
    ("pool_check", 0, 400),
    ("reject_at_admission", 1, 400),
    ("abort_cleanup", 4, 504),  # no transfer-complete: decode times out, as before #38935
    ("transfer_check", 5, 500),
])
def test_each_defence_stops_the_incident_at_its_step(defence, step, status):
    e = cases(incident.Switches(**{defence: True}))["over-pool-prompt"].effects
    assert (e["stopped_at"], e["status"], e["foreign_pages_read"]) == (step, status, {})


def test_deferred_release_does_not_stop_the_incident_but_stops_late_writes():
    without, with_ = cases(incident.Switches()), cases(incident.Switches(deferred_release=True))
    assert with_["over-pool-prompt"].classification == "bug"
    assert without["late-write-after-free"].classification == "bug"
    assert with_["late-write-after-free"].classification == "clean"
    assert with_["late-write-after-free"].effects["stopped_at"] == 4


def test_reject_at_admission_creates_no_handoff_objects():
    before = cases(incident.Switches())["reject-prefill-side"].effects["created"]
    after = cases(incident.Switches(reject_at_admission=True))["reject-prefill-side"].effects["created"]
    assert all(before.values()) and not any(after.values())


def test_all_defences_clean_and_guards_kept_everywhere():
    for name, sw in incident.CONFIGS.items():
        got = cases(sw)
        assert all(c.classification == "clean" for c in got.values() if c.role == "guard"), name
    assert all(c.classification == "clean" for c in cases(incident.CONFIGS["all"]).values())


def test_guards_catch_a_defence_that_retires_on_the_abort_marker_alone(monkeypatch):
    """Why the guards exist: a naive entry check would orphan resource-holding requests."""
    monkeypatch.setattr(incident, "unadmitted_reject", lambda req: req.to_finish is not None)
    got = cases(incident.Switches(reject_at_admission=True))
    dropped = {i for i, c in got.items() if c.role == "guard" and c.classification == "bug"}
    assert dropped == {"reentry-holding-metadata", "preempted-with-abort", "bootstrapped-then-aborted"}
    assert got["reentry-holding-metadata"].effects["resources_orphaned"] is True
