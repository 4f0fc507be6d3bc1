"""The incident's seven steps, which probe cases can back each, and the evidence level a bundle gives
each step: a CPU differential only where every backing case went bug -> clean between tree receipts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from runner import fixids
from runner.evidence.receipts import CaseTransition
from runner.views.report.verified import Fix

Level = Literal["CPU differential", "vendor disclosure", "not covered"]


@dataclass(frozen=True)
class Step:
    number: int
    text: str
    backing: tuple[tuple[str, str], ...]  # (probe, case): bug at base, clean at head backs the step
    beyond: str  # what of the step no CPU probe observes, so it rests on the vendor disclosure


STEPS = (
    Step(1, "Bootstrap: the router tells decode the prompt is N pages; decode reserves N KV pages.",
         (("admission", "decode-door-rejected"),),
         "The router and the page count N are not modelled: no pages are reserved on CPU."),
    Step(2, "Prefill admission admits the rejected request.", (("admission", "prefill-door-rejected"),), ""),
    Step(3, "Prefill forward runs the 1-token placeholder.", (),
         "No probe runs a forward pass: no GPU, no model weights."),
    Step(4, "KV transfer sends one page and signals transfer-complete.",
         (("prefill-cleanup", "aborted-final-result"),),
         "The KV sender is a recording double: the last-chunk send is observed, no bytes move."),
    Step(5, "Decode admission applies the same finished() check and accepts.",
         (("admission", "decode-door-rejected"),), ""),
    Step(6, "Decode attention reads all N reserved pages: only page 0 was written by this request, "
            "the rest is stale data of earlier tenants.", (),
         "Needs real KV pages, attention kernels and other tenants' data: none exist on CPU."),
    Step(7, "HTTP 200 with a plausible answer instead of HTTP 400.", (),
         "No HTTP server or model answers in a CPU probe."),
)
LEVEL_CLASS = {"CPU differential": "cpu", "vendor disclosure": "vendor", "not covered": "none"}


@dataclass(frozen=True)
class Backing:
    fix: Fix
    transition: CaseTransition


@dataclass(frozen=True)
class Finding:
    step: Step
    level: Level
    backing: list[Backing]
    found: list[str]  # what else the bundle holds for the step's cases: observations that do not back it


def assess(step: Step, fixes: list[Fix]) -> Finding:
    """CPU differential only if every backing case went bug -> clean between tree receipts here."""
    if not step.backing:
        return Finding(step, "vendor disclosure", [], [])
    backing: list[Backing] = []
    found: list[str] = []
    for fix in fixes:
        for t in fix.judged.cases:
            if (t.probe, t.case) not in step.backing:
                continue
            if fix.cpu and t.transition == "bug -> clean":
                backing.append(Backing(fix, t))
            else:
                what = "" if fix.cpu else " (model or gate receipts: not a CPU differential)"
                found.append(f"{fixids.label(fix.judged.fix)} {t.probe}/{t.case}: {arrow(t.transition)}{what}")
    if {(b.transition.probe, b.transition.case) for b in backing} == set(step.backing):
        return Finding(step, "CPU differential", backing, found)  # conflicting observations stay visible
    if not found:
        found = [f"no base/head differential here observed {p}/{c}" for p, c in step.backing]
    return Finding(step, "not covered", [], found)


def arrow(transition: str) -> str:
    return transition.replace(" -> ", " → ")
