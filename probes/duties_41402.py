"""The duty table of #41402 (0.5.22): every decode peer.

An acknowledgement per aborting decode endpoint, for its own generation of the room (its cases check #41023's
and #40645's duties on more peers).

Rows are duties (id, what must hold, the check over a case's recorded effects); the case space (``SPACE``)
says which cases check which duties; ``FIX_CODE`` names the code the fix changed (what ``mutate`` mutates).
Standard library only: the host judges with it too.
"""

from __future__ import annotations

from . import space
from .duties_lifetime import (ACKED, ACKS, DEFERRED_CONFIG, GUARD_ABORT, HELD, OFF, OFF_DUTIES, CONN, MOONCAKE, SUFFIXES,
                              on, on_rules, site)
from .effects import Duty


DUTIES: tuple[Duty, ...] = ()

SPACE = space.Space(
    probe="lifetime-peers",
    dimensions=(
        space.Dimension("peers", (
            space.Value("one", "one decode rank paired with one prefill rank", label="one-rank"),
            space.Value("two-decode", "two decode ranks hold the room (prefill TP < decode TP), each sending its own ABORT",
                        label="two-decode-ranks-abort", says="two decode ranks aborting one room"),
            space.Value("two-prefill", "one decode rank paired with two prefill ranks, each of which must acknowledge",
                        label="two-prefill-ranks-abort", says="one decode rank paired with two prefill ranks"),
        ), core=True, reads=("_deferred_ack_targets", "_deferred_ack_fanout_snapshots", "required_acks")),
        space.Dimension("clears", (
            space.Value("no", "both ABORTs reach prefill while the room is active", label=""),
            space.Value("yes", "prefill clears the room between the two ABORTs", label="room-cleared-between",
                        says="prefill clearing the room between their ABORTs"),
        ), over={"peers": ("two-decode",)}, reads=("transfer_infos", "request_status")),
        space.Dimension("acks", (ACKS.values[0], ACKS.values[2], space.Value(
            "reset", "the acknowledgement's send fails at prefill (a connection reset): it never leaves",
            label="ack-send-fails", says="the acknowledgement's send failing at prefill")),
            over={"peers": ("one",)}, reads=("note_abort_ack", "_send_abort_ack")),
        space.Dimension("stale", (
            space.Value("no", "no acknowledgement of another request is on the wire", label=""),
            space.Value("yes", "the room's previous request was aborted; its acknowledgement, held back on the wire, "
                        "arrives while this request's write is in flight", label="stale-ack-of-previous-request",
                        says="the previous request's late acknowledgement arriving mid-transfer"),
        ), over={"peers": ("one",)}, reads=("generation",)),
        DEFERRED_CONFIG,
    ),
    bug=on({"acks": ("delivered",)}),
    duties_by=(*on_rules(
        space.Rule({"stale": ("no",), "acks": ("delivered",)}, (*ACKED, *HELD)),
        space.Rule({"stale": ("yes",)}, HELD),
        space.Rule({"acks": ("late", "reset")}, GUARD_ABORT),
    ), space.Rule(OFF, OFF_DUTIES)),
    aliases={f"{old}{suffix}": f"{new}{suffix}" for suffix in SUFFIXES for old, new in (
        ("one-rank", "abort-in-flight"), ("one-rank-stale-ack-of-previous-request", "stale-ack-of-previous-request"),
        ("two-decode-ranks-abort-room-cleared-between", "two-decode-ranks-room-cleared-between"))},
    site=site,
)

# The code the fix relies on, in the release that first carries it (pins.toml), by qualified name (whole
# functions, or the slice of a long one naming these): what ``diffprobe mutate`` changes, one statement at a
# time, on the lines the cases run.
FIX_CODE: dict[str, tuple[str, ...]] = {
    f"{CONN}.CommonKVManager.register_deferred_ack_target": ("targets",),
    f"{CONN}.CommonKVManager._maybe_ack_drained_abort": ("_send_abort_acks",),
    f"{CONN}.CommonKVManager._send_abort_acks": (),
    f"{CONN}.CommonKVManager._send_abort_ack": (),
    f"{CONN}.CommonKVManager.note_abort_ack": (),
    f"{CONN}.CommonKVManager.register_deferred_abort_room": (),
    f"{CONN}.CommonKVManager.handle_abort_ack_message": ("note_abort_ack", "generation"),
    f"{CONN}.AbortNotification.deferred_ack_target": ("AckTarget",),
    f"{MOONCAKE}.MooncakeKVManager._handle_deferred_abort_notification": ("register_deferred_ack_target",),
}

# Mutants no case can tell from the tree, each with why, keyed by (function, operator, statement before):
# ``EQUIVALENT`` ones behave the same on every input; ``EXPLAINED`` ones do not, and stay survivors.
EQUIVALENT: dict[tuple[str, str, str], str] = {
    ("CommonKVManager.handle_abort_ack_message", "delete", "if ack.generation is None:"):
        "a generation-less acknowledgement passed on is compared with the room's generation, an int, and never "
        "matches: note_abort_ack records it no more than the early return does",
    ("CommonKVManager.handle_abort_ack_message", "false", "ack.generation is None"):
        "as its deletion: None never matches the room's generation",
    ("CommonKVManager.handle_abort_ack_message", "delete", "return True"):
        "the acknowledgement is already recorded; the frames then go to parse_kv_status_message, which returns None "
        "for them (the tag is no room number) and the thread moves on",
    ("CommonKVManager.handle_abort_ack_message", "flip", "return True"):
        "as its deletion: the acknowledgement is recorded, and the status parser rejects its frames",
}
EXPLAINED: dict[tuple[str, str, str], str] = {

}
