"""What each fix promises, as data: duties, and which case checks which.

A duty is one promise of a fix (its PR summary, its own tests), stated as a predicate over the
effects a case records. A case's bug signature is the conjunction of the duties it declares: the
case is ``clean`` when every one held and ``bug`` (for a guard case: a regression) when any failed,
and the failed ones are named. Nothing here imports SGLang or the rest of ``probes``: the host
imports this module to re-derive every classification from the recorded effects, so a verdict
that does not follow from its effects cannot pass for evidence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import space

Effects = Mapping[str, Any]


@dataclass(frozen=True)
class Duty:
    id: str
    fix: int
    promise: str  # what must hold, in one line
    held: Callable[[Effects], bool]


# --- reading effects -----------------------------------------------------------------------------


def _rid(effects: Effects) -> str:
    return effects["request"]["rid"]


def returned(effects: Effects) -> bool:
    """No failure escaped the tree's own code (a scripted transport failure, a member its class lacks)."""
    return effects.get("escaped") is None


def _streams(effects: Effects) -> list[dict[str, Any]]:
    """Every request the tree streamed to its client, as it stood when streamed."""
    return [item for call in effects["streamed"] for item in call]


def _streamed_once_with(effects: Effects, status: int | None) -> bool:
    """Streamed exactly once, finished with an abort (of ``status`` when given) at that moment."""
    mine = [item for item in _streams(effects) if item["rid"] == _rid(effects)]
    if len(mine) != 1:
        return False
    reason = mine[0]["finished_reason"]
    asked = effects["request"].get("return_logprob")
    if asked is not None and mine[0].get("return_logprob", asked) != asked:
        return False  # streamed without the logprobs the request holds it asked for, or with ones it did not
    return (
        isinstance(reason, dict)
        and reason.get("type") == "abort"
        and (status is None or reason.get("status_code") == status)
    )


# --- #38935: the admission doors ------------------------------------------------------------------

REJECTION_STATUS = 400  # what ``set_finish_with_abort`` gives an over-long prompt


def _admitted(effects: Effects) -> bool:
    return any(_rid(effects) in queue for queue in effects["queues"].values())


def _door_untouched(effects: Effects) -> bool:
    """A request the door must leave alone: not retired, not released, not finished or streamed,
    and whatever it held (metadata buffer, KV, Mamba, retraction backup) still held."""
    before, after = effects["before"], effects["request"]
    kept = ("metadata_buffer_index", "holds_kv", "holds_mamba", "holds_backup")
    return (
        not effects["retired"]
        and not effects["tree_cache_calls"]
        and not _streams(effects)
        and not after["finished"]
        and all(before.get(key) == after.get(key) for key in kept)
    )


def names_request(value: Any, rid: str) -> bool:
    """Whether a recorded argument names the request: its rid, or a handle holding it."""
    if isinstance(value, dict):
        return any(names_request(item, rid) for item in value.values())
    if isinstance(value, list):
        return any(names_request(item, rid) for item in value)
    return value == rid


def _cache_released_aborted(effects: Effects) -> bool:
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
        return names_request(args, _rid(effects)) and any(str(arg).endswith(".ABORT") for arg in args)
    return calls[0]["call"] == "release_aborted_request" and names_request(args, _rid(effects))


def _initialised_with_peer_rank(effects: Effects) -> bool:
    """Where the known peer runs data parallelism and follows bootstrap rooms (``effects["peer"]``), the
    receiver was initialised with the peer's rank for the request's room (room % dp_size), not another."""
    peer = effects.get("peer")
    if not peer:
        return True
    inits = [c for c in effects["kv_calls"] if c["call"] == "init"]
    rank = peer["room"] % peer["dp_size"]
    return all([*c["args"], *c["kwargs"].values()][:1] == [rank] for c in inits)


DOOR_DUTIES = (
    Duty("door-not-queued", 38935, "the rejected request entered no queue", lambda e: not _admitted(e)),
    Duty(
        "door-no-kv-endpoint",
        38935,
        "no KV sender or receiver was built for the rejected request",
        lambda e: not e["kv_endpoints"] and not e["kv_calls"],
    ),
    Duty(
        "door-no-bootstrap",
        38935,
        "no bootstrap was started for the rejected request",
        lambda e: not e["request"]["pending_bootstrap"] and not e["request"]["has_kv_sender"],
    ),
    Duty(
        "door-no-metadata-buffer",
        38935,
        "the rejected request holds no metadata buffer",
        lambda e: e["request"]["metadata_buffer_index"] < 0,
    ),
    Duty(
        "door-retired-by-tree",
        38935,
        "the door retired the request once, through the tree's own Scheduler.retire_unadmitted_request",
        lambda e: e["retired"] == [_rid(e)],
    ),
    Duty(
        "door-finished-rejected",
        38935,
        f"the request ended finished with the rejection's abort (status {REJECTION_STATUS})",
        lambda e: e["request"]["finished"]
        and isinstance(e["request"]["finished_reason"], dict)
        and e["request"]["finished_reason"].get("status_code") == REJECTION_STATUS,
    ),
    Duty(
        "door-streamed-once",
        38935,
        f"the client was streamed the rejection (status {REJECTION_STATUS}) exactly once",
        lambda e: _streamed_once_with(e, REJECTION_STATUS),
    ),
    Duty(
        "door-session-released",
        38935,
        "the streaming session of the rejected request was released (aborted once, detached)",
        lambda e: e["session_aborted"] == [_rid(e)] and not e["request"]["has_session"],
    ),
    Duty(
        "door-session-kept",
        38935,
        "a non-streaming session of the rejected request is left as it is (not aborted, still attached)",
        lambda e: not e["session_aborted"] and e["request"]["has_session"],
    ),
    Duty(
        "door-receiver-initialised",
        38935,
        "a door that looked the request's known prefill peer up initialised its receiver once (a door that "
        "leaves the peer to the handshake touches no receiver); never parked as pending (a guard)",
        lambda e: [c["call"] for c in e["kv_calls"]] == (["init"] if e.get("peer_lookups") else [])
        and not e["queues"].get("pending") and _initialised_with_peer_rank(e),
    ),
    Duty(
        "door-awaits-peer",
        38935,
        "a door that does not know the request's prefill peer yet parked it as pending with its receiver, "
        "uninitialised (a guard)",
        lambda e: e["queues"].get("pending") == [_rid(e)] and not [c for c in e["kv_calls"] if c["call"] == "init"],
    ),
    Duty(
        "door-fake-initialised",
        38935,
        "a fake-transfer (warm-up) request's receiver was initialised once at a door that resolves prefill peers "
        "itself (0.5.x on; before, a receiver is initialised after the door), without a peer lookup, never parked "
        "as pending (a guard)",
        lambda e: [c["call"] for c in e["kv_calls"]] == (["init"] if e["door_resolves_peer"] else [])
        and not e.get("peer_lookups") and not e["queues"].get("pending"),
    ),
    Duty(
        "door-refused-over-capacity",
        38935,
        "a request longer than the KV pool was refused at the door: queued nowhere, no KV sender or receiver, "
        "finished with an abort streamed to its client once (a guard: the fix must not let it through)",
        lambda e: not _admitted(e) and not e["kv_endpoints"] and e["request"]["finished"] and _streamed_once_with(e, None),
    ),
    Duty(
        "door-beam-retired",
        38935,
        "the rejected request's beam group was retired with it (trees with beam groups; none before 0.5.19)",
        lambda e: e["beam_retired"] == ([_rid(e)] if e["beam_groups"] else []),
    ),
    Duty(
        "door-cache-released",
        38935,
        "the tree cache was told once that the rejected request ended aborted (its cache-side state released; "
        "trees with an abort release of it, none before 0.5.2)",
        _cache_released_aborted,
    ),
    Duty("door-returns", 38935, "the door returned: no failure escaped the tree's code", returned),
    Duty(
        "door-queued-bootstrap",
        38935,
        "the request reached the prefill bootstrap queue (a guard: the fix must not drop it)",
        lambda e: e["queues"].get("bootstrap") == [_rid(e)],
    ),
    Duty(
        "door-queued-prealloc",
        38935,
        "the request reached the decode prealloc queue (a guard: the fix must not drop it)",
        lambda e: e["queues"].get("prealloc") == [_rid(e)] and not e["queues"].get("retracted"),
    ),
    Duty(
        "door-queued-retracted",
        38935,
        "the retracted request went back to the retracted queue, which owns its backup (a guard)",
        lambda e: e["queues"].get("retracted") == [_rid(e)] and not e["queues"].get("prealloc"),
    ),
    Duty(
        "door-endpoint-built",
        38935,
        "an admitted request got its KV sender or receiver (a guard: admission still hands off)",
        lambda e: len(e["kv_endpoints"]) == 1,
    ),
    Duty(
        "door-keeps-resources",
        38935,
        "the request was not retired, finished or streamed, and kept what it held",
        _door_untouched,
    ),
)

REJECTED = ("door-not-queued", "door-no-kv-endpoint", "door-no-bootstrap", "door-no-metadata-buffer",
            "door-retired-by-tree", "door-finished-rejected", "door-streamed-once", "door-beam-retired",
            "door-cache-released", "door-returns")
KEPT = ("door-keeps-resources", "door-returns")
AT_PREFILL = ("door-queued-bootstrap", "door-endpoint-built", *KEPT)
AT_DECODE = ("door-queued-prealloc", "door-endpoint-built", "door-receiver-initialised", *KEPT)
AWAITING_PEER = ("door-queued-prealloc", "door-endpoint-built", "door-awaits-peer", *KEPT)
FAKE_AT_DECODE = ("door-queued-prealloc", "door-endpoint-built", "door-fake-initialised", *KEPT)


# --- #36988: prefill result cleanup ---------------------------------------------------------------


def _final(effects: Effects) -> Mapping[str, Any]:
    return effects["results"][-1]


def _held(effects: Effects, key: str) -> bool:
    return bool(effects["before"][key])


def _untouched(snapshot: Mapping[str, Any]) -> bool:
    """No handoff and no release, stream or cache call: nothing happened to the request."""
    return not (
        snapshot["request"]["rid"] in snapshot["inflight_queue"] + snapshot["requeued"]
        or snapshot["kv_chunks_sent"]
        or snapshot["sender_calls"]
        or snapshot["metadata_frees"]
        or snapshot["kv_releases"]
        or snapshot["tree_cache_calls"]
        or snapshot["streamed"]
        or snapshot.get("grammar_calls")
    )


def _seen(request: Mapping[str, Any]) -> dict[str, Any]:
    """A request's state but for a verdict still pending in ``to_finish``: once the request is finished that
    verdict is moot (``update_finish_state`` returns at once), so setting it changes nothing anyone sees."""
    return {k: v for k, v in request.items() if not (k == "to_finish" and request.get("finished"))}


def _tree_cache(effects: Effects, call: str) -> list[Mapping[str, Any]]:
    return [c for c in _final(effects)["tree_cache_calls"] if c["call"] == call]


def _cached_unfinished(effects: Effects) -> list[Mapping[str, Any]]:
    """Calls keeping the request's KV in the tree cache as unfinished (``checkpoint`` in later trees)."""
    return _tree_cache(effects, "cache_unfinished_req") + _tree_cache(effects, "checkpoint")


def _sender_aborted(effects: Effects) -> bool:
    calls = _final(effects)["sender_calls"]
    return calls.count("abort") == 1 if effects["before"]["has_kv_sender"] else not calls


def _last_chunk(chunk: Mapping[str, Any]) -> bool:
    """A send marked final: ``last_chunk=True``, or (0.4.5/0.4.6) the sampled ``token_id`` given."""
    kwargs = chunk["kwargs"]
    return bool(kwargs.get("last_chunk")) or kwargs.get("token_id") is not None


def _middle_sends(effects: Effects) -> int:
    """Middle chunks whose KV result processing sends: one per result before the last under overlap
    scheduling; none without it (``process_prefill_chunk`` sends them ahead of the next forward)."""
    return len(effects["results"]) - 1 if effects["overlap"] else 0


def _metadata_freed(effects: Effects) -> bool:
    index = effects["before"]["metadata_buffer_index"]
    return _final(effects)["metadata_frees"] == ([index] if index >= 0 else [])


def _kv_released(effects: Effects) -> bool:
    """What it held of KV and Mamba state went back in exactly one release, and nothing was
    released for a request holding neither."""
    held = _held(effects, "holds_kv") or _held(effects, "holds_mamba")
    releases = _final(effects)["kv_releases"]
    return len(releases) == (1 if held else 0) and not _final(effects)["request"]["holds_kv"]


def _mamba_freed(effects: Effects) -> bool:
    releases = [r for r in _final(effects)["kv_releases"] if r["mamba"]]
    return len(releases) == (1 if _held(effects, "holds_mamba") else 0) and not _final(effects)["request"]["holds_mamba"]


def _cache_finished_aborted(effects: Effects) -> bool:
    finishes = _tree_cache(effects, "finish")
    return len(finishes) == 1 and any("ABORT" in str(arg) for arg in finishes[0]["args"])


def _kept_for_bootstrap(effects: Effects) -> bool:
    """Kept for its bootstrap: waiting in the transfer queue with its KV cached and held and its sender
    untouched; or, where the tree asked its sender (which answers: still bootstrapping), released once and
    re-queued once for prefill, an optimistic retry (0.5.13-0.5.15). Never aborted, freed of its metadata,
    finished or streamed."""
    final = _final(effects)
    rid, calls = _rid(final), final["sender_calls"]
    if final["metadata_frees"] or final["streamed"] or final["request"]["finished"]:
        return False
    waits = (
        final["inflight_queue"] == [rid]
        and len(_cached_unfinished(effects)) == 1
        and not (calls or final["requeued"] or final["kv_releases"])
    )
    retried = (
        calls == ["poll"]
        and final["requeued"] == [rid]
        and not final["inflight_queue"]
        and len(final["kv_releases"]) == 1
        and not final["request"]["holds_kv"]
    )
    return waits or retried


RESULT_DUTIES = (
    Duty(
        "result-sender-aborted",
        36988,
        "the request's KV sender was told to abort, once",
        _sender_aborted,
    ),
    Duty(
        "result-returns",
        36988,
        "result processing returned: a failing sender.abort() (or anything else) did not escape",
        returned,
    ),
    Duty(
        "result-pending-chunk-cleared",
        36988,
        "the request left the pending chunk-send set",
        lambda e: _rid(_final(e)) not in _final(e)["pending_chunk_rids"],
    ),
    Duty(
        "result-not-requeued",
        36988,
        "the aborted result was not re-queued (for transfer, prefill or bootstrap) nor cached as unfinished",
        lambda e: _rid(_final(e)) not in _final(e)["inflight_queue"] + _final(e)["requeued"]
        and not _cached_unfinished(e),
    ),
    Duty("result-no-kv-chunk", 36988, "no KV chunk was sent for it", lambda e: not _final(e)["kv_chunks_sent"]),
    Duty("result-metadata-freed", 36988, "its metadata buffer was freed exactly once", _metadata_freed),
    Duty("result-kv-released", 36988, "the KV it held was released exactly once (no release when it held none)",
         _kv_released),
    Duty(
        "result-kv-not-inserted",
        36988,
        "no release inserted its KV into the radix tree",
        lambda e: not any(r["is_insert"] for r in _final(e)["kv_releases"]),
    ),
    Duty(
        "result-cache-finished-aborted",
        36988,
        "the tree cache (HiCache) was told once that the request ended aborted",
        _cache_finished_aborted,
    ),
    Duty(
        "result-cache-not-misinformed",
        36988,
        "with HiCache storage off, the tree cache was told at most once, and only that the request ended aborted",
        lambda e: len(_tree_cache(e, "finish")) <= 1 and all(_cache_finished_aborted(e) for _ in _tree_cache(e, "finish")),
    ),
    Duty("result-mamba-freed", 36988, "the Mamba state it held was freed exactly once", _mamba_freed),
    Duty(
        "result-bootstrap-settled",
        36988,
        "the request no longer waits for a bootstrap",
        lambda e: not _final(e)["request"]["pending_bootstrap"],
    ),
    Duty(
        "result-finished",
        36988,
        "the request ended finished with an abort",
        lambda e: _final(e)["request"]["finished"]
        and isinstance(_final(e)["request"]["finished_reason"], dict)
        and _final(e)["request"]["finished_reason"].get("type") == "abort",
    ),
    Duty(
        "result-streamed-once",
        36988,
        "the client was streamed the abort exactly once",
        lambda e: _streamed_once_with(_final(e), None),
    ),
    Duty(
        "result-late-no-effect",
        36988,
        "a late result of an already retired request had no effect at all: nothing sent, freed, streamed or "
        "cached, no grammar fed, and the request as its client and its owners see it (output, finish, what it "
        "holds) left as it was",
        lambda e: _untouched(_final(e)) and _seen(_final(e)["request"]) == _seen(e["before"]),
    ),
    Duty(
        "result-not-freed-early",
        36988,
        "nothing was freed, sent or streamed while a later chunk was still in flight",
        lambda e: _untouched(e["results"][0]),
    ),
    Duty(
        "result-queued-for-transfer",
        36988,
        "a healthy final result was cached as unfinished and queued for transfer, once (a guard)",
        lambda e: _final(e)["inflight_queue"] == [_rid(_final(e))] and len(_cached_unfinished(e)) == 1,
    ),
    Duty(
        "result-last-chunk-sent",
        36988,
        "a bootstrapped healthy request sent its last KV chunk exactly once, after any middle chunks (a guard)",
        lambda e: [_last_chunk(c) for c in _final(e)["kv_chunks_sent"]] == [False] * _middle_sends(e) + [True],
    ),
    Duty(
        "result-yield-requeued",
        36988,
        "a healthy optimistic request that yields is re-queued for prefill, not aborted, sent or streamed (a guard)",
        lambda e: _final(e)["requeued"] == [_rid(_final(e))] and not _final(e)["inflight_queue"]
        and not _final(e)["sender_calls"] and not _final(e)["kv_chunks_sent"] and not _final(e)["streamed"],
    ),
    Duty(
        "result-waits-for-bootstrap",
        36988,
        "a healthy result whose bootstrap is pending sent no KV yet (a guard)",
        lambda e: not _final(e)["kv_chunks_sent"],
    ),
    Duty(
        "result-kept-for-bootstrap",
        36988,
        "a healthy result whose bootstrap is pending waits for it in the transfer queue, or is retried once its "
        "sender said the bootstrap is still in progress; never aborted, freed, finished or streamed (a guard)",
        _kept_for_bootstrap,
    ),
    Duty(
        "result-healthy-kept",
        36988,
        "a healthy result was not aborted, freed, re-queued for prefill or streamed (a guard)",
        lambda e: not _final(e)["sender_calls"]
        and not _final(e)["requeued"]
        and not _final(e)["metadata_frees"]
        and not _final(e)["kv_releases"]
        and not _final(e)["streamed"]
        and not _final(e)["request"]["finished"],
    ),
)

RETIRED_BEFORE_CACHE = ("result-sender-aborted", "result-returns", "result-pending-chunk-cleared", "result-not-requeued",
                        "result-no-kv-chunk", "result-metadata-freed", "result-kv-released", "result-kv-not-inserted")
RETIRED_AFTER_CACHE = ("result-mamba-freed", "result-bootstrap-settled", "result-finished", "result-streamed-once")
RETIRED_ONCE = (*RETIRED_BEFORE_CACHE, "result-cache-finished-aborted", *RETIRED_AFTER_CACHE)

HEALTHY = ("result-queued-for-transfer", "result-last-chunk-sent", "result-healthy-kept", "result-returns")
KEPT_FOR_BOOTSTRAP = ("result-kept-for-bootstrap", "result-waits-for-bootstrap", "result-returns")

DUTIES: dict[str, Duty] = {duty.id: duty for duty in DOOR_DUTIES + RESULT_DUTIES}


# --- the case spaces: what each fix's code tells apart (probes/space.py) ------------------------------
# Each probe's cases are the reachable combinations of these dimensions; each value says how the tree's
# own code produces that state. A case's duties follow from its dimensions (the rules below), never
# from a hand table per case. The scene builders (probes/admission.py, probes/prefill_cleanup.py) turn
# a point into real SGLang objects; a state an era's code cannot produce is not applicable there,
# naming the API the tree lacks.

RE_ENTRIES = ("reentry", "preempted", "retracted", "rebootstrap")
HELD = ("metadata", "kv", "mamba", "backup")

ADMISSION = space.Space(
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
        space.Dimension("stream", (
            space.Value("off", "a client that takes the whole response at once", label=""),
            space.Value("on", "a client streaming its response (Req.stream, /generate with stream on)",
                        label="streaming", says="streaming its response"),
        ), over={"abort": ("rejected",)}, reads=("stream",)),
        space.Dimension("logprob", (
            space.Value("off", "no logprobs asked for", label=""),
            space.Value("on", "the client asked for logprobs (return_logprob); the tree's own rejection "
                        "(set_finish_with_abort) may clear the flag", label="logprob", says="asking for logprobs"),
        ), over={"abort": ("rejected",)}, reads=("return_logprob",)),
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

RETIRING = {"abort": ("pending",), "phase": ("final", "yielded")}  # where _retire_aborted_prefill_result is called
FINAL = {"phase": ("final",), "bootstrap": ("done",)}  # read on a final result whatever the bootstrap

PREFILL_CLEANUP = space.Space(
    probe="prefill-cleanup",
    dimensions=(
        space.Dimension("abort", (
            space.Value("none", "no abort on it", label="healthy", says="healthy request"),
            space.Value("pending", "an AbortReq reached it while its forward ran (abort method 3): to_finish "
                        "pending", label="aborted", says="request aborted while its forward ran"),
            space.Value("retired", "already retired by an earlier retire or a bootstrap failure: finished with an "
                        "abort, its resources released; this is a late result of it", label="late",
                        says="late result of a request already retired",
                        implies={"holds": "nothing", "bootstrap": "done"}),
        ), core=True, reads=("is_aborted", "to_finish", "finished_reason")),
        space.Dimension("phase", (
            space.Value("final", "the result of its last (or only) chunk", label="final-result", says="its final result"),
            space.Value("chunked", "a middle chunk's result while its next chunk runs (it is still the scheduler's "
                        "chunked_req), then its last chunk's result", says="a middle chunk's result, then its last"),
            space.Value("last-launched", "a middle chunk's result while its last chunk already runs (overlap "
                        "scheduling launched it: its extend range reaches the end of the input), then the last's",
                        says="a middle chunk's result while its last chunk runs, then its last",
                        implies={"overlap": "on"}),
            space.Value("yielded", "a middle chunk's result with no later chunk of it running: it yields",
                        says="a middle chunk's result with no later chunk in flight"),
        ), core=True, reads=("inflight_middle_chunks", "chunked_req", "extend_range", "extend_end", "still_chunking")),
        space.Dimension("bootstrap", (
            space.Value("done", "its bootstrap completed before the forward", label=""),
            space.Value("pending", "optimistic prefill: popped while the handshake is still bootstrapping (with a "
                        "metadata buffer), its forward run ahead of it", label="optimistic",
                        says="bootstrap still pending (optimistic prefill)"),
        ), core=True, reads=("pending_bootstrap",)),
        space.Dimension("holds", (
            space.Value("kv-metadata", "its KV row and its metadata buffer, as after its forward", label=""),
            space.Value("metadata", "a metadata buffer and no KV or Mamba state", label="metadata-only",
                        says="holding a metadata buffer only"),
            space.Value("mamba", "Mamba state, no KV, no metadata buffer and no KV sender yet", says="holding Mamba state only",
                        implies={"sender": "none"}),
            space.Value("nothing", "nothing: an earlier retire released it all", label=""),
        ), over=RETIRING, reads=("holds_kv", "holds_mamba", "metadata_buffer_index", "owns_resources")),
        space.Dimension("slot", (
            space.Value("7", "metadata buffer 7: a slot the allocator handed out after others", label=""),
            space.Value("0", "metadata buffer 0: the allocator's first slot (an index tested against 0)",
                        label="slot-0", says="in metadata slot 0"),
        ), over={"abort": ("pending",), "phase": ("final",), "bootstrap": ("done",), "holds": ("kv-metadata", "metadata")},
            reads=("metadata_buffer_index",)),
        space.Dimension("sender", (
            space.Value("ready", "the KV sender the prefill door built", label=""),
            space.Value("fails", "its KV sender's abort() raises (the transport is down)", label="sender-fails",
                        says="its KV sender failing to abort"),
            space.Value("none", "no KV sender built yet", label="no-sender", says="no KV sender yet"),
        ), over=RETIRING, reads=("disagg_kv_sender", "sender")),
        space.Dimension("failure", (
            space.Value("runtime", "sender.abort() raises a RuntimeError", label=""),
            space.Value("transport", "sender.abort() raises the transport's own exception class, which derives from "
                        "Exception only (no RuntimeError, OSError or LookupError)", label="transport-error",
                        says="with the transport's own exception"),
        ), over={"sender": ("fails",)}, reads=("Exception",)),
        space.Dimension("batch", (
            space.Value("alone", "the only request of its batch", label=""),
            space.Value("after-aborted", "the second request of its batch, behind a request aborted while the same "
                        "forward ran (a batch of requests, as the scheduler builds it)", label="after-aborted",
                        says="behind an aborted request in its batch"),
            space.Value("before-aborted", "the first request of its batch, ahead of a request aborted while the same "
                        "forward ran", label="before-aborted", says="ahead of an aborted request in its batch"),
        ), over={"phase": ("final", "chunked"), "bootstrap": ("done",)}, reads=("reqs", "batch")),
        space.Dimension("grammar", (
            space.Value("none", "no grammar", label=""),
            space.Value("accepts", "a compiled grammar that accepts the sampled token", label="grammar",
                        says="its grammar accepting the sampled token"),
            space.Value("rejects", "a compiled grammar whose accept_token raises ValueError for the sampled token",
                        label="grammar-rejects", says="its grammar rejecting the sampled token"),
        ), over=FINAL, reads=("grammar",)),
        space.Dimension("mask", (
            space.Value("off", "no sampling mask asked for", label=""),
            space.Value("ok", "return_sampling_mask, the sampler reporting the token inside its captured support",
                        label="mask", says="a sampling mask that holds"),
            space.Value("rejects", "return_sampling_mask, the sampler reporting the token outside its captured support "
                        "(the batch result processor's own get_sampling_mask_finish_reason aborts it)",
                        label="mask-rejects", says="its sampling mask rejecting the sampled token"),
        ), over=FINAL, reads=("return_sampling_mask", "sampling_mask_finish_reason")),
        space.Dimension("discard", (
            space.Value("kept", "its KV landed", label=""),
            space.Value("discarded", "the cache discarded its output: its KV never landed (discard_output_reason)",
                        says="its output discarded (KV never landed)"),
        ), over=FINAL, reads=("discard_output_reason",)),
        space.Dimension("overlap", (
            space.Value("off", "the normal event loop: a middle chunk's KV is sent from process_prefill_chunk", label=""),
            space.Value("on", "overlap scheduling: a middle chunk's KV is sent from result processing",
                        label="overlap", says="under overlap scheduling"),
        ), over={"phase": ("chunked", "yielded"), "abort": ("none", "pending")}, reads=("enable_overlap",)),
        space.Dimension("hicache", (
            space.Value("on", "HiCache storage on", label=""),
            space.Value("off", "HiCache storage off", label="no-hicache", says="HiCache storage off"),
        ), over=RETIRING, reads=("enable_hicache_storage",)),
    ),
    unreachable=(
        space.Unreachable("a request that ran its forward holds what it ran with; only an earlier retire leaves it "
                          "nothing", {"abort": ("none", "pending"), "holds": ("nothing",)}),
        space.Unreachable("the prefill door builds the KV sender when it admits a request (create_sender), before "
                          "any forward; only the Mamba-only state is taken before it",
                          {"sender": ("none",), "holds": ("kv-metadata", "metadata")}),
        space.Unreachable("an optimistic request was popped from the bootstrap queue while its handshake ran: the door "
                          "had built its sender", {"sender": ("none",), "bootstrap": ("pending",)}),
    ),
    bug=({"abort": ("pending", "retired")}, {"grammar": ("rejects",)}, {"mask": ("rejects",)},
         {"discard": ("discarded",)}),
    duties_by=(
        space.Rule({"abort": ("retired",)}, ("result-late-no-effect", "result-returns")),
        space.Rule({"abort": ("pending",), "phase": ("chunked", "last-launched")}, ("result-not-freed-early",)),
        *(space.Rule(when, RETIRED_BEFORE_CACHE) for when in (
            {"abort": ("pending",)}, {"abort": ("none",), "grammar": ("rejects",)},
            {"abort": ("none",), "mask": ("rejects",)}, {"abort": ("none",), "discard": ("discarded",)})),
        *(space.Rule({**when, "hicache": (state,)}, (duty,)) for state, duty in (
            ("on", "result-cache-finished-aborted"), ("off", "result-cache-not-misinformed")) for when in (
            {"abort": ("pending",)}, {"abort": ("none",), "grammar": ("rejects",)},
            {"abort": ("none",), "mask": ("rejects",)}, {"abort": ("none",), "discard": ("discarded",)})),
        *(space.Rule(when, RETIRED_AFTER_CACHE) for when in (
            {"abort": ("pending",)}, {"abort": ("none",), "grammar": ("rejects",)},
            {"abort": ("none",), "mask": ("rejects",)}, {"abort": ("none",), "discard": ("discarded",)})),
        *(space.Rule({"abort": ("none",), "grammar": ("none", "accepts"), "mask": ("off", "ok"), "discard": ("kept",), **when},
                     duties) for when, duties in (
            ({"phase": ("final", "chunked", "last-launched"), "bootstrap": ("done",)}, HEALTHY),
            ({"phase": ("final", "chunked", "last-launched"), "bootstrap": ("pending",)}, KEPT_FOR_BOOTSTRAP),
            ({"phase": ("yielded",), "bootstrap": ("pending",)}, ("result-yield-requeued", "result-returns")),
            ({"phase": ("yielded",), "bootstrap": ("done",)}, ("result-healthy-kept", "result-returns")),
        )),
    ),
    aliases={
        "late-final-result": "late-result-after-retire",
        "aborted-chunked-overlap": "aborted-middle-chunk",
        "aborted-final-result-sender-fails": "sender-abort-raises",
        "healthy-final-result-grammar-rejects": "grammar-rejection",
        "aborted-final-result-mamba-no-sender": "mamba-before-kv",
        "aborted-final-result-metadata-only": "metadata-only",
        "aborted-yielded-optimistic": "aborted-yielded-chunk",
        "healthy-final-result-grammar": "healthy-grammar-result",
        "healthy-chunked-overlap": "healthy-chunked-result",
        "healthy-yielded-optimistic": "healthy-yielded-result",
        "healthy-yielded": "healthy-yielded-bootstrapped",
        "healthy-chunked-optimistic": "healthy-optimistic-chunked",
        "healthy-final-result-optimistic": "healthy-optimistic-result",
    },
    site="prefill-result",
    incidental={
        "req": "the request itself", "self": "the scheduler", "kv": "the request's KV bookkeeping, whose fields "
        "are the holds dimension", "len": "a builtin", "isinstance": "a builtin", "FINISH_ABORT": "the abort "
        "class is_aborted tests for (the abort dimension)", "end": "the end of the extend range (the phase "
        "dimension)", "origin_input_ids": "the prompt, whose end the extend range is compared with (phase)",
        "aborted_reqs": "the batch's retired requests so far, to stream: filled by the abort dimension's cases",
        "_retire_aborted_prefill_result": "its answer, whether the request still owned resources (holds)",
        "finished": "req.finished(): a retired request is finished (the abort dimension)",
    },
)

SPACES: dict[str, space.Space] = {s.probe: s for s in (ADMISSION, PREFILL_CLEANUP)}

# The ids of the hand-written cases the spaces replaced: each is still a case, meaning what it meant (the
# receipts and bundles made before name them).
KEPT_IDS: dict[str, tuple[str, ...]] = {
    "admission": ("prefill-door-rejected", "decode-door-rejected", "prefill-door-rejected-session",
                  "prefill-door-rejected-plain-session", "prefill-door-valid", "decode-door-valid",
                  "prefill-door-reentry-metadata", "prefill-door-reentry-backup", "prefill-door-reentry-kv",
                  "prefill-door-reentry-mamba", "decode-door-retracted", "decode-door-rebootstrap",
                  "prefill-door-preempted", "decode-door-preempted"),
    "prefill-cleanup": ("aborted-final-result", "late-result-after-retire", "aborted-middle-chunk", "sender-abort-raises",
                        "grammar-rejection", "mamba-before-kv", "metadata-only", "aborted-yielded-chunk",
                        "healthy-final-result", "healthy-grammar-result", "healthy-chunked-result",
                        "healthy-yielded-result", "healthy-yielded-bootstrapped", "healthy-optimistic-chunked",
                        "healthy-optimistic-result"),
}

# Which duties each case checks, by probe and case id: its signature is their conjunction. Generated from
# the spaces; a probe declaring its cases another way registers them here the same way.
CASES: dict[str, dict[str, tuple[str, ...]]] = {probe: s.duty_table() for probe, s in SPACES.items()}


# The code each fix changed, by qualified name: what ``diffprobe mutate`` mutates, on the lines the
# fix's cases execute. A function the fix rewrote is mutated whole; in a long function the fix
# touched in places, only its slice: the statements naming one of the listed names, and
# everything inside a block such a statement opens. A name a tree lacks is reported, never guessed.
FIX_CODE: dict[int, dict[str, tuple[str, ...]]] = {
    38935: {
        "sglang.srt.disaggregation.prefill.PrefillBootstrapQueue.add": (),
        "sglang.srt.disaggregation.decode.DecodePreallocQueue.add": (
            "is_unadmitted_reject", "retire_unadmitted_request", "retracted_queue", "_create_receiver_and_enqueue",
            "pending_reqs", "kv_receiver",
        ),
        "sglang.srt.disaggregation.utils.is_unadmitted_reject": (),
        "sglang.srt.managers.scheduler.Scheduler.retire_unadmitted_request": (),
    },
    36988: {
        "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin.process_batch_result_disagg_prefill": (
            "is_aborted", "_retire_aborted_prefill_result", "aborted_reqs", "disagg_prefill_inflight_queue",
            "send_kv_chunk", "cache_unfinished_disagg_prefill", "stream_output", "still_chunking",
            "inflight_middle_chunks", "prepare_abort",
        ),
        "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin._retire_aborted_prefill_result": (),
        "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin.clear_pending_chunk_send": (),
        "sglang.srt.disaggregation.utils.is_aborted": (),
    },
}


# Mutants no case can tell from the tree, each with why, keyed by (function, operator, statement
# before): ``equivalent`` ones behave the same on every input (they leave the score's count);
# ``explained`` ones do not, and stay survivors, with what no case covers.
EQUIVALENT: dict[tuple[str, str, str], str] = {
    ("SchedulerDisaggregationPrefillMixin._retire_aborted_prefill_result", "true", "sender is not None"):
        "the call sits in `try: ... except Exception`, which swallows the AttributeError of None.abort()",
    ("SchedulerDisaggregationPrefillMixin._retire_aborted_prefill_result", "true",
     "req.to_finish is not None and (not req.finished())"):
        "is_aborted(req) holds here, so to_finish or finished_reason is set, and update_finish_state "
        "returns at once for a finished request",
    ("SchedulerDisaggregationPrefillMixin._retire_aborted_prefill_result", "true", "req.to_finish is not None"):
        "update_finish_state returns at once for a finished request; an unfinished one has to_finish set "
        "(is_aborted)",
    ("SchedulerDisaggregationPrefillMixin._retire_aborted_prefill_result", "true", "not req.finished()"):
        "update_finish_state returns at once for a finished request",
}
EXPLAINED: dict[tuple[str, str, str], str] = {
    ("SchedulerDisaggregationPrefillMixin._retire_aborted_prefill_result", "true", "self.enable_hicache_storage"):
        "0.5.20 tells the tree cache only when HiCache storage is on (0.5.21 always); the cases run with it on, "
        "and a case with it off could not require the call without failing 0.5.21's unconditional one",
    ("Scheduler.retire_unadmitted_request", "delete", "req.release_mm_inputs_on_abort()"):
        "0.5.22's retire path also frees multimodal inputs, but set_finish_with_abort already freed a rejected "
        "request's (0.5.22 on): a request rejected at intake reaches the door holding none, and freeing them is "
        "not among #38935's duties",
}


def mutant_key(function: str, operator: str, before: str) -> tuple[str, str, str]:
    """The key of a mutant in EQUIVALENT and EXPLAINED: class and function, operator, statement."""
    return (".".join(function.split(".")[-2:]), operator, before)


def declared(probe: str, case: str) -> tuple[str, ...]:
    """The duties ``case`` of ``probe`` checks; KeyError for a case nobody declared."""
    return CASES[probe][case]


def signature(duties: tuple[str, ...]) -> str:
    """The one-line bug signature of a case: which of its duties failing makes it a bug."""
    return "a duty failed: " + ", ".join(duties)


def judge(probe: str, case: str, effects: Effects) -> dict[str, bool]:
    """Each declared duty of the case, in order, and whether it held in ``effects``."""
    return judge_duties(declared(probe, case), effects)


def judge_duties(duties: tuple[str, ...], effects: Effects) -> dict[str, bool]:
    """A duty whose effects are missing or malformed did not hold: effects that cannot show a
    duty never count as showing it."""
    results = {}
    for duty_id in duties:
        try:
            results[duty_id] = bool(DUTIES[duty_id].held(effects))
        except (KeyError, IndexError, TypeError, AttributeError, ValueError):
            results[duty_id] = False
    return results


def classify(duties: Mapping[str, bool]) -> str:
    """``bug`` when any duty failed (for a guard case: the regression), else ``clean``."""
    return "clean" if all(duties.values()) else "bug"


# --- gates 3 and 4: the handoff and the lifetime of its pages (#39500, #40645, #41402, #41404, #41023) ---
# Self-contained: the effects are the page-ownership model's (probes/pages.py) and the wire's
# (probes/lifetime.py). "The subject" is the request whose transfer the case aborts or fails.

# The later defences' cases are grouped by the configuration they run under (their site): the tree's
# defaults, or a defence's option switched on. A defence off by default is in force only where its
# "with-" configuration is fixed; the host keeps one bug window per configuration (judging.window).
CONFIGURATIONS = ("default", "with-deferred-release", "with-kv-checksum")


def _subject(effects: Effects) -> str:
    return effects["subject"]


def _started(effects: Effects) -> dict[str, Any]:
    """The step at which the subject took the room (bootstrapped on every rank)."""
    return next(s for s in effects["steps"] if s["step"] == "bootstrapped" and s.get("rid") == _subject(effects))


def _timeout_at(effects: Effects) -> int:
    """When the tree's stated release timeout, counted from the subject's start, is reached."""
    return _started(effects)["t"] + effects["timeout"]


def _frees(rank: Mapping[str, Any], rid: str) -> list[Mapping[str, Any]]:
    return [e for e in rank["events"] if e["event"] == "free" and e["rid"] == rid]


def _no_early_release(effects: Effects) -> bool:
    """No page of the subject went back to the allocator while a prefill write could still land in
    it, unless the tree's stated release timeout had passed (a release by the timeout is recorded as
    such in the events, and allowed)."""
    return not any(f["rid"] == _subject(effects) and f["t"] < _timeout_at(effects)
                   for rank in effects["decode"] for f in rank["freed_while_writable"])


def _freed_once(effects: Effects) -> bool:
    """By the last step, each page of the subject went back exactly once (its KV, written or not, not
    kept in the prefix cache for later requests), its metadata row was freed exactly once, no page was
    freed twice or by a request that did not own it, nothing is still held."""
    rid = _subject(effects)
    for rank in effects["decode"]:
        request = rank["requests"][rid]
        freed = [p for f in _frees(rank, rid) for p in f["pages"]]
        if any(f.get("cached") for f in _frees(rank, rid)):
            return False
        if sorted(freed) != sorted(request["pages"]) or rank["double_frees"] or rank["held"]:
            return False
        if rank["metadata_frees"].count(request["metadata_index"]) != 1:
            return False
    return True


def _acks(effects: Effects, prefill: int, decode: int) -> list[Mapping[str, Any]]:
    """Acknowledgements prefill rank ``prefill`` sent decode rank ``decode`` since the subject started."""
    return [m for m in effects["wire"] if m["kind"] == "ABORT_ACK" and m["seq"] > _started(effects)["seq"]
            and m["from"] == f"prefill{prefill}" and m["to"].endswith(f":{17000 + decode}")]


def _drained(effects: Effects, prefill: int) -> int:
    """The sequence number at which prefill rank ``prefill``'s last write of the subject landed or failed (0: none)."""
    ends = [e["seq"] for rank in effects["decode"] for e in rank["events"]
            if e["event"] in ("write lands", "write fails") and e.get("rank") == prefill and e["rid"] == _subject(effects)]
    return max(ends, default=0)


def _acked_after_drain(effects: Effects, ranks: list[int]) -> bool:
    """Each of decode ``ranks`` got exactly one acknowledgement from every prefill rank, sent after
    that prefill rank's writes of the subject stopped."""
    prefills = range(len(effects["outstanding"]))
    for d in ranks:
        for p in prefills:
            acks = _acks(effects, p, d)
            if len(acks) != 1 or acks[0]["seq"] < _drained(effects, p):
                return False
    return True


def _aborting(effects: Effects) -> list[int]:
    """Decode ranks that told prefill the subject was aborted."""
    return [r["rank"] for r in effects["decode"] if r["requests"][_subject(effects)]["notified"]]


def _aborted_after_clear(effects: Effects) -> list[int]:
    """Decode ranks whose ABORT reached prefill only after the prefill scheduler had cleared the room."""
    cleared = [s["seq"] for s in effects["steps"] if s["step"] == "prefill concludes" and s.get("rid") == _subject(effects)]
    if not cleared:
        return []
    return sorted({int(m["frames"][3]) - 17000 for m in effects["wire"] if m["kind"] == "ABORT"
                   and m.get("delivered", 0) > min(cleared) and len(m["frames"]) >= 4})


def _released_before_timeout(effects: Effects) -> bool:
    """With every acknowledgement delivered, the subject's pages went back before the timeout."""
    rid = _subject(effects)
    return all(_frees(rank, rid) and all(f["t"] < _timeout_at(effects) for f in _frees(rank, rid))
               for rank in effects["decode"])


def _timeout_recorded(effects: Effects) -> bool:
    """The subject's pages went back by the release timeout exactly when the tree logged a release by timeout
    after the subject started: a timeout release is recorded as such, a release on acknowledgement is not."""
    rid = _subject(effects)
    by_timeout = any(f["t"] >= _timeout_at(effects) for rank in effects["decode"] for f in _frees(rank, rid))
    logged = any(r["seq"] > _started(effects)["seq"] and "timed out" in r["message"] and "release" in r["message"].lower()
                 for r in effects["log"])
    return by_timeout == logged


def _not_held_forever(effects: Effects) -> bool:
    rid = _subject(effects)
    return all(not rank["held"] and _frees(rank, rid) for rank in effects["decode"])


def _committed(effects: Effects) -> bool:
    """Committed on every rank, read only where its own write landed, its pages kept, nothing held, and its
    metadata row handed back once (the commit is done with it)."""
    rid = _subject(effects)
    return all(rid in rank["committed"] and not rank["unwritten_reads"] and not _frees(rank, rid) and not rank["held"]
               and rank["metadata_frees"].count(rank["requests"][rid]["metadata_index"]) == 1
               for rank in effects["decode"])


LIFETIME_DUTIES = (
    Duty("lifetime-no-early-release", 41023,
         "no page went back to the allocator while a prefill write could still land in it, except at the tree's "
         "stated release timeout (recorded as such)", _no_early_release),
    Duty("lifetime-no-foreign-write", 41023, "no write landed in a page another request owned",
         lambda e: not any(rank["foreign_writes"] for rank in e["decode"])),
    Duty("lifetime-freed-once", 41023,
         "each page and the metadata row of the aborted request went back exactly once (its KV not kept in the prefix "
         "cache), and nothing is held at the end",
         _freed_once),
    Duty("lifetime-acked-after-drain", 40645,
         "every aborting decode rank got exactly one acknowledgement from each prefill rank, sent after its writes stopped",
         lambda e: bool(_aborting(e)) and _acked_after_drain(e, _aborting(e))),
    Duty("lifetime-late-abort-acked", 40645,
         "a decode rank whose ABORT reached prefill after the room was cleared, a write still outstanding, was "
         "acknowledged exactly once after the drain",
         lambda e: bool(_aborted_after_clear(e)) and _acked_after_drain(e, _aborted_after_clear(e))),
    Duty("lifetime-released-on-ack", 40645,
         "with every acknowledgement delivered, the pages went back before the release timeout, not by it",
         _released_before_timeout),
    Duty("lifetime-released-at-once", 41404,
         "nothing could write the pages (no prefill rank ever learned them): they went back at once, not held to the "
         "release timeout", _released_before_timeout),
    Duty("lifetime-failure-handled", 41404,
         "decode's own failed send of its destinations did not escape the tree's code to its caller (a tree that "
         "lets it escape has no failure path for it: it can neither hold nor release the pages by its rules)",
         returned),
    Duty("lifetime-timeout-recorded", 41023,
         "pages went back at the release timeout exactly when the tree logged a release by timeout (a timeout "
         "release is recorded as such, a release on the acknowledgements is not)", _timeout_recorded),
    Duty("lifetime-not-held-forever", 41023,
         "the pages went back by the end (by acknowledgement or the stated timeout), nothing held forever (a guard)",
         _not_held_forever),
    Duty("lifetime-committed", 41023,
         "a healthy transfer was committed at once: its pages held, read only where its own write landed, its "
         "metadata row handed back once (a guard)",
         _committed),
)

DUTIES.update({duty.id: duty for duty in LIFETIME_DUTIES})

_HELD = ("lifetime-no-early-release", "lifetime-no-foreign-write", "lifetime-freed-once", "lifetime-timeout-recorded")
_ACKED = ("lifetime-acked-after-drain", "lifetime-released-on-ack")
_GUARD_ABORT = ("lifetime-not-held-forever", "lifetime-freed-once", "lifetime-timeout-recorded")
_ON_ACK = ("lifetime-released-on-ack", "lifetime-freed-once")
# with nothing in flight at the abort, the request's chunk, finished after it, must be refused: nothing lands
_ON_ACK_IDLE = ("lifetime-acked-after-drain", "lifetime-released-on-ack", "lifetime-no-foreign-write", "lifetime-freed-once")

# Every lifetime case runs in the tree's default configuration and with the deferred release switched on
# (a tree where it is off by default is probed with it on as well); the configuration is the case's site.
DEFERRED_CONFIG = space.Dimension("config", (
    space.Value("default", "the tree's own defaults: nothing set", label=""),
    space.Value("with-deferred-release", "SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE=true in the ranks' "
                "environment", says="deferred release switched on"),
), core=True, reads=("enable_deferred_decode_kv_release", "enable_deferred_kv_release"))
_IN_FLIGHT = space.Dimension("in_flight", (
    space.Value("yes", "prefill's write of the request is inside the engine when it happens", label="in-flight",
                says="while prefill's write is in flight"),
    space.Value("no", "before prefill wrote anything", label="nothing-in-flight", says="before prefill wrote anything"),
), reads=("_staging_outstanding",))
_ACKS = space.Dimension("acks", (
    space.Value("delivered", "the drain acknowledgements reach decode", label=""),
    space.Value("lost", "every drain acknowledgement is lost on the wire", label="acks-lost",
                says="every drain acknowledgement lost"),
    space.Value("late", "the acknowledgement arrives after the release timeout", label="acks-late",
                says="the acknowledgement arriving after the release timeout"),
), reads=("is_abort_release_safe", "note_abort_ack"))


def _site(point: Mapping[str, str]) -> str:
    return point["config"]


LIFETIME_DEFAULT = space.Space(
    probe="lifetime-default",
    dimensions=(
        space.Dimension("failure", (
            space.Value("decode-abort", "a client abort reaches decode's scheduler (its abort_request)", label="abort",
                        says="a client abort at decode"),
            space.Value("none", "a healthy transfer", label="healthy-transfer", says="a healthy transfer, committed to decode"),
        ), core=True, reads=("abort_notified",)),
        space.Dimension(_IN_FLIGHT.name, _IN_FLIGHT.values, over={"failure": ("decode-abort",)}, reads=_IN_FLIGHT.reads),
        space.Dimension(_ACKS.name, _ACKS.values, over={"failure": ("decode-abort",)}, reads=_ACKS.reads),
        DEFERRED_CONFIG,
    ),
    # with nothing in flight the abort must still stop the request's later chunk (trees without an ABORT message
    # to prefill, 0.5.12 and earlier, let it write into pages decode already gave away): a bug case, not a guard
    bug=({"failure": ("decode-abort",), "in_flight": ("yes",), "acks": ("delivered",)}, {"in_flight": ("no",)}),
    duties_by=(
        space.Rule({"failure": ("decode-abort",), "in_flight": ("yes",), "acks": ("delivered",)}, _HELD),
        space.Rule({"acks": ("lost", "late")}, _GUARD_ABORT),
        space.Rule({"in_flight": ("no",)}, _ON_ACK_IDLE),
        space.Rule({"failure": ("none",)}, ("lifetime-committed",)),
    ),
    aliases={f"{old}{suffix}": f"{new}{suffix}" for suffix in ("", "-with-deferred-release") for old, new in (
        ("abort-in-flight-acks-lost", "abort-acks-lost"), ("abort-in-flight-acks-late", "abort-acks-late"),
        ("healthy-transfer-in-flight", "healthy-transfer"))},
    site=_site,
)

LIFETIME_DRAIN = space.Space(
    probe="lifetime-drain",
    dimensions=(
        space.Dimension(_IN_FLIGHT.name, _IN_FLIGHT.values, core=True, reads=_IN_FLIGHT.reads),
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
        space.Dimension(_ACKS.name, _ACKS.values, over={"in_flight": ("yes",), "clears": ("no",)}, reads=_ACKS.reads),
        DEFERRED_CONFIG,
    ),
    unreachable=(space.Unreachable("with nothing sent, prefill has no write to clear the room under",
                                   {"in_flight": ("no",), "clears": ("yes",)}),),
    bug=({"in_flight": ("yes",), "acks": ("delivered",), "clears": ("no", "yes")}, {"in_flight": ("no",)}),
    duties_by=(
        space.Rule({"in_flight": ("yes",), "acks": ("delivered",), "decode_ranks": ("one",), "clears": ("no", "yes")},
                   (*_ACKED, *_HELD)),
        space.Rule({"decode_ranks": ("two",)}, ("lifetime-late-abort-acked", *_HELD)),
        space.Rule({"acks": ("lost", "late")}, _GUARD_ABORT),
        space.Rule({"in_flight": ("no",)}, _ON_ACK_IDLE),
        space.Rule({"clears": ("late",)}, _ON_ACK),
    ),
    aliases={f"{old}{suffix}": f"{new}{suffix}" for suffix in ("", "-with-deferred-release") for old, new in (
        ("in-flight", "abort-in-flight"), ("in-flight-prefill-clears-before-drain", "prefill-clears-before-drain"),
        ("in-flight-prefill-clears-before-drain-second-rank", "abort-after-room-cleared"),
        ("in-flight-acks-lost", "acks-lost"), ("in-flight-acks-late", "acks-late"),
        ("nothing-in-flight", "abort-nothing-in-flight"),
        ("in-flight-prefill-concludes-late", "prefill-concludes-late"),
        ("nothing-in-flight-prefill-concludes-late", "nothing-in-flight-prefill-concludes-late"))},
    site=_site,
)

LIFETIME_PEERS = space.Space(
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
        space.Dimension("acks", (_ACKS.values[0], _ACKS.values[2], space.Value(
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
    bug=({"acks": ("delivered",)},),
    duties_by=(
        space.Rule({"stale": ("no",), "acks": ("delivered",)}, (*_ACKED, *_HELD)),
        space.Rule({"stale": ("yes",)}, _HELD),
        space.Rule({"acks": ("late", "reset")}, _GUARD_ABORT),
    ),
    aliases={f"{old}{suffix}": f"{new}{suffix}" for suffix in ("", "-with-deferred-release") for old, new in (
        ("one-rank", "abort-in-flight"), ("one-rank-stale-ack-of-previous-request", "stale-ack-of-previous-request"),
        ("two-decode-ranks-abort-room-cleared-between", "two-decode-ranks-room-cleared-between"))},
    site=_site,
)

LIFETIME_FAILURES = space.Space(
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
        ), core=True, reads=("send_metadata", "init_time", "force_arm", "ensure_abort_notified")),
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
        ), over={"failure": ("write-fails",)}, reads=("_poison_unsettled_send", "_deferred_ack_poisoned_rooms")),
        DEFERRED_CONFIG,
    ),
    bug=({"prefill_ranks": ("two",)}, {"failed_write": ("keeps-writing",)}, {"failure": ("metadata-send-fails",)}),
    duties_by=(
        space.Rule({"prefill_ranks": ("two",)}, (*_HELD, "lifetime-not-held-forever")),
        space.Rule({"failed_write": ("keeps-writing",)}, (*_HELD, "lifetime-not-held-forever")),
        space.Rule({"failure": ("write-fails",), "prefill_ranks": ("one",), "failed_write": ("stops",)}, _GUARD_ABORT),
        # decode's own failure: the rank that took the destinations is told, drains, acknowledges; no timeout needed
        space.Rule({"failure": ("metadata-send-fails",)},
                   ("lifetime-failure-handled", *_HELD, *_ACKED, "lifetime-not-held-forever")),
        space.Rule({"failure": ("bootstrap-fails",)}, ("lifetime-released-at-once", *_GUARD_ABORT)),
    ),
    aliases={"": "failure-nothing-else-in-flight", "with-deferred-release": "failure-nothing-else-in-flight-with-deferred-"
             "release", **{f"other-rank-fails-while-writing-failed-write-keeps-landing{suffix}":
                           f"other-rank-fails-failed-write-keeps-landing{suffix}"
                           for suffix in ("", "-with-deferred-release")}},
    site=_site,
)

LIFETIME_SPACES = (LIFETIME_DEFAULT, LIFETIME_DRAIN, LIFETIME_PEERS, LIFETIME_FAILURES)


def _handoff_rank(effects: Effects) -> Mapping[str, Any]:
    return effects["decode"][0]


def _ran(effects: Effects) -> bool:
    return any(_subject(effects) in batch["runs"] for batch in effects["batches"])


def _caught(effects: Effects) -> bool:
    """A handoff not read ended as an error: finished with an abort, streamed once, its pages back once,
    their KV not kept in the prefix cache."""
    if _ran(effects):
        return True
    rank, rid = _handoff_rank(effects), _subject(effects)
    freed = [p for f in _frees(rank, rid) for p in f["pages"]]
    return (_streamed_once_with({"streamed": rank["streamed"], "request": effects["request"]}, None)
            and effects["request"]["finished"] and sorted(freed) == sorted(rank["requests"][rid]["pages"])
            and not rank["double_frees"] and not any(f.get("cached") for f in _frees(rank, rid)))


def _declared_unverified(effects: Effects) -> bool:
    """Pages read that the request's own write did not reach were read only after the tree logged
    that it admitted the handoff unverified."""
    if not _handoff_rank(effects)["unwritten_reads"]:
        return True
    return any("checksum skipped" in r["message"].lower() or "unverified" in r["message"].lower()
               for r in effects["log"])


HANDOFF_DUTIES = (
    Duty("handoff-no-unwritten-read", 39500,
         "decode read no page that the request's own write did not reach (transfer-complete is not proof)",
         lambda e: not _handoff_rank(e)["unwritten_reads"]),
    Duty("handoff-caught-released", 39500,
         "a handoff decode did not read ended as an error: finished with an abort, streamed once, its pages given back "
         "once, their KV not kept in the prefix cache", 
         _caught),
    Duty("handoff-unverified-declared", 39500,
         "where the checksum cannot compare the two layouts, a short handoff was caught or the tree logged that it "
         "admitted it unverified", _declared_unverified),
    Duty("handoff-full-accepted", 39500,
         "a full handoff was committed and read, only its own KV, and not aborted or released (a guard)",
         lambda e: _ran(e) and not _handoff_rank(e)["unwritten_reads"] and not e["request"]["finished"]
         and not _frees(_handoff_rank(e), _subject(e))),
)
DUTIES.update({duty.id: duty for duty in HANDOFF_DUTIES})
_SHORT = ("handoff-no-unwritten-read", "handoff-caught-released")
_UNCOMPARABLE = ("handoff-unverified-declared", "handoff-caught-released")

HANDOFF = space.Space(
    probe="handoff",
    dimensions=(
        space.Dimension("transfer", (
            space.Value("short", "the prefill request was cut to its 1-token placeholder (the incident's rejected "
                        "request): its last chunk sends 1 page of the 4 decode reserved", label="short-handoff",
                        says="prefill sends 1 page of the 4 decode reserved"),
            space.Value("partial", "the engine lands 2 of the 4 pages sent, then reports success", label="partial-write",
                        says="the engine landing 2 of the 4 pages sent"),
            space.Value("early", "prefill reports success while its write is still in flight", label="early-success",
                        says="success reported while the write is still in flight"),
            space.Value("full", "all 4 pages written", label="full-handoff", says="a full handoff of all 4 pages"),
        ), core=True, reads=("expected_kv_checksum", "kv_checksum_computer")),
        space.Dimension("layout", (
            space.Value("comparable", "prefill and decode hold the KV in the same layout", label=""),
            space.Value("incomparable", "prefill of another TP width: each side digests other bytes",
                        label="incomparable-layout", says="prefill of another KV layout"),
        ), over={"config": ("with-kv-checksum",), "transfer": ("short", "partial", "early")},
            reads=("kv_checksum_signature", "should_verify_kv_checksum")),
        space.Dimension("prefill", (
            space.Value("same", "prefill runs with the option as decode does", label=""),
            space.Value("without", "decode runs with the option, prefill not yet (a rolling restart): prefill sends "
                        "no digest", label="prefill-without-checksum", says="prefill not yet running the checksum"),
        ), over={"config": ("with-kv-checksum",), "transfer": ("full",)}, reads=("expected_kv_checksum",)),
        space.Dimension("config", (
            space.Value("default", "the stock server: the checksum off", label=""),
            space.Value("with-kv-checksum", "--disaggregation-enable-kv-checksum on both sides",
                        says="kv checksum on"),
        ), core=True, reads=("disaggregation_enable_kv_checksum",)),
    ),
    bug=({"transfer": ("short", "partial", "early")},),
    duties_by=(
        space.Rule({"transfer": ("short", "partial", "early"), "layout": ("comparable",)}, _SHORT),
        space.Rule({"layout": ("incomparable",)}, _UNCOMPARABLE),
        space.Rule({"transfer": ("full",)}, ("handoff-full-accepted",)),
    ),
    site=_site,
)

SPACES.update({s.probe: s for s in (*LIFETIME_SPACES, HANDOFF)})
CASES.update({s.probe: s.duty_table() for s in (*LIFETIME_SPACES, HANDOFF)})

# The code each later defence relies on, in the release that first carries it (pins.toml), by qualified name
# (whole functions, or the slice of a long one naming these): what ``diffprobe mutate`` changes, one statement
# at a time, on the lines the defence's cases run. The configuration gates themselves (an environ default, a
# backend's ``supports_deferred_decode_kv_release`` flag) are not functions: the cases read them as the
# tree's own ``__init__`` expressions compute them, and no mutant of them is counted.
_C, _M, _D = ("sglang.srt.disaggregation.common.conn", "sglang.srt.disaggregation.mooncake.conn",
              "sglang.srt.disaggregation.decode")
FIX_CODE.update({
    41023: {  # the hold and its release: what the default turns on
        f"{_D}.DecodeTransferQueue.pop_transferred": ("_defer_release", "deferred_indices"),
        f"{_D}.DecodeTransferQueue._defer_release": (),
        f"{_D}.DecodeTransferQueue.resolve_deferred_releases": ("is_abort_release_safe", "drained", "deadline", "still_held",
                                                                "to_release", "_do_release"),
        f"{_D}.DecodeTransferQueue._do_release": ("_release_request", "req_to_metadata_buffer_idx_allocator"),
        f"{_C}.CommonKVManager.is_abort_release_safe": (),
        f"{_C}.CommonKVManager.note_abort_ack": (),
        f"{_C}.CommonKVManager.register_deferred_abort_room": (),
    },
    40645: {  # the drain acknowledgement kept through clear(), and the ABORT for a cleared room still outstanding
        f"{_C}.CommonKVSender.clear": ("_deferred_ack_targets", "_staging_outstanding", "_maybe_ack_drained_abort"),
        f"{_C}.CommonKVManager._maybe_ack_drained_abort": ("_staging_outstanding", "_deferred_ack_targets",
                                                           "_send_abort_ack", "target"),
        f"{_C}.CommonKVManager.register_deferred_ack_target": ("_deferred_ack_targets",),
        f"{_M}.MooncakeKVManager.transfer_worker": ("_maybe_ack_drained_abort",),
        f"{_M}.MooncakeKVManager.start_prefill_thread": ("room_active", "register_deferred_ack_target",
                                                         "_maybe_ack_drained_abort", "_send_abort_ack"),
    },
    41402: {  # an acknowledgement per aborting decode endpoint, for its own generation of the room
        f"{_C}.CommonKVManager.register_deferred_ack_target": ("targets",),
        f"{_C}.CommonKVManager._maybe_ack_drained_abort": ("_send_abort_acks",),
        f"{_C}.CommonKVManager._send_abort_acks": (),
        f"{_C}.CommonKVManager._send_abort_ack": (),
        f"{_C}.CommonKVManager.note_abort_ack": (),
        f"{_C}.CommonKVManager.register_deferred_abort_room": (),
        f"{_C}.CommonKVManager.handle_abort_ack_message": ("note_abort_ack", "generation"),
        f"{_C}.AbortNotification.deferred_ack_target": ("AckTarget",),
        f"{_M}.MooncakeKVManager._handle_deferred_abort_notification": ("register_deferred_ack_target",),
    },
    41404: {  # failures decode did not initiate: notify and hold; a failed send that may still write: poisoned
        f"{_D}.DecodeTransferQueue.pop_transferred": ("ensure_abort_notified",),
        # the notification itself; the guards around it (a receiver never initialised, or one already notified)
        # are the decode abort's, which calls it too: no failure decode did not initiate reaches them
        f"{_C}.CommonKVReceiver.ensure_abort_notified": ("_send_abort_notification",),
        f"{_M}.MooncakeKVManager._poison_unsettled_send": (),
        f"{_C}.CommonKVManager.poison_deferred_ack_room": (),
        f"{_C}.CommonKVManager._maybe_ack_drained_abort": ("_deferred_ack_poisoned_rooms",),
        f"{_M}.MooncakeKVManager.transfer_worker": ("_poison_unsettled_send", "poison_deferred_ack_room"),
    },
    39500: {
        f"{_D}.SchedulerDisaggregationDecodeMixin._verify_kv_checksums": (),
        f"{_D}.SchedulerDisaggregationDecodeMixin._handle_kv_checksum_mismatch": (),
        f"{_D}.SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch": (),
        f"{_D}.DecodeTransferQueue._commit_transfer_to_req": ("kv_checksum_computer", "expected_kv_checksum",
                                                              "get_kv_checksum"),
        "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin.send_kv_chunk": (),
        "sglang.srt.disaggregation.utils.MetadataBuffers.set_kv_checksum": (),
        "sglang.srt.disaggregation.utils.MetadataBuffers.get_kv_checksum": (),
        "sglang.srt.disaggregation.checksum.page_indices_for_request": (),
    },
})

EXPLAINED.update({
    ("DecodeTransferQueue.resolve_deferred_releases", "return", "still_held.append((decode_req, deadline, idx, required_acks))"):
        "returning while the first entry is still held skips the entries after it: every case holds one request per "
        "decode rank at a time, so no case has a later entry to skip",
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "return", "verified.append(i)"):
        "returning after the first request verified leaves the batch's later requests unverified: every handoff case "
        "admits one request per batch, so no case has a later request to miss",
    ("SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch", "delete",
     "self.ngram_embedding_manager.prepare_for_forward(batch, chunked_req=self.chunked_req)"):
        "the n-gram embedding's preparation of the batch: no case runs a model with n-gram embeddings, and they hold "
        "no page",
})

# Later defences' mutants that behave as the tree does on every input the tree can be given (see the rule above).
EQUIVALENT.update({
    # #39500 (0.5.21)
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "delete", "if computer is None:"):
        "without a computer the commit records no expected digest (_commit_transfer_to_req sets it only when "
        "kv_checksum_computer is set), so each request carries Req's default 0 and the expected == 0 check verifies it",
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "false", "computer is None"):
        "as its deletion: with no computer every expected digest is the default 0, verified by the next check",
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "delete", "return"):
        "as the deletion of its guard: with no computer every expected digest is 0 and verified without computing",
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "delete", "if is_health_check_req(req):"):
        "prefill digests a health check as 0 (send_kv_chunk), so its expected digest is 0 and the next check verifies it",
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "false", "is_health_check_req(req)"):
        "as its deletion: a health check's expected digest is 0, verified by the next check",
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "true", "len(verified) != len(batch.reqs)"):
        "filtering a batch by the indices of all its requests keeps every request, in order",
    ("SchedulerDisaggregationDecodeMixin._handle_kv_checksum_mismatch", "delete", "if is_in_ci():"):
        "is_in_ci() reads SGLang's own test-suite switch, off wherever a server runs: the raise is the test suite's, "
        "the abort below it is serving's",
    ("SchedulerDisaggregationDecodeMixin._handle_kv_checksum_mismatch", "false", "is_in_ci()"):
        "as its deletion: the test suite's switch is off wherever a server runs",
    ("SchedulerDisaggregationDecodeMixin._handle_kv_checksum_mismatch", "delete", "if self.metrics_reporter.enable_metrics:"):
        "the guard of a metrics-only block: telemetry (mutation.TELEMETRY), which no duty reads",
    ("SchedulerDisaggregationDecodeMixin._handle_kv_checksum_mismatch", "true", "self.metrics_reporter.enable_metrics"):
        "the guard of a metrics-only block: telemetry (mutation.TELEMETRY), which no duty reads",
    ("SchedulerDisaggregationDecodeMixin._handle_kv_checksum_mismatch", "false", "self.metrics_reporter.enable_metrics"):
        "the guard of a metrics-only block: telemetry (mutation.TELEMETRY), which no duty reads",
    ("SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch", "delete", "if batch.is_empty():"):
        "a batch left empty by the verification is handed on instead of None, and its caller "
        "(get_next_disagg_decode_batch_to_run) merges or runs a prebuilt batch only when it is not empty",
    ("SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch", "false", "batch.is_empty()"):
        "as its deletion: the caller drops an empty prebuilt batch",
    ("SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch", "delete", "return None"):
        "as the deletion of its guard: the caller drops an empty prebuilt batch",
    ("SchedulerDisaggregationPrefillMixin.send_kv_chunk", "true", "last_chunk"):
        "a digest written for an earlier chunk is overwritten by the last chunk's before the metadata row is sent, "
        "which goes with the last chunk only",
    ("SchedulerDisaggregationPrefillMixin.send_kv_chunk", "false", "is_health_check_req(req)"):
        "decode never compares a health check's digest (it verifies health checks without computing)",
    ("SchedulerDisaggregationPrefillMixin.send_kv_chunk", "true", "end_idx is None"):
        "every last-chunk call gives no end (the scheduler's calls), so the end is computed either way",
    # #41402 (0.5.22)
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
    # #41404 (0.5.22)
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
})

EQUIVALENT.update({
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
})
