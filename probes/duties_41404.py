"""The duty table of #41404 (0.5.22): other transfer failures.

Failures decode did not initiate are notified and held like an abort; a failed send that may still write poisons
its room.

Rows are duties (id, what must hold, the check over a case's recorded effects); the case space (``SPACE``)
says which cases check which duties; ``FIX_CODE`` names the code the fix changed (what ``mutate`` mutates).
Standard library only: the host judges with it too.
"""

from __future__ import annotations

from . import space
from .duties_lifetime import (ACKED, DEFERRED_CONFIG, GUARD_ABORT, HELD, OFF, OFF_DUTIES, CONN, DECODE, MOONCAKE, SUFFIXES,
                              on, on_rules, released_before_timeout, site, started)
from .effects import Duty, Effects, returned


def uninitialised_abort_quiet(effects: Effects) -> bool:
    """No failure escaped the tree's code, and no ABORT went out on the wire."""
    return returned(effects) and not any(m["kind"] == "ABORT" for m in effects["wire"])


def no_ack_while_writing(effects: Effects) -> bool:
    """Each prefill rank whose failed write was still running (the engine gave up on it) sent no drain
    acknowledgement of the subject before that write landed; false where no such write landed."""
    landed: dict[int, int] = {}
    for s in effects["steps"]:
        if s["step"] == "failed write lands":
            landed[s["rank"]] = max(landed.get(s["rank"], 0), s["seq"])
    return bool(landed) and not any(
        m["kind"] == "ABORT_ACK" and m["from"] == f"prefill{rank}" and started(effects)["seq"] < m["seq"] < seq
        for rank, seq in landed.items() for m in effects["wire"])


DUTIES: tuple[Duty, ...] = (
    Duty("lifetime-released-at-once",
         "nothing could write the pages (no prefill rank ever learned them): they went back at once, not held "
         "to the release timeout",
         released_before_timeout),
    Duty("lifetime-uninitialised-abort-quiet",
         "the abort of a request whose KV receiver was never initialised (no prefill rank known) did not escape the "
         "tree's code and sent nothing to any prefill rank (it knows none)",
         uninitialised_abort_quiet),
    Duty("lifetime-no-ack-while-writing",
         "a prefill rank whose failed write (KV, aux or state) the engine gave up on while it still ran acknowledged "
         "no drain of the room before that write landed: it cannot know the write stopped, so decode waits for its "
         "release timeout",
         no_ack_while_writing),
    Duty("lifetime-failure-handled",
         "decode's own failed send of its destinations did not escape the tree's code to its caller (a tree "
         "that lets it escape has no failure path for it: it can neither hold nor release the pages by its "
         "rules)",
         returned),
)

SPACE = space.Space(
    probe="lifetime-failures",
    dimensions=(
        space.Dimension("failure", (
            space.Value("write-fails", "prefill rank 0's write fails; decode learns it from the failure status",
                        label=""),
            space.Value("metadata-send-fails", "decode's destinations reached prefill rank 0, which writes, but the "
                        "send to prefill rank 1 failed (a connection reset): decode marks the room failed itself, "
                        "with rank 0's write in flight", label="metadata-send-fails",
                        says="decode's metadata reaching prefill rank 0 but not rank 1"),
            space.Value("bootstrap-fails", "decode never learned its prefill ranks: no prefill rank knows its pages",
                        label="bootstrap-fails", says="decode never learning its prefill ranks"),
            space.Value("aux-write-fails", "prefill rank 0's KV write lands, the engine's aux write (decode's metadata "
                        "row) returns failure: the worker concludes the room failed", label="aux-write-fails",
                        says="the aux write failing after the KV landed"),
            space.Value("state-write-fails", "a hybrid (Mamba) model: prefill rank 0's KV write lands, the engine's write "
                        "of the request's state slot (the tree's maybe_send_extra) returns failure",
                        label="state-write-fails", says="the state write failing after the KV landed",
                        implies={"state": "mamba"}),
            space.Value("aborted-before-init", "the client aborts the request while it waits in decode's preallocation "
                        "queue for its prefill's parallel info: its KV receiver, as the tree's constructor left it, was "
                        "never initialised (no bootstrap infos: no prefill rank known), nothing reserved yet",
                        label="aborted-before-init", says="an abort before decode's receiver learned its prefill"),
            space.Value("aborted-then-write-fails", "decode aborts the request twice (the client's disconnect, then its "
                        "explicit abort) while prefill rank 0's write is in flight; that write then fails: a failure "
                        "after decode already notified the abort", label="aborted-then-write-fails",
                        says="prefill's write failing after decode notified its abort"),
        ), core=True, reads=("send_metadata", "init_time", "force_arm", "ensure_abort_notified", "send_aux",
                             "abort_notified")),
        space.Dimension("chunks", (
            space.Value("one", "the request's KV in one chunk, the last", label=""),
            space.Value("two", "the request's KV in two chunks: the first lands and decode's event loop polls the room "
                        "(not failed) before the last chunk is sent, whose write fails", label="two-chunks",
                        says="the last of two chunks failing"),
        ), over={"failure": ("write-fails",)}, reads=("is_last_chunk",)),
        space.Dimension("state", (
            space.Value("none", "a model without state: its chunks carry no state slot", label=""),
            space.Value("mamba", "a hybrid (Mamba) model: its last chunk carries the request's state slot, written "
                        "(and landing) after the KV", label="with-mamba-state", says="a hybrid model's state"),
        ), over={"failure": ("aux-write-fails", "state-write-fails")}, reads=("state_indices", "maybe_send_extra")),
        space.Dimension("mla", (
            space.Value("no", "a model whose KV every prefill rank writes its share of", label=""),
            space.Value("dummy-rank", "an MLA model over two prefill TP ranks and one decode rank: decode reads prefill "
                        "rank 0's KV and gives rank 1 a dummy destination (the tree's is_dummy: no pages, no status to "
                        "decode), whose worker takes its chunk first and writes nothing; rank 0's write fails",
                        label="mla-dummy-rank", says="an MLA model's dummy prefill rank"),
        ), over={"failure": ("write-fails",)}, reads=("is_dummy",)),
        space.Dimension("prefill_cp", (
            space.Value("no", "no prefill context parallelism", label=""),
            space.Value("two-ranks", "two prefill context-parallel ranks of a hybrid (Mamba) model, decode pulling from "
                        "both (its all-CP-ranks option): both write their KV; only CP rank 0 sends the replicated state "
                        "(the tree skips rank 1's: skip_state); rank 0's aux write fails", label="prefill-cp",
                        says="two prefill context-parallel ranks", implies={"state": "mamba"}),
        ), over={"failure": ("aux-write-fails",)}, reads=("skip_state", "attn_cp_rank", "attn_cp_size")),
        space.Dimension("prefill_ranks", (
            space.Value("one", "one prefill rank, whose write fails", label=""),
            space.Value("two", "two prefill ranks: rank 0's write fails while rank 1's write is in flight",
                        label="other-rank-fails-while-writing", says="another prefill rank's write still in flight"),
        ), over={"failure": ("write-fails",)}, reads=("bootstrap_infos", "required_acks")),
        space.Dimension("failed_write", (
            space.Value("stops", "the failed write stopped: nothing of it lands later", label=""),
            space.Value("keeps-writing", "the engine reported it failed while it still runs (its wall-clock timeout); it "
                        "lands after decode learned of the failure", label="failed-write-keeps-landing",
                        says="the failed write still landing"),
        ), over={"failure": ("write-fails", "aborted-then-write-fails", "aux-write-fails", "state-write-fails")},
           reads=("_poison_unsettled_send", "_deferred_ack_poisoned_rooms")),
        DEFERRED_CONFIG,
    ),
    # switched off, decode's own failed send must still be handled and its pages freed at once: trees that let it
    # escape (0.5.10 to 0.5.16 in the release line) leak them in every configuration, so it stays a bug case there
    bug=(*on({"prefill_ranks": ("two",)}, {"failed_write": ("keeps-writing",)}, {"failure": ("metadata-send-fails",)}),
         {**OFF, "failure": ("metadata-send-fails",)}),
    duties_by=(*on_rules(
        space.Rule({"prefill_ranks": ("two",)}, (*HELD, "lifetime-not-held-forever")),
        space.Rule({"failed_write": ("keeps-writing",)}, (*HELD, "lifetime-not-held-forever", "lifetime-no-ack-while-writing")),
        space.Rule({"failure": ("write-fails",), "prefill_ranks": ("one",), "failed_write": ("stops",)}, GUARD_ABORT),
        # decode's own failure: the rank that took the destinations is told, drains, acknowledges; no timeout needed
        space.Rule({"failure": ("metadata-send-fails",)},
                   ("lifetime-failure-handled", *HELD, *ACKED, "lifetime-not-held-forever")),
    ),
        space.Rule({**OFF, "failure": ("write-fails",)}, OFF_DUTIES),
        space.Rule({**OFF, "failure": ("metadata-send-fails",)}, ("lifetime-failure-handled", *OFF_DUTIES)),
        space.Rule({**OFF, "failure": ("aborted-then-write-fails",)}, OFF_DUTIES),
        space.Rule({"failure": ("bootstrap-fails",)}, ("lifetime-released-at-once", *GUARD_ABORT)),
        # nothing of a failed write lands later, in any configuration: the pages may go back at once or be held,
        # never leaked or reused under a write; a repeated abort frees them once
        space.Rule({"failure": ("aux-write-fails", "state-write-fails")}, (*GUARD_ABORT, "lifetime-no-foreign-write")),
        space.Rule({"failure": ("aborted-then-write-fails",), "failed_write": ("stops",)},
                   (*GUARD_ABORT, "lifetime-no-foreign-write")),
        space.Rule({"chunks": ("two",)}, ("lifetime-no-foreign-write",)),
        space.Rule({"failure": ("aborted-before-init",)}, ("lifetime-uninitialised-abort-quiet",)),
        space.Rule({"mla": ("dummy-rank",)}, ("lifetime-no-foreign-write",))),
    aliases={**{suffix.removeprefix("-"): f"failure-nothing-else-in-flight{suffix}" for suffix in SUFFIXES},
             **{f"other-rank-fails-while-writing-failed-write-keeps-landing{suffix}":
                f"other-rank-fails-failed-write-keeps-landing{suffix}" for suffix in SUFFIXES}},
    site=site,
)

# The code the fix relies on, in the release that first carries it (pins.toml), by qualified name (whole
# functions, or the slice of a long one naming these): what ``diffprobe mutate`` changes, one statement at a
# time, on the lines the cases run.
FIX_CODE: dict[str, tuple[str, ...]] = {
    f"{DECODE}.DecodeTransferQueue.pop_transferred": ("ensure_abort_notified",),
    # the notification itself; the guards around it (a receiver never initialised, or one already notified)
    # are the decode abort's, which calls it too: no failure decode did not initiate reaches them
    f"{CONN}.CommonKVReceiver.ensure_abort_notified": ("_send_abort_notification",),
    f"{MOONCAKE}.MooncakeKVManager._poison_unsettled_send": (),
    f"{CONN}.CommonKVManager.poison_deferred_ack_room": (),
    f"{CONN}.CommonKVManager._maybe_ack_drained_abort": ("_deferred_ack_poisoned_rooms",),
    f"{MOONCAKE}.MooncakeKVManager.transfer_worker": ("_poison_unsettled_send", "poison_deferred_ack_room"),
}

# Mutants no case can tell from the tree, each with why, keyed by (function, operator, statement before):
# ``EQUIVALENT`` ones behave the same on every input; ``EXPLAINED`` ones do not, and stay survivors.
EQUIVALENT: dict[tuple[str, str, str], str] = {
    ("MooncakeKVManager._poison_unsettled_send", "true", "self.enable_deferred_decode_kv_release"):
        "a manager without the deferred release never registers an acknowledgement target "
        "(register_deferred_ack_target is called only by the deferred ABORT handler), so a poisoned room has no "
        "acknowledgement to withhold, and a new lifecycle of the room clears the mark (update_status)",
    ("CommonKVManager.poison_deferred_ack_room", "delete", "self._deferred_ack_targets.pop(room, None)"):
        "a target left beside the poison is dropped, unsent, by _maybe_ack_drained_abort's poisoned check at the drain, "
        "and a new lifecycle of the room pops it (update_status)",
    ("CommonKVManager._maybe_ack_drained_abort", "delete", "if room in self._deferred_ack_poisoned_rooms:"):
        "poison_deferred_ack_room pops the room's targets and register_deferred_ack_target refuses a poisoned room, so "
        "a poisoned room has no target to send to at the drain: the check guards only a registration racing the "
        "poison from another thread",
    ("CommonKVManager._maybe_ack_drained_abort", "false", "room in self._deferred_ack_poisoned_rooms"):
        "as its deletion: a poisoned room has no target left to send to",
    ("MooncakeKVManager.transfer_worker", "delete", "break"):
        "after conclude_failure the room carries a failure record, so conclude_transfer turns the loop's later "
        "Success into Failed; the failed destination's further aux write lands in its own metadata row, held "
        "(poisoned) with its pages",
}
_WORKER_DIES = ("the transfer worker's own death (an exception out of its loop; this prefill is then dead): no case "
                "kills the worker, and its poison there withholds an acknowledgement only while the room's count says "
                "nothing of it is in flight (an exception before the chunk is counted, where only the tracing context's "
                "rebuild runs, or after it settled): an engine that raises mid-write leaves the chunk counted, so no "
                "acknowledgement fires with or without the poison, and an acknowledgement the poison withholds would "
                "have been true (the pages released on it, not at the timeout: no duty is broken either way)")
EXPLAINED: dict[tuple[str, str, str], str] = {
    **{("MooncakeKVManager.transfer_worker", operator, "self.poison_deferred_ack_room(kv_chunk.room)"): _WORKER_DIES
       for operator in ("delete", "return")},
}
