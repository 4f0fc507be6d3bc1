"""Probe for #41404: deferred release extended to transfer failures decode did not initiate.

A prefill rank's write fails and decode learns it from the failure status, not from its own abort;
before the fix decode released the pages at once, while another prefill rank's write (or the failed
write itself, which the engine gave up waiting for) could still land in them. Guard: a failure with
nothing else in flight never holds the pages forever.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import duties
from .case import Probe
from .lifetime import IMPORTS, Shape, space_cases


def shape_of(point: Mapping[str, str]) -> Shape:
    return Shape(config=point["config"], failure="prefill-failure", prefill_ranks=2 if point["prefill_ranks"] == "two" else 1,
                 failed_write="keeps writing" if point["failed_write"] == "keeps-writing" else "stops")


PROBE = Probe(id="lifetime-failures", fix=41404, imports=IMPORTS, cases=space_cases(duties.LIFETIME_FAILURES, shape_of))
