"""The four acceptance gates' titles, and an acceptance as the command prints it. The record itself
(``bundle.json``'s ``extra``, ``diffprobe accept``) is ``runner.evidence.records.Acceptance``, which
``accept`` writes and ``report`` shows; which checks each gate runs and when it passes are
``commands/accept.py``'s rules."""

from __future__ import annotations

from runner import ui
from runner.evidence.records import Acceptance

KIND = "accept"  # the bundle kind ``diffprobe accept`` writes
# The write-up's four acceptance gates, by number.
GATES = {
    1: "pool vs context on every rank of every worker",
    2: "reject / admission: the running tree's audit (both doors, guards, cleanup)",
    3: "transfer / read: KV checksum verifiable on every pair, or canary, in force on every rank",
    4: "lifetime / ownership: deferred release in force on every rank of prefill and decode",
}


def print_gates(record: Acceptance) -> None:
    for g in record.gates:
        mark = "[green]✓ pass[/]" if g.passed else "[red]✗ FAIL[/]"
        ui.out.print(f"{mark} gate {g.gate}: {g.title}")
        for reason in g.reasons:
            ui.out.print("    " + reason, markup=False, style=None if g.passed else "red")
        if g.unused:
            ui.out.print(f"    not used: {', '.join(g.unused)}", markup=False, style="dim")
    ui.out.print("[bold green]accepted[/]" if record.accepted else "[bold red]not accepted[/]")
