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


def _names(value: Any, rid: str) -> bool:
    """Whether a recorded argument names the request: its rid, or a handle holding it."""
    if isinstance(value, dict):
        return any(_names(item, rid) for item in value.values())
    if isinstance(value, list):
        return any(_names(item, rid) for item in value)
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
        return _names(args, _rid(effects)) and any(str(arg).endswith(".ABORT") for arg in args)
    return calls[0]["call"] == "release_aborted_request" and _names(args, _rid(effects))


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
        and not e["queues"].get("pending"),
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
        ), over={"door": ("decode",), "entry": ("fresh",)},
            reads=("prefill_dp_rank", "_resolve_prefill_dp_rank", "prefill_info_table")),
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
            ({"peer": ("known",), "transfer": ("real",)}, AT_DECODE),
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
        space.Dimension("sender", (
            space.Value("ready", "the KV sender the prefill door built", label=""),
            space.Value("fails", "its KV sender's abort() raises (the transport is down)", label="sender-fails",
                        says="its KV sender failing to abort"),
            space.Value("none", "no KV sender built yet", label="no-sender", says="no KV sender yet"),
        ), over=RETIRING, reads=("disagg_kv_sender", "sender")),
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
