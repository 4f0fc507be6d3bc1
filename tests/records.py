"""A bundle's record (``bundle.json`` ``extra``) checked against its kind's committed JSON schema,
with jsonschema (what a consumer without diffprobe would use), and against its pydantic model, which
must give back the very same JSON: the record is what the model says, no field more or less."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import orjson
from pydantic import BaseModel

from runner.evidence import bundle, schema
from runner.evidence.records import (Acceptance, BackportRecord, GateRecord, ModelRecord, MutationRecord, RunRecord,
                                     SweepRecord)
from runner.evidence.upstream import UpstreamTestsRecord

# bundle kind -> the schema (evidence/schema/NAME.schema.json) and model of its record
KINDS: dict[str, tuple[str, type[BaseModel]]] = {
    "run": ("run", RunRecord),
    "backport": ("backport", BackportRecord),
    "accept": ("accept", Acceptance),
    "mutation": ("mutation-scores", MutationRecord),
    "model": ("model", ModelRecord),
    **{f"gate-{name}": ("gate", GateRecord) for name in ("pool", "canary", "latency")},
    "sweep": ("sweep", SweepRecord),
    "audit": ("sweep", SweepRecord),
    "upstream-tests": ("upstream-tests", UpstreamTestsRecord),
}


def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(orjson.loads((schema.DIR / f"{name}.schema.json").read_bytes()))


def checked(root: Path) -> dict:
    """The record of the bundle at ``root``, once it has passed both checks."""
    index = orjson.loads((root / bundle.INDEX).read_bytes())
    name, model = KINDS[index["kind"]]
    record = index["extra"]
    validator(name).validate(record)
    assert model.model_validate(record).model_dump(mode="json", by_alias=True) == record, index["kind"]
    return record
