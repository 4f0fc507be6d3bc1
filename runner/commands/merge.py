"""``diffprobe merge``: join the shard bundles of one sweep into one bundle, rows in the sweep's order."""

from __future__ import annotations

from pathlib import Path

from runner import errors, ui
from runner.app import survey
from runner.commands import options
from runner.evidence import bundle, departures, pins
from runner.evidence.records import SweepRecord, windows
from runner.sandbox import execute
from runner.views import status


def cmd_merge(args) -> int:
    signers = options.signers(args)
    """Receipts are matched to rows by tree digest (a row may rest on a receipt observed through
    another source with the same tree), and rows of one tree from different shards are marked
    "same tree as" the first in sweep order."""
    target = bundle.out_path(args.out, "sweep")
    records, rows, by_tree, departed = [], {}, {}, {}
    for path in args.bundles:
        index, receipts, _ = bundle.load(Path(path))
        departed |= departures.in_bundle(Path(path))
        if index.kind != "sweep":
            raise errors.BadInput(f"{path}: not a sweep bundle (kind {index.kind})")
        record = SweepRecord.model_validate(index.extra)
        records.append(record)
        for r in receipts.values():
            by_tree.setdefault(r.source.tree_digest, {})[r.probe.id] = r
        for row in record.rows:
            if row.source in rows:
                raise errors.BadInput(f"{path}: {row.source} was already probed by another shard")
            rows[row.source] = row
    order = records[0].order
    if any(r.order != order for r in records):
        raise errors.BadInput("these bundles are shards of different sweeps (their source lists differ)")
    missing = [s for s in order if s not in rows]
    if missing:
        ui.warn(f"{len(missing)} source(s) of the sweep are in none of these shards, e.g. {missing[0]}")
    probed = survey.same_trees([survey.Probed(row=rows[s].model_copy(update={"same_tree_as": None}),
                                              receipts=list(by_tree.get(rows[s].tree_digest, {}).values()),
                                              departures=departed.get(departures.file_name(rows[s].label)))
                                for s in order if s in rows])
    merged = [p.row for p in probed]
    record = SweepRecord(order=order, shard=None, rows=merged, first_fixed=survey.first_fixed(merged),
                         windows=windows(merged), probe_runs=sum(r.probe_runs for r in records))
    pinned = pins.load(None)
    out = survey.write(target, "sweep", execute.now(), probed, record, survey.differentials(probed, pinned), signers=signers)
    status.print_matrix(record, probed, {n: f.sites for n, f in pinned.fixes.items()}, out)
    ui.out.print(f"bundle: {out}")
    return survey.exit_code(merged, accept_unreviewed=args.accept_unreviewed)


def register(sub) -> None:
    p = options.command(
        sub, "merge", "one sweep from its shard bundles",
        about="Joins the shard bundles of one sweep (sweep --shard I/N) into one bundle, rows in the sweep's order.",
        example="diffprobe merge shard-1 shard-2 --out sweep",
        ok="merged; every site of every tree has a conclusive status", differs="a site is inconclusive somewhere (named)",
        more={errors.UNREVIEWED: "a tree's fix reads 'fixed on unreviewed code' (each place named; --accept-unreviewed: exit 0)"})
    p.add_argument("bundles", nargs="+", metavar="BUNDLE", help="the shard bundles of one sweep (sweep --shard I/N)")
    options.out(p, "sweep")
    options.accept_unreviewed(p)
    options.signing(p)
    p.set_defaults(func=cmd_merge)
