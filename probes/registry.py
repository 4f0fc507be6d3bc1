"""The probes diffprobe runs, one row each: the one registry the harness (inside a tree's process), the
duty tables and the host's catalog all read. Standard library only: probes never import ``runner``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    id: str  # what pins.toml, receipts and --probe name it by
    module: str  # its module in probes/
    fix: int  # the upstream PR whose promise it checks, or a local id (< 1000, shown L<n>): its duty table is probes/duties_{fix}.py


PROBES: tuple[Entry, ...] = (
    Entry("admission", "admission", 38935),
    Entry("prefill-cleanup", "prefill_cleanup", 36988),
    Entry("lifetime-default", "lifetime_default", 41023),
    Entry("lifetime-drain", "lifetime_drain", 40645),
    Entry("lifetime-peers", "lifetime_peers", 41402),
    Entry("lifetime-failures", "lifetime_failures", 41404),
    Entry("handoff", "handoff", 39500),
    Entry("handoff-slot", "handoff_slot", 4),
    Entry("lifetime-hisparse", "lifetime_hisparse", 5),
    Entry("lifetime-ranks", "lifetime_ranks", 1),
    Entry("lifetime-flush", "lifetime_flush", 2),
    Entry("nixl-completion", "nixl_completion", 3),
    Entry("lifetime-restore", "lifetime_restore", 6),
)
