"""The duty table of #36988 (0.5.20): prefill result cleanup.

The result of a request aborted while its forward ran is cleaned up (sender aborted, metadata, KV, Mamba and
cache state released once), never re-queued; a late result of a retired request has no effect.

Rows are duties (id, what must hold, the check over a case's recorded effects); the case space (``SPACE``)
says which cases check which duties; ``FIX_CODE`` names the code the fix changed (what ``mutate`` mutates).
Standard library only: the host judges with it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import space
from .effects import Duty, Effects, returned, rid, streamed_once_with


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


def sender_aborted(effects: Effects) -> bool:
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


def metadata_freed(effects: Effects) -> bool:
    index = effects["before"]["metadata_buffer_index"]
    return _final(effects)["metadata_frees"] == ([index] if index >= 0 else [])


def kv_released(effects: Effects) -> bool:
    """What it held of KV and Mamba state went back in exactly one release, and nothing was
    released for a request holding neither."""
    held = _held(effects, "holds_kv") or _held(effects, "holds_mamba")
    releases = _final(effects)["kv_releases"]
    return len(releases) == (1 if held else 0) and not _final(effects)["request"]["holds_kv"]


def mamba_freed(effects: Effects) -> bool:
    releases = [r for r in _final(effects)["kv_releases"] if r["mamba"]]
    return len(releases) == (1 if _held(effects, "holds_mamba") else 0) and not _final(effects)["request"]["holds_mamba"]


def cache_finished_aborted(effects: Effects) -> bool:
    finishes = _tree_cache(effects, "finish")
    return len(finishes) == 1 and any("ABORT" in str(arg) for arg in finishes[0]["args"])


def kept_for_bootstrap(effects: Effects) -> bool:
    """Kept for its bootstrap: waiting in the transfer queue with its KV cached and held and its sender
    untouched; or, where the tree asked its sender (which answers: still bootstrapping), released once and
    re-queued once for prefill, an optimistic retry (0.5.13-0.5.15). Never aborted, freed of its metadata,
    finished or streamed."""
    final = _final(effects)
    mine, calls = rid(final), final["sender_calls"]
    if final["metadata_frees"] or final["streamed"] or final["request"]["finished"]:
        return False
    waits = (
        final["inflight_queue"] == [mine]
        and len(_cached_unfinished(effects)) == 1
        and not (calls or final["requeued"] or final["kv_releases"])
    )
    retried = (
        calls == ["poll"]
        and final["requeued"] == [mine]
        and not final["inflight_queue"]
        and len(final["kv_releases"]) == 1
        and not final["request"]["holds_kv"]
    )
    return waits or retried


def pending_chunk_cleared(e: Effects) -> bool:
    return rid(_final(e)) not in _final(e)["pending_chunk_rids"]


def not_requeued(e: Effects) -> bool:
    return (rid(_final(e)) not in _final(e)["inflight_queue"] + _final(e)["requeued"]
            and not _cached_unfinished(e))


def no_kv_chunk(e: Effects) -> bool:
    return not _final(e)["kv_chunks_sent"]


def kv_not_inserted(e: Effects) -> bool:
    return not any(r["is_insert"] for r in _final(e)["kv_releases"])


def cache_not_misinformed(e: Effects) -> bool:
    return len(_tree_cache(e, "finish")) <= 1 and all(cache_finished_aborted(e) for _ in _tree_cache(e, "finish"))


def bootstrap_settled(e: Effects) -> bool:
    return not _final(e)["request"]["pending_bootstrap"]


def finished(e: Effects) -> bool:
    return (_final(e)["request"]["finished"]
            and isinstance(_final(e)["request"]["finished_reason"], dict)
            and _final(e)["request"]["finished_reason"].get("type") == "abort")


def streamed_once(e: Effects) -> bool:
    return streamed_once_with(_final(e), None)


def late_no_effect(e: Effects) -> bool:
    return _untouched(_final(e)) and _seen(_final(e)["request"]) == _seen(e["before"])


def not_freed_early(e: Effects) -> bool:
    return _untouched(e["results"][0])


def queued_for_transfer(e: Effects) -> bool:
    return _final(e)["inflight_queue"] == [rid(_final(e))] and len(_cached_unfinished(e)) == 1


def last_chunk_sent(e: Effects) -> bool:
    return [_last_chunk(c) for c in _final(e)["kv_chunks_sent"]] == [False] * _middle_sends(e) + [True]


def yield_requeued(e: Effects) -> bool:
    return (_final(e)["requeued"] == [rid(_final(e))] and not _final(e)["inflight_queue"]
            and not _final(e)["sender_calls"] and not _final(e)["kv_chunks_sent"] and not _final(e)["streamed"])


def waits_for_bootstrap(e: Effects) -> bool:
    return not _final(e)["kv_chunks_sent"]


def healthy_kept(e: Effects) -> bool:
    return (not _final(e)["sender_calls"]
            and not _final(e)["requeued"]
            and not _final(e)["metadata_frees"]
            and not _final(e)["kv_releases"]
            and not _final(e)["streamed"]
            and not _final(e)["request"]["finished"])


DUTIES: tuple[Duty, ...] = (
    Duty("result-sender-aborted", "the request's KV sender was told to abort, once", sender_aborted),
    Duty("result-returns",
         "result processing returned: a failing sender.abort() (or anything else) did not escape",
         returned),
    Duty("result-pending-chunk-cleared", "the request left the pending chunk-send set", pending_chunk_cleared),
    Duty("result-not-requeued",
         "the aborted result was not re-queued (for transfer, prefill or bootstrap) nor cached as unfinished",
         not_requeued),
    Duty("result-no-kv-chunk", "no KV chunk was sent for it", no_kv_chunk),
    Duty("result-metadata-freed", "its metadata buffer was freed exactly once", metadata_freed),
    Duty("result-kv-released", "the KV it held was released exactly once (no release when it held none)", kv_released),
    Duty("result-kv-not-inserted", "no release inserted its KV into the radix tree", kv_not_inserted),
    Duty("result-cache-finished-aborted",
         "the tree cache (HiCache) was told once that the request ended aborted",
         cache_finished_aborted),
    Duty("result-cache-not-misinformed",
         "with HiCache storage off, the tree cache was told at most once, and only that the request ended "
         "aborted",
         cache_not_misinformed),
    Duty("result-mamba-freed", "the Mamba state it held was freed exactly once", mamba_freed),
    Duty("result-bootstrap-settled", "the request no longer waits for a bootstrap", bootstrap_settled),
    Duty("result-finished", "the request ended finished with an abort", finished),
    Duty("result-streamed-once", "the client was streamed the abort exactly once", streamed_once),
    Duty("result-late-no-effect",
         "a late result of an already retired request had no effect at all: nothing sent, freed, streamed or "
         "cached, no grammar fed, and the request as its client and its owners see it (output, finish, what it "
         "holds) left as it was",
         late_no_effect),
    Duty("result-not-freed-early",
         "nothing was freed, sent or streamed while a later chunk was still in flight",
         not_freed_early),
    Duty("result-queued-for-transfer",
         "a healthy final result was cached as unfinished and queued for transfer, once (a guard)",
         queued_for_transfer),
    Duty("result-last-chunk-sent",
         "a bootstrapped healthy request sent its last KV chunk exactly once, after any middle chunks (a "
         "guard)",
         last_chunk_sent),
    Duty("result-yield-requeued",
         "a healthy optimistic request that yields is re-queued for prefill, not aborted, sent or streamed (a "
         "guard)",
         yield_requeued),
    Duty("result-waits-for-bootstrap",
         "a healthy result whose bootstrap is pending sent no KV yet (a guard)",
         waits_for_bootstrap),
    Duty("result-kept-for-bootstrap",
         "a healthy result whose bootstrap is pending waits for it in the transfer queue, or is retried once "
         "its sender said the bootstrap is still in progress; never aborted, freed, finished or streamed (a "
         "guard)",
         kept_for_bootstrap),
    Duty("result-healthy-kept",
         "a healthy result was not aborted, freed, re-queued for prefill or streamed (a guard)",
         healthy_kept),
)

RETIRED_BEFORE_CACHE = ("result-sender-aborted", "result-returns", "result-pending-chunk-cleared", "result-not-requeued",
                        "result-no-kv-chunk", "result-metadata-freed", "result-kv-released", "result-kv-not-inserted")
RETIRED_AFTER_CACHE = ("result-mamba-freed", "result-bootstrap-settled", "result-finished", "result-streamed-once")
RETIRED_ONCE = (*RETIRED_BEFORE_CACHE, "result-cache-finished-aborted", *RETIRED_AFTER_CACHE)

HEALTHY = ("result-queued-for-transfer", "result-last-chunk-sent", "result-healthy-kept", "result-returns")
KEPT_FOR_BOOTSTRAP = ("result-kept-for-bootstrap", "result-waits-for-bootstrap", "result-returns")

# The case space: what the result processing's code tells apart (probes/space.py); the scene builder is
# probes/prefill_cleanup.py.

RETIRING = {"abort": ("pending",), "phase": ("final", "yielded")}  # where _retire_aborted_prefill_result is called
FINAL = {"phase": ("final",), "bootstrap": ("done",)}  # read on a final result whatever the bootstrap

SPACE = space.Space(
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
        space.Dimension("logprob", (
            space.Value("off", "no logprobs asked for", label=""),
            space.Value("on", "the client asked for logprobs (return_logprob): the result's logprob pointer advances "
                        "past it", label="logprob", says="asking for logprobs"),
        ), over=FINAL, reads=("return_logprob",)),
        space.Dimension("extent", (
            space.Value("unset", "no extend range recorded on it", label=""),
            space.Value("mid", "the extend range of the middle chunk that ran: it ends inside the input, so no later "
                        "chunk of it was launched", label="mid-range", says="its extend range ending inside the input"),
        ), over={"phase": ("yielded",)}, reads=("extend_range", "extend_end")),
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

# The ids of the hand-written cases the space replaced: each is still a case, meaning what it meant.
KEPT_IDS = ("aborted-final-result", "late-result-after-retire", "aborted-middle-chunk", "sender-abort-raises",
            "grammar-rejection", "mamba-before-kv", "metadata-only", "aborted-yielded-chunk",
            "healthy-final-result", "healthy-grammar-result", "healthy-chunked-result",
            "healthy-yielded-result", "healthy-yielded-bootstrapped", "healthy-optimistic-chunked",
            "healthy-optimistic-result")

# The code the fix changed, by qualified name: a function it rewrote is mutated whole; in a long function
# it touched in places, only the statements naming one of the listed names (and the blocks they open).
FIX_CODE: dict[str, tuple[str, ...]] = {
    "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin.process_batch_result_disagg_prefill": (
        "is_aborted", "_retire_aborted_prefill_result", "aborted_reqs", "disagg_prefill_inflight_queue",
        "send_kv_chunk", "cache_unfinished_disagg_prefill", "stream_output", "still_chunking",
        "inflight_middle_chunks", "prepare_abort",
    ),
    "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin._retire_aborted_prefill_result": (),
    "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin.clear_pending_chunk_send": (),
    "sglang.srt.disaggregation.utils.is_aborted": (),
}

# Mutants no case can tell from the tree, each with why, keyed by (function, operator, statement before):
# ``EQUIVALENT`` ones behave the same on every input; ``EXPLAINED`` ones do not, and stay survivors.
EQUIVALENT: dict[tuple[str, str, str], str] = {
    ("SchedulerDisaggregationPrefillMixin.process_batch_result_disagg_prefill", "insert:req.inflight_middle_chunks",
     "req.inflight_middle_chunks <= 0"):
        "inflight_middle_chunks counts a request's middle chunks still in flight, never below 0: where the test holds "
        "it is 0, and `not 0` holds too",
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
}
