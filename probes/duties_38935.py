"""The duty table of #38935 (0.5.21): the admission doors.

A request rejected at intake is retired at the PD admission doors, before bootstrap, queue, metadata buffer and
KV sender or receiver; valid and re-entering requests pass.

Rows are duties (id, what must hold, the check over a case's recorded effects); the case space (``SPACE``)
says which cases check which duties; ``FIX_CODE`` names the code the fix changed (what ``mutate`` mutates).
Standard library only: the host judges with it too.
"""

from __future__ import annotations

from . import space
from .effects import Duty, Effects, names_request, returned, rid, streamed_once_with, streams


REJECTION_STATUS = 400  # what ``set_finish_with_abort`` gives an over-long prompt


def _admitted(effects: Effects) -> bool:
    return any(rid(effects) in queue for queue in effects["queues"].values())


def door_untouched(effects: Effects) -> bool:
    """A request the door must leave alone: not retired, not released, not finished or streamed,
    and whatever it held (metadata buffer, KV, Mamba, retraction backup) still held."""
    before, after = effects["before"], effects["request"]
    kept = ("metadata_buffer_index", "holds_kv", "holds_mamba", "holds_backup")
    return (
        not effects["retired"]
        and not effects["tree_cache_calls"]
        and not streams(effects)
        and not after["finished"]
        and all(before.get(key) == after.get(key) for key in kept)
    )


def cache_released_aborted(effects: Effects) -> bool:
    """The tree cache heard exactly once that this request ended aborted, whichever helper of the
    tree's retire path made the call: ``finish(handle, ABORT)`` where the cache has outcomes (0.5.20
    on), or the HiCache storage ``release_aborted_request`` before that (0.5.2 on). A tree with no
    abort release at all is held to telling the cache nothing."""
    calls = effects["tree_cache_calls"]
    if not effects["cache_release"]:
        return not calls
    if len(calls) != 1:
        return False
    args = [*calls[0]["args"], *calls[0]["kwargs"].values()]
    if calls[0]["call"] == "finish":
        return names_request(args, rid(effects)) and any(str(arg).endswith(".ABORT") for arg in args)
    return calls[0]["call"] == "release_aborted_request" and names_request(args, rid(effects))


def _initialised_with_peer_rank(effects: Effects) -> bool:
    """Where the known peer runs data parallelism and follows bootstrap rooms (``effects["peer"]``), the
    receiver was initialised with the peer's rank for the request's room (room % dp_size), not another."""
    peer = effects.get("peer")
    if not peer:
        return True
    inits = [c for c in effects["kv_calls"] if c["call"] == "init"]
    rank = peer["room"] % peer["dp_size"]
    return all([*c["args"], *c["kwargs"].values()][:1] == [rank] for c in inits)


def not_queued(e: Effects) -> bool:
    return not _admitted(e)


def no_kv_endpoint(e: Effects) -> bool:
    return not e["kv_endpoints"] and not e["kv_calls"]


def no_bootstrap(e: Effects) -> bool:
    return not e["request"]["pending_bootstrap"] and not e["request"]["has_kv_sender"]


def no_metadata_buffer(e: Effects) -> bool:
    return e["request"]["metadata_buffer_index"] < 0


def retired_by_tree(e: Effects) -> bool:
    return e["retired"] == [rid(e)]


def finished_rejected(e: Effects) -> bool:
    return (e["request"]["finished"]
            and isinstance(e["request"]["finished_reason"], dict)
            and e["request"]["finished_reason"].get("status_code") == REJECTION_STATUS)


def streamed_once(e: Effects) -> bool:
    return streamed_once_with(e, REJECTION_STATUS)


def session_released(e: Effects) -> bool:
    return e["session_aborted"] == [rid(e)] and not e["request"]["has_session"]


def session_kept(e: Effects) -> bool:
    return not e["session_aborted"] and e["request"]["has_session"]


def receiver_initialised(e: Effects) -> bool:
    return ([c["call"] for c in e["kv_calls"]] == (["init"] if e.get("peer_lookups") else [])
            and not e["queues"].get("pending") and _initialised_with_peer_rank(e))


def awaits_peer(e: Effects) -> bool:
    return e["queues"].get("pending") == [rid(e)] and not [c for c in e["kv_calls"] if c["call"] == "init"]


def fake_initialised(e: Effects) -> bool:
    return ([c["call"] for c in e["kv_calls"]] == (["init"] if e["door_resolves_peer"] else [])
            and not e.get("peer_lookups") and not e["queues"].get("pending"))


def refused_over_capacity(e: Effects) -> bool:
    return not _admitted(e) and not e["kv_endpoints"] and e["request"]["finished"] and streamed_once_with(e, None)


def beam_retired(e: Effects) -> bool:
    return e["beam_retired"] == ([rid(e)] if e["beam_groups"] else [])


def queued_bootstrap(e: Effects) -> bool:
    return e["queues"].get("bootstrap") == [rid(e)]


def queued_prealloc(e: Effects) -> bool:
    return e["queues"].get("prealloc") == [rid(e)] and not e["queues"].get("retracted")


def queued_retracted(e: Effects) -> bool:
    return e["queues"].get("retracted") == [rid(e)] and not e["queues"].get("prealloc")


def endpoint_built(e: Effects) -> bool:
    return len(e["kv_endpoints"]) == 1


DUTIES: tuple[Duty, ...] = (
    Duty("door-not-queued", "the rejected request entered no queue", not_queued),
    Duty("door-no-kv-endpoint", "no KV sender or receiver was built for the rejected request", no_kv_endpoint),
    Duty("door-no-bootstrap", "no bootstrap was started for the rejected request", no_bootstrap),
    Duty("door-no-metadata-buffer", "the rejected request holds no metadata buffer", no_metadata_buffer),
    Duty("door-retired-by-tree",
         "the door retired the request once, through the tree's own Scheduler.retire_unadmitted_request",
         retired_by_tree),
    Duty("door-finished-rejected",
         f"the request ended finished with the rejection's abort (status {REJECTION_STATUS})",
         finished_rejected),
    Duty("door-streamed-once",
         f"the client was streamed the rejection (status {REJECTION_STATUS}) exactly once",
         streamed_once),
    Duty("door-session-released",
         "the streaming session of the rejected request was released (aborted once, detached)",
         session_released),
    Duty("door-session-kept",
         "a non-streaming session of the rejected request is left as it is (not aborted, still attached)",
         session_kept),
    Duty("door-receiver-initialised",
         "a door that looked the request's known prefill peer up initialised its receiver once (a door that "
         "leaves the peer to the handshake touches no receiver); never parked as pending (a guard)",
         receiver_initialised),
    Duty("door-awaits-peer",
         "a door that does not know the request's prefill peer yet parked it as pending with its receiver, "
         "uninitialised (a guard)",
         awaits_peer),
    Duty("door-fake-initialised",
         "a fake-transfer (warm-up) request's receiver was initialised once at a door that resolves prefill "
         "peers itself (0.5.x on; before, a receiver is initialised after the door), without a peer lookup, "
         "never parked as pending (a guard)",
         fake_initialised),
    Duty("door-refused-over-capacity",
         "a request longer than the KV pool was refused at the door: queued nowhere, no KV sender or receiver, "
         "finished with an abort streamed to its client once (a guard: the fix must not let it through)",
         refused_over_capacity),
    Duty("door-beam-retired",
         "the rejected request's beam group was retired with it (trees with beam groups; none before 0.5.19)",
         beam_retired),
    Duty("door-cache-released",
         "the tree cache was told once that the rejected request ended aborted (its cache-side state released; "
         "trees with an abort release of it, none before 0.5.2)",
         cache_released_aborted),
    Duty("door-returns", "the door returned: no failure escaped the tree's code", returned),
    Duty("door-queued-bootstrap",
         "the request reached the prefill bootstrap queue (a guard: the fix must not drop it)",
         queued_bootstrap),
    Duty("door-queued-prealloc",
         "the request reached the decode prealloc queue (a guard: the fix must not drop it)",
         queued_prealloc),
    Duty("door-queued-retracted",
         "the retracted request went back to the retracted queue, which owns its backup (a guard)",
         queued_retracted),
    Duty("door-endpoint-built",
         "an admitted request got its KV sender or receiver (a guard: admission still hands off)",
         endpoint_built),
    Duty("door-keeps-resources",
         "the request was not retired, finished or streamed, and kept what it held",
         door_untouched),
)

REJECTED = ("door-not-queued", "door-no-kv-endpoint", "door-no-bootstrap", "door-no-metadata-buffer",
            "door-retired-by-tree", "door-finished-rejected", "door-streamed-once", "door-beam-retired",
            "door-cache-released", "door-returns")
KEPT = ("door-keeps-resources", "door-returns")
AT_PREFILL = ("door-queued-bootstrap", "door-endpoint-built", *KEPT)
AT_DECODE = ("door-queued-prealloc", "door-endpoint-built", "door-receiver-initialised", *KEPT)
AWAITING_PEER = ("door-queued-prealloc", "door-endpoint-built", "door-awaits-peer", *KEPT)
FAKE_AT_DECODE = ("door-queued-prealloc", "door-endpoint-built", "door-fake-initialised", *KEPT)

# The case space: what the doors' code tells apart (probes/space.py). The scene builder (probes/admission.py)
# turns a point into real SGLang objects; a state an era's code cannot produce is not applicable there.

RE_ENTRIES = ("reentry", "preempted", "retracted", "rebootstrap")
HELD = ("metadata", "kv", "mamba", "backup")

SPACE = space.Space(
    probe="admission",
    dimensions=(
        space.Dimension("door", (
            space.Value("prefill", "PrefillBootstrapQueue.add, where the prefill scheduler's _add_request_to_queue "
                        "hands every request", label="prefill-door", says="at the prefill admission door"),
            space.Value("decode", "DecodePreallocQueue.add, where the decode scheduler hands every request",
                        label="decode-door", says="at the decode admission door"),
        ), core=True),
        space.Dimension("abort", (
            space.Value("valid", "a request that passed intake; no abort on it", says="valid request"),
            space.Value("rejected", "rejected at intake: the length check's set_finish_with_abort leaves the abort "
                        "pending in to_finish (finished() still False) and cuts the prompt to one token",
                        says="request rejected for length"),
            space.Value("marked", "an AbortReq reached it while it ran (abort method 3): to_finish pending, "
                        "finished() still False", label="", says="request aborted while it ran"),
        ), core=True, reads=("is_aborted", "is_unadmitted_reject", "to_finish", "finished_reason")),
        space.Dimension("entry", (
            space.Value("fresh", "its first admission, straight from intake", label=""),
            space.Value("reentry", "requeued through _add_request_to_queue while its queue still owns what it "
                        "holds (a preempted prefill requeue, a resumed request)", says="re-entering"),
            space.Value("preempted", "priority preemption or a pause requeues it through a bare "
                        "_add_request_to_queue: release_req freed what it held and reset_for_retract marked it "
                        "is_retracted", says="preempted and re-entering"),
            space.Value("retracted", "the door's own re-entry of a retracted request: add(is_retracted=True)",
                        says="retracted and re-entering (is_retracted)"),
            space.Value("rebootstrap", "a PD true-retraction whose prefix KV the prefill worker recomputes: "
                        "add(is_rebootstrap=True)", says="re-bootstrapping (is_rebootstrap)"),
        ), core=True, reads=("is_retracted", "is_rebootstrap")),
        space.Dimension("holds", (
            space.Value("nothing", "nothing of its own: a fresh request acquires at the door; a retraction "
                        "released the rest", label=""),
            space.Value("metadata", "a metadata buffer (a preempted prefill requeue whose KV is already released)",
                        says="holding a metadata buffer"),
            space.Value("kv", "its KV row (released by its queue, not by the door)", says="holding its KV"),
            space.Value("mamba", "Mamba state and no KV", says="holding Mamba state"),
            space.Value("backup", "a host copy of its KV taken at retraction (offload_kv_cache)",
                        says="holding a retraction backup"),
        ), over={"entry": RE_ENTRIES, "abort": ("marked",)},  # what keeps a request aborted while it ran out of retirement
            reads=("holds_kv", "holds_mamba", "metadata_buffer_index", "retraction_backup")),
        space.Dimension("slot", (
            space.Value("7", "metadata buffer 7: a slot the allocator handed out after others", label=""),
            space.Value("0", "metadata buffer 0: the allocator's first slot (an index tested against 0)",
                        label="slot-0", says="in metadata slot 0"),
        ), over={"holds": ("metadata",)}, reads=("metadata_buffer_index",)),
        space.Dimension("capacity", (
            space.Value("fits", "a prompt the door's KV pool can hold", label=""),
            space.Value("exceeds", "the server's context length exceeds its KV pool (the incident's first fault): "
                        "intake passes a prompt longer than the door's pool holds", label="over-capacity",
                        says="longer than the KV pool"),
        ), over={"entry": ("fresh",), "abort": ("valid",)},
            reads=("create_sender", "_check_if_req_exceed_kv_capacity")),
        space.Dimension("transfer", (
            space.Value("real", "a real transfer backend", label=""),
            space.Value("fake", "the server's own warm-up request: its bootstrap host is FAKE_BOOTSTRAP_HOST and the "
                        "fake transfer backend serves it", label="fake", says="on the fake transfer (warm-up)"),
        ), over={"entry": ("fresh",)}, reads=("_is_fake_transfer", "bootstrap_host")),
        space.Dimension("peer", (
            space.Value("known", "the decode worker already knows the request's prefill peer (its prefill_info_table "
                        "has it): the door's cache-hit fast path", label=""),
            space.Value("unknown", "the request's prefill peer is not in the decode worker's prefill_info_table yet: "
                        "the door leaves it to the handshake", label="new-peer", says="from a prefill peer not met yet"),
            space.Value("known-dp", "the known prefill peer runs data parallelism (dp_size 4) and follows bootstrap "
                        "rooms: the door resolves the rank room % dp_size (not 0)", label="dp-peer",
                        says="from a known prefill peer of dp_size 4"),
        ), over={"door": ("decode",), "entry": ("fresh",)},
            reads=("prefill_dp_rank", "_resolve_prefill_dp_rank", "prefill_info_table", "dp_size")),
        space.Dimension("priority", (
            space.Value("none", "no priority: priority scheduling off, or the client gave none", label=""),
            space.Value("set", "priority scheduling on and the client gave a priority (Req(priority=5), as the "
                        "tokenizer hands it over)", label="priority", says="with a priority"),
        ), over={"entry": ("fresh",), "abort": ("valid", "rejected")}, reads=("priority",)),
        space.Dimension("finish", (
            space.Value("pending", "the rejection still pending in to_finish (finished() False), as intake leaves it",
                        label=""),
            space.Value("applied", "its finish already applied when it reaches the door: the tree's own "
                        "update_finish_state moved the rejection into finished_reason (finished() True)",
                        label="finished", says="already finished"),
        ), over={"abort": ("rejected",), "session": ("none", "session")},  # also where the retire path releases a session
            reads=("finished_reason", "finished", "update_finish_state")),
        space.Dimension("stream", (
            space.Value("off", "a client that takes the whole response at once", label=""),
            space.Value("on", "a client streaming its response (Req.stream, /generate with stream on)",
                        label="streaming", says="streaming its response"),
        ), over={"abort": ("rejected",)}, reads=("stream",)),
        space.Dimension("logprob", (
            space.Value("off", "no logprobs asked for", label=""),
            space.Value("on", "the client asked for logprobs (return_logprob); the tree's own rejection "
                        "(set_finish_with_abort) may clear the flag", label="logprob", says="asking for logprobs"),
        ), over={"abort": ("rejected",), "session": ("none", "session")}, reads=("return_logprob",)),
        space.Dimension("session", (
            space.Value("none", "no session", label=""),
            space.Value("session", "a turn of a streaming session, which create_req marked in flight",
                        says="in a streaming session"),
            space.Value("plain-session", "a turn of a session that does not stream: nothing of it is in flight",
                        says="in a non-streaming session"),
        ), over={"abort": ("rejected",)}, reads=("session", "streaming")),  # read by the retire path only
    ),
    unreachable=(
        space.Unreachable("a request is rejected at intake, before its first door: it never re-enters",
                          {"abort": ("rejected",), "entry": RE_ENTRIES}),
        space.Unreachable("an abort is marked on a request that ran; a request at its first door has not",
                          {"abort": ("marked",), "entry": ("fresh",)}),
        space.Unreachable("a request at its first door holds nothing: the door is where it acquires",
                          {"entry": ("fresh",), "holds": HELD}),
        space.Unreachable("a requeue that holds nothing went through release_req, whose reset_for_retract marks it "
                          "is_retracted: that is the preempted entry", {"entry": ("reentry",), "holds": ("nothing",)}),
        space.Unreachable("a retraction releases device KV, Mamba state and the metadata buffer (release_req); "
                          "at most a host backup stays", {"entry": ("preempted", "retracted", "rebootstrap"),
                                                          "holds": ("metadata", "kv", "mamba")}),
    ),
    bug=({"abort": ("rejected",)},),
    duties_by=(
        space.Rule({"abort": ("rejected",)}, REJECTED),
        space.Rule({"abort": ("rejected",), "session": ("session",)}, ("door-session-released",)),
        space.Rule({"abort": ("rejected",), "session": ("plain-session",)}, ("door-session-kept",)),
        space.Rule({"abort": ("valid", "marked"), "capacity": ("fits",), "door": ("prefill",)}, AT_PREFILL),
        space.Rule({"abort": ("valid", "marked"), "door": ("decode",), "entry": ("retracted",)},
                   ("door-queued-retracted", *KEPT)),
        *(space.Rule({"abort": ("valid", "marked"), "capacity": ("fits",), "door": ("decode",),
                      "entry": ("fresh", "reentry", "preempted", "rebootstrap"), **when}, held) for when, held in (
            ({"peer": ("known", "known-dp"), "transfer": ("real",)}, AT_DECODE),
            ({"peer": ("unknown",)}, AWAITING_PEER),
            ({"transfer": ("fake",)}, FAKE_AT_DECODE))),
        space.Rule({"capacity": ("exceeds",)}, ("door-refused-over-capacity", "door-returns")),
        space.Rule({"abort": ("valid", "marked"), "session": ("session", "plain-session")}, ("door-session-kept",)),
    ),
    site=lambda p: f"{p['door']}-door",
    incidental={
        "req": "the request itself", "self": "the door's queue or the scheduler", "kv": "the request's KV "
        "bookkeeping, whose fields are the holds dimension", "num_kv_heads": "the model's head count, passed "
        "to the sender as is",
    },
)

# The ids of the hand-written cases the space replaced: each is still a case, meaning what it meant (the
# receipts and bundles made before name them).
KEPT_IDS = ("prefill-door-rejected", "decode-door-rejected", "prefill-door-rejected-session",
            "prefill-door-rejected-plain-session", "prefill-door-valid", "decode-door-valid",
            "prefill-door-reentry-metadata", "prefill-door-reentry-backup", "prefill-door-reentry-kv",
            "prefill-door-reentry-mamba", "decode-door-retracted", "decode-door-rebootstrap",
            "prefill-door-preempted", "decode-door-preempted")

# The code the fix changed, by qualified name: a function it rewrote is mutated whole; in a long function
# it touched in places, only the statements naming one of the listed names (and the blocks they open).
FIX_CODE: dict[str, tuple[str, ...]] = {
    "sglang.srt.disaggregation.prefill.PrefillBootstrapQueue.add": (),
    "sglang.srt.disaggregation.decode.DecodePreallocQueue.add": (
        "is_unadmitted_reject", "retire_unadmitted_request", "retracted_queue", "_create_receiver_and_enqueue",
        "pending_reqs", "kv_receiver",
    ),
    "sglang.srt.disaggregation.utils.is_unadmitted_reject": (),
    "sglang.srt.managers.scheduler.Scheduler.retire_unadmitted_request": (),
}

# Mutants no case can tell from the tree, each with why, keyed by (function, operator, statement before):
# ``EQUIVALENT`` ones behave the same on every input; ``EXPLAINED`` ones do not, and stay survivors.
EQUIVALENT: dict[tuple[str, str, str], str] = {
    ("Scheduler.retire_unadmitted_request", "insert:req.return_logprob", "req.session is not None and req.session.streaming"):
        "only a request rejected at intake reaches the retire path (an aborted re-entry holds what keeps it out), and the "
        "tree's own rejection (set_finish_with_abort) clears return_logprob: `not req.return_logprob` holds here",
    ("DecodePreallocQueue.add", "insert:req.output_ids", "not is_retracted and (not is_rebootstrap) and is_unadmitted_reject(req)"):
        "the gate retires only a request neither retracted nor re-bootstrapping, that is one rejected at intake on its "
        "first admission: it has produced no output, so `not req.output_ids` holds wherever the rest of the test does",
}
EXPLAINED: dict[tuple[str, str, str], str] = {
    ("Scheduler.retire_unadmitted_request", "delete", "req.release_mm_inputs_on_abort()"):
        "0.5.22's retire path also frees multimodal inputs, but set_finish_with_abort already freed a rejected "
        "request's (0.5.22 on): a request rejected at intake reaches the door holding none, and freeing them is "
        "not among #38935's duties",
}
