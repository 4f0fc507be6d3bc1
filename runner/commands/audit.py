"""``diffprobe audit``: every probe against one tree; fixed / not fixed / inconclusive per fix and door."""

from __future__ import annotations

from runner import errors, ui
from runner.commands import baseline, options, pipeline, survey
from runner.evidence import bundle, judging, pins
from runner.evidence.records import SweepRecord
from runner.sandbox import execute
from runner.views import status


def cmd_audit(args) -> int:
    signers = options.signers(args)
    baseline.check_against(args.against)
    opts = pipeline.options(args, pins.load(options.path(args.pins)), options.probe(args))
    target = bundle.out_path(args.out, "audit")
    started = execute.now()
    probed, runs = survey.counted([args.source], opts, against=args.against)
    rows = [p.row for p in probed]
    record = SweepRecord(order=[args.source], shard=None, rows=rows, first_fixed=survey.first_fixed(rows), probe_runs=runs)
    out = survey.write(target, "audit", started, probed, record, signers=signers)
    status.print_audit(rows[0])
    ui.out.print(f"bundle: {out}")
    fixed = all(f.status == "fixed" for f in rows[0].fixes)
    return errors.OK if fixed and not (args.strict and judging.strict_fails(rows[0].fixes)) else errors.DIFFERS


def register(sub) -> None:
    p = sub.add_parser("audit", help="every probe against one tree: fixed / not fixed / inconclusive per fix and door")
    p.add_argument("source")
    p.add_argument("--out", metavar="DIR", help="bundle directory to create")
    options.probe_options(p, parallel=None)
    options.baseline(p)
    options.common(p)
    options.signing(p)
    p.set_defaults(func=cmd_audit)
