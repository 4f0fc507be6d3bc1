"""The review ledger: a reviewer's decision on each changed place of a fork, kept by the auditor.

A verdict observed on code upstream never had rests on that code; after a person has read a hunk,
the next audit of the same fork need not stop on it again (cargo-vet's audits, crev's reviews). A
review is recorded under the hunk's content address (``Hunk.key``: its file, its function and its
removed and added lines, no line numbers), so an unrelated edit above it keeps the review and
changing one byte of the hunk makes it unreviewed again. The ledger is one JSON file
(``diffprobe.reviews/1``), written atomically, that the auditor keeps in their own repository; signed
(``FILE.dsse.json``, a DSSE envelope over its bytes, with the keys attestations use), another auditor
can import its decisions with the signer's public key, as cargo-vet imports audits.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runner import errors
from runner.evidence import dsse
from runner.evidence.departures import Departures, Hunk
from runner.files import write_atomic
from runner.judge.judging import FixStatus

SCHEMA = "diffprobe.reviews/1"
PAYLOAD_TYPE = "application/vnd.diffprobe.reviews+json"  # never an in-toto Statement: one envelope cannot pass for the other
SIGNED = ".dsse.json"
_KEY = re.compile(r"[0-9a-f]{64}")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Review(_Model):
    key: str = Field(pattern=_KEY.pattern, description="the hunk's content address (departures' Hunk.key)")
    file: str
    function: str
    decision: Literal["accepted", "rejected"] = Field(
        description="accepted: read, and the verdict may rest on it; rejected: read, and it must not (a fix observed "
                    "on it is never a pass)")
    reviewer: str = Field(min_length=1, max_length=200)
    date: str = Field(description="when it was recorded, UTC (YYYY-MM-DD)")
    note: str = Field("", max_length=4000)
    diff: list[str] = Field([], description="the hunk's lines as the reviewer saw them (for a reader; the key decides)")


class Ledger(_Model):
    """``reviews.json``: every decision, in the order recorded; a later one on the same key replaces it."""

    schema_version: Literal["diffprobe.reviews/1"] = SCHEMA
    reviews: list[Review] = []

    def decided(self) -> dict[str, Review]:
        return {r.key: r for r in self.reviews}

    def with_(self, new: list[Review]) -> "Ledger":
        keys = {r.key for r in new}
        return self.model_copy(update={"reviews": [r for r in self.reviews if r.key not in keys] + new})


def load(path: Path | None, *, missing_ok: bool = False) -> Ledger:
    """The ledger at ``path`` (an empty one for None, or a missing file with ``missing_ok``); anything that is not a
    ledger is the user's error, in one line."""
    if path is None:
        return Ledger()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if missing_ok:
            return Ledger()
        raise errors.BadInput(f"no review ledger at {errors.printable(str(path))}") from None
    except OSError as e:
        raise errors.BadInput(f"cannot read the review ledger {errors.printable(str(path))}: {e.strerror}") from None
    try:
        return Ledger.model_validate_json(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise errors.BadInput(f"{errors.printable(str(path))} is not a review ledger ({SCHEMA}): "
                              f"{errors.one_line(where + ': ' + first['msg'], 200)}") from None


def save(path: Path, ledger: Ledger, signers: list[dsse.Signer] = ()) -> None:
    """The ledger at ``path``; with ``signers``, also its envelope at ``path`` + ``.dsse.json``."""
    data = (ledger.model_dump_json(indent=2) + "\n").encode()
    write_atomic(path, data)
    if signers:
        write_atomic(path.with_name(path.name + SIGNED), dsse.dump(dsse.seal(data, list(signers), payload_type=PAYLOAD_TYPE)))


def imported(envelope_path: Path, keys: dict) -> Ledger:
    """Another auditor's ledger from its envelope, signed by one of ``keys`` (their public keys), or the user's error."""
    try:
        envelope = dsse.parse(envelope_path.read_bytes())
    except OSError as e:
        raise errors.BadInput(f"cannot read {errors.printable(str(envelope_path))}: {e.strerror}") from None
    except ValueError as e:
        raise errors.BadInput(f"{errors.printable(str(envelope_path))}: {e}") from None
    problem = dsse.check_signatures(envelope, keys, payload_type=PAYLOAD_TYPE)
    if problem:
        raise errors.DiffprobeError.differs(f"{errors.printable(str(envelope_path))}: not imported: {problem}")
    try:
        return Ledger.model_validate_json(envelope.payload_bytes())
    except ValidationError:
        raise errors.BadInput(f"{errors.printable(str(envelope_path))} signs something that is not a review ledger") from None


def merged(mine: Ledger, theirs: Ledger, signer: str) -> tuple[Ledger, int]:
    """``mine`` with every decision of ``theirs`` on a place ``mine`` has not decided (mine stand), each
    noting whose key vouched for it; and how many were taken."""
    decided = mine.decided()
    taken = [r.model_copy(update={"note": (f"imported, signed by {signer}" + (f": {r.note}" if r.note else ""))[:4000]})
             for r in theirs.reviews if r.key not in decided]
    return mine.with_(taken), len(taken)


def standing(record: Departures, ledger: Ledger) -> tuple[list[Hunk], list[Hunk], list[Hunk]]:
    """The reachable changed places of ``record``: (not reviewed, rejected, accepted)."""
    decided = ledger.decided()
    unreviewed, rejected, accepted = [], [], []
    for h in record.reachable():
        review = decided.get(h.key or "")
        (unreviewed if review is None else rejected if review.decision == "rejected" else accepted).append(h)
    return unreviewed, rejected, accepted


def resting(fixes: list[FixStatus], record: Departures | None, unreviewed: list[Hunk], rejected: list[Hunk]) -> list[int]:
    """The fixes whose "fixed" rests on reachable changed code no review accepted (or one rejected), or
    on a tree with no baseline to read its changes against: "fixed on unreviewed code", one rule for
    every command and view."""
    no_baseline = record is not None and (record.baseline is None or record.unavailable is not None)
    return [f.fix for f in fixes if f.status == "fixed"] if unreviewed or rejected or no_baseline else []


def named(h: Hunk) -> str:
    """A hunk in one line: where, how it is reached, and its key's first 12 digits (what ``review --accept`` takes)."""
    return f"{h.place} ({h.reach}) {(h.key or '')[:12]}"
