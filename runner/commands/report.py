"""``diffprobe report``: show a verified bundle in the terminal and, with ``--html``, as one HTML file
(runner/views/report: what the report derives from the bundle, and its two renderings)."""

from __future__ import annotations

import argparse
from pathlib import Path

from runner import errors
from runner.commands import options
from runner.views.report import html, terminal, verified


def cmd_report(args: argparse.Namespace) -> int:
    ev = verified.gather(Path(args.bundle))
    focus = terminal.Focus(fixes=tuple(args.fix or ()), cases=tuple(args.case or ()), all=args.all)
    terminal.show(ev, diffs=args.departures, focus=focus)
    if args.html:
        out = html.write_html(ev, Path(args.html))
        terminal.wrote(out)
    return errors.OK


def register(sub) -> None:
    """The ``report`` command; it reads only the bundle, so the cache and pins options do not apply."""
    p = options.command(
        sub, "report", "what a verified bundle shows, in the terminal or as HTML",
        about="Shows a verified bundle: a summary first (every fix's verdict, the incident's steps, the sources), the details "
              "with --fix, --case or --all; --html also writes everything as one self-contained page.",
        example="diffprobe report evidence/releases-20261201 --html report.html",
        ok="the bundle verified and was shown", differs="the bundle does not verify (it is never shown then)")
    p.add_argument("bundle", metavar="BUNDLE", help="a bundle directory written by run, audit, sweep, backport, ...")
    p.add_argument("--html", metavar="OUT.html", help="also write a single self-contained HTML report here")
    options.fixes(p, "show this fix's cases: both sides, how they ran, each case's duties and side effects (repeatable)")
    p.add_argument("--case", action="append", metavar="ID", help="show this case wherever the bundle has it (repeatable)")
    p.add_argument("--all", action="store_true", help="show everything: every fix's cases, the steps, the whole matrix, "
                   "departures, the line of trees, the limits")
    p.add_argument("--departures", action="store_true",
                   help="print the lines of every changed place where a tree departs from its baseline (folded otherwise)")
    p.set_defaults(func=cmd_report)
