"""Probe for #40645: drain acknowledgements kept until the in-flight writes drain.

The prefill scheduler concludes a failed sender (``clear``) as soon as it polls Failed, which can be
while the transfer worker is still inside the engine's write; before the fix that dropped the
acknowledgement target, so decode waited out its timeout and released anyway. An ABORT that
reaches prefill after the room was cleared, a write still outstanding, was never acknowledged.
An abort whose chunk is still queued for the transfer worker (taken after the room failed, or after
the scheduler cleared it) or whose transfer already succeeded is acknowledged once and releases on it,
nothing written. Guards: lost and late acknowledgements never hold the pages forever nor free them twice.
Each backend has its half (``backend``): Mooncake's prefill manager, and NIXL's (its own transfer worker and ABORT
handling, decode's NIXL manager reading its status messages and acknowledgements). On NIXL the write in flight can
then fail (its worker's failure path acknowledges once every handle settled) or become unreadable (no acknowledgement
before it lands), and an abort can precede decode's publish (an unarmed ABORT: nothing to acknowledge).
"""

from __future__ import annotations

from collections.abc import Mapping

from . import duties_40645, duties_41023, duties_41404
from .case import Probe
from .duties_lifetime import NIXL, configuration
from .lifetime import IMPORTS, Shape, space_cases
from .nixl import NixlDecodeRank, NixlPrefillRank


def shape_of(point: Mapping[str, str]) -> Shape:
    return Shape(config=configuration(point), in_flight=point["in_flight"] == "yes", clears=point["clears"] == "yes",
                 chunk={"queued": "queued", "taken": "taken", "landed": "landed"}.get(point["in_flight"], ""),
                 wire_bootstrap=point["bootstrap"] == "published",
                 late_conclusion=point["clears"] == "late",
                 decode_ranks=2 if point["decode_ranks"] == "two" else 1, acks=point["acks"],
                 backend=point["backend"], write_fails=point["write"] != "lands",
                 failed_write="keeps writing" if point["write"] == "unreadable" else "stops",
                 unpublished=point["destinations"] == "unpublished")


PROBE = Probe(id="lifetime-drain", fix=40645, imports=(*IMPORTS, NIXL), table=duties_40645,
              cases=space_cases(duties_40645, shape_of, uses=(duties_41023, duties_41404),
                                backends={"nixl": (NixlDecodeRank, NixlPrefillRank)}))
