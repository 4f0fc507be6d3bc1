"""The duty table of #40645 (0.5.21): drain acknowledgements.

The drain acknowledgement survives the prefill scheduler's clear(), and an ABORT for a cleared room with a write
still outstanding is acknowledged after the drain.

Rows are duties (id, what must hold, the check over a case's recorded effects); the case space (``SPACE``)
says which cases check which duties; ``FIX_CODE`` names the code the fix changed (what ``mutate`` mutates).
Standard library only: the host judges with it too.
"""

from __future__ import annotations

from . import space
from .duties_lifetime import (ACKED, ACKS, DEFERRED_CONFIG, GUARD_ABORT, HELD, IN_FLIGHT, OFF, OFF_DUTIES, ON_ACK,
                              ON_ACK_IDLE, CONN, MOONCAKE, NIXL, SUFFIXES, aborted_after_clear, aborting, acked_after_drain,
                              frees, on, on_rules, released_before_timeout, site, subject, timeout_at)
from .effects import Duty, Effects, returned


def every_abort_acked(e: Effects) -> bool:
    return bool(aborting(e)) and acked_after_drain(e, aborting(e))


def late_abort_acked(e: Effects) -> bool:
    return bool(aborted_after_clear(e)) and acked_after_drain(e, aborted_after_clear(e))


def unarmed_abort_handled(e: Effects) -> bool:
    """Nothing escaped the tree's code, decode's ABORT reached prefill, whose scheduler concluded the failed sender,
    and nothing is held. An acknowledgement is no fault: decode armed nothing and ignores it."""
    return (returned(e) and any(m["kind"] == "ABORT" and m["fate"] == "delivered" for m in e["wire"])
            and any(s["step"] == "prefill concludes" and s.get("rid") == subject(e) for s in e["steps"])
            and not any(rank["held"] for rank in e["decode"]))


def held_to_timeout(e: Effects) -> bool:
    """Each decode rank gave the subject's pages back, and only once its release timeout had passed."""
    return all(frees(rank, subject(e)) and all(f["t"] >= timeout_at(e) for f in frees(rank, subject(e)))
               for rank in e["decode"])


# Where the request's last chunk is when the abort reaches prefill, beside in flight or not sent: the transfer worker
# takes a chunk of an aborted (or already cleared) room and skips it, acknowledging what it never wrote; an ABORT
# for a room that already succeeded is acknowledged at once (nothing can write any more)
CHUNK = (
    space.Value("queued", "the request's last chunk waits in prefill's transfer queue (add_transfer_request ran), not "
                "yet taken by the worker, when the abort arrives; the worker takes it after", label="abort-with-chunk-queued",
                says="with prefill's last chunk queued, not yet taken by its transfer worker"),
    space.Value("taken", "the abort arrives as prefill's transfer worker, having taken the last chunk, first tests its "
                "room in request_status (trees that count a chunk outstanding at dequeue have counted it by then)",
                label="abort-as-chunk-taken", says="as prefill's transfer worker takes the last chunk and checks its room"),
    space.Value("landed", "prefill's worker wrote the last chunk and marked the room Success before the abort arrives; "
                "the success status is still on its way to decode", label="abort-after-transfer-succeeded",
                says="after prefill's write landed and the room succeeded"),
)


DUTIES: tuple[Duty, ...] = (
    Duty("lifetime-acked-after-drain",
         "every aborting decode rank got exactly one acknowledgement from each prefill rank, sent after its "
         "writes stopped",
         every_abort_acked),
    Duty("lifetime-late-abort-acked",
         "a decode rank whose ABORT reached prefill after the room was cleared, a write still outstanding, was "
         "acknowledged exactly once after the drain",
         late_abort_acked),
    Duty("lifetime-unarmed-abort-handled",
         "the ABORT of a decode that never published its destinations (unarmed: it waits for no acknowledgement) "
         "failed the room at prefill, whose scheduler concluded the sender, and nothing escaped the tree's code (its "
         "bootstrap thread goes on); decode holds nothing", unarmed_abort_handled),
    Duty("lifetime-held-to-timeout-prefill-off",
         "with the deferred release switched off at prefill and on at decode, decode released the pages at its "
         "release timeout, not before: a prefill switched off promises no drain, so nothing it sends releases them",
         held_to_timeout),
    Duty("lifetime-released-on-ack",
         "with every acknowledgement delivered, the pages went back before the release timeout, not by it",
         released_before_timeout),
)

def same(patterns: tuple) -> tuple:
    """``patterns`` (bug patterns or rules) where prefill's switch is decode's: a fleet part-way through switching
    it has duties of its own."""
    return tuple(space.Rule({**p.when, "prefill_config": ("same",)}, p.duties) if isinstance(p, space.Rule)
                 else {**p, "prefill_config": ("same",)} for p in patterns)


SPACE = space.Space(
    probe="lifetime-drain",
    dimensions=(
        space.Dimension(IN_FLIGHT.name, (*IN_FLIGHT.values, *CHUNK), core=True, reads=(*IN_FLIGHT.reads, "request_status")),
        space.Dimension("clears", (
            space.Value("no", "the prefill scheduler concludes the failed sender after the write drained", label=""),
            space.Value("yes", "the prefill scheduler polls Failed and concludes the sender (clearing the room) while the "
                        "write is still in flight", label="prefill-clears-before-drain",
                        says="the prefill scheduler clearing the room before the write drains"),
            space.Value("late", "the prefill scheduler, busy, concludes the sender only after decode's release timeout",
                        label="prefill-concludes-late", says="the prefill scheduler concluding only after the timeout"),
        ), core=True, reads=("_deferred_ack_targets", "transfer_infos", "request_status")),
        space.Dimension("decode_ranks", (
            space.Value("one", "one decode rank holds the room", label=""),
            space.Value("two", "two decode ranks hold the room (prefill TP < decode TP); the second's ABORT reaches "
                        "prefill after the room was cleared", label="second-rank", says="a second decode rank's ABORT "
                        "arriving after the clear"),
        ), over={"in_flight": ("yes",), "clears": ("yes",)}, reads=("room_active",)),
        space.Dimension(ACKS.name, ACKS.values, over={"in_flight": ("yes",), "clears": ("no",)}, reads=ACKS.reads),
        space.Dimension("bootstrap", (
            space.Value("handed", "the room's destinations are handed to the prefill rank as its bootstrap thread "
                        "records them", label=""),
            space.Value("published", "decode's receivers send their destinations (the tree's send_metadata) and "
                        "each prefill rank's bootstrap thread takes them in, the ABORT later reaching the same loop",
                        label="destinations-over-the-wire", says="decode's destinations reaching prefill over the wire"),
        ), over={"in_flight": ("yes",), "clears": ("no",)}, reads=("room",)),
        # each backend's prefill manager has its own transfer worker and ABORT handling (its half of the fix)
        space.Dimension("backend", (
            space.Value("mooncake", "Mooncake's KV managers, sender and receiver (the engine's writes)", label=""),
            space.Value("nixl", "NIXL's KV managers, sender and receiver, writing through NIXL agent transfers (one "
                        "prefill and one decode rank, an MLA model's KV)", says="over NIXL"),
        ), reads=("start_prefill_thread", "_handle_abort_notification")),
        # how the write in flight at the abort ends: NIXL's worker acknowledges after a failed write only once every
        # handle settled (its failure path), and never where it cannot tell a write ended
        space.Dimension("write", (
            space.Value("lands", "the write in flight at the abort lands", label=""),
            space.Value("fails", "the write in flight at the abort then fails (NIXL reports ERR for the KV write; "
                        "every handle of the batch settled)", label="write-fails", says="the write then failing"),
            space.Value("unreadable", "NIXL cannot read the state of the write in flight at the abort (its "
                        "check_xfer_state raises): the worker cannot tell the write ended, and it lands later",
                        label="write-state-unreadable", says="the write's state then unreadable, the write landing later"),
        ), over={"in_flight": ("yes",), "clears": ("no", "late"), "backend": ("nixl",)},
            reads=("check_xfer_state", "notify")),
        # an ABORT from a decode that never published its destinations carries no generation: it waits for no
        # acknowledgement, and prefill's handler has no target to register (NIXL's ack_target is None)
        space.Dimension("destinations", (
            space.Value("published", "decode published the request's destinations before the abort", label=""),
            space.Value("unpublished", "the client aborts while the request waits in decode's preallocation queue for "
                        "pages: its receiver learned its prefill ranks but never published its destinations (no "
                        "init), so its ABORT is unarmed; prefill's sender is still bootstrapping",
                        label="destinations-unpublished", says="before decode published its destinations"),
        ), over={"in_flight": ("no",), "clears": ("no",), "backend": ("nixl",)}, reads=("init_time", "ack_target")),
        # a fleet part-way through switching the deferred release on: decode's on, prefill's still off
        space.Dimension("prefill_config", (
            space.Value("same", "prefill's deferred release set as decode's", label=""),
            space.Value("switched-off", "decode's deferred release switched on, prefill's switched off "
                        "(SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE=false in prefill's environment alone)",
                        label="decode-only", says="with the deferred release switched on at decode alone"),
        ), over={"config": ("with-deferred-release",), "in_flight": ("yes", "no"), "clears": ("no",),
                 "backend": ("mooncake", "nixl")}, reads=("enable_deferred_decode_kv_release",)),
        DEFERRED_CONFIG,
    ),
    unreachable=(space.Unreachable("with nothing sent, prefill has no write to clear the room under",
                                   {"in_flight": ("no",), "clears": ("yes",)}),
                 space.Unreachable("a room whose transfer succeeded is never marked Failed (an ABORT for it finds it "
                                   "concluded): the scheduler concludes its sender as a success, never clearing it as "
                                   "a failed one", {"in_flight": ("landed",), "clears": ("yes", "late")})),
    # switched off, the abort must still stop a chunk not yet written (decode gives its pages back at once): trees
    # without an ABORT message to prefill (0.5.12 and earlier) write it in every configuration, a bug case there too
    bug=(*same(on({"in_flight": ("yes",), "acks": ("delivered",), "clears": ("no", "yes")},
                  {"in_flight": ("no", "queued", "taken", "landed"), "destinations": ("published",)},
                  {"write": ("fails", "unreadable")})),
         {**OFF, "in_flight": ("no", "queued", "taken"), "destinations": ("published",)},
         # a tree without the deferred release gives the pages back at the abort, whatever either side sets
         {"prefill_config": ("switched-off",)}),
    duties_by=(*same(on_rules(
        space.Rule({"in_flight": ("yes",), "acks": ("delivered",), "decode_ranks": ("one",), "clears": ("no", "yes"),
                    "write": ("lands", "fails")}, (*ACKED, *HELD)),
        # a write whose end the worker cannot tell is never acknowledged: decode holds the pages to its timeout
        space.Rule({"write": ("unreadable",)}, (*HELD, "lifetime-not-held-forever", "lifetime-no-ack-while-writing")),
        space.Rule({"decode_ranks": ("two",)}, ("lifetime-late-abort-acked", *HELD)),
        space.Rule({"acks": ("lost", "late")}, GUARD_ABORT),
        space.Rule({"in_flight": ("no", "queued", "taken", "landed"), "destinations": ("published",)}, ON_ACK_IDLE),
        space.Rule({"clears": ("late",), "write": ("lands", "fails")}, ON_ACK),
    )), space.Rule({"prefill_config": ("switched-off",)}, ("lifetime-held-to-timeout-prefill-off", *HELD, *GUARD_ABORT)),
        space.Rule({**OFF, "destinations": ("published",)}, OFF_DUTIES),
        space.Rule({**OFF, "in_flight": ("no", "queued", "taken")}, ("lifetime-no-foreign-write",)),
        # in every configuration: decode reserved nothing and armed nothing
        space.Rule({"destinations": ("unpublished",)}, ("lifetime-unarmed-abort-handled", "lifetime-no-foreign-write"))),
    aliases={f"{old}{backend}{suffix}": f"{new}{backend}{suffix}" for suffix in SUFFIXES for backend in ("", "-nixl")
             for old, new in (
        ("in-flight", "abort-in-flight"), ("in-flight-prefill-clears-before-drain", "prefill-clears-before-drain"),
        ("in-flight-prefill-clears-before-drain-second-rank", "abort-after-room-cleared"),
        ("in-flight-acks-lost", "acks-lost"), ("in-flight-acks-late", "acks-late"),
        ("nothing-in-flight", "abort-nothing-in-flight"),
        ("in-flight-prefill-concludes-late", "prefill-concludes-late"),
        ("nothing-in-flight-prefill-concludes-late", "nothing-in-flight-prefill-concludes-late"),
        ("in-flight-destinations-over-the-wire", "abort-in-flight-destinations-over-the-wire"))},
    site=site,
)

# The code the fix relies on, in the release that first carries it (pins.toml), by qualified name (whole
# functions, or the slice of a long one naming these): what ``diffprobe mutate`` changes, one statement at a
# time, on the lines the cases run.
FIX_CODE: dict[str, tuple[str, ...]] = {
    f"{CONN}.CommonKVSender.clear": ("_deferred_ack_targets", "_staging_outstanding", "_maybe_ack_drained_abort"),
    f"{CONN}.CommonKVManager._maybe_ack_drained_abort": ("_staging_outstanding", "_deferred_ack_targets",
                                                       "_send_abort_ack", "target"),
    f"{CONN}.CommonKVManager.register_deferred_ack_target": ("_deferred_ack_targets",),
    f"{MOONCAKE}.MooncakeKVManager.transfer_worker": ("_maybe_ack_drained_abort",),
    f"{MOONCAKE}.MooncakeKVManager.start_prefill_thread": ("room_active", "register_deferred_ack_target",
                                                     "_maybe_ack_drained_abort", "_send_abort_ack"),
    # NIXL's half (the lifetime-drain cases with backend nixl): its worker's drains, and its ABORT handling (inline
    # before 0.5.22, in _handle_deferred_abort_ack from 0.5.22)
    f"{NIXL}.NixlKVManager.transfer_worker": ("_maybe_ack_drained_abort",),
    f"{NIXL}.NixlKVManager._handle_abort_notification": ("register_deferred_ack_target", "_maybe_ack_drained_abort",
                                                        "_send_abort_ack", "_handle_deferred_abort_ack"),
    f"{NIXL}.NixlKVManager._handle_deferred_abort_ack": (),
}

# Mutants no case can tell from the tree, each with why, keyed by (function, operator, statement before):
# ``EQUIVALENT`` ones behave the same on every input; ``EXPLAINED`` ones do not, and stay survivors.
EQUIVALENT: dict[tuple[str, str, str], str] = {
    ("CommonKVSender.clear", "delete", "self.kv_mgr._maybe_ack_drained_abort(self.bootstrap_room)"):
        "every path that brings a room's outstanding writes to zero (the worker after a write, and its skip of a "
        "failed room's chunk) tries the acknowledgement, and the ABORT handler tries it right after registering: "
        "clear() finds the target gone or a write still outstanding in every interleaving of those (0.5.21)",
    ("CommonKVSender.clear", "return", "self.kv_mgr._maybe_ack_drained_abort(self.bootstrap_room)"):
        "the same redundant try as its deletion: returning before it only skips it",
    ("MooncakeKVManager.start_prefill_thread", "true",
     "room_active or self._staging_outstanding.get(room_to_be_aborted, 0) > 0"):
        "an inactive room with nothing outstanding is then registered and acknowledged by the handler's own immediate "
        "try, as the else branch acknowledges it; marking a cleared room Failed is a no-op (update_status refuses "
        "to resurrect it)",
    ("MooncakeKVManager.start_prefill_thread", "true", "room_active"):
        "the same as above: an inactive room is registered and acknowledged at once; a cleared room is not resurrected",
    ("MooncakeKVManager.start_prefill_thread", "true", "self._staging_outstanding.get(room_to_be_aborted, 0) > 0"):
        "the same as above, for an inactive room with nothing outstanding",
    # the poisoned branch #41404 added (0.5.22) inside this fix's function, which #41404's probe drives; its table
    # declares the whole branch's removal equivalent, so each part of it is too
    **{("CommonKVManager._maybe_ack_drained_abort", operator, "self._deferred_ack_targets.pop(room, None)"):
       "a poisoned room has no target to pop: poison_deferred_ack_room popped them and register_deferred_ack_target "
       "refuses a poisoned room (only a registration racing the poison from another thread leaves one, which is then "
       "never sent: this branch returns at every later drain, and a new lifecycle of the room pops it)"
       for operator in ("delete", "return")},
    # the only `return` of the function's slice: the poisoned branch's
    ("CommonKVManager._maybe_ack_drained_abort", "delete", "return"):
        "falling through, the drain pops the poisoned room's targets again, the line before having popped them, and "
        "sends to none: the same as returning",
}
# NIXL's half (0.5.22 on): the worker's skip of a cleared room's chunk
EXPLAINED: dict[tuple[str, str, str], str] = {
    ("NixlKVManager.transfer_worker", "delete", "self._maybe_ack_drained_abort(room)"):
        "one of the worker's tries goes untold: its skip of a chunk whose room was cleared acknowledges something only "
        "for a chunk counted before the clear, which only staging's re-enqueue leaves (staging is off by default and no "
        "case builds it; otherwise a room's chunk is counted after this test, and the ABORT handler's immediate try or "
        "the drain of the chunk before has acknowledged)",
    ("NixlKVManager.transfer_worker", "return", "self._maybe_ack_drained_abort(room)"):
        "as its deletion; returning there also ends the worker thread (no later chunk of its queue is written), which "
        "no case can see: each has one request, and the scene runs the worker body afresh at each step",
    # 0.5.21's clear(): the branch for a manager with acknowledgement targets but no outstanding counts
    **{("CommonKVSender.clear", operator, "self.kv_mgr._deferred_ack_targets.pop(self.bootstrap_room, None)"):
       "runs only on a KV manager without _staging_outstanding, of this tree's the Mori backend's alone (Mooncake, "
       "Ascend and NIXL set it in PREFILL mode), and mori/conn.py imports the ROCm `mori` library, which no CPU "
       "environment can build: no probe can make a Mori sender (runner/judge/conditions.py explains the condition so)"
       for operator in ("delete", "return")},
}
