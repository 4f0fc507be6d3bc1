"""``diffprobe attest``: sign a bundle already written (its Statements in DSSE envelopes)."""

from __future__ import annotations

from pathlib import Path

from runner import errors, ui
from runner.commands import options
from runner.errors import BadInput
from runner.evidence import bundle, dsse


def cmd_attest(args) -> int:
    signers = options.signers(args)
    if not signers:
        raise BadInput(f"attest needs a key: --sign KEY or ${dsse.ENV_KEY}")
    root = bundle.sign_existing(Path(args.bundle), signers)
    ui.out.print(f"signed: {root}  by key {signers[0].keyid[:16]}; all signers: "
                 + ", ".join(k[:16] for k in bundle.signers(root)), markup=False)
    return errors.OK


def register(sub) -> None:
    p = sub.add_parser("attest", help="sign an existing bundle: in-toto Statements in DSSE envelopes (Ed25519)")
    p.add_argument("bundle", metavar="BUNDLE")
    options.signing(p)
    p.set_defaults(func=cmd_attest)
