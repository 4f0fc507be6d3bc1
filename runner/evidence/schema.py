"""JSON schemas of every file format, generated from the pydantic models (kept in evidence/schema)."""

from __future__ import annotations

from pathlib import Path

import orjson

from runner.evidence.bundle import Index
from runner.evidence.departures import Departures
from runner.evidence.drift import Catalog
from runner.evidence.dsse import Envelope
from runner.evidence.mutation import Mutation
from runner.judge.observations import Observations
from runner.evidence.pins import Pins
from runner.evidence.receipts import Differential, Receipt
from runner.evidence.reviews import Ledger
from runner.evidence.records import (Acceptance, BackportRecord, GateRecord, ModelRecord, MutationRecord, RunRecord,
                                     SweepRecord)
from runner.evidence.upstream import UpstreamTestsRecord
from runner.judge.pytest_records import Outcomes

MODELS = {
    "pins": Pins,
    "isolation": Catalog,  # runner/data/isolation.toml (drift --catalog): the module set and the reviewed [[unprobed]]
    "observations": Observations,
    "receipt": Receipt,
    "differential": Differential,
    "bundle": Index,
    "sweep": SweepRecord,  # bundle.json "extra" of audit, sweep and merge bundles: rows, bug windows
    "mutation": Mutation,  # mutation/*.json of mutate (and run --mutate) bundles
    "departures": Departures,  # departures/*.json: where a tree departs from its baseline, and what ran there
    "reviews": Ledger,  # the review ledger an auditor keeps (diffprobe review; audit --reviews)
    "envelope": Envelope,  # attestations/*.intoto.json (DSSE); the Statements inside follow in-toto's spec
    "pytest-outcomes": Outcomes,  # what upstream-tests' pytest plugin writes in a tree's environment
    "upstream-tests": UpstreamTestsRecord,  # bundle.json "extra" of upstream-tests bundles: test files, grading
    # bundle.json "extra" of the other kinds of bundle, by kind
    "run": RunRecord,
    "backport": BackportRecord,
    "accept": Acceptance,
    "mutation-scores": MutationRecord,  # of mutation bundles (mutation/*.json, the reports, are another format)
    "gate": GateRecord,  # of gate-pool, gate-canary and gate-latency bundles
    "model": ModelRecord,
}
DIR = Path(__file__).resolve().parents[2] / "evidence" / "schema"


def render() -> dict[str, bytes]:
    return {
        f"{name}.schema.json": orjson.dumps(model.model_json_schema(by_alias=True), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
        for name, model in MODELS.items()
    }


def main() -> None:
    from runner.files import write_atomic

    for name, data in render().items():
        write_atomic(DIR / name, data)
        print(DIR / name)


if __name__ == "__main__":
    main()
