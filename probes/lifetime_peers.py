"""Probe for #41402: every decode peer that aborted a room is acknowledged, for its own request.

With prefill TP < decode TP several decode ranks share one room and each sends its own ABORT;
before the fix the second overwrote the first, and the first rank held its pages until the
timeout. The acknowledgement must reach each of them, also when the room was cleared between the
two ABORTs, and an acknowledgement meant for the room's previous request (held back on the wire)
must not release this request's pages while its write is still in flight (the acknowledgement
carries its request's generation from 0.5.22, with the per-endpoint targets; the documents name no
PR of its own for that check).
"""

from __future__ import annotations

from .case import Probe
from .lifetime import IMPORTS, configured

PROBE = Probe(
    id="lifetime-peers",
    fix=41402,
    imports=IMPORTS,
    cases=configured("lifetime-peers", [
        ("two-decode-ranks-abort", "bug", "two decode ranks abort one room while prefill's write is in flight",
         {"decode_ranks": 2}),
        ("two-decode-ranks-room-cleared-between", "bug",
         "two decode ranks abort one room, prefill clearing the room between their ABORTs", {"decode_ranks": 2, "clears": True}),
        ("stale-ack-of-previous-request", "bug",
         "the room's previous request's late acknowledgement arrives while this request's write is in flight",
         {"stale_ack": True}),
        ("two-prefill-ranks-abort", "bug", "one decode rank paired with two prefill ranks aborts mid-transfer",
         {"prefill_ranks": 2}),
    ], ("default", "with-deferred-release")),
)
