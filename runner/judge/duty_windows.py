"""Per-duty windows: along an ordered line of trees, where each duty of a fix first holds, case by
case, beside the fix's own window (``judging.window``).

Why: a fix's window is its whole: it is "fixed" only where every bug case holds every duty. A
backport user needs to know which duty came when, because upstream often lands a fix in parts
(#41402's acknowledgement of every peer is in 0.5.21, its handling of a room cleared between two
ABORTs only in 0.5.22), and a duty that held once and stopped holding is a regression the fix's
window folds away. A duty is judged per case (the probe's duty table says which duties a case
holds), so the window is per (duty, case); cases of one duty whose windows agree are reported
together. Only behaviour counts: a tree where the case did not run to an observation neither holds
nor fails the duty there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from runner.judge.observations import Case


class DutyWindow(BaseModel):
    """One duty of a fix in the cases whose windows agree."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    fix: int
    duty: str
    cases: list[str] = Field(description="the cases (of the fix's probes) whose window this is")
    held_before: str | None = Field(description="the first tree where the duty held before it first failed: it stopped "
                                                "holding at first_failed")
    first_failed: str
    first_held: str | None = Field(description="the first tree after first_failed where it held in these cases "
                                               "(None: not by the last tree)")
    recurred: list[str] = Field(description="trees after first_held where it failed again")


def held(cases: Iterable[Case]) -> dict[tuple[str, str], bool]:
    """(duty, case id) -> whether the case held the duty, for every observed case that judged it."""
    return {(duty, c.id): ok for c in cases if c.outcome == "observed" and c.duties for duty, ok in c.duties.items()}


def windows(fix: int, line: Sequence[tuple[str, Iterable[Case] | None]]) -> list[DutyWindow]:
    """The per-duty windows of ``fix`` over ``line``: (source, the cases of the fix's probes on that
    tree, or None where not probed), in line order. A (duty, case) that never failed has no window."""
    states = [(source, held(cases or ())) for source, cases in line]
    pairs = list(dict.fromkeys(pair for _, seen in states for pair in seen))
    grouped: dict[tuple, list[str]] = {}
    for duty, case in pairs:
        along = [(source, seen[duty, case]) for source, seen in states if (duty, case) in seen]
        first = next((i for i, (_, ok) in enumerate(along) if not ok), None)
        if first is None:
            continue
        before = next((source for source, ok in along[:first] if ok), None)
        fixed = next((i for i in range(first, len(along)) if along[i][1]), None)
        recurred = tuple(source for source, ok in along[fixed:] if not ok) if fixed is not None else ()
        key = (duty, before, along[first][0], along[fixed][0] if fixed is not None else None, recurred)
        grouped.setdefault(key, []).append(case)
    order = {source: i for i, (source, _) in enumerate(line)}
    found = [DutyWindow(fix=fix, duty=duty, cases=cases, held_before=before, first_failed=failed, first_held=first_held,
                        recurred=list(recurred))
             for (duty, before, failed, first_held, recurred), cases in grouped.items()]
    return sorted(found, key=lambda w: (w.duty, order.get(w.first_held, len(order)), order[w.first_failed]))


def bracket(duties: Sequence[str], cases: Sequence[str], without: Iterable[Case], with_: Iterable[Case]) -> list[str]:
    """Why a duty-level bracket is not reproduced (empty: it is): on the tree without, every named
    duty that a named case judges fails there; on the tree with, every one holds; and each named
    duty is judged by some named case on both. A case that did not run to an observation judges
    nothing, so it cannot reproduce the bracket."""
    wanted = set(cases)
    sides = {side: {pair: ok for pair, ok in held(c for c in got if c.id in wanted).items() if pair[0] in duties}
             for side, got in (("without", without), ("with", with_))}
    why = [f"{duty} is judged by none of the named cases on the tree {side}"
           for side, seen in sides.items() for duty in duties if not any(d == duty for d, _ in seen)]
    why += [f"{duty} already holds in {case} on the tree without" for (duty, case), ok in sides["without"].items() if ok]
    why += [f"{duty} still fails in {case} on the tree with" for (duty, case), ok in sides["with"].items() if not ok]
    return why
