"""The duty table of L2 (0.5.23, a local id: no upstream PR number known): no cache flush while pages are held.

The decode scheduler is not idle while deferred releases are pending (``Scheduler.is_fully_idle`` asks the transfer
queue's ``has_pending_deferred_releases``), so ``flush_cache`` cannot clear the pool under pages held for a prefill
write that may still land.

Rows are duties (id, what must hold, the check over a case's recorded effects); the case space (``SPACE``)
says which cases check which duties; ``FIX_CODE`` names the code the fix changed (what ``mutate`` mutates).
Standard library only: the host judges with it too.
"""

from __future__ import annotations

from . import space
from .duties_lifetime import DECODE, DEFERRED_CONFIG, HELD, OFF, OFF_DUTIES, on, on_rules, site, subject
from .effects import Duty, Effects

SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"


def clears(rank: dict) -> list[dict]:
    return [e for e in rank["events"] if e["event"] == "clear"]


def flushes(e: Effects) -> list[dict]:
    return [s for s in e["steps"] if s["step"] == "flush"]


def not_cleared_under_held_pages(e: Effects) -> bool:
    """A flush reached every decode rank, and no rank's pool was cleared while the subject still owned pages in it."""
    return len(flushes(e)) == len(e["decode"]) and not any(
        subject(e) in c["owned"] for rank in e["decode"] for c in clears(rank))


def flushed_when_idle(e: Effects) -> bool:
    """With nothing pending, the flush cleared every decode rank's pool (once)."""
    return len(flushes(e)) == len(e["decode"]) and all(len(clears(rank)) == 1 for rank in e["decode"])


DUTIES: tuple[Duty, ...] = (
    Duty("lifetime-flush-refused-while-held",
         "a cache flush reaching decode while the aborted request's pages were held for a write still in flight "
         "did not clear the pool under them (the scheduler was not idle)",
         not_cleared_under_held_pages),
    Duty("lifetime-flush-done-when-idle",
         "a cache flush after every page went back cleared the pool (a guard: the scheduler is idle again once "
         "the held pages are released)",
         flushed_when_idle),
)

SPACE = space.Space(
    probe="lifetime-flush",
    dimensions=(
        space.Dimension("flush", (
            space.Value("held", "a client abort reaches decode while prefill's write is in flight; the pages are held "
                        "(or not) by the tree's own rules, then a cache flush reaches the decode scheduler (its "
                        "flush_cache) before the write lands", label="flush-while-held",
                        says="a cache flush while an aborted request's pages are held for a write in flight"),
            space.Value("idle", "the same abort, its acknowledgement delivered and its pages released, then a cache "
                        "flush", label="flush-when-idle", says="a cache flush after the pages went back"),
        ), core=True, reads=("is_fully_idle", "has_pending_deferred_releases", "_deferred_releases")),
        DEFERRED_CONFIG,
    ),
    bug=on({"flush": ("held",)}),
    duties_by=(*on_rules(
        space.Rule({"flush": ("held",)}, ("lifetime-flush-refused-while-held", *HELD)),
    ), space.Rule({**OFF, "flush": ("held",)}, OFF_DUTIES),
        space.Rule({"flush": ("idle",)}, ("lifetime-flush-done-when-idle", "lifetime-freed-once"))),
    site=site,
)

FIX_CODE: dict[str, tuple[str, ...]] = {
    f"{SCHEDULER}.is_fully_idle": ("has_pending_deferred_releases",),
    f"{DECODE}.DecodeTransferQueue.has_pending_deferred_releases": (),
}

EQUIVALENT: dict[tuple[str, str, str], str] = {}
EXPLAINED: dict[tuple[str, str, str], str] = {}
