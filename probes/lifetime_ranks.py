"""Probe for L1 (a local id): the decode TP ranks agree on holding and releasing a failed transfer's pages.

Two decode ranks share the room, their all-reduces reducing over both as the server's (``lifetime.Group``). Each
rank's own reading of the failure can differ: one could not send its abort (it never learned its prefill ranks)
while its peer did, or prefill's drain acknowledgement reaches one rank and not (or only after the release
timeout) the other. The tree must hold and release the pages in the same pass on every rank, so admission sees
the same capacity everywhere; run in the default configuration and with the deferred release switched on and
off. Guards: both acknowledged, the pages go back on the acknowledgements; a healthy transfer is committed on
both ranks; pages released exactly once, none held forever.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import duties_1, duties_40645, duties_41023
from .case import Probe
from .lifetime import IMPORTS, Shape, space_cases

FAILURE = {"cannot-notify": "peer-bootstrap-fails", "cannot-notify-writing": "peer-bootstrap-fails-writing", "healthy": "none"}
PEER_ACKS = {"ack-late": "late", "ack-lost": "lost"}


def shape_of(point: Mapping[str, str]) -> Shape:
    ranks = point["ranks"]
    return Shape(config=point["config"], decode_ranks=2, group=True, failure=FAILURE.get(ranks, "decode-abort"),
                 peer_acks=PEER_ACKS.get(ranks, ""))


PROBE = Probe(id="lifetime-ranks", fix=1, imports=IMPORTS, table=duties_1,
              cases=space_cases(duties_1, shape_of, uses=(duties_40645, duties_41023)))
