"""Probe for #40645: drain acknowledgements kept until the in-flight writes drain.

The prefill scheduler concludes a failed sender (``clear``) as soon as it polls Failed, which can be
while the transfer worker is still inside the engine's write; before the fix that dropped the
acknowledgement target, so decode waited out its timeout and released anyway. An ABORT that
reaches prefill after the room was cleared, a write still outstanding, was never acknowledged.
Guards: lost and late acknowledgements never hold the pages forever nor free them twice; an abort
with nothing in flight releases on the acknowledgement.
"""

from __future__ import annotations

from .case import Probe
from .lifetime import IMPORTS, configured

PROBE = Probe(
    id="lifetime-drain",
    fix=40645,
    imports=IMPORTS,
    cases=configured("lifetime-drain", [
        ("prefill-clears-before-drain", "bug",
         "the prefill scheduler clears the aborted room while its write is still in flight", {"clears": True}),
        ("abort-after-room-cleared", "bug",
         "a second decode rank's ABORT reaches prefill after the room was cleared, the write still outstanding",
         {"decode_ranks": 2, "clears": True}),
        ("acks-lost", "guard", "abort in flight, every drain acknowledgement lost on the wire", {"acks": "lost"}),
        ("acks-late", "guard", "abort in flight, the acknowledgement arrives after the release timeout", {"acks": "late"}),
        ("abort-nothing-in-flight", "guard", "a client abort before prefill wrote anything", {"in_flight": False}),
    ], ("default", "with-deferred-release")),
)
