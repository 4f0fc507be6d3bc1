"""``diffprobe verify``: recompute a bundle's manifest, every receipt digest and the schemas."""

from __future__ import annotations

from pathlib import Path

from runner import errors, ui
from runner.evidence import bundle


def cmd_verify(args) -> int:
    root = Path(args.bundle)
    problems = bundle.verify(root)
    if problems:
        for line in problems:
            ui.out.print(f"[red]✗[/] {line}", markup=True)
        raise bundle.Tampered(f"{root}: tampered or damaged ({len(problems)} problem(s))")
    _, rs, ds = bundle.contents(root)
    ui.out.print(f"[green]✓[/] {root}: intact ({len(rs)} receipts, {len(ds)} differentials, every digest recomputed)")
    return errors.OK


def register(sub) -> None:
    p = sub.add_parser("verify", help="recompute a bundle's manifest and every receipt digest")
    p.add_argument("bundle")
    p.set_defaults(func=cmd_verify)
