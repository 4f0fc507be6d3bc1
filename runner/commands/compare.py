"""``diffprobe compare``: observation-level differences between two bundles or receipts."""

from __future__ import annotations

from pathlib import Path

from runner import errors, ui
from runner.commands import options
from runner.evidence import compare


def cmd_compare(args) -> int:
    differences = compare.compare(Path(args.a), Path(args.b))
    for line in differences:
        ui.out.print(line, markup=False)
    if not differences:
        ui.out.print("same observations")
    return errors.DIFFERS if differences else errors.OK


def register(sub) -> None:
    p = options.command(
        sub, "compare", "two bundles observed the same, under the same confinement",
        about="Compares every case's observation, and says when the two runs differ in sandbox, interpreter or dependency layer.",
        example="diffprobe compare evidence/releases-20261201 diffprobe-out/run-1",
        ok="the same observations", differs="observations differ (one line per difference)")
    p.add_argument("a", metavar="A", help="a bundle directory or one receipt file")
    p.add_argument("b", metavar="B", help="the bundle or receipt to compare it with")
    p.set_defaults(func=cmd_compare)
