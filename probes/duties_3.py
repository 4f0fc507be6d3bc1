"""The duty table of L3 (0.5.23, a local id: no upstream PR number known): a NIXL decode completes a transfer only
once prefill reported that every write of it landed; a send after the sender concluded is dropped.

Before 0.5.23 the NIXL decode receiver took a transfer as done from the NIXL notifications that reached its agent
(``NixlKVManager.update_transfer_status`` / ``check_transfer_done``): one per KV chunk, one for the metadata row, and
one per state component, but it counted the state per prefill rank, not per component, so the notification of one
state component completed the transfer while another component's write was still landing. From 0.5.23 the decode
never reads notifications: the prefill transfer worker waits for every write of the chunk to settle
(``_await_handles``) and only then concludes the room Success (``conclude_transfer``), which decode's status listener
applies (``apply_prefill_status``). And ``CommonKVSender.send`` (the NIXL and Mooncake senders' from 0.5.23) returns
at once for a sender that concluded Success or Failed (an abort), where 0.5.22's NIXL sender enqueued the chunk anyway.

Rows are duties (id, what must hold, the check over a case's recorded effects); the case space (``SPACE``)
says which cases check which duties; ``FIX_CODE`` names the code the fix changed (what ``mutate`` mutates).
Standard library only: the host judges with it too.
"""

from __future__ import annotations

from . import space
from .duties_lifetime import DEFERRED_CONFIG, site
from .effects import Duty, Effects

NIXL = "sglang.srt.disaggregation.nixl.conn"
COMMON = "sglang.srt.disaggregation.common.conn"
SUCCESS, FAILED = "Success", "Failed"


def _failed_writes(e: Effects) -> bool:
    return any(w["state"] == "failed" for w in e["writes"])


def no_success_before_landed(e: Effects) -> bool:
    """Decode's receiver never answered Success while a write of the transfer into decode's memory (its KV pages, a
    state component, its metadata row) had not landed, and never for a transfer a write of which failed."""
    return not any(p["result"] == SUCCESS and (p["unlanded"] or _failed_writes(e)) for p in e["polls"])


def completes_once(e: Effects) -> bool:
    """Every write landed and decode's receiver answered Success, then nothing else (no Failed after it), and the
    request's read of its pages found each written with its own KV."""
    results = [p["result"] for p in e["polls"]]
    if SUCCESS not in results or any(r != SUCCESS for r in results[results.index(SUCCESS):]):
        return False
    return all(w["state"] == "landed" for w in e["writes"]) and not e["pool"]["unwritten_reads"] and any(
        ev["event"] == "read" for ev in e["pool"]["events"])


def failure_reported(e: Effects) -> bool:
    """A write failed and decode's receiver ended Failed (prefill's failure reached it; nothing was read)."""
    return _failed_writes(e) and e["polls"][-1]["result"] == FAILED and not any(
        ev["event"] == "read" for ev in e["pool"]["events"])


def _concluded_at(e: Effects) -> int | None:
    """The sequence number at which the prefill sender concluded: its first poll answering Success or Failed."""
    return next((p["seq"] for p in e["sender_polls"] if p["result"] in (SUCCESS, FAILED)), None)


def late_send_dropped(e: Effects) -> bool:
    """The sender concluded before the late send; no chunk reached the transfer queue after it concluded, its poll
    answered the same after the late send as before, and decode's receiver too."""
    at = _concluded_at(e)
    if at is None:
        return False
    late = next(s["seq"] for s in e["steps"] if s["step"] == "late send")
    before = [p["result"] for p in e["sender_polls"] if p["seq"] < late]
    after = [p["result"] for p in e["sender_polls"] if p["seq"] > late]
    decode_before = [p["result"] for p in e["polls"] if p["seq"] < late]
    decode_after = [p["result"] for p in e["polls"] if p["seq"] > late]
    return (not any(q["seq"] > at for q in e["queued"]) and bool(after) and set(after) == {before[-1]}
            and all(r == decode_before[-1] for r in decode_after))


DUTIES: tuple[Duty, ...] = (
    Duty("nixl-no-success-before-landed",
         "decode's NIXL receiver never reported the transfer done while a write of it (its KV pages, a state "
         "component, its metadata row) had not landed in decode's memory, nor for a transfer a write of which failed",
         no_success_before_landed),
    Duty("nixl-completes-once",
         "a transfer whose every write landed is reported done by decode's receiver, once and for good, and the "
         "request reads its pages as written (a guard: healthy transfers still complete)",
         completes_once),
    Duty("nixl-failure-reported",
         "a transfer a write of which failed ends Failed on decode, and nothing of it is read (a guard)",
         failure_reported),
    Duty("nixl-late-send-dropped",
         "a chunk sent after the prefill sender concluded (Success, or Failed by an abort) never reaches the transfer "
         "queue, and neither the sender's outcome nor decode's changes",
         late_send_dropped),
)

def _space(aliases: dict[str, str]) -> space.Space:
    return space.Space(
    probe="nixl-completion",
    dimensions=(
        space.Dimension("held", (
            space.Value("none", "every write of the chunk lands before decode polls", label="healthy",
                        says="every write landed"),
            space.Value("state", "the write of the second state component (the tree's StateType DSA slot) is still "
                        "in flight while the KV pages, the first (SWA) component and the metadata row landed and their "
                        "notifications reached decode's agent; decode polls, then it lands or fails",
                        label="state-in-flight", says="one state component's write in flight while decode polls"),
            space.Value("kv", "the write of the KV pages is in flight while the rest landed", label="kv-in-flight",
                        says="the KV pages' write in flight while decode polls"),
            space.Value("aux", "the write of the metadata row is in flight while the rest landed", label="aux-in-flight",
                        says="the metadata row's write in flight while decode polls"),
        ), core=True, reads=("conclude_transfer", "any_failed")),
        space.Dimension("late", (
            space.Value("none", "no send after the transfer", label=""),
            space.Value("after-success", "prefill's scheduler hands the sender a chunk again after its poll answered "
                        "Success", label="late-send-after-success", says="a send after the sender concluded Success"),
            space.Value("after-abort", "prefill's scheduler aborts the sender (its abort) before handing it the "
                        "request's chunk", label="late-send-after-abort", says="a send after the sender was aborted"),
        ), core=True, reads=("conclude_state",)),
        space.Dimension("fate", (
            space.Value("lands", "the held write lands after decode polled", label=""),
            space.Value("fails", "the held write fails (NIXL reports ERR)", label="fails", says="then fails"),
        ), over={"held": ("state", "kv", "aux")}, reads=("any_failed",)),
        space.Dimension("chunks", (
            space.Value("1", "the request's pages are sent in one chunk, the last", label=""),
            space.Value("2", "its pages are sent in two chunks: the first (no metadata row, no state) is written and "
                        "settled before the last", label="two-chunks", says="in two chunks"),
        ), over={"held": ("none",)}, reads=("is_last_chunk",)),
        space.Dimension("config", DEFERRED_CONFIG.values, over={"held": ("none",)}, reads=DEFERRED_CONFIG.reads),
    ),
    unreachable=(space.Unreachable("a late send follows a transfer every write of which landed, or no transfer",
                                   {"held": ("state", "kv", "aux"), "late": ("after-success", "after-abort")}),),
    bug=({"held": ("state",)}, {"late": ("after-abort",)}),
    duties_by=(space.Rule({"held": ("state", "kv", "aux")}, ("nixl-no-success-before-landed",)),
               space.Rule({"held": ("state", "kv", "aux"), "fate": ("lands",)}, ("nixl-completes-once",)),
               space.Rule({"fate": ("fails",)}, ("nixl-failure-reported",)),
               space.Rule({"held": ("none",), "late": ("none", "after-success")},
                          ("nixl-completes-once", "nixl-no-success-before-landed")),
               space.Rule({"late": ("after-success", "after-abort")}, ("nixl-late-send-dropped",))),
    site=site, aliases=aliases,
)


# a late send follows the healthy transfer (or its abort): its case says so, not "healthy"
SPACE = _space({i: i.removeprefix("healthy-") for p in _space({}).points()
                if (i := _space({}).case_id(p)).startswith("healthy-late-")})

# The code the fix changed, in the release that first carries it (0.5.23), by qualified name (whole functions, or
# the slice of a long one naming these): what ``diffprobe mutate`` changes, one statement at a time.
FIX_CODE: dict[str, tuple[str, ...]] = {
    # the worker's settle-then-conclude: the batch's wait for every write (its result any_failed) and the Success
    # conclusion after it (the staging path's own wait, and the settle timeout after an ERR, are not the rule's)
    f"{NIXL}.NixlKVManager.transfer_worker": ("conclude_transfer", "any_failed"),
    f"{COMMON}.CommonKVSender.send": ("conclude_state",),
}

EQUIVALENT: dict[tuple[str, str, str], str] = {}
EXPLAINED: dict[tuple[str, str, str], str] = {}
