"""Which fixes does each tree carry? Probe trees and record each fix's status, door by door: the
rows that ``audit``, ``sweep`` and ``merge`` write.

Statuses come from observed behaviour (runner/evidence/judging.py); code or options of later defences are
reported beside them as static findings (runner/evidence/static.py), labelled as such.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from runner.commands import pipeline
from runner.evidence import bundle, catalog, judging, static
from runner.evidence.records import Row, SweepRecord
from runner.evidence.receipts import Receipt


class Probed(BaseModel):
    row: Row
    receipts: list[Receipt]


def probe(texts: list[str], opts: pipeline.Options) -> list[Probed]:
    probes = list(catalog.PROBES)
    findings: dict[str, list[static.Finding]] = {}
    trees, got = pipeline.probe_sources({t: probes for t in texts}, opts,
                                        on_tree=lambda text, tree: findings.__setitem__(text, static.scan(tree.root)))
    out = []
    for t in texts:
        receipts = [got[(t, p)] for p in probes]
        row = Row(source=t, label=bundle.label(trees[t].identity), tree_digest=trees[t].identity.tree_digest,
                  fixes=judging.fixes(receipts), static=findings[t])
        out.append(Probed(row=row, receipts=receipts))
    return out


def first_fixed(rows: list[Row]) -> dict[int, str | None]:
    fixes = sorted({f.fix for r in rows for f in r.fixes})
    return {fix: next((r.source for r in rows if status_of(r, fix) == "fixed"), None) for fix in fixes}


def status_of(row: Row, fix: int) -> str:
    return next((f.status for f in row.fixes if f.fix == fix), "not applicable")


def write(target: Path, kind: str, started: str, probed: list[Probed], record: SweepRecord) -> Path:
    receipts = [r for p in probed for r in p.receipts]
    return bundle.write(target, kind=kind, created_at=started, receipts=receipts, differentials=[],
                        pins_sha256=None, extra=record.model_dump(mode="json"))


