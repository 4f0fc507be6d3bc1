"""``diffprobe audit``: every probe against one tree; fixed / not fixed / inconclusive per fix and door."""

from __future__ import annotations

from runner import errors, ui
from runner.commands import baseline, options, pipeline, survey
from runner.evidence import bundle, pins
from runner.judge import judging
from runner.evidence.records import SweepRecord
from runner.sandbox import execute
from runner.views import status, verdict


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
    lines = verdict.of_tree(rows[0].fixes, probed[0].receipts, {n: f.sites for n, f in pinned.fixes.items()})
    status.print_audit(rows[0], lines, probed[0].receipts, out)
    if args.fix:
        ui.out.print(f"only {', '.join(f'#{n}' for n in sorted(set(args.fix)))} (--fix): no other pinned fix was probed")
    ui.out.print(f"bundle: {out}")
    return exit_code(lines, rows[0].fixes, args.strict)


def exit_code(lines: list[verdict.Line], fixes: list[judging.FixStatus], strict: bool) -> int:
    """0 when every headline says the tree carries the fix (in the configuration its pin names), so the
    two never disagree; with ``strict``, not when a "fixed" rests on code that differs from its baseline."""
    fixed = all(line.carried for line in lines)
    return errors.OK if fixed and not (strict and judging.strict_fails(fixes)) else errors.DIFFERS


def register(sub) -> None:
    p = options.command(
        sub, "audit", "which pinned fixes one tree carries, by observed behaviour",
        about="Runs every probe against one tree: fixed / not fixed / inconclusive per fix, with the reason that decides each.",
        example="diffprobe audit pypi:sglang==0.5.21",
        ok="every fix's line reads fixed, or fixed when enabled; off by default (in force with its option on)",
        differs="a fix is not fixed, inconclusive or not probed there (each line says which and why), or --strict refused one")
    options.source(p, what="the tree to audit (a release, a commit of a fork, a directory)")
    options.out(p, "audit")
    options.probe_options(p, parallel=None)
    options.fixes(p)
    options.baseline(p)
    options.common(p)
    options.signing(p)
    p.set_defaults(func=cmd_audit)
