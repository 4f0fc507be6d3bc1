"""The synthetic incident model: the leak end to end, where each defence stops it, guards kept."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from runner import cli
from runner.commands import model
from runner.evidence import bundle
from runner.files import sha256_file
from runner.evidence.receipts import Receipt


def cases(sw: model.Switches) -> dict[str, dict]:
    """Every situation's case under one configuration, by id."""
    return {c.id: c for r in model.run("test", sw) for c in r.cases}


def test_situation_counts_match_the_published_models():
    by_probe = {p: [s for s in model.SITUATIONS if s.probe == p] for p in ("model-handoff", "model-admission")}
    assert len(by_probe["model-handoff"]) >= 6 and len(by_probe["model-admission"]) >= 9
    guards = {s.id for s in model.SITUATIONS if s.role == "guard"}
    assert {"reentry-holding-metadata", "preempted-holding-pages", "preempted-with-abort"} <= guards


def test_incident_leaks_end_to_end():
    case = cases(model.Switches())["over-pool-prompt"]
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
    e = cases(model.Switches(**{defence: True}))["over-pool-prompt"].effects
    assert (e["stopped_at"], e["status"], e["foreign_pages_read"]) == (step, status, {})


def test_deferred_release_does_not_stop_the_incident_but_stops_late_writes():
    without, with_ = cases(model.Switches()), cases(model.Switches(deferred_release=True))
    assert with_["over-pool-prompt"].classification == "bug"
    assert without["late-write-after-free"].classification == "bug"
    assert with_["late-write-after-free"].classification == "clean"
    assert with_["late-write-after-free"].effects["stopped_at"] == 4


def test_reject_at_admission_creates_no_handoff_objects():
    before = cases(model.Switches())["reject-prefill-side"].effects["created"]
    after = cases(model.Switches(reject_at_admission=True))["reject-prefill-side"].effects["created"]
    assert all(before.values()) and not any(after.values())


def test_all_defences_clean_and_guards_kept_everywhere():
    for name, sw in model.CONFIGS.items():
        got = cases(sw)
        assert all(c.classification == "clean" for c in got.values() if c.role == "guard"), name
    assert all(c.classification == "clean" for c in cases(model.CONFIGS["all"]).values())


def test_guards_catch_a_defence_that_retires_on_the_abort_marker_alone(monkeypatch):
    """Why the guards exist: a naive entry check would orphan resource-holding requests."""
    monkeypatch.setattr(model, "unadmitted_reject", lambda req: req.to_finish is not None)
    got = cases(model.Switches(reject_at_admission=True))
    dropped = {i for i, c in got.items() if c.role == "guard" and c.classification == "bug"}
    assert dropped == {"reentry-holding-metadata", "preempted-with-abort", "bootstrapped-then-aborted"}
    assert got["reentry-holding-metadata"].effects["resources_orphaned"] is True


def test_command_writes_a_verified_bundle_of_labelled_receipts(tmp_path: Path, capsys):
    out = tmp_path / "bundle"
    assert cli.main(["model", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "not SGLang code" in text and "6/6 clean" in text and "9/9 clean" in text
    assert bundle.verify(out) == []
    index = orjson.loads((out / "bundle.json").read_bytes())
    assert "not SGLang code" in index["extra"]["synthetic"]
    receipts = [Receipt.model_validate(orjson.loads((out / n).read_bytes())) for n in index["receipts"]]
    assert len(receipts) == 2 * len(model.CONFIGS)
    digest = sha256_file(Path(model.__file__))
    for r in receipts:
        assert r.source.kind == "model" and r.probe.sha256 == digest and r.probe.id in ("model-handoff", "model-admission")
        assert all("not SGLang code" in c.title for c in r.cases)


def test_custom_configuration(tmp_path: Path, capsys):
    out = tmp_path / "bundle"
    assert cli.main(["model", "--defence", "transfer_check", "--fault-off", "pool_short", "--out", str(out)]) == 0
    (r, _) = [Receipt.model_validate(orjson.loads(p.read_bytes())) for p in sorted((out / "receipts").iterdir())]
    assert r.source.switches["transfer_check"] and not r.source.switches["pool_short"]
