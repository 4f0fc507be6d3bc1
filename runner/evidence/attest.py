"""A bundle's attestations: its Statements in DSSE envelopes under ``attestations/``.

``receipts/X.json`` is attested by ``attestations/X.intoto.json``, the whole bundle by
``attestations/bundle.intoto.json``. Envelopes are listed in ``SHA256SUMS`` like any file. A bundle
without ``attestations/`` is unsigned (and says so); one with it must carry every envelope, each
payload exactly the Statement re-derived from what the bundle holds, bound to one nonce or none.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import orjson

from runner.evidence import dsse, statements
from runner.evidence.mutation import Mutation
from runner.evidence.receipts import Differential, Receipt

DIR = "attestations/"
BUNDLE_ENVELOPE = "attestations/bundle.intoto.json"
# How far in the future a signed creation time may lie before ``--max-age`` calls it wrong: clocks
# of the signer's and the verifier's machines differ by seconds, not by this.
CLOCK_SKEW = timedelta(minutes=5)


def envelope_name(receipt_name: str) -> str:
    return DIR + receipt_name.removeprefix("receipts/").removesuffix(".json") + ".intoto.json"


def expected(files: dict[str, str], receipts: dict[str, Receipt], differentials: dict[str, Differential],
             judge: tuple[str, str], mutations: dict[str, Mutation], index: tuple[str, str]) -> dict[str, dict]:
    """Envelope name -> the Statement it must carry (before any nonce). ``files``: every file of the
    bundle other than its manifest and attestations, name -> sha256; ``judge``: the bundle index's
    (version, sha256); ``index``: its (file name, creation time)."""
    out = {envelope_name(n): statements.receipt_statement(n, files[n], r) for n, r in receipts.items()}
    whole = statements.bundle_statement(files, receipts, differentials, judge, mutations, index)
    if whole is not None:
        out[BUNDLE_ENVELOPE] = whole
    return out


def sign(wanted: dict[str, dict], signers: list[dsse.Signer], present: dict[str, bytes],
         nonce: str | None) -> tuple[dict[str, bytes], list[str]]:
    """(envelope files signed by ``signers``, key ids whose signatures were dropped). Other keys'
    signatures of ``present`` envelopes are kept when the payload stays the same; a new nonce
    changes it, and their signatures, which could never verify again, are dropped."""
    out, dropped = {}, set()
    for name, statement in wanted.items():
        payload = statements.payload(statements.with_nonce(statement, nonce))
        previous = dsse.parse(present[name]) if name in present else None
        mine = {s.keyid for s in signers}
        if previous is not None:
            kept = {s.keyid for s in dsse.kept_from(previous, payload)}
            dropped |= {s.keyid for s in previous.signatures} - kept - mine
        out[name] = dsse.dump(dsse.seal(payload, signers, previous))
    return out, sorted(dropped)


def nonce_of(present: dict[str, bytes]) -> str | None:
    """The nonce the bundle's envelope carries (None: none, or no readable bundle envelope); what
    ``attest`` keeps when co-signing without ``--nonce``."""
    try:
        return _nonce(dsse.parse(present[BUNDLE_ENVELOPE]).payload_bytes())
    except (KeyError, ValueError):
        return None


def _nonce(payload: bytes) -> str | None:
    """The nonce field of a payload, or None; ValueError when the payload is not a Statement."""
    try:
        value = orjson.loads(payload)["predicate"].get(statements.NONCE)
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        raise ValueError("payload is not an in-toto Statement") from None
    if value is not None and not isinstance(value, str):
        raise ValueError("payload's nonce is not a string")
    return value


def check(wanted: dict[str, dict], present: dict[str, bytes], keys: dict[str, object], threshold: int = 1) -> list[str]:
    """One line per problem: an envelope missing, unreadable, foreign to the bundle, whose payload is not
    the Statement of what it names (with the nonce it carries, the same in every envelope), or (with
    ``keys``) not signed by ``threshold`` of them. No envelope at all is an unsigned bundle: fine
    without keys, one problem per missing envelope with them. With keys, a bundle with nothing to
    attest is a problem too: no signature of a given key vouches for it."""
    if not present and not keys:
        return []
    problems = [] if wanted or not keys else ["attestations/: nothing in this bundle can be attested (no receipt, no mutation report)"]
    for name in sorted(set(present) - set(wanted)):
        problems.append(f"{name}: attests nothing this bundle holds")
    nonces = set()
    for name in sorted(wanted):
        if name not in present:
            problems.append(f"{name}: missing (no signed attestation for {_subject(name)})")
            continue
        try:
            envelope = dsse.parse(present[name])
            nonce = _nonce(envelope.payload_bytes())
        except ValueError as e:
            problems.append(f"{name}: {e}")
            continue
        nonces.add(nonce)
        if envelope.payload_bytes() != statements.payload(statements.with_nonce(wanted[name], nonce)):
            problems.append(f"{name}: payload is not the Statement of {_subject(name)}")
        elif len(nonces) > 1:
            problems.append(f"{name}: carries another nonce than the bundle's other attestations")
        elif keys and (why := dsse.check_signatures(envelope, keys, threshold)):
            problems.append(f"{name}: {why}")
    return problems


def _subject(envelope: str) -> str:
    if envelope == BUNDLE_ENVELOPE:
        return "the bundle"
    return "receipts/" + envelope.removeprefix(DIR).removesuffix(".intoto.json") + ".json"


def claims(present: dict[str, bytes]) -> tuple[int, list[str]]:
    """(signatures, key ids they claim) over every envelope: labels, read without checking them."""
    count, ids = 0, set()
    for data in present.values():
        try:
            signatures = dsse.parse(data).signatures
        except ValueError:
            continue
        count += len(signatures)
        ids |= {s.keyid for s in signatures}
    return count, sorted(ids)


def verified_signers(present: dict[str, bytes], keys: dict[str, dsse.Ed25519PublicKey]) -> list[str]:
    """Key ids of ``keys`` whose signature verifies on every envelope (checked, not read off labels)."""
    sets = [dsse.verified_by(dsse.parse(data), keys)[0] for data in present.values()]
    return sorted(set.intersection(*sets)) if sets else []


def freshness(created_at: str, nonce: str | None, *, not_before: datetime | None, max_age: timedelta | None,
              want_nonce: str | None, now: datetime) -> list[str]:
    """Problems with a signed bundle's age or challenge: created before ``not_before``, more than
    ``max_age`` before ``now`` (or later than ``now``), or not answering ``want_nonce``."""
    problems = []
    try:
        created = _utc(datetime.fromisoformat(created_at))
    except ValueError:
        return [f"signed creation time {created_at!r} is not an ISO 8601 time"]
    if not_before is not None and created < not_before:
        problems.append(f"created {created_at}, before --not-before {not_before.isoformat()}: an older bundle replayed?")
    if max_age is not None and created < now - max_age:
        problems.append(f"created {created_at}, {_age(now - created)} ago, older than --max-age {_age(max_age)}")
    if max_age is not None and created > now + CLOCK_SKEW:
        problems.append(f"created {created_at}, in the future (now {now.isoformat(timespec='seconds')})")
    if want_nonce is not None and nonce != want_nonce:
        problems.append("signed without the nonce asked for" if nonce is None else
                        f"signed for another nonce ({nonce[:40]!r}), not the one asked for")
    return problems


def _utc(t: datetime) -> datetime:
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def _age(d: timedelta) -> str:
    seconds = int(d.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0 or seconds >= 10 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
