"""``diffprobe review``: the changed places of an audited tree that no review has accepted, and a
reviewer's decision on each, recorded in the auditor's review ledger (runner/evidence/reviews.py)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from rich.text import Text

from runner import errors, ui
from runner.commands import options
from runner.evidence import bundle, departures, dsse, reviews
from runner.evidence.departures import REACHED, Hunk

MIN_PREFIX = 8


def cmd_review(args) -> int:
    root = Path(args.bundle)
    problems = bundle.verify(root)
    if problems:
        raise bundle.Tampered(f"{root}: tampered or damaged: {problems[0]}")
    records = departures.in_bundle(root)
    if not records:
        raise errors.BadInput(f"{errors.printable(str(root))} holds no departure records (audit, sweep and backport write them)")
    ledger_path = Path(args.ledger)
    signers = options.signers(args)
    ledger = reviews.load(ledger_path, missing_ok=True)
    changed = False
    if args.import_:
        if not args.key:
            raise errors.BadInput("--import needs --key PUBLIC_KEY: the key of the auditor who signed it")
        keys = {k: v for path in args.key for k, v in dsse.load_keys(Path(path)).items()}
        theirs = reviews.imported(Path(args.import_), keys)
        ledger, taken = reviews.merged(ledger, theirs, ", ".join(dsse.shown(k) for k in sorted(keys)))
        changed = True
        ui.out.print(Text(f"imported {taken} decision(s) of {len(theirs.reviews)} from {errors.printable(args.import_)} "
                          f"(yours stand where you decided)"))
    reachable = {h.key: h for r in records.values() for h in r.reachable() if h.key}
    decisions = [*(("accepted", k) for k in args.accept or []), *(("rejected", k) for k in args.reject or [])]
    if args.accept_all:
        decisions += [("accepted", h.key) for r in records.values() for h in reviews.standing(r, ledger)[0]]
    if decisions:
        if not args.reviewer:
            raise errors.BadInput("--reviewer NAME is required to record a decision")
        today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        new = [reviews.Review(key=h.key, file=h.file, function=h.function, decision=decision, reviewer=args.reviewer,
                              date=today, note=args.note or "", diff=h.diff)
               for decision, prefix in decisions for h in [_one(prefix, reachable)]]
        ledger = ledger.with_(new)
        changed = True
        ui.out.print(Text(f"recorded {len(new)} decision(s) by {errors.printable(args.reviewer)} in {errors.printable(str(ledger_path))}"))
    if changed or signers:
        reviews.save(ledger_path, ledger, signers)
    left = 0
    for record in records.values():
        unreviewed, rejected, accepted = reviews.standing(record, ledger)
        left += len(unreviewed) + len(rejected)
        ui.out.print(Text(errors.printable(record.line()), style="bold"))
        ui.out.print(Text(f"  {len(accepted)} reachable changed place(s) accepted, {len(rejected)} rejected, "
                          f"{len(unreviewed)} not reviewed"))
        for h in [*rejected, *unreviewed]:
            _show(h, "rejected" if h in rejected else "not reviewed")
    if left:
        ui.out.print(Text(f"record a decision: diffprobe review {errors.printable(str(root))} --ledger "
                          f"{errors.printable(str(ledger_path))} --reviewer NAME --accept KEY (or --reject KEY; --note TEXT)",
                          style="dim"))
    return errors.DIFFERS if left else errors.OK


def _one(prefix: str, reachable: dict[str, Hunk]) -> Hunk:
    """The reachable changed place whose key starts with ``prefix`` (one, or the user's error)."""
    if len(prefix) < MIN_PREFIX or not all(c in "0123456789abcdef" for c in prefix):
        raise errors.BadInput(f"a key is at least {MIN_PREFIX} lowercase hex digits (review lists them): "
                              f"{errors.printable(prefix[:80])!r}")
    found = [h for k, h in reachable.items() if k.startswith(prefix)]
    if len(found) != 1:
        raise errors.BadInput(f"{prefix} names {'no' if not found else len(found)} reachable changed place(s) of this bundle")
    return found[0]


def _show(h: Hunk, state: str) -> None:
    ui.out.print(Text(f"  {errors.printable(h.key or '')[:64]}  {state}", style="bold"))
    ui.out.print(Text(f"    {errors.printable(h.place)}: {h.reach}, {REACHED[h.reach or 'unreachable']}"))
    if h.aware:
        ui.out.print(Text(f"    hint: can tell it is being probed: {errors.printable('; '.join(a.what for a in h.aware))}"))
    for line in h.diff:
        ui.out.print(Text(f"    {errors.printable(line)}", style="green" if line.startswith("+") else "red"))
    if h.diff_more:
        ui.out.print(Text(f"    ... {h.diff_more} more line(s): read {errors.printable(h.file)} in the tree before deciding"))


def register(sub) -> None:
    p = options.command(
        sub, "review", "a fork's changed code, read and accepted once per change",
        about="Shows each changed place of the audited trees that the probes can reach and no review has accepted, "
              "with its lines; --accept/--reject record a reviewer's decision, by the place's content address, in the "
              "ledger that audit --reviews reads (docs/review.md).",
        example="diffprobe review diffprobe-audit-20261204T1830Z --ledger reviews.json --reviewer alice --accept 3f2a9c1d",
        ok="every reachable changed place of the bundle is accepted by the ledger",
        differs="some reachable changed place is not reviewed or was rejected (each one shown), or the bundle does not verify")
    p.add_argument("bundle", metavar="BUNDLE", help="a bundle written by audit, sweep or backport")
    p.add_argument("--ledger", metavar="FILE", required=True, help="the review ledger to read and extend (created if missing)")
    p.add_argument("--accept", metavar="KEY", action="append", help="accept the changed place whose key starts with KEY")
    p.add_argument("--reject", metavar="KEY", action="append", help="reject it: a fix observed on it is never a pass")
    p.add_argument("--accept-all", action="store_true", help="accept every reachable changed place shown (read them first)")
    p.add_argument("--reviewer", metavar="NAME", help="who decides (recorded with each decision)")
    p.add_argument("--note", metavar="TEXT", help="why (recorded with each decision)")
    p.add_argument("--sign", metavar="KEY", help="also write FILE.dsse.json, the ledger signed with this Ed25519 private key "
                                                 "(diffprobe keygen), for other auditors to import")
    p.add_argument("--import", dest="import_", metavar="SIGNED", help="take another auditor's decisions from their signed "
                                                                     "ledger (their FILE.dsse.json) where yours are silent")
    p.add_argument("--key", metavar="PUBLIC_KEY", action="append", help="the public key --import must be signed by")
    p.set_defaults(func=cmd_review)
