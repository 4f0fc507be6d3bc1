"""Every kind of bundle record (``bundle.json`` ``extra``) has a model and a committed JSON schema
(that the schema files are current is ``tests/test_evidence.py``'s check). Real records validate:
the committed run bundles and a model bundle here; the gate, mutate, backport, accept, run --via
commits and run --mutate bundles in their own command tests (``tests/records.checked``)."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from runner import cli
from runner.commands import gate
from runner.evidence import bundle
from runner.evidence.records import Applied, GateName, RunRecord, Score
from runner.evidence.schema import MODELS
from runner.model.incident import Switches
from tests.records import KINDS, checked, validator

EVIDENCE = Path(__file__).resolve().parents[2] / "evidence"
SCORE = {"fix": 38935, "probe": "admission", "mutants": 10, "killed": 8, "survived": 1, "equivalent": 1, "not_covered": 0, "error": 0,
         "baseline": "fixed", "source": "pypi:sglang==0.5.21"}


def test_every_kind_has_a_committed_schema():
    assert {name for name, _ in KINDS.values()} <= set(MODELS)
    for name, model in KINDS.values():
        assert MODELS[name] is model


def test_committed_run_bundles_hold_a_run_record():
    runs = [p for p in EVIDENCE.glob("releases-*") if (p / bundle.MANIFEST).is_file()]
    assert runs
    for root in runs:
        record = checked(root)
        assert record["via"] == "releases" and record["repo"] is None and "scores" not in record


def test_a_run_record_has_scores_only_with_mutate():
    """Without --mutate, no ``scores`` key at all (as run bundles always had); with it, the scores."""
    plain = RunRecord(via="releases", fixes=[38935], repo=None).model_dump(mode="json")
    assert plain == {"via": "releases", "fixes": [38935], "repo": None}
    mutated = RunRecord(via="releases", fixes=[38935], repo=None, scores=[Score(**SCORE)]).model_dump(mode="json")
    assert mutated["scores"] == [SCORE]
    for record in (plain, mutated):
        validator("run").validate(record)


def test_a_model_bundle_record(tmp_path, capsys):
    out = tmp_path / "model"
    assert cli.main(["model", "--out", str(out)]) == 0
    record = checked(out)
    assert "not SGLang code" in record["synthetic"] and "incident" in record["configurations"]
    assert all(set(switches) == set(Switches.model_fields) for switches in record["configurations"].values())


def test_the_schemas_refuse_what_the_models_refuse():
    run = {"via": "releases", "fixes": [38935], "repo": None}
    mutation = {"scores": [SCORE]}
    worker = {"role": "prefill", "endpoint": "/server_info", "version": "0.5.22", "tree": "pypi:sglang==0.5.22"}
    accept = {"workers": {"http://p": worker}, "trees": {}, "gates": [], "accepted": False}
    row = {"probe": "admission", "case": "c", "backport": "clean", "head": "clean", "same": True}
    backport = {"pr": 38935, "onto": "pypi:sglang==0.5.20", "head": "h", "patch_sha256": None,
                "applied": "applied cleanly", "files": [], "rows": [row], "behaves_like_head": True}
    good = {"run": run, "mutation-scores": mutation, "accept": accept, "backport": backport,
            "gate": {"gate": "pool", "url": "http://x"}}
    bad = {
        "run": [run | {"via": "nightly"}, {k: v for k, v in run.items() if k != "repo"},
                run | {"extra": 1}],
        "mutation-scores": [{"scores": [SCORE | {"baseline": "passed"}]}, {"scores": [SCORE | {"extra": 1}]}],
        "accept": [accept | {"workers": {"http://p": worker | {"role": "router"}}},
                   accept | {"workers": {"http://p": worker | {"extra": 1}}}],
        "backport": [backport | {"applied": "applied somehow"}, backport | {"rows": [row | {"head": "fine"}]}],
        "gate": [{"gate": "speed", "url": "http://x"}, {"gate": "pool"}],
    }
    for name, doc in good.items():
        validator(name).validate(doc)
        MODELS[name].model_validate(doc)
    for name, docs in bad.items():
        for doc in docs:
            assert list(validator(name).iter_errors(doc)), (name, doc)
            with pytest.raises(ValueError):
                MODELS[name].model_validate(doc)


def test_the_vocabularies_are_the_commands():
    assert set(get_args(GateName)) == set(gate.GATES)
    assert "taken as applied" in get_args(Applied)

