"""The duty table of L5 (0.5.23, no upstream PR number known): HiSparse host pages freed with the deferred release.

On a HiSparse decode the transfer writes the request's KV into host pages (the HiSparse coordinator's host pool).
Before the fix a failed transfer's host pages went back at failure time (``pop_transferred`` called
``HiSparseCoordinator.request_finished`` at once) while the deferred release held only the request's logical
indices, so prefill's write still in flight could land in host pages given to another request. From 0.5.23
``DecodeTransferQueue._release_request`` frees them, so they go back with the deferred release, after the drain.

Rows are duties (id, what must hold, the check over a case's recorded effects); the case space (``SPACE``)
says which cases check which duties; ``FIX_CODE`` names the code the fix changed (what ``mutate`` mutates).
Standard library only: the host judges with it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import space
from .duties_lifetime import DECODE, DEFERRED_CONFIG, GUARD_ABORT, HELD, OFF, OFF_DUTIES, frees, on, on_rules, site, subject, timeout_at
from .effects import Duty, Effects

HOST_FREE = "hisparse request_finished"


def _host_frees(rank: Mapping[str, Any], rid: str) -> list[Mapping[str, Any]]:
    return [f for f in frees(rank, rid) if f["how"] == HOST_FREE]


def host_held(e: Effects) -> bool:
    """No host page of the subject went back to the HiSparse host pool while a prefill write could still land in it,
    except at the tree's stated release timeout."""
    rid = subject(e)
    return not any(f["rid"] == rid and f["how"] == HOST_FREE and f["t"] < timeout_at(e)
                   for rank in e["decode"] for f in rank["freed_while_writable"])


def host_freed_with_release(e: Effects) -> bool:
    """The subject's host pages went back exactly once, by the coordinator, and its logical indices once, not kept
    in the prefix cache: the KV's destination is released with the request, neither leaked nor freed twice."""
    rid = subject(e)
    for rank in e["decode"]:
        host = [p for f in _host_frees(rank, rid) for p in f["pages"]]
        logical = [r for r in rank.get("logical_releases", []) if r["rid"] == rid]
        if sorted(host) != sorted(rank["requests"][rid]["pages"]) or len(logical) != 1 or logical[0]["cached"]:
            return False
    return True


DUTIES: tuple[Duty, ...] = (
    Duty("hisparse-host-held",
         "no HiSparse host page of the aborted request (the transfer's destination) went back to the host pool while "
         "a prefill write could still land in it, except at the tree's stated release timeout",
         host_held),
    Duty("hisparse-host-freed-once",
         "the aborted request's host pages went back exactly once, by the HiSparse coordinator, and its logical "
         "indices once, not kept in the prefix cache",
         host_freed_with_release),
)

SPACE = space.Space(
    probe="lifetime-hisparse",
    dimensions=(
        space.Dimension("decode", (
            space.Value("hisparse", "a HiSparse decode (--enable-hisparse): the transfer writes the request's KV into "
                        "host pages of the HiSparse coordinator", label="hisparse", says="a HiSparse decode"),
            space.Value("plain", "a decode without HiSparse: the transfer writes its device KV pages", label="plain-decode",
                        says="a decode without HiSparse"),
        ), over={"failure": ("decode-abort",)}, reads=("enable_hisparse",)),
        space.Dimension("failure", (
            space.Value("decode-abort", "a client abort reaches decode's scheduler (its abort_request) while prefill's "
                        "write into the request's pages is in flight", label="abort-in-flight",
                        says="a client abort while prefill's write is in flight"),
            space.Value("none", "a healthy transfer", label="healthy-transfer", says="a healthy transfer, committed"),
        ), core=True, reads=("request_finished",)),
        DEFERRED_CONFIG,
    ),
    bug=on({"failure": ("decode-abort",), "decode": ("hisparse",)}),
    duties_by=(*on_rules(space.Rule({"failure": ("decode-abort",), "decode": ("hisparse",)}, ("hisparse-host-held", *HELD))),
               space.Rule({**OFF, "failure": ("decode-abort",)}, OFF_DUTIES),
               space.Rule({"failure": ("decode-abort",), "decode": ("hisparse",)}, ("hisparse-host-freed-once",)),
               # without HiSparse the request's own pages go back once and by the end, whatever the release (a guard)
               space.Rule({"decode": ("plain",)}, GUARD_ABORT),
               space.Rule({"failure": ("none",)}, ("lifetime-committed",))),
    site=site,
)

# The code the fix changed, in the release that first carries it (0.5.23), by qualified name (whole functions, or
# the slice of a long one naming these): what ``diffprobe mutate`` changes, one statement at a time.
FIX_CODE: dict[str, tuple[str, ...]] = {
    f"{DECODE}.DecodeTransferQueue._release_request": ("hisparse_coordinator", "enable_hisparse"),
}

EQUIVALENT: dict[tuple[str, str, str], str] = {}
EXPLAINED: dict[tuple[str, str, str], str] = {}
