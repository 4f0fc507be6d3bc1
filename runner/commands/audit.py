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
    pinned = pins.load(options.path(args.pins))
    opts = pipeline.options(args, pinned, options.probe(args))
    target = bundle.out_path(args.out, "audit")
    started = execute.now()
    probed, runs = survey.counted([args.source], opts, against=args.against)
    rows = [p.row for p in probed]
    record = SweepRecord(order=[args.source], shard=None, rows=rows, first_fixed=survey.first_fixed(rows), probe_runs=runs)
    out = survey.write(target, "audit", started, probed, record, signers=signers)
    in_force = {f.fix: survey.pinned_status(f, pinned) for f in rows[0].fixes}
    status.print_audit(rows[0], {n: (", ".join(pinned.fixes[n].sites), word) for n, word in in_force.items()
                                 if n in pinned.fixes and pinned.fixes[n].sites})
    if args.fix:
        ui.out.print(f"only {', '.join(f'#{n}' for n in sorted(set(args.fix)))} (--fix): no other pinned fix was probed")
    ui.out.print(f"bundle: {out}")
    # exit 0: every fix in force in the configuration its pin names (each configuration is printed)
    fixed = all(word == "fixed" for word in in_force.values())
    return errors.OK if fixed and not (args.strict and judging.strict_fails(rows[0].fixes)) else errors.DIFFERS


def register(sub) -> None:
    p = options.command(
        sub, "audit", "which pinned fixes one tree carries, by observed behaviour",
        about="Runs every probe against one tree: fixed / not fixed / inconclusive per fix, with the reason that decides each.",
        example="diffprobe audit pypi:sglang==0.5.21",
        ok="every pinned fix is fixed in the configuration its pin names (a fix off by default: with its option on)",
        differs="a fix is not fixed, inconclusive or not probed there (each line says which and why), or --strict refused one")
    options.source(p, what="the tree to audit (a release, a commit of a fork, a directory)")
    options.out(p, "audit")
    options.probe_options(p, parallel=None)
    options.fixes(p)
    options.baseline(p)
    options.common(p)
    options.signing(p)
    p.set_defaults(func=cmd_audit)
