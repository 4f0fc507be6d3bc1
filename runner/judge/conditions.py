"""The atomic conditions of the fix's code, as the host reads them from the stored tree, and what the cases
made of them.

A line of the fix's code runs whichever way its condition goes, so line coverage cannot tell a fix whose
duty holds on every input from one that holds only on the inputs the cases happened to build. Each atomic
condition of the fix's code (``probes/conditions.py``: parts of boolean expressions, comparisons, tests,
calls used as tests) is listed here from the stored bytes, sent to the tree's process as data (it rewrites
just those functions to record them), and judged from the cases' records: a "fixed" rests on every one
seen both true and false, or on a reason checked here (a constant; a condition on an input no probe can
build, declared in :data:`REASONS` with its exact text).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from probes import conditions, fixcode
from probes.duties import FIX_CODE
from runner.judge.observations import Case

TEXT = 120  # a condition's text in a receipt, at most


class Condition(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    at: str = Field(description="file:line:col of its first character (file relative to the directory holding sglang/)")
    kind: Literal["truth", "tested", "value"] = Field(description="probes/conditions.py: only its truth is used; "
                                                                  "tested and maybe returned; its value is used")
    text: str = Field(description="its source, as the stored tree has it (at most 120 characters)")
    seen: list[bool] = Field([], description="the values the cases' processes recorded it taking")
    reason: str | None = Field(None, description="why it need not go both ways, checked on the host; null: it must")

    @property
    def line(self) -> str:
        """``file:line``."""
        return self.at.rsplit(":", 1)[0]

    def missing(self) -> list[bool]:
        """The values no case saw it take (none when a reason explains it)."""
        return [] if self.reason is not None else [v for v in (False, True) if v not in self.seen]


# Conditions on an input no probe can build, each with why: (function as FIX_CODE names it, condition text) ->
# reason. The text must match the stored tree's exactly, so a changed condition is never excused by an old reason.
REASONS: dict[tuple[str, str], str] = {}


def listed(qualified: str, path: str, fn: ast.FunctionDef, names: tuple[str, ...]) -> list[Condition]:
    """The atomic conditions of the fix's code in ``fn`` (its statements' own parts and those of every statement
    enclosing one: they decide whether it runs), in source order."""
    found = []
    for node, kind in conditions.atoms(fixcode.deciding(fn, names)):
        text = ast.unparse(node)
        reason = ("a constant" if isinstance(node, ast.Constant)
                  else REASONS.get((qualified, text)))
        found.append(Condition(at=conditions.key(path, node), kind=kind, text=text[:TEXT], reason=reason))
    return found


def wanted(read: Callable[[str], str | None]) -> list[dict]:
    """What the tree's process records (``probes/conditions.py`` install): every function of every fix's code
    the stored tree defines, with the atomic conditions of each fix's slice of it (one entry per function)."""
    by_function: dict[str, dict] = {}
    for fix_code in FIX_CODE.values():
        for qualified, names in fix_code.items():
            try:
                found = fixcode.locate(read, qualified)
            except (SyntaxError, ValueError, RecursionError):
                continue
            if found is None:
                continue
            path, fn = found
            entry = by_function.setdefault(qualified, {"function": qualified, "file": path, "conditions": {}})
            for node, kind in conditions.atoms(fixcode.deciding(fn, names)):
                if not isinstance(node, ast.Constant):
                    entry["conditions"][conditions.position(node)] = {
                        "at": conditions.key(path, node), "position": list(conditions.position(node)), "kind": kind}
    return [{**entry, "conditions": [entry["conditions"][p] for p in sorted(entry["conditions"])]}
            for entry in by_function.values()]


def judged(found: list[Condition], cases: Iterable[Case]) -> list[Condition]:
    """``found`` with ``seen`` as the cases' records give it: what ``verify`` derives again from a receipt."""
    values: dict[str, set[bool]] = {}
    for case in cases:
        for at, took in (case.conditions or {}).items():
            values.setdefault(at, set()).update(took)
    return [c.model_copy(update={"seen": sorted(values.get(c.at, ()))}) for c in found]
