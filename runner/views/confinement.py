"""How the trees' code ran: in the sandbox or not, under which interpreter and dependency layer.
Every screen that shows a verdict says it when the code ran outside the sandbox (README, "Threat
model"), and compare says when two runs differ in it: the same observations under another
confinement are not the same evidence."""

from __future__ import annotations

from typing import Iterable

from runner.evidence.receipts import Receipt
from runner.views.report.sources import TREE_KINDS, sandbox


def _trees(receipts: Iterable[Receipt]) -> list[Receipt]:
    return [r for r in receipts if r.source.kind in TREE_KINDS]


def warning(receipts: Iterable[Receipt]) -> str | None:
    """One line when any tree's code ran outside the sandbox (or before it was recorded); None when all of it ran in it."""
    runs = _trees(receipts)
    loose = [r for r in runs if not sandbox(r)[1]]
    if not loose:
        return None
    said = sorted({sandbox(r)[0] for r in loose})
    return f"{len(loose)} of {len(runs)} probe run(s) not in the sandbox: {'; '.join(said)}"


def differences(a: Iterable[Receipt], b: Iterable[Receipt]) -> list[str]:
    """One line per way the runs of A and B were confined differently (sandbox, interpreter, layer)."""
    sides = [[r.environment.confinement() for r in _trees(rs)] for rs in (a, b)]
    out = []
    for key in ("sandbox", "interpreter", "dependency layer"):
        seen = [sorted({h[key] for h in side}) for side in sides]
        if all(seen) and seen[0] != seen[1]:
            out.append(f"the runs differ in {key}: A {', '.join(seen[0])}; B {', '.join(seen[1])}")
    return out
