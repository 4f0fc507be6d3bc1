"""What audit, sweep and merge bundles record beside their receipts (``bundle.json`` ``extra``):
one row per tree with each fix's status by door and the static findings."""

from __future__ import annotations

from pydantic import BaseModel

from runner.evidence import judging, static


class Row(BaseModel):
    source: str
    label: str
    tree_digest: str
    fixes: list[judging.FixStatus]
    static: list[static.Finding]


class SweepRecord(BaseModel):
    """What a sweep bundle adds in ``bundle.json`` ``extra``; a merge rebuilds it from shards."""

    order: list[str]  # every source of the whole sweep, in sweep order
    shard: str | None
    rows: list[Row]
    first_fixed: dict[int, str | None]
    bisect: dict[int, list[str]] | None = None  # fix -> sources probed while bisecting
