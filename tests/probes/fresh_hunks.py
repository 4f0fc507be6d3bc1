"""Single-hunk changes of the fix's code that the authors of the case space had not seen (red team r2).

Each is written the way a sloppy vendor backport or refactor would change a real release's text: a
condition, a dropped or doubled call, a swapped argument, two statements reordered, ``continue`` turned
into ``break``, an off-by-one, a narrower ``except``, ``is`` for ``==``, a call moved out of its branch,
a late-result check reading the wrong field. Each entry says what the tree with it must read (the claim
of #22: "any single-hunk change of the fix's code that changes behaviour on a reachable input reads 'not
fixed' or 'regression'"), the duty (or the tree's own failure) that must say so, and, for a
behaviour-preserving change, why it preserves behaviour on every reachable input.

Every text is found once in the function on 0.5.21, 0.5.22 and 0.5.23.
Nothing of SGLang is here but the short fragments a hunk replaces.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFILL_ADD = "sglang.srt.disaggregation.prefill.PrefillBootstrapQueue.add"
DECODE_ADD = "sglang.srt.disaggregation.decode.DecodePreallocQueue.add"
PREDICATE = "sglang.srt.disaggregation.utils.is_unadmitted_reject"
IS_ABORTED = "sglang.srt.disaggregation.utils.is_aborted"
RETIRE = "sglang.srt.managers.scheduler.Scheduler.retire_unadmitted_request"
MIXIN = "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin"
RESULT = f"{MIXIN}.process_batch_result_disagg_prefill"
RETIRE_RESULT = f"{MIXIN}._retire_aborted_prefill_result"
CLEAR_PENDING = f"{MIXIN}.clear_pending_chunk_send"

GATE = "        if is_unadmitted_reject(req):\n            self.scheduler.retire_unadmitted_request(req)\n            return\n"
SENDER = "        if not self.create_sender(req, num_kv_heads):\n            return\n"
STREAM = "        self.output_streamer.stream_output([req], req.return_logprob)\n"
FINAL_ABORT = (
    "                if is_aborted(req):\n"
    "                    if self._retire_aborted_prefill_result(req):\n"
    "                        req.time_stats.set_completion_time()\n"
    "                        aborted_reqs.append(req)\n"
    "                    advance_logprob_pt(i, req)\n"
    "                    continue\n"
    "\n"
    "                # Test hook"
)
MIDDLE_ABORT = (
    "                    advance_logprob_pt(i, req)\n"
    "                    req.time_stats.set_last_chunked_prefill_finish_time()\n"
    "                    continue\n"
    "\n"
    "                if req.pending_bootstrap and not still_chunking:"
)
OWNS = "            req.kv.holds_kv or req.kv.holds_mamba or req.metadata_buffer_index >= 0\n"
METADATA_FREE = "        maybe_release_metadata_buffer(req, self.req_to_metadata_buffer_idx_allocator)\n"


@dataclass(frozen=True)
class Change:
    function: str
    old: str
    new: str
    reads: str  # what the tree with it must read: "not fixed", "regression" or (behaviour-preserving) "fixed"
    names: str | None  # a duty (or the tree's own failure) the reading must name; None for "fixed"
    why: str  # for "fixed": why behaviour is the same on every reachable input; else the input that shows it


HUNKS: dict[int, dict[str, Change]] = {
    38935: {
        "prefill-retire-falls-through": Change(
            PREFILL_ADD, GATE, GATE.replace("            return\n", ""), "not fixed", "prefill-door-rejected",
            "the rejected request is retired, then admitted anyway: a sender built, queued for bootstrap"),
        "prefill-sender-before-gate": Change(
            PREFILL_ADD, GATE + SENDER, SENDER + GATE, "not fixed", "door-no-kv-endpoint",
            "two statements reordered: a KV sender is built for the rejected request before the gate retires it"),
        "prefill-retired-twice": Change(
            PREFILL_ADD, "            self.scheduler.retire_unadmitted_request(req)\n",
            "            self.scheduler.retire_unadmitted_request(req)\n" * 2, "not fixed", "prefill-door-rejected",
            "retired (finished, released, streamed) twice"),
        "prefill-queued-twice": Change(
            PREFILL_ADD, "        self.queue.append(req)\n", "        self.queue.append(req)\n" * 2, "regression",
            "door-queued-bootstrap", "a valid request queued twice for bootstrap"),
        "decode-fake-falls-through": Change(
            DECODE_ADD, "                decode_req.kv_receiver.init(0)\n                return\n",
            "                decode_req.kv_receiver.init(0)\n", "regression", "decode-door-valid-fake",
            "the warm-up request's receiver initialised, then looked up as a real peer (early return dropped)"),
        "decode-rank-truthiness": Change(
            DECODE_ADD, "            if prefill_dp_rank is not None:\n", "            if prefill_dp_rank:\n",
            "regression", "door-receiver-initialised",
            "`is not None` for truthiness: a known peer of dp rank 0 is parked as pending"),
        "decode-gate-is-false": Change(
            DECODE_ADD, "        if not is_retracted and not is_rebootstrap and is_unadmitted_reject(req):\n",
            "        if is_retracted is False and is_rebootstrap is False and is_unadmitted_reject(req):\n", "fixed", None,
            "every caller passes the flags as bools (or leaves their False defaults): `not x` and `x is False` agree on bools"),
        "predicate-backup-truthiness": Change(
            PREDICATE, "        or req.kv.retraction_backup is not None\n", "        or req.kv.retraction_backup\n", "fixed", None,
            "a retraction backup is a RetractionBackup NamedTuple of four fields: always truthy, None otherwise"),
        "retire-stream-before-finish": Change(
            RETIRE, "        req.update_finish_state()\n" + STREAM, STREAM + "        req.update_finish_state()\n",
            "not fixed", "door-streamed-once",
            "two statements reordered: the client is streamed the request before it is finished (no 400 in it)"),
        "retire-any-session": Change(
            RETIRE, "        if req.session is not None and req.session.streaming:\n",
            "        if req.session is not None:\n", "not fixed", "door-session-kept",
            "a non-streaming session of the rejected turn is aborted as if it were streaming"),
        "retire-session-left-attached": Change(
            RETIRE, "            req.session = None\n", "", "not fixed", "door-session-released",
            "the streaming session is aborted but stays attached to the retired request"),
        "retire-cache-released-twice": Change(
            RETIRE, "        self._release_aborted_request(req)\n", "        self._release_aborted_request(req)\n" * 2,
            "not fixed", "door-cache-released", "the tree cache told twice that the request ended aborted"),
        "retire-reason-order": Change(
            RETIRE, "        reason = req.finished_reason or req.to_finish\n",
            "        reason = req.to_finish or req.finished_reason\n", "fixed", None,
            "`reason` only feeds the trace context's abort note (telemetry): what the client and the queues see is the same"),
    },
    36988: {
        "predicate-type-is": Change(
            IS_ABORTED, "    return isinstance(req.to_finish, FINISH_ABORT) or isinstance(\n        req.finished_reason, FINISH_ABORT\n    )",
            "    return type(req.to_finish) is FINISH_ABORT or type(req.finished_reason) is FINISH_ABORT", "fixed", None,
            "nothing in the tree subclasses FINISH_ABORT, so isinstance and an exact type test agree"),
        "final-abort-double-free-metadata": Change(
            RETIRE_RESULT, METADATA_FREE,
            "        self.req_to_metadata_buffer_idx_allocator.free(req.metadata_buffer_index)\n" + METADATA_FREE,
            "not fixed", "result-metadata-freed", "a resource freed twice: the metadata slot goes back to the allocator twice"),
        "release-kv-twice": Change(
            RETIRE_RESULT, "            release_kv_cache(", "            release_kv_cache(req, self.tree_cache)\n            release_kv_cache(",
            "regression", "the tree's code raised TypeError",
            "the KV row released twice, once without the keyword-only checkpoint flag 0.5.23's release_kv_cache requires: "
            "the tree's own release (which the cases run) raises TypeError, and a healthy request behind the aborted one "
            "in its batch is never processed (before the cases ran the tree's release, a double took the call: "
            "'not fixed', result-kv-released)"),
        "cache-finished-success": Change(
            RETIRE_RESULT, "        self.tree_cache.finish(req.cache_request_handle, CacheRequestOutcome.ABORT)\n",
            "        self.tree_cache.finish(req.cache_request_handle, CacheRequestOutcome.SUCCESS)\n", "not fixed",
            "result-cache-finished-aborted", "the tree cache told the aborted request ended well"),
        "owns-without-mamba": Change(
            RETIRE_RESULT, OWNS, "            req.kv.holds_kv or req.metadata_buffer_index >= 0\n", "not fixed", "result-mamba-freed",
            "a late-result check reading the wrong fields: a request holding only Mamba state passes for retired"),
        "owns-by-sender": Change(
            RETIRE_RESULT, OWNS, "            req.disagg_kv_sender is not None\n", "not fixed", "result-mamba-freed",
            "the late-result check looks at the sender, not at what the request holds"),
        "pending-chunk-wrong-key": Change(
            CLEAR_PENDING, "discard(req.rid)", "discard(req)", "not fixed", "result-pending-chunk-cleared",
            "the pending chunk set is keyed by rid; discarding the request object leaves the entry"),
        "final-result-off-by-one": Change(
            RESULT, "            if req.inflight_middle_chunks <= 0:\n", "            if req.inflight_middle_chunks < 0:\n",
            "regression", "result-queued-for-transfer", "a final result (no middle chunk in flight) taken for a middle chunk's"),
        "still-chunking-off-by-one": Change(
            RESULT, ">= len(req.origin_input_ids)", "> len(req.origin_input_ids)", "regression", "result-kept-for-bootstrap",
            "a last chunk launched right to the end of the input no longer counts as in flight"),
        "still-chunking-equality": Change(
            RESULT, "still_chunking = self.chunked_req is req or (", "still_chunking = self.chunked_req == req or (",
            "fixed", None, "Req defines no __eq__ (identity), and chunked_req is a Req or None"),
        "mask-reason-after-retire": Change(
            RESULT, "                    req.to_finish = sampling_mask_finish_reason\n",
            "", "not fixed", "result-finished", "the sampling-mask rejection retired without its finish reason set"),
        "grammar-check-reads-finished": Change(
            RESULT, "                    req.grammar.finished = req.finished()\n                    if is_aborted(req):\n",
            "                    req.grammar.finished = req.finished()\n                    if req.finished():\n",
            "fixed", None, "prepare_abort sets finished_reason itself, and every request aborted before this point took "
            "an earlier branch (continue): here is_aborted(req) and req.finished() agree"),
    },
}

# Found by r2 as changes no case built the input for (they read "fixed" then); each is now a case of the generated
# space (a batch of two with an aborted request ahead or behind, metadata slot 0, a data-parallel prefill peer, a
# streaming rejected request, a transport's own exception class). One was behaviour-preserving after all.
FOUND: dict[int, dict[str, Change]] = {
    38935: {
        "predicate-metadata-off-by-one": Change(
            PREDICATE, "        or req.metadata_buffer_index >= 0\n", "        or req.metadata_buffer_index > 0\n",
            "regression", "door-keeps-resources",
            "a re-entering request holding metadata buffer 0 (the allocator's first slot) is retired at the door and "
            "its buffer leaks; every case that holds a buffer holds slot 7"),
        "prefill-gate-spares-streaming": Change(
            PREFILL_ADD, "        if is_unadmitted_reject(req):\n", "        if is_unadmitted_reject(req) and not req.stream:\n",
            "not fixed", "door-not-queued",
            "a guard for non-streaming requests only: a rejected request that streams its response (the usual client) "
            "is admitted; #22 names streaming as a dimension, and no admission case streams (Req.stream is False)"),
        "decode-init-rank-zero": Change(
            DECODE_ADD, "prefill_dp_rank)\n                return\n", "0)\n                return\n", "regression",
            "door-receiver-initialised",
            "a known prefill peer's receiver initialised with dp rank 0 whatever rank the peer resolved (a prefill "
            "deployment of dp_size > 1: room % dp_size, or the rank the request names); the one known peer of every "
            "case has dp_size 1, whose rank is 0"),
        "retire-logprob-dropped": Change(
            RETIRE, STREAM, STREAM.replace("req.return_logprob", "False"), "fixed", None,
            "a request reaches the retire path only rejected at intake, and the tree's own rejection "
            "(Req.set_finish_with_abort) clears return_logprob: the flag is False on every reachable input (the "
            "logprob dimension's cases ask for logprobs and the output streamer records the flag streamed)"),
    },
    36988: {
        "final-abort-break": Change(
            RESULT, FINAL_ABORT, FINAL_ABORT.replace("continue\n", "break\n"), "regression", "result-queued-for-transfer",
            "`continue` turned into `break`: in a batch [aborted, healthy], the healthy request's result is never "
            "processed (not queued for transfer, KV never sent, decode waits forever); every case's batch holds one request"),
        "middle-abort-break": Change(
            RESULT, MIDDLE_ABORT, MIDDLE_ABORT.replace("continue\n", "break\n"), "regression", "result-queued-for-transfer",
            "the same in the middle-chunk branch: the requests after an aborted chunked one are dropped from the batch"),
        "aborted-reqs-rebound": Change(
            RESULT, FINAL_ABORT, FINAL_ABORT.replace("aborted_reqs.append(req)", "aborted_reqs = [req]"), "not fixed",
            "result-streamed-once",
            "two aborted requests in one batch: only the last is streamed its abort, the first client never hears"),
        "owns-metadata-off-by-one": Change(
            RETIRE_RESULT, OWNS, OWNS.replace(">= 0", "> 0"), "not fixed", "result-metadata-freed",
            "an aborted request holding only metadata buffer 0 passes for already retired: slot 0 leaks, never "
            "finished or streamed; every case that holds a buffer holds slot 7"),
        "sender-abort-narrow-except": Change(
            RETIRE_RESULT, "            except Exception:\n", "            except RuntimeError:\n", "not fixed",
            "result-returns",
            "a sender.abort() failing with another exception (OSError, KeyError from the transport's room table) "
            "escapes result processing; the case's failing sender raises RuntimeError only"),
    },
}

for _fix, _found in FOUND.items():
    HUNKS[_fix].update(_found)


def as_json(changes: dict[str, Change]) -> list[dict[str, str]]:
    return [{"id": hid, "function": c.function, "old": c.old, "new": c.new} for hid, c in changes.items()]
