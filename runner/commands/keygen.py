"""``diffprobe keygen``: an Ed25519 key pair for signing bundles."""

from __future__ import annotations

from pathlib import Path

from runner import errors, ui
from runner.commands import options
from runner.evidence import dsse


def cmd_keygen(args) -> int:
    private, public, keyid = dsse.generate(Path(args.dir))
    ui.out.print(f"private key: {private}  (mode 0600; sign with --sign {private} or {dsse.ENV_KEY})", markup=False)
    ui.out.print(f"public key:  {public}  (give it to whoever verifies: diffprobe verify BUNDLE --key {public})",
                 markup=False)
    ui.out.print(f"keyid:       {keyid}", markup=False)
    return errors.OK


def register(sub) -> None:
    p = options.command(
        sub, "keygen", "a signing identity: an Ed25519 key pair written into DIR",
        about="Writes an Ed25519 key pair for signing bundles; existing keys are never overwritten.",
        example="diffprobe keygen keys", ok="written")
    p.add_argument("dir", metavar="DIR", help="directory for the key pair (created if missing; keys are never overwritten)")
    p.set_defaults(func=cmd_keygen)
