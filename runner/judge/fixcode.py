"""Coverage of the fix's code: which statements of each function a fix changed (``duties.FIX_CODE``) a receipt's
cases ran, and which none did; which of its atomic conditions they saw both ways (``runner/judge/conditions.py``).

The statements are read on the host from the stored tree (``probes/fixcode.py``: the same reading the
harness makes for mutation sites), never from what the tree's process said; what each case ran comes from
its recorded ``lines`` (``runner/judge/coverage.py``). A statement of the fix's code no case ran is named:
a "fixed" that rests on fewer than all of them says how many it does not rest on.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from pydantic import BaseModel, ConfigDict, Field

from probes import fixcode
from probes.duties import FIX_CODE
from runner.judge import conditions, coverage
from runner.judge.conditions import Condition
from runner.judge.observations import Case


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FixFunction(_Model):
    function: str = Field(description="qualified name, as duties.FIX_CODE names it")
    file: str | None = Field(None, description="where the stored tree defines it (relative to the directory holding "
                                               "sglang/); null: not where FIX_CODE names it (the tree lacks it)")
    statements: list[tuple[int, int]] = Field([], description="each statement of the fix's code: [first line, last line]")
    not_covered: list[int] = Field([], description="the first line of each statement no case ran")
    conditions: list[Condition] = Field([], description="each atomic condition of the fix's code (read "
                                                   "from the stored tree) and the values the cases saw it take")


def backend_of(function: str) -> str | None:
    """The package under ``sglang.srt.disaggregation`` a FIX_CODE name lies in (``mooncake``, ``nixl``, ``common``...;
    None outside it): the host's own names, never the tree's."""
    parts = function.split(".")
    return parts[parts.index("disaggregation") + 1] if "disaggregation" in parts[:-1] else None


class FixCoverage(_Model):
    """One receipt's cases against one fix's code."""

    fix: int
    functions: list[FixFunction]
    unrecorded: list[str] = Field([], description="cases that ran the tree but whose lines are unknown (what they ran "
                                                  "cannot count either way)")

    def not_covered(self) -> list[str]:
        """``file:line`` of each statement of the fix's code no case ran."""
        return [f"{f.file}:{line}" for f in self.functions for line in f.not_covered]

    def one_way(self, without: Collection[str] = ()) -> list[str]:
        """Each atomic condition of the fix's code no case saw both ways and no reason explains, as it reads:
        ``condition `X` at file:line never false``. ``without``: KV-transfer backends whose own modules' conditions
        do not count (a site whose cases run another backend: only its own and the shared code's are its)."""
        return [said for f in self.functions if backend_of(f.function) not in without
                for c in f.conditions if (said := c.one_way()) is not None]

    def both_ways(self) -> tuple[int, int]:
        """(conditions seen both ways or explained, conditions) of the fix's code."""
        every = [c for f in self.functions for c in f.conditions]
        return sum(not c.missing() for c in every), len(every)


def measure(fix: int, read: Callable[[str], str | None], cases: Iterable[Case]) -> FixCoverage | None:
    """The coverage of ``fix``'s code by ``cases`` (None for a fix whose code is not declared)."""
    if fix not in FIX_CODE:
        return None
    cases = list(cases)
    functions = []
    for qualified, names in FIX_CODE[fix].items():
        try:
            found = conditions.locate(read, qualified)
        except (SyntaxError, ValueError, RecursionError):  # a file of the tree that does not parse defines nothing
            found = None
        if found is None:
            functions.append(FixFunction(function=qualified))
            continue
        name, node = found
        spans = [fixcode.span(s) for s in fixcode.statements(node, names)]
        functions.append(FixFunction(function=qualified, file=name, statements=spans, not_covered=[],
                                     conditions=conditions.listed(qualified, name, node, names, read)))
    return judged(FixCoverage(fix=fix, functions=functions), cases)


def judged(cov: FixCoverage, cases: Iterable[Case]) -> FixCoverage:
    """``cov`` with ``not_covered`` and ``unrecorded`` as the cases' recorded lines give them: what ``verify``
    derives again from a receipt."""
    cases = list(cases)
    functions = []
    for f in cov.functions:
        run = [c for c in cases if c.lines and f.file in c.lines]
        missed = [start for start, end in f.statements
                  if not any(coverage.overlaps(c.lines[f.file], [(start, end)]) for c in run)]
        functions.append(f.model_copy(update={"not_covered": missed, "conditions": conditions.judged(f.conditions, cases)}))
    return cov.model_copy(update={"functions": functions, "unrecorded": coverage.unrecorded(cases)})
