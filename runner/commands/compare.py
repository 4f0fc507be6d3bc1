"""``diffprobe compare``: observation-level differences between two bundles or receipts, and how the
two runs were confined when that differs (a line of its own: it does not change the observations)."""

from __future__ import annotations

from pathlib import Path

from runner import errors, ui
from runner.commands import options
from runner.evidence import bundle, compare
from runner.evidence.receipts import Receipt
from runner.views import confinement


def _receipts(path: Path) -> list[Receipt]:
    """The receipts of a bundle or the one receipt file (compare.compare has refused anything else)."""
    if path.is_dir():
        return list(bundle.contents(path)[1].values())  # verified by compare.compare already
    return [Receipt.model_validate_json(path.read_bytes())]


def cmd_compare(args) -> int:
    a, b = Path(args.a), Path(args.b)
    differences = compare.compare(a, b)
    for line in differences:
        ui.out.print(line, markup=False)
    if not differences:
        ui.out.print("same observations")
    for line in confinement.differences(_receipts(a), _receipts(b)):
        ui.out.print(line, style="bold red", markup=False)
    return errors.DIFFERS if differences else errors.OK


def register(sub) -> None:
    p = options.command(
        sub, "compare", "two bundles observed the same, under the same confinement",
        about="Compares every case's observation, and says on a line of its own when the two runs differ in "
              "sandbox, interpreter or dependency layer.",
        example="diffprobe compare evidence/releases-20261201 diffprobe-run-20261204T120000Z",
        ok="the same observations (a difference in confinement is still said, on its own line)",
        differs="observations differ (one line per difference)")
    p.add_argument("a", metavar="A", help="a bundle directory or one receipt file")
    p.add_argument("b", metavar="B", help="the bundle or receipt to compare it with")
    p.set_defaults(func=cmd_compare)
