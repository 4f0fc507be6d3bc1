"""``diffprobe compare``: observation-level differences between two bundles or receipts."""

from __future__ import annotations

from pathlib import Path

from runner import errors, ui
from runner.evidence import compare


def cmd_compare(args) -> int:
    differences = compare.compare(Path(args.a), Path(args.b))
    for line in differences:
        ui.out.print(line, markup=False)
    if not differences:
        ui.out.print("same observations")
    return errors.DIFFERS if differences else errors.OK


def register(sub) -> None:
    p = sub.add_parser("compare", help="observation-level differences between two bundles or receipts")
    p.add_argument("a")
    p.add_argument("b")
    p.set_defaults(func=cmd_compare)
