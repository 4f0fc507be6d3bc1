"""``diffprobe verify``: recompute a bundle's manifest, every receipt digest and the schemas; with
``--key``, check its signatures (``--threshold`` of the keys given) and, if asked, its freshness."""

from __future__ import annotations

import argparse
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

from rich.markup import escape

from runner import errors, ui
from runner.commands import options
from runner.errors import BadInput
from runner.evidence import attest, bundle, dsse


def cmd_verify(args) -> int:
    root = Path(args.bundle)
    keys = _keys(args)
    fresh = args.not_before or args.max_age or args.nonce is not None
    if fresh and not keys:
        raise BadInput("--not-before, --max-age and --nonce check what a signature vouches for: pass --key PUBLIC_KEY")
    problems = bundle.verify(root, keys, args.threshold)
    if not problems and fresh:
        index, _, _ = bundle.contents(root)
        signed = bundle.attestations(root)
        problems = [f"{attest.BUNDLE_ENVELOPE}: {p}" for p in attest.freshness(
            index.created_at, attest.nonce_of(signed), not_before=args.not_before, max_age=args.max_age,
            want_nonce=args.nonce, now=datetime.now(timezone.utc))]
    if problems:  # each problem once: the first in the error line, the others above it
        for line in problems[1:]:
            ui.out.print(f"[red]✗[/] {escape(line)}")
        more = f" (and the {len(problems) - 1} more problem(s) above)" if len(problems) > 1 else ""
        raise bundle.Tampered(f"{root}: tampered or damaged: {problems[0]}{more}")
    _, rs, ds = bundle.contents(root)
    ui.out.print(f"[green]✓[/] {escape(str(root))}: intact ({len(rs)} receipts, {len(ds)} differentials, every digest recomputed)")
    signed = bundle.attestations(root)
    if keys:
        who = ", ".join(dsse.shown(k) for k in attest.verified_signers(signed, keys))
        ui.out.print(f"[green]✓[/] signed: every attestation carries valid signatures by at least {args.threshold} of the "
                     f"{len(keys)} key(s) given (verified: {who})")
        if fresh:
            ui.out.print(f"[green]✓[/] fresh: signed creation time {escape(errors.printable(bundle.contents(root)[0].created_at))}"
                         + (", nonce as asked" if args.nonce is not None else ""))
    elif signed:
        count, claimed = attest.claims(signed)
        ui.out.print(f"attestations: {len(signed)} envelope(s) carry {count} signature(s) claiming key id(s) "
                     f"{', '.join(dsse.shown(k) for k in claimed) or '(none)'}, not checked: pass --key PUBLIC_KEY", markup=False)
    else:
        ui.out.print("unsigned: no attestations (sign it with: diffprobe attest BUNDLE --sign KEY)", markup=False)
    return errors.OK


def _keys(args) -> dict[str, dsse.Ed25519PublicKey]:
    """Every key of every ``--key`` file; the threshold must be reachable with them."""
    keys: dict[str, dsse.Ed25519PublicKey] = {}
    for path in args.key or []:
        keys |= dsse.load_keys(Path(path))
    if keys and args.threshold > len(keys):
        raise BadInput(f"--threshold {args.threshold}: only {len(keys)} distinct key(s) given")
    if not keys and args.threshold != 1:
        raise BadInput("--threshold counts signatures by the keys given: pass --key PUBLIC_KEY")
    return keys


_DURATION = re.compile(r"^([1-9][0-9]{0,8})([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _duration(text: str) -> timedelta:
    m = _DURATION.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a duration like 90s, 30m, 12h, 7d or 2w, got {text!r}")
    return timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2)])


def _instant(text: str) -> datetime:
    """An ISO 8601 date or time; one without a zone is UTC."""
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 date or time (2026-11-30, 2026-11-30T12:00:00Z), got {text!r}") from None
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def register(sub) -> None:
    p = options.command(
        sub, "verify", "a bundle is intact, and signed by the keys given",
        about="Recomputes the manifest, every receipt digest and schema; with --key, checks the signatures (and freshness if asked).",
        example="diffprobe verify evidence/releases-20261201 --key keys/diffprobe-signing.pub",
        ok="intact (and with --key: signed, fresh if asked)", differs="tampered or damaged: each problem once, the first in the error line")
    p.add_argument("bundle", metavar="BUNDLE", help="the bundle directory to check")
    p.add_argument("--key", action="append", metavar="PUBLIC_KEY",
                   help="Ed25519 public key file(s) (PEM; a file may hold several keys; repeatable): every attestation "
                        "must carry valid signatures by --threshold of them, each checked against the key its id names")
    p.add_argument("--threshold", type=options.positive_int, default=1, metavar="K",
                   help="how many distinct keys of those given must sign every attestation (default 1)")
    p.add_argument("--not-before", type=_instant, metavar="DATE",
                   help="refuse a bundle whose signed creation time is before DATE (ISO 8601; needs --key)")
    p.add_argument("--max-age", type=_duration, metavar="AGE",
                   help="refuse a bundle whose signed creation time is older than AGE (90s, 30m, 12h, 7d, 2w; needs --key)")
    options.nonce(p, "require the attestations to be signed for this nonce (diffprobe attest --nonce; needs --key)")
    p.set_defaults(func=cmd_verify)
