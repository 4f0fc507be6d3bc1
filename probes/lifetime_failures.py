"""Probe for #41404: deferred release extended to transfer failures decode did not initiate.

A prefill rank's write fails and decode learns it from the failure status, not from its own abort;
before the fix decode released the pages at once, while another prefill rank's write (or the failed
write itself, which the engine gave up waiting for) could still land in them. Guard: a failure with
nothing else in flight never holds the pages forever.
"""

from __future__ import annotations

from .case import Probe
from .lifetime import IMPORTS, configured

PROBE = Probe(
    id="lifetime-failures",
    fix=41404,
    imports=IMPORTS,
    cases=configured("lifetime-failures", [
        ("other-rank-fails-while-writing", "bug",
         "prefill rank 0's write fails while prefill rank 1's write of the same request is in flight",
         {"prefill_ranks": 2, "failure": "prefill-failure"}),
        ("failed-write-keeps-landing", "bug",
         "the engine reports a write failed while it is still running; it lands after decode learns of the failure",
         {"failure": "prefill-failure", "failed_write": "keeps writing"}),
        ("failure-nothing-else-in-flight", "guard", "a prefill write fails and stops; nothing else is in flight",
         {"failure": "prefill-failure"}),
    ], ("default", "with-deferred-release")),
)
