"""The review ledger: a reviewer's decision on each changed place of a fork, kept by the auditor.

A verdict observed on code upstream never had rests on that code; after a person has read a hunk,
the next audit of the same fork need not stop on it again (cargo-vet's audits, crev's reviews). A
review is recorded under the hunk's content address (``Hunk.key``: its file, its function and its
removed and added lines, no line numbers), so an unrelated edit above it keeps the review and
changing one byte of the hunk makes it unreviewed again. The ledger is one JSON file
(``diffprobe.reviews/1``), written atomically, that the auditor keeps in their own repository.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runner import errors
from runner.evidence.departures import Departures, Hunk
from runner.files import write_atomic

SCHEMA = "diffprobe.reviews/1"
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


def save(path: Path, ledger: Ledger) -> None:
    write_atomic(path, (ledger.model_dump_json(indent=2) + "\n").encode())


def standing(record: Departures, ledger: Ledger) -> tuple[list[Hunk], list[Hunk], list[Hunk]]:
    """The reachable changed places of ``record``: (not reviewed, rejected, accepted)."""
    decided = ledger.decided()
    unreviewed, rejected, accepted = [], [], []
    for h in record.reachable():
        review = decided.get(h.key or "")
        (unreviewed if review is None else rejected if review.decision == "rejected" else accepted).append(h)
    return unreviewed, rejected, accepted


def named(h: Hunk) -> str:
    """A hunk in one line: where, how it is reached, and its key's first 12 digits (what ``review --accept`` takes)."""
    return f"{h.place} ({h.reach}) {(h.key or '')[:12]}"
