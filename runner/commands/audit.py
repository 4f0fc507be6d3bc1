"""``diffprobe audit``: every probe against one tree; fixed / not fixed / inconclusive per fix and door."""

from __future__ import annotations

from runner import errors, fixids, ui
from runner.app import baseline, survey
from runner.commands import options
from runner.evidence import bundle, pins, reviews
from runner.evidence.records import SweepRecord
from runner.sandbox import execute
from runner.views import status, verdict


def cmd_audit(args) -> int:
    signers = options.signers(args)
    baseline.check_against(args.against)
    ledger = reviews.load(options.path(args.reviews))
    pinned = pins.load(options.path(args.pins))
    opts = options.resolved(args, pinned, options.probe(args))
    target = bundle.out_path(args.out, "audit")
    started = execute.now()
    probed, runs = survey.counted([args.source], opts, against=args.against, ledger=ledger)
    rows = [p.row for p in probed]
    record = SweepRecord(order=[args.source], shard=None, rows=rows, first_fixed=survey.first_fixed(rows), probe_runs=runs)
    out = survey.write(target, "audit", started, probed, record, signers=signers)
    lines = verdict.of_tree(rows[0].fixes, probed[0].receipts, {n: f.sites for n, f in pinned.fixes.items()}, rows[0])
    status.print_audit(rows[0], lines, probed[0].receipts, out)
    if rows[0].on_unreviewed:
        status.print_unreviewed(fixids.labels(rows[0].on_unreviewed), rows[0], out, args.reviews)
    if args.fix:
        ui.out.print(f"only {fixids.labels(sorted(set(args.fix)))} (--fix): no other pinned fix was probed")
    ui.out.print(f"bundle: {out}")
    return verdict.exit_code(lines, args.accept_unreviewed)


def register(sub) -> None:
    p = options.command(
        sub, "audit", "which pinned fixes one tree carries, by observed behaviour",
        about="Runs every probe against one tree: fixed / not fixed / inconclusive per fix, with the reason that decides each. "
              "Every file of the tree is compared with its upstream baseline; a 'fixed' that rests on changed code the "
              "probes can reach is 'fixed on unreviewed code' until a review accepts each changed place (docs/review.md).",
        example="diffprobe audit pypi:sglang==0.5.21",
        ok="every fix's line reads fixed, or fixed when enabled; off by default (in force with its option on), on code "
           "identical to its baseline or reviewed",
        differs="a fix is not fixed, inconclusive or not probed there (each line says which and why)",
        more={errors.UNREVIEWED: "fixed on unreviewed code: every fix is fixed, but on changed code the probes can reach "
                                 "that no review accepted (each place named; --accept-unreviewed: exit 0)"})
    options.source(p, what="the tree to audit (a release, a commit of a fork, a directory)")
    options.out(p, "audit")
    options.probe_options(p, parallel=None)
    options.fixes(p)
    options.baseline(p, reviewed=True)
    options.common(p)
    options.signing(p)
    p.set_defaults(func=cmd_audit)
