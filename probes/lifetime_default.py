"""Probe for #41023: deferred decode-side KV release, on by default in the backends that support it.

An abort reaches decode while prefill's write into the request's pages is still in flight; the
pool then has nothing else free, so whatever decode releases goes straight to the next request.
In its default configuration the tree must hold the pages until prefill acknowledges that its
writes stopped (or the stated timeout passes), so that the late write never lands in another
request's pages. Run in the default configuration and with the option on (releases where it is
off by default). Guards: a healthy transfer is committed at once; an abort with nothing in flight
releases on the acknowledgement, also behind another request held to the timeout on the same decode rank; lost
acknowledgements never hold the pages forever.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import duties_40645, duties_41023, duties_41404
from .case import Probe
from .lifetime import IMPORTS, Shape, space_cases


def shape_of(point: Mapping[str, str]) -> Shape:
    partial, peer = point["publish"] == "partial", point["failure"] == "peer-bootstrap-fails"
    return Shape(config=point["config"], failure=point["failure"], in_flight=point["in_flight"] == "yes",
                 acks=point["acks"], stale_ack=point["stale"] == "yes", publish=point["publish"],
                 neighbour=point["neighbour"] == "held",
                 prefill_ranks=2 if partial else 1, decode_ranks=2 if peer else 1, group=peer)


PROBE = Probe(id="lifetime-default", fix=41023, imports=IMPORTS, table=duties_41023,
              cases=space_cases(duties_41023, shape_of, uses=(duties_40645, duties_41404)))
