"""``diffprobe keygen``: an Ed25519 key pair for signing bundles."""

from __future__ import annotations

from pathlib import Path

from runner import errors, ui
from runner.evidence import dsse


def cmd_keygen(args) -> int:
    private, public, keyid = dsse.generate(Path(args.dir))
    ui.out.print(f"private key: {private}  (mode 0600; sign with --sign {private} or {dsse.ENV_KEY})", markup=False)
    ui.out.print(f"public key:  {public}  (give it to whoever verifies: diffprobe verify BUNDLE --key {public})",
                 markup=False)
    ui.out.print(f"keyid:       {keyid}", markup=False)
    return errors.OK


def register(sub) -> None:
    p = sub.add_parser("keygen", help=f"write an Ed25519 key pair ({dsse.PRIVATE_NAME}, {dsse.PUBLIC_NAME}) into DIR")
    p.add_argument("dir", metavar="DIR", help="directory for the key pair (created if missing; keys are never overwritten)")
    p.set_defaults(func=cmd_keygen)
