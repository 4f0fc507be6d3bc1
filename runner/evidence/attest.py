"""A bundle's attestations: its Statements in DSSE envelopes under ``attestations/``.

``receipts/X.json`` is attested by ``attestations/X.intoto.json``, the whole bundle by
``attestations/bundle.intoto.json``. Envelopes are listed in ``SHA256SUMS`` like any file. A bundle
without ``attestations/`` is unsigned (and says so); one with it must carry every envelope, each
payload exactly the Statement re-derived from what the bundle holds.
"""

from __future__ import annotations

from runner.evidence import dsse, statements
from runner.evidence.mutation import Mutation
from runner.evidence.receipts import Differential, Receipt

DIR = "attestations/"
BUNDLE_ENVELOPE = "attestations/bundle.intoto.json"


def envelope_name(receipt_name: str) -> str:
    return DIR + receipt_name.removeprefix("receipts/").removesuffix(".json") + ".intoto.json"


def payloads(files: dict[str, str], receipts: dict[str, Receipt], differentials: dict[str, Differential],
             judge: tuple[str, str], mutations: dict[str, Mutation]) -> dict[str, bytes]:
    """Envelope name -> the Statement it must carry. ``files``: every file of the bundle other than
    its manifest and attestations, name -> sha256; ``judge``: the bundle index's (version, sha256)."""
    out = {envelope_name(n): statements.payload(statements.receipt_statement(n, files[n], r))
           for n, r in receipts.items()}
    whole = statements.bundle_statement(files, receipts, differentials, judge, mutations)
    if whole is not None:
        out[BUNDLE_ENVELOPE] = statements.payload(whole)
    return out


def sign(expected: dict[str, bytes], signers: list[dsse.Signer], present: dict[str, bytes]) -> dict[str, bytes]:
    """Envelope files signed by ``signers``, keeping other keys' signatures of ``present`` ones."""
    out = {}
    for name, payload in expected.items():
        previous = dsse.parse(present[name]) if name in present else None
        out[name] = dsse.dump(dsse.seal(payload, signers, previous))
    return out


def check(expected: dict[str, bytes], present: dict[str, bytes], keys: dict[str, object]) -> list[str]:
    """One line per problem: an envelope missing, unreadable, foreign to the bundle, whose payload is not
    the Statement of what it names, or (with ``keys``) not signed by one of them. No envelope at all is
    an unsigned bundle: fine without keys, one problem per missing envelope with them. With keys, a
    bundle with nothing to attest is a problem too: no signature of a given key vouches for it."""
    if not present and not keys:
        return []
    problems = [] if expected or not keys else ["attestations/: nothing in this bundle can be attested (no receipt, no mutation report)"]
    for name in sorted(set(present) - set(expected)):
        problems.append(f"{name}: attests nothing this bundle holds")
    for name in sorted(expected):
        if name not in present:
            problems.append(f"{name}: missing (no signed attestation for {_subject(name)})")
            continue
        try:
            envelope = dsse.parse(present[name])
        except ValueError as e:
            problems.append(f"{name}: {e}")
            continue
        if envelope.payload_bytes() != expected[name]:
            problems.append(f"{name}: payload is not the Statement of {_subject(name)}")
        elif keys and (why := dsse.check_signatures(envelope, keys)):
            problems.append(f"{name}: {why}")
    return problems


def _subject(envelope: str) -> str:
    if envelope == BUNDLE_ENVELOPE:
        return "the bundle"
    return "receipts/" + envelope.removeprefix(DIR).removesuffix(".intoto.json") + ".json"


def signers_of(present: dict[str, bytes]) -> list[str]:
    """Key ids that signed every envelope (what an unkeyed ``verify`` can report without checking)."""
    sets = []
    for data in present.values():
        try:
            sets.append({s.keyid for s in dsse.parse(data).signatures})
        except ValueError:
            return []
    return sorted(set.intersection(*sets)) if sets else []
