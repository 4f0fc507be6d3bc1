"""What a duty is, and the readings of recorded effects the fixes' duty tables share.

A duty is one promise of a fix (its PR summary, its own tests), stated as a predicate over the effects a
case records. Pure standard library: the host imports the duty tables to re-judge every recorded case.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Effects = Mapping[str, Any]


@dataclass(frozen=True)
class Duty:
    """One row of a fix's duty table: its id, what must hold (one line), and the predicate that checks it."""

    id: str
    promise: str
    held: Callable[[Effects], bool]


def judged(duties: tuple[str, ...], table: Mapping[str, Duty], effects: Effects) -> dict[str, bool]:
    """Each of ``duties``, in order, and whether it held in ``effects`` by ``table`` (duty id -> row). A duty
    whose effects are missing or malformed did not hold: effects that cannot show a duty never count as
    showing it."""
    results = {}
    for duty_id in duties:
        try:
            results[duty_id] = bool(table[duty_id].held(effects))
        except (KeyError, IndexError, TypeError, AttributeError, ValueError):
            results[duty_id] = False
    return results


def classify(duties: Mapping[str, bool]) -> str:
    """``bug`` when any duty failed (for a guard case: the regression), else ``clean``."""
    return "clean" if all(duties.values()) else "bug"


def signature(duties: tuple[str, ...]) -> str:
    """The one-line bug signature of a case: which of its duties failing makes it a bug."""
    return "a duty failed: " + ", ".join(duties)


def rid(effects: Effects) -> str:
    return effects["request"]["rid"]


def returned(effects: Effects) -> bool:
    """No failure escaped the tree's own code (a scripted transport failure, a member its class lacks)."""
    return effects.get("escaped") is None


def streams(effects: Effects) -> list[dict[str, Any]]:
    """Every request the tree streamed to its client, as it stood when streamed."""
    return [item for call in effects["streamed"] for item in call]


def streamed_once_with(effects: Effects, status: int | None) -> bool:
    """Streamed exactly once, finished with an abort (of ``status`` when given) at that moment."""
    mine = [item for item in streams(effects) if item["rid"] == rid(effects)]
    if len(mine) != 1:
        return False
    reason = mine[0]["finished_reason"]
    asked = effects["request"].get("return_logprob")
    if asked is not None and mine[0].get("return_logprob", asked) != asked:
        return False  # streamed without the logprobs the request holds it asked for, or with ones it did not
    return (
        isinstance(reason, dict)
        and reason.get("type") == "abort"
        and (status is None or reason.get("status_code") == status)
    )


def names_request(value: Any, rid: str) -> bool:
    """Whether a recorded argument names the request: its rid, or a handle holding it."""
    if isinstance(value, dict):
        return any(names_request(item, rid) for item in value.values())
    if isinstance(value, list):
        return any(names_request(item, rid) for item in value)
    return value == rid
