"""Probe for #41404: deferred release extended to transfer failures decode did not initiate.

A prefill rank's write fails and decode learns it from the failure status, not from its own abort;
before the fix decode released the pages at once, while another prefill rank's write (or the failed
write itself, which the engine gave up waiting for) could still land in them. Decode's own send of
its destinations can fail too, after one prefill rank took them and began writing: the room fails on
decode's side, and that rank's write must drain (and be acknowledged) before the pages go back.
Guards: a failure with nothing else in flight never holds the pages forever; a failure before decode
learned its prefill ranks (nothing can write its pages) gives them back at once.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import duties_40645, duties_41023, duties_41404
from .case import Probe
from .lifetime import IMPORTS, Shape, space_cases


def shape_of(point: Mapping[str, str]) -> Shape:
    failure = {"write-fails": "prefill-failure"}.get(point["failure"], point["failure"])
    return Shape(config=point["config"], failure=failure,
                 prefill_ranks=2 if (point["prefill_ranks"] == "two" or failure == "metadata-send-fails"
                                     or point["mla"] == "dummy-rank" or point["prefill_cp"] == "two-ranks") else 1,
                 failed_write="keeps writing" if point["failed_write"] == "keeps-writing" else "stops",
                 chunks=2 if point["chunks"] == "two" else 1, state=point["state"] == "mamba",
                 layout="mla" if point["mla"] == "dummy-rank" else "cp" if point["prefill_cp"] == "two-ranks" else "tp")


PROBE = Probe(id="lifetime-failures", fix=41404, imports=IMPORTS, table=duties_41404,
              cases=space_cases(duties_41404, shape_of, uses=(duties_40645, duties_41023)))
