"""Per-case line coverage on the host: which lines of a tree its cases ran, and which cases ran them.

A case's ``lines`` (docs/probe-contract.md) maps a file of the tree (relative to the directory that
holds ``sglang/``) to sorted, merged, inclusive ``[start, end]`` ranges; ``None`` when nothing was
recorded. These helpers work on the ranges without expanding them (a range may be large) and are
the one reader of the format: fix-code coverage, departures and new probes all go through here.
The format's writer and checker are the probes' own (``probes/coverage.py``), so both sides agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from probes.coverage import canonical, expand, ranges
from runner.judge.observations import Case

Span = Sequence[int]  # [start, end], inclusive
Lines = Mapping[str, Sequence[Span]]  # file -> ranges

__all__ = ["canonical", "expand", "ranges", "merge", "union", "overlaps", "intersect", "count",
           "lines_run", "cases_running", "unrecorded"]


def merge(spans: Iterable[Span]) -> list[list[int]]:
    """Any ranges (unsorted, overlapping, adjacent) as one canonical ranges list."""
    out: list[list[int]] = []
    for start, end in sorted((int(s), int(e)) for s, e in spans):
        if out and start <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def union(maps: Iterable[Lines | None]) -> dict[str, list[list[int]]]:
    """Several files -> ranges maps as one (``None`` entries contribute nothing)."""
    gathered: dict[str, list[Span]] = {}
    for lines in maps:
        for path, spans in (lines or {}).items():
            gathered.setdefault(path, []).extend(spans)
    return {path: merge(spans) for path, spans in sorted(gathered.items()) if spans}


def intersect(a: Sequence[Span], b: Sequence[Span]) -> list[list[int]]:
    """The lines in both ranges lists, as ranges (both canonical or at least sorted)."""
    a, b = merge(a), merge(b)
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start <= end:
            out.append([start, end])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def overlaps(a: Sequence[Span], b: Sequence[Span]) -> bool:
    return bool(intersect(a, b))


def count(spans: Sequence[Span]) -> int:
    """How many lines some ranges hold."""
    return sum(end - start + 1 for start, end in merge(spans))


def lines_run(cases: Iterable[Case]) -> dict[str, list[list[int]]]:
    """Every line any of ``cases`` ran, by file."""
    return union(c.lines for c in cases)


def cases_running(cases: Iterable[Case], path: str, spans: Sequence[Span]) -> list[str]:
    """Ids of the cases that ran at least one line of ``spans`` in ``path``, in the order given."""
    return [c.id for c in cases if c.lines and path in c.lines and overlaps(c.lines[path], spans)]


def unrecorded(cases: Iterable[Case]) -> list[str]:
    """Ids of the cases whose process ran the tree's code but whose lines were not recorded (an
    error or timeout with no result, a recorder displaced): what they ran is unknown, so no line
    can be said "not run" on their account. A case not applicable ran nothing of the tree."""
    return [c.id for c in cases if c.lines is None and c.outcome != "not_applicable"
            and not (c.error is not None and c.error.where == "import")]
