"""``diffprobe verify``: recompute a bundle's manifest, every receipt digest and the schemas."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from runner import errors, ui
from runner.evidence import bundle, dsse


def cmd_verify(args) -> int:
    root = Path(args.bundle)
    keys = dict(dsse.load_public(Path(k)) for k in args.key or [])
    problems = bundle.verify(root, keys)
    if problems:
        for line in problems:
            ui.out.print(f"[red]✗[/] {escape(line)}")
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise bundle.Tampered(f"{root}: tampered or damaged: {problems[0]}{more}")
    _, rs, ds = bundle.contents(root)
    ui.out.print(f"[green]✓[/] {escape(str(root))}: intact ({len(rs)} receipts, {len(ds)} differentials, every digest recomputed)")
    signed = [k[:16] for k in bundle.signers(root)]
    if keys:
        ui.out.print(f"[green]✓[/] signed: every attestation verifies with a given key (signers: {', '.join(signed)})")
    elif signed:
        ui.out.print(f"signed by {', '.join(signed)}; signatures not checked: pass --key PUBLIC_KEY", markup=False)
    else:
        ui.out.print("unsigned: no attestations (sign it with: diffprobe attest BUNDLE --sign KEY)", markup=False)
    return errors.OK


def register(sub) -> None:
    p = sub.add_parser("verify", help="recompute a bundle's manifest and every receipt digest")
    p.add_argument("bundle")
    p.add_argument("--key", action="append", metavar="PUBLIC_KEY",
                   help="require every attestation to be signed by this Ed25519 key (repeatable: any one of them)")
    p.set_defaults(func=cmd_verify)
