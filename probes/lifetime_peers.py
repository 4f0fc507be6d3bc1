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

from collections.abc import Mapping

from . import duties_40645, duties_41023, duties_41402
from .case import Probe
from .lifetime import IMPORTS, Shape, space_cases


def shape_of(point: Mapping[str, str]) -> Shape:
    return Shape(config=point["config"], decode_ranks=2 if point["peers"] == "two-decode" else 1,
                 prefill_ranks=2 if point["peers"] == "two-prefill" else 1, clears=point["clears"] == "yes",
                 stale_ack=point["stale"] == "yes", acks=point["acks"])


PROBE = Probe(id="lifetime-peers", fix=41402, imports=IMPORTS, table=duties_41402,
              cases=space_cases(duties_41402, shape_of, uses=(duties_40645, duties_41023)))
