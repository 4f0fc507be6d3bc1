"""What audit, sweep and merge bundles record beside their receipts (``bundle.json`` ``extra``):
one row per source with each fix's status by door and the static findings."""

from __future__ import annotations

from pydantic import BaseModel

from runner.evidence import judging, static


class Row(BaseModel):
    source: str
    label: str
    tree_digest: str
    fixes: list[judging.FixStatus]
    static: list[static.Finding]
    same_tree_as: str | None = None  # an earlier source of this sweep with the same tree: its receipts stand for both
    reused: bool = False  # every receipt behind the row was observed before this command (receipts store or a twin)


class SweepRecord(BaseModel):
    """What a sweep bundle adds in ``bundle.json`` ``extra``; a merge rebuilds it from shards."""

    order: list[str]  # every source of the whole sweep, in sweep order
    shard: str | None
    rows: list[Row]
    first_fixed: dict[int, str | None]  # each window's first_fixed
    windows: list[judging.Window] = []  # per fix, where the bug entered the line and where it left (judging.window)
    bisect: dict[int, list[str]] | None = None  # fix -> sources whose status the bisection read
    probe_runs: int = 0  # probe processes this sweep started (a merge adds its shards'); the rest was reused


def inconclusive_sites(rows: list[Row]) -> list[str]:
    """Every source and site whose status is inconclusive: one is enough for a sweep to fail."""
    return [f"{r.label} {s.site}" for r in rows for f in r.fixes for s in f.sites if s.status == "inconclusive"]


def windows(rows: list[Row]) -> list[judging.Window]:
    """Each fix's bug window over the rows, in their order."""
    fixes = sorted({f.fix for r in rows for f in r.fixes})
    return [judging.window(fix, [(r.source, next((f for f in r.fixes if f.fix == fix), None)) for r in rows])
            for fix in fixes]
