"""An acceptance as ``bundle.json``'s ``extra`` records it (``diffprobe accept``), and the gates as the
command prints them. Which checks each gate runs and when it passes are ``commands/accept.py``'s rules;
this is the record they write, which ``accept`` and ``report`` both show."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from runner import ui

KIND = "accept"  # the bundle kind ``diffprobe accept`` writes
# The write-up's four acceptance gates, by number.
GATES = {
    1: "pool vs context on every prefill worker",
    2: "reject / admission: the running tree's audit (both doors, guards, cleanup)",
    3: "transfer / read: KV checksum or canary in force on every worker",
    4: "lifetime / ownership: deferred release in force on prefill and decode",
}


class GateResult(BaseModel):
    gate: int
    title: str
    passed: bool
    reasons: list[str]  # why it failed; for a pass, what it rests on
    receipts: list[str]


class Acceptance(BaseModel):
    """What ``bundle.json``'s ``extra`` holds for an acceptance bundle."""

    workers: dict[str, dict[str, Any]]  # url -> role, endpoint, version, tree source
    trees: dict[str, str]  # tree source -> tree digest
    gates: list[GateResult]
    accepted: bool


def print_gates(record: Acceptance) -> None:
    for g in record.gates:
        mark = "[green]✓ pass[/]" if g.passed else "[red]✗ FAIL[/]"
        ui.out.print(f"{mark} gate {g.gate}: {g.title}")
        for reason in g.reasons:
            ui.out.print("    " + reason, markup=False, style=None if g.passed else "red")
    ui.out.print("[bold green]accepted[/]" if record.accepted else "[bold red]not accepted[/]")
