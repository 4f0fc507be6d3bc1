"""The duty table of #41023 (0.5.22): deferred release by default.

Decode holds an aborted request's pages until prefill's writes stopped (or the stated timeout passed), in its
default configuration.

Rows are duties (id, what must hold, the check over a case's recorded effects); the case space (``SPACE``)
says which cases check which duties; ``FIX_CODE`` names the code the fix changed (what ``mutate`` mutates).
Standard library only: the host judges with it too.
"""

from __future__ import annotations

from . import space
from .duties_lifetime import (ACKS, DEFERRED_CONFIG, GUARD_ABORT, HELD, IN_FLIGHT, OFF, OFF_DUTIES, ON, ON_ACK_IDLE, CONN,
                              DECODE, SUFFIXES, committed, freed_once, no_early_release, not_held_forever, on, on_rules,
                              site, timeout_recorded)
from .effects import Duty, Effects


def no_foreign_write(e: Effects) -> bool:
    return not any(rank["foreign_writes"] for rank in e["decode"])


DUTIES: tuple[Duty, ...] = (
    Duty("lifetime-no-early-release",
         "no page went back to the allocator while a prefill write could still land in it, except at the "
         "tree's stated release timeout (recorded as such)",
         no_early_release),
    Duty("lifetime-no-foreign-write", "no write landed in a page another request owned", no_foreign_write),
    Duty("lifetime-freed-once",
         "each page and the metadata row of the aborted request went back exactly once (its KV not kept in the "
         "prefix cache), and nothing is held at the end",
         freed_once),
    Duty("lifetime-timeout-recorded",
         "pages went back at the release timeout exactly when the tree logged a release by timeout (a timeout "
         "release is recorded as such, a release on the acknowledgements is not)",
         timeout_recorded),
    Duty("lifetime-not-held-forever",
         "the pages went back by the end (by acknowledgement or the stated timeout), nothing held forever (a "
         "guard)",
         not_held_forever),
    Duty("lifetime-committed",
         "a healthy transfer was committed at once and handed to the scheduler to decode: its pages held, read only "
         "where its own write landed, its metadata row handed back once (a guard)",
         committed),
)

SPACE = space.Space(
    probe="lifetime-default",
    dimensions=(
        space.Dimension("failure", (
            space.Value("decode-abort", "a client abort reaches decode's scheduler (its abort_request)", label="abort",
                        says="a client abort at decode"),
            space.Value("none", "a healthy transfer", label="healthy-transfer", says="a healthy transfer, committed to decode"),
            space.Value("bootstrap-fails", "decode never learned its prefill ranks (the tree's send_metadata with no "
                        "bootstrap infos fails the room): no prefill rank knows its pages, so decode notifies nobody",
                        label="bootstrap-fails", says="decode never learning its prefill ranks (nobody to notify)"),
            space.Value("peer-bootstrap-fails", "two decode ranks hold the room; rank 1 never learned its prefill ranks "
                        "(notifies nobody) while rank 0 published to them: their polls and holds are all-reduced over "
                        "both ranks as in the server, so rank 1 holds for its peer with nothing of its own to await",
                        label="peer-bootstrap-fails",
                        says="one of two decode ranks never learning its prefill ranks (it holds only for its peer)"),
            space.Value("hicache-restore-fails", "decode's HiCache holds the request's prompt prefix on its host tier "
                        "(the tree's own cache demoted it there), so decode reserved pages for the rest only, which "
                        "prefill writes; with that write in flight decode's event loop runs the tree's restore, whose "
                        "load-back of the prefix comes up short (the running batch holds every other device page): "
                        "the tree marks the restore failed and fails the request, a failure prefill did not see",
                        label="hicache-restore-fails",
                        says="decode's HiCache load-back of the cached prefix coming up short while prefill writes"),
        ), core=True, reads=("abort_notified", "all_reduce_flags", "hicache_restore_status", "prefix_match",
                             "enable_decode_hicache")),
        space.Dimension(IN_FLIGHT.name, IN_FLIGHT.values, over={"failure": ("decode-abort",)}, reads=IN_FLIGHT.reads),
        space.Dimension(ACKS.name, ACKS.values, over={"failure": ("decode-abort",)}, reads=ACKS.reads),
        space.Dimension("stale", (
            space.Value("no", "no acknowledgement of another request is on the wire", label=""),
            space.Value("yes", "the room's previous request was aborted and released at the timeout; its "
                        "acknowledgement, held back on the wire, arrives while this request's write is in flight",
                        label="stale-ack-of-previous-request",
                        says="the previous request's late acknowledgement (an older generation) arriving mid-transfer"),
        ), over={"failure": ("decode-abort",)}, reads=("generation",)),
        space.Dimension("publish", (
            space.Value("all", "decode's destinations reached every prefill rank", label=""),
            space.Value("partial", "two prefill ranks: the tree's send_metadata reached rank 0, its send to rank 1 "
                        "failed (a connection reset), then the client's abort reaches decode while rank 0 writes",
                        label="after-partial-publish",
                        says="after decode's metadata reached only one of two prefill ranks"),
        # switched off nothing is held, so nothing tells a partial publish apart: varied where the release is on
        ), over={"failure": ("decode-abort",), "config": ON}, reads=("init_time", "_deferred_abort_ack_tracker")),
        space.Dimension("neighbour", (
            space.Value("none", "no other request of the decode rank is held", label=""),
            space.Value("held", "another request on the same decode rank, in its own room, was aborted just before "
                        "this one started and its ABORT lost on the wire: decode holds its pages to the release "
                        "timeout, ahead of this request in the deferred releases", label="behind-held-request",
                        says="behind another request of the same decode rank held to the timeout"),
        # switched off nothing is held: varied where the release is on
        ), over={"failure": ("decode-abort",), "config": ON}, reads=("_deferred_releases", "still_held")),
        DEFERRED_CONFIG,
    ),
    # with nothing in flight the abort must still stop the request's later chunk (trees without an ABORT message
    # to prefill, 0.5.12 and earlier, let it write into pages decode already gave away): a bug case, not a guard
    # a stale acknowledgement is #41402's to refuse (lifetime-peers: an earlier generation releases 0.5.21's pages):
    # here a guard, driving the generation check of the room's acknowledgements both ways
    bug=on({"failure": ("decode-abort",), "in_flight": ("yes",), "acks": ("delivered",), "stale": ("no",)},
           {"in_flight": ("no",)}, {"failure": ("hicache-restore-fails",)}),
    duties_by=(*on_rules(
        space.Rule({"failure": ("decode-abort",), "in_flight": ("yes",), "acks": ("delivered",), "stale": ("no",)}, HELD),
        space.Rule({"acks": ("lost", "late")}, GUARD_ABORT),
        space.Rule({"stale": ("yes",)}, GUARD_ABORT),
        # the request's acknowledgements arrive while the neighbour is still held: its release must not wait for it
        space.Rule({"neighbour": ("held",)}, ("lifetime-released-on-ack",)),
        space.Rule({"in_flight": ("no",)}, ON_ACK_IDLE),
        # decode failed the request itself while prefill writes: its pages wait for that write to drain
        space.Rule({"failure": ("hicache-restore-fails",)}, (*HELD, "lifetime-not-held-forever")),
    ), space.Rule({**OFF, "failure": ("decode-abort", "hicache-restore-fails")}, OFF_DUTIES),
        space.Rule({"failure": ("none",)}, ("lifetime-committed",)),
        # nothing could write its pages: they go back at once, in every configuration (a guard)
        space.Rule({"failure": ("bootstrap-fails", "peer-bootstrap-fails")}, ("lifetime-released-at-once", *GUARD_ABORT))),
    aliases={f"{old}{suffix}": f"{new}{suffix}" for suffix in SUFFIXES for old, new in (
        ("abort-in-flight-acks-lost", "abort-acks-lost"), ("abort-in-flight-acks-late", "abort-acks-late"),
        ("healthy-transfer-in-flight", "healthy-transfer"), ("bootstrap-fails-in-flight", "bootstrap-fails"),
        ("peer-bootstrap-fails-in-flight", "peer-bootstrap-fails"),
        ("hicache-restore-fails-in-flight", "hicache-restore-fails"),
        ("abort-in-flight-stale-ack-of-previous-request", "abort-stale-ack-of-previous-request"),
        ("abort-in-flight-after-partial-publish", "abort-after-partial-publish"))},
    site=site,
)

# The code the fix relies on, in the release that first carries it (pins.toml), by qualified name (whole
# functions, or the slice of a long one naming these): what ``diffprobe mutate`` changes, one statement at a
# time, on the lines the cases run.
FIX_CODE: dict[str, tuple[str, ...]] = {
    f"{DECODE}.DecodeTransferQueue.pop_transferred": ("_defer_release", "deferred_indices"),
    f"{DECODE}.DecodeTransferQueue._defer_release": (),
    f"{DECODE}.DecodeTransferQueue.resolve_deferred_releases": ("is_abort_release_safe", "drained", "deadline", "still_held",
                                                            "to_release", "_do_release"),
    f"{DECODE}.DecodeTransferQueue._do_release": ("_release_request", "req_to_metadata_buffer_idx_allocator"),
    f"{CONN}.CommonKVManager.is_abort_release_safe": (),
    f"{CONN}.CommonKVManager.note_abort_ack": (),
    f"{CONN}.CommonKVManager.register_deferred_abort_room": (),
}

# Mutants no case can tell from the tree, each with why, keyed by (function, operator, statement before):
# ``EQUIVALENT`` ones behave the same on every input; ``EXPLAINED`` ones do not, and stay survivors.
_METRICS_LABEL = ("the only `drained` tested in the function is the label of the release's metrics observation "
                  "(`outcome = \"drained\" if drained else \"timeout\"`, handed to _observe_deferred_kv_release, which "
                  "records it only with metrics on): which pages go back, when, and what is logged are decided by the "
                  "other tests of `drained`, which are not this expression; no duty is about metrics (mutate leaves "
                  "telemetry alone, and conditions.REASONS explains metrics switches)")
EQUIVALENT: dict[tuple[str, str, str], str] = {
    **{("DecodeTransferQueue.resolve_deferred_releases", operator, "drained"): _METRICS_LABEL
       for operator in ("true", "false", "negate")},
}
_STALE = ("an acknowledgement of the room's earlier generation is then taken for this one's (the stale case releases "
          "early): refusing it is #41402's duty, which lifetime-peers checks; here the stale case is a guard, as 0.5.21 "
          "(where #41023 is in) has no generations")
_HOST = ("a host destination: no transfer backend of 0.5.21-0.5.23 supports host KV destinations (every "
         "supports_host_destination they define answers False: runner/judge/conditions.py's reason for these "
         "conditions, checked on each tree by backends_answer), so no request is ever host-staged and the test is "
         "false in every server these trees run, whatever enable_host_receive is")
EXPLAINED: dict[tuple[str, str, str], str] = {
    ("CommonKVManager.register_deferred_abort_room", "delete", "self._deferred_abort_generation += 1"): _STALE,
    ("CommonKVManager.note_abort_ack", "true", "state.generation == generation"): _STALE,
    ("DecodeTransferQueue._defer_release", "false", "self._is_host_destination(decode_req)"): _HOST,
    **{("DecodeTransferQueue._defer_release", operator, text): _HOST for operator in ("true", "false", "negate")
       for text in ("self.enable_host_receive and decode_req.host_staged", "self.enable_host_receive",
                    "decode_req.host_staged")},
}
