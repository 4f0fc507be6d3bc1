"""Probe for L2 (a local id): a cache flush never clears pages held for a write that may still land.

A client abort reaches decode while prefill's write is in flight, so the tree holds the request's pages until
prefill acknowledges its writes stopped; then a cache flush (``/flush_cache``) reaches the decode scheduler, whose
own ``flush_cache`` clears every pool only if its ``is_fully_idle`` says nothing is in use. The pages must survive
it: cleared, they go to the next request and the late write lands in them. Run in the default configuration and
with the deferred release switched on and off. Guard: once the pages went back, a flush clears the pool.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import duties_2, duties_41023
from .case import Probe
from .lifetime import IMPORTS, Shape, space_cases


def shape_of(point: Mapping[str, str]) -> Shape:
    return Shape(config=point["config"], flush=point["flush"])


PROBE = Probe(id="lifetime-flush", fix=2, imports=IMPORTS, table=duties_2,
              cases=space_cases(duties_2, shape_of, uses=(duties_41023,)))
