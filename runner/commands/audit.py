"""``diffprobe audit``: every probe against one tree; fixed / not fixed / inconclusive per fix and door."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text

from runner import errors, ui
from runner.commands import baseline, options, pipeline, survey
from runner.evidence import bundle, pins, reviews
from runner.evidence.departures import Departures
from runner.evidence.records import Row, SweepRecord
from runner.sandbox import execute
from runner.views import status, verdict

SHOWN = 40  # changed places named on the screen; the bundle's row names every one


def cmd_audit(args) -> int:
    signers = options.signers(args)
    baseline.check_against(args.against)
    ledger = reviews.load(options.path(args.reviews))
    pinned = pins.load(options.path(args.pins))
    opts = pipeline.options(args, pinned, options.probe(args))
    target = bundle.out_path(args.out, "audit")
    started = execute.now()
    probed, runs = survey.counted([args.source], opts, against=args.against, ledger=ledger)
    rows = [p.row for p in probed]
    record = SweepRecord(order=[args.source], shard=None, rows=rows, first_fixed=survey.first_fixed(rows), probe_runs=runs)
    out = survey.write(target, "audit", started, probed, record, signers=signers)
    lines = verdict.of_tree(rows[0].fixes, probed[0].receipts, {n: f.sites for n, f in pinned.fixes.items()})
    status.print_audit(rows[0], lines, probed[0].receipts, out)
    resting = unreviewed(rows[0], probed[0].departures)
    if resting:
        show_unreviewed(rows[0], probed[0].departures, resting, out, args.reviews)
    if args.fix:
        ui.out.print(f"only {', '.join(f'#{n}' for n in sorted(set(args.fix)))} (--fix): no other pinned fix was probed")
    ui.out.print(f"bundle: {out}")
    return exit_code(lines, resting, args.accept_unreviewed)


def unreviewed(row: Row, record: Departures | None) -> list[int]:
    """The fixes whose "fixed" rests on changed code the probes can reach that no review accepted (or
    that a review rejected), or on a tree with no baseline to read its changes against."""
    fixed = [f.fix for f in row.fixes if f.status == "fixed"]
    no_baseline = record is not None and (record.baseline is None or record.unavailable is not None)
    return fixed if row.unreviewed or row.rejected or no_baseline else []


def show_unreviewed(row: Row, record: Departures | None, fixes: list[int], out: Path, ledger: str | None) -> None:
    said = ", ".join(f"#{n}" for n in fixes)
    if record is not None and (record.baseline is None or record.unavailable is not None):
        ui.out.print(Text(f"fixed on unreviewed code: {said}: the tree has no baseline, so none of its code is known to be "
                          f"upstream's (give --against SOURCE)", style="bold red"))
        return
    places = row.rejected + row.unreviewed
    ui.out.print(Text(f"fixed on unreviewed code: {said} rest{'s' if len(fixes) == 1 else ''} on {len(places)} changed "
                      f"place(s) the probes can reach" + (f" ({len(row.rejected)} rejected by a review)" if row.rejected else "")
                      + f" that no review accepted ({row.reviewed} accepted):", style="bold red"))
    for place in row.rejected:
        ui.out.print(Text(f"  rejected: {errors.printable(place)}"))
    for place in row.unreviewed[:max(0, SHOWN - len(row.rejected))]:
        ui.out.print(Text(f"  {errors.printable(place)}"))
    if len(places) > SHOWN:
        ui.out.print(Text(f"  ... and {len(places) - SHOWN} more (diffprobe review lists them all)"))
    ledger_arg = errors.printable(ledger or "reviews.json")
    ui.out.print(Text(f"read and record them: diffprobe review {errors.printable(str(out))} --ledger {ledger_arg}, then audit "
                      f"--reviews {ledger_arg} (docs/review.md)", style="dim"))


def exit_code(lines: list[verdict.Line], resting: list[int], accept_unreviewed: bool) -> int:
    """0 when every headline says the tree carries the fix (in the configuration its pin names), so the
    two never disagree, and no "fixed" rests on reachable changed code no review accepted (unless
    ``accept_unreviewed``): that is exit 4, its own answer."""
    if not all(line.carried for line in lines):
        return errors.DIFFERS
    return errors.UNREVIEWED if resting and not accept_unreviewed else errors.OK


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
