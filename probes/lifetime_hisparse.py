"""Probe for L5 (0.5.23): a HiSparse decode's host pages, the transfer's destination, are freed with the deferred
release instead of at failure time.

The lifetime scene (``probes/lifetime.py``) on a HiSparse decode (``Shape.hisparse``): the pages decode hands prefill
are host pages of the tree's own ``HiSparseCoordinator``, whose ``request_finished`` gives them back. A client abort
while prefill's write is in flight must leave them held until the drain (or the stated timeout), as the deferred
release holds the request: freed at once, the write lands in the next request's pages. Guards: a healthy transfer is
committed and keeps its pages; with the deferred release switched off, the pages still go back exactly once; on a
decode without HiSparse an abort's pages go back once and by the end (the tree's HiSparse tests read both ways).
"""

from __future__ import annotations

from collections.abc import Mapping

from . import duties_5, duties_41023
from .case import Probe
from .lifetime import HISPARSE, IMPORTS, Shape, space_cases


def shape_of(point: Mapping[str, str]) -> Shape:
    return Shape(config=point["config"], failure=point["failure"], hisparse=point["decode"] == "hisparse")


PROBE = Probe(id="lifetime-hisparse", fix=5, imports=IMPORTS + (HISPARSE.rsplit(".", 1)[0],), table=duties_5,
              cases=space_cases(duties_5, shape_of, uses=(duties_41023,)))
