"""``diffprobe attest``: sign a bundle already written (its Statements in DSSE envelopes)."""

from __future__ import annotations

from pathlib import Path

from runner import errors, ui
from runner.commands import options
from runner.errors import BadInput
from runner.evidence import attest, bundle, dsse


def cmd_attest(args) -> int:
    signers = options.signers(args)
    if not signers:
        raise BadInput(f"attest needs a key: --sign KEY or ${dsse.ENV_KEY}")
    root = Path(args.bundle).resolve()
    dropped = bundle.sign_existing(root, signers, args.nonce)
    mine = {s.keyid for s in signers}
    signed = bundle.attestations(root)
    others = [dsse.shown(k) for k in attest.claims(signed)[1] if k not in mine]
    nonce = attest.nonce_of(signed)
    ui.out.print(f"signed: {root} by key {', '.join(dsse.shown(k) for k in sorted(mine))}"
                 + (f" for nonce {nonce!r}" if nonce is not None else ""), markup=False)
    if others:
        ui.out.print(f"kept: signatures claiming key id(s) {', '.join(others)}, not checked", markup=False)
    if dropped:
        ui.out.print(f"dropped: signatures claiming key id(s) {', '.join(dsse.shown(k) for k in dropped)} (they signed "
                     f"another payload: another nonce), not kept", markup=False)
    return errors.OK


def register(sub) -> None:
    p = options.command(
        sub, "attest", "who vouches for a bundle: signed in-toto Statements (DSSE)",
        about="Signs a bundle already written: its Statements in DSSE envelopes (Ed25519).",
        example="diffprobe attest diffprobe-out/run-1 --sign keys/diffprobe-signing.key", ok="signed")
    p.add_argument("bundle", metavar="BUNDLE", help="the bundle directory to sign (written by any command)")
    options.signing(p)
    options.nonce(p, "bind the signed Statements to a verifier's challenge (verify --nonce checks it); "
                     "default: the nonce the bundle's attestations already carry, if any")
    p.set_defaults(func=cmd_attest)
