"""``diffprobe merge``: join the shard bundles of one sweep into one bundle, rows in the sweep's order."""

from __future__ import annotations

from pathlib import Path

from runner import errors, ui
from runner.commands import survey
from runner.evidence import bundle
from runner.evidence.receipts import Receipt
from runner.evidence.records import SweepRecord
from runner.sandbox import execute
from runner.views import status


def cmd_merge(args) -> int:
    target = bundle.out_path(args.out, "sweep")
    records, probed = [], {}
    for path in args.bundles:
        index, receipts, _ = bundle.load(Path(path))
        if index.kind != "sweep":
            raise errors.BadInput(f"{path}: not a sweep bundle (kind {index.kind})")
        record = SweepRecord.model_validate(index.extra)
        records.append(record)
        by_source: dict[str, list[Receipt]] = {}
        for r in receipts.values():
            by_source.setdefault(r.source.source, []).append(r)
        for row in record.rows:
            if row.source in probed:
                raise errors.BadInput(f"{path}: {row.source} was already probed by another shard")
            probed[row.source] = survey.Probed(row=row, receipts=by_source.get(row.source, []))
    order = records[0].order
    if any(r.order != order for r in records):
        raise errors.BadInput("these bundles are shards of different sweeps (their source lists differ)")
    missing = [s for s in order if s not in probed]
    if missing:
        ui.warn(f"{len(missing)} source(s) of the sweep are in none of these shards, e.g. {missing[0]}")
    rows_in_order = [probed[s] for s in order if s in probed]
    rows = [p.row for p in rows_in_order]
    record = SweepRecord(order=order, shard=None, rows=rows, first_fixed=survey.first_fixed(rows))
    out = survey.write(target, "sweep", execute.now(), rows_in_order, record)
    status.print_matrix(record)
    ui.out.print(f"bundle: {out}")
    return errors.OK


def register(sub) -> None:
    p = sub.add_parser("merge", help="join the shard bundles of one sweep")
    p.add_argument("bundles", nargs="+", metavar="BUNDLE")
    p.add_argument("--out", metavar="DIR")
    p.set_defaults(func=cmd_merge)
