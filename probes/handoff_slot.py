"""Probe for L4 (0.5.23): a freed metadata slot's checksum row is zeroed, so the next request cannot inherit a
stale digest.

The handoff scene (``probes/handoff.py``) with the subject's decode metadata slot reused: the previous owner's full
handoff, sent by a prefill instance running ``--disaggregation-enable-kv-checksum``, is committed and read first,
and the tree frees its slot; the subject is preallocated into that slot. A subject whose prefill instance does not
run the option yet (a rolling restart: it registers no digest buffer, so the aux transfer leaves decode's digest
row as it was) must not be checked against the digest the previous owner left there. Guards: the previous owner
completes; the subject's full handoff from a prefill running the option is accepted, and its short one still
caught (clearing the row does not blind the check); the default configuration's handoffs complete. And (0.5.23 too)
the digests cover only the pages after decode's cached prefix: a healthy handoff past a prefix decode's cache holds
as another prefill instance computed it (the same tokens, other bytes) is accepted, not aborted on a mismatch.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import duties_4, duties_39500
from .case import Case, Probe
from .handoff import CACHED, PROMPT, REQUIRES, Handoff, HandoffShape
from .lifetime import IMPORTS, UTILS

# the digest row the defence clears: trees without the checksum have none (their cases are not applicable)
CHECKSUM_ROW = f"{UTILS}.MetadataBuffers.get_kv_checksum"


def shape_of(point: Mapping[str, str]) -> HandoffShape:
    return HandoffShape(config=point["config"], prefill_checksum=point["prefill"] != "without",
                        sent=1 if point["transfer"] == "short" else PROMPT, slot=point["slot"],
                        **({"cached": CACHED, "prefix_from": "another-prefill"}
                           if point["decode_cache"] == "prefix-from-another-prefill" else {}))


def _cases() -> tuple[Case, ...]:
    return tuple(Case.of(duties_4, p, lambda journal, shape=shape_of(p): Handoff(journal, shape),
                         REQUIRES + ((CHECKSUM_ROW,) if p["config"] == "with-kv-checksum" else ()), uses=(duties_39500,))
                 for p in duties_4.SPACE.points())


PROBE = Probe(id="handoff-slot", fix=4, imports=IMPORTS, cases=_cases(), table=duties_4)
