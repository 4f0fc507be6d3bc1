"""The duty table of #39500 (0.5.21): the handoff checksum.

With ``--disaggregation-enable-kv-checksum``, decode never reads pages the request's own write did not reach.

Rows are duties (id, what must hold, the check over a case's recorded effects); the case space (``SPACE``)
says which cases check which duties; ``FIX_CODE`` names the code the fix changed (what ``mutate`` mutates).
Standard library only: the host judges with it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import space
from .duties_lifetime import DECODE, frees, site, subject
from .effects import Duty, Effects, streamed_once_with


def _handoff_rank(effects: Effects) -> Mapping[str, Any]:
    return effects["decode"][0]


def _ran(effects: Effects) -> bool:
    return any(subject(effects) in batch["runs"] for batch in effects["batches"])


def caught(effects: Effects) -> bool:
    """A handoff not read ended as an error: finished with an abort, streamed once, its pages back once,
    their KV not kept in the prefix cache."""
    if _ran(effects):
        return True
    rank, rid = _handoff_rank(effects), subject(effects)
    freed = [p for f in frees(rank, rid) for p in f["pages"]]
    return (streamed_once_with({"streamed": rank["streamed"], "request": effects["request"]}, None)
            and effects["request"]["finished"] and sorted(freed) == sorted(rank["requests"][rid]["pages"])
            and not rank["double_frees"] and not any(f.get("cached") for f in frees(rank, rid)))


def declared_unverified(effects: Effects) -> bool:
    """Pages read that the request's own write did not reach were read only after the tree logged
    that it admitted the handoff unverified."""
    if not _handoff_rank(effects)["unwritten_reads"]:
        return True
    return any("checksum skipped" in r["message"].lower() or "unverified" in r["message"].lower()
               for r in effects["log"])


def no_unwritten_read(e: Effects) -> bool:
    return not _handoff_rank(e)["unwritten_reads"]


def beside_accepted(e: Effects) -> bool:
    """The healthy request batched with the subject ran, read only its own KV, and was not aborted or released."""
    rank, other = _handoff_rank(e), e["beside"]["rid"]
    return (any(other in batch["runs"] for batch in e["batches"])
            and not any(r["rid"] == other for r in rank["unwritten_reads"])
            and not e["beside"]["request"]["finished"] and not frees(rank, other))


def full_accepted(e: Effects) -> bool:
    return (_ran(e) and not _handoff_rank(e)["unwritten_reads"] and not e["request"]["finished"]
            and not frees(_handoff_rank(e), subject(e)))


DUTIES: tuple[Duty, ...] = (
    Duty("handoff-no-unwritten-read",
         "decode read no page that the request's own write did not reach (transfer-complete is not proof)",
         no_unwritten_read),
    Duty("handoff-caught-released",
         "a handoff decode did not read ended as an error: finished with an abort, streamed once, its pages "
         "given back once, their KV not kept in the prefix cache",
         caught),
    Duty("handoff-unverified-declared",
         "where the checksum cannot compare the two layouts, a short handoff was caught or the tree logged "
         "that it admitted it unverified",
         declared_unverified),
    Duty("handoff-full-accepted",
         "a full handoff was committed and read, only its own KV (with the prefix decode's cache held for it), and "
         "not aborted or released (a guard)",
         full_accepted),
    Duty("handoff-beside-accepted",
         "a full handoff batched with one decode did not read was read, only its own KV, and not aborted or "
         "released: dropping the caught one keeps the rest of its batch (a guard)",
         beside_accepted),
)
SHORT = ("handoff-no-unwritten-read", "handoff-caught-released")
UNCOMPARABLE = ("handoff-unverified-declared", "handoff-caught-released")

SPACE = space.Space(
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
        space.Dimension("batch", (
            space.Value("alone", "the subject's is the only handoff decode commits in its step", label=""),
            space.Value("beside", "another request's full handoff, in the next room from the same prefill, commits in "
                        "the same decode step and is batched ahead of the subject's",
                        label="beside-a-full-handoff", says="batched behind another request's full handoff"),
            space.Value("beside-health-check", "a health check's full handoff (its rid as the tree prefixes one: prefill "
                        "digests it as 0, decode admits it without computing), in the next room from the same prefill, "
                        "commits in the same decode step and is batched ahead of the subject's",
                        label="beside-a-health-check", says="batched behind a health check's handoff"),
            space.Value("beside-unverified", "another request's full handoff from a prefill instance not yet running the "
                        "option (a rolling restart: it sends no digest), in the next room, commits in the same decode "
                        "step and is batched ahead of the subject's", label="beside-an-unverified-handoff",
                        says="batched behind a handoff its prefill sent no digest for"),
        ), over={"config": ("with-kv-checksum",), "transfer": ("short",)}, reads=("mismatched", "verified", "is_health_check_req")),
        space.Dimension("decode_cache", (
            space.Value("miss", "decode's prefix cache holds nothing of the prompt", label=""),
            space.Value("prefix-hit", "decode's prefix cache (--disaggregation-decode-enable-radix-cache) holds the "
                        "prompt's first 2 tokens, the KV prefill computed and sent for an earlier request with that "
                        "prefix (prefill's own prefix cache kept the same): decode reserves, and prefill sends, only the "
                        "other 2", label="decode-prefix-hit", says="decode holding the prompt's first 2 tokens in its "
                        "prefix cache"),
        ), over={"transfer": ("full", "early")}, reads=("cache_protected_len", "disagg_decode_prefix_len")),
        space.Dimension("chunks", (
            space.Value("one", "prefill sends the prompt's KV with its last chunk", label=""),
            space.Value("two", "chunked prefill sends the prompt's first 2 tokens as a chunk of their own (not the last: "
                        "no digest, no metadata), then the rest with the last chunk", label="two-chunks",
                        says="sent in two chunks"),
        ), over={"transfer": ("full",)}, reads=("last_chunk",)),
        space.Dimension("config", (
            space.Value("default", "the stock server: the checksum off", label=""),
            space.Value("with-kv-checksum", "--disaggregation-enable-kv-checksum on both sides",
                        says="kv checksum on"),
        ), core=True, reads=("disaggregation_enable_kv_checksum",)),
    ),
    bug=({"transfer": ("short", "partial", "early")},),
    duties_by=(
        space.Rule({"transfer": ("short", "partial", "early"), "layout": ("comparable",)}, SHORT),
        space.Rule({"layout": ("incomparable",)}, UNCOMPARABLE),
        space.Rule({"transfer": ("full",)}, ("handoff-full-accepted",)),
        space.Rule({"batch": ("beside", "beside-health-check", "beside-unverified")}, ("handoff-beside-accepted",)),
    ),
    site=site,
)

# The code the fix relies on, in the release that first carries it (pins.toml), by qualified name (whole
# functions, or the slice of a long one naming these): what ``diffprobe mutate`` changes, one statement at a
# time, on the lines the cases run.
FIX_CODE: dict[str, tuple[str, ...]] = {
    f"{DECODE}.SchedulerDisaggregationDecodeMixin._verify_kv_checksums": (),
    f"{DECODE}.SchedulerDisaggregationDecodeMixin._handle_kv_checksum_mismatch": (),
    f"{DECODE}.SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch": (),
    f"{DECODE}.DecodeTransferQueue._commit_transfer_to_req": ("kv_checksum_computer", "expected_kv_checksum",
                                                          "get_kv_checksum"),
    "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin.send_kv_chunk": (),
    "sglang.srt.disaggregation.utils.MetadataBuffers.set_kv_checksum": (),
    "sglang.srt.disaggregation.utils.MetadataBuffers.get_kv_checksum": (),
    "sglang.srt.disaggregation.checksum.page_indices_for_request": (),
}

# Mutants no case can tell from the tree, each with why, keyed by (function, operator, statement before):
# ``EQUIVALENT`` ones behave the same on every input; ``EXPLAINED`` ones do not, and stay survivors.
_METRICS = "the guard of a metrics-only block: telemetry (mutation.TELEMETRY), which no duty reads"
_NO_COMPUTER = ("as the deletion of its guard: without a computer every expected digest is the default 0, verified "
                "without computing")
_CI = "is_in_ci() is off wherever a server runs: a condition joined to it, or its test suite's own switch, changes nothing"
_INJECTION = ("SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB is upstream CI's fault injection, 0 wherever a server runs: "
              "with it 0 the injection never fires, however its test is changed")
EQUIVALENT: dict[tuple[str, str, str], str] = {
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "delete",
     "messages[i] = f'KV checksum mismatch req={req.rid} bootstrap_room={req.bootstrap_room} expected={..."):
        "the message only words the mismatch for the log and for _handle_kv_checksum_mismatch, which raises it only "
        "under is_in_ci() (never in a server); without it the tree words it as a peer rank's: the request is still "
        "dropped from the batch, aborted with its own constant \"KV checksum mismatch\" and streamed, as before",
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "insert:batch.reqs", "computer is None"): _NO_COMPUTER,
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "false",
     "not kv_manager.should_verify_kv_checksum(_bootstrap_addr(req))"):
        "should_verify_kv_checksum answers True for every peer in the trees that call it (conditions.REASONS)",
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "delete",
     "if mismatch_prob > 0 and prealloc_queue.kv_checksum_mismatch_injector.random() < mismatch_prob:"): _INJECTION,
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "false",
     "mismatch_prob > 0 and prealloc_queue.kv_checksum_mismatch_injector.random() < mismatch_prob"): _INJECTION,
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "true", "mismatch_prob > 0"): _INJECTION,
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "false", "mismatch_prob > 0"): _INJECTION,
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "negate", "mismatch_prob > 0"): _INJECTION,
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "true",
     "prealloc_queue.kv_checksum_mismatch_injector.random() < mismatch_prob"): _INJECTION,
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "false",
     "prealloc_queue.kv_checksum_mismatch_injector.random() < mismatch_prob"): _INJECTION,
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "negate",
     "prealloc_queue.kv_checksum_mismatch_injector.random() < mismatch_prob"): _INJECTION,
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "delete", "if not any(mismatched):"):
        "with no request mismatched the loop below handles none and the filter keeps every request, in order",
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "false", "not any(mismatched)"):
        "as its deletion: with none mismatched the filter keeps every request, in order",
    ("SchedulerDisaggregationDecodeMixin._handle_kv_checksum_mismatch", "insert:req.return_logprob", "is_in_ci()"): _CI,
    ("SchedulerDisaggregationDecodeMixin._handle_kv_checksum_mismatch", "insert:req.return_logprob",
     "is_in_ci() and envs.SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB.get() == 0"): _CI,
    ("SchedulerDisaggregationDecodeMixin._handle_kv_checksum_mismatch", "delete",
     "if is_in_ci() and envs.SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB.get() == 0:"): _CI,
    ("SchedulerDisaggregationDecodeMixin._handle_kv_checksum_mismatch", "false",
     "is_in_ci() and envs.SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB.get() == 0"): _CI,
    ("SchedulerDisaggregationDecodeMixin._handle_kv_checksum_mismatch", "true",
     "envs.SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB.get() == 0"): _CI,
    ("SchedulerDisaggregationDecodeMixin._handle_kv_checksum_mismatch", "false",
     "envs.SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB.get() == 0"): _CI,
    ("SchedulerDisaggregationDecodeMixin._handle_kv_checksum_mismatch", "negate",
     "envs.SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB.get() == 0"): _CI,
    ("SchedulerDisaggregationDecodeMixin._handle_kv_checksum_mismatch", "negate", "self.metrics_reporter.enable_metrics"):
        _METRICS,
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
        _METRICS,
    ("SchedulerDisaggregationDecodeMixin._handle_kv_checksum_mismatch", "true", "self.metrics_reporter.enable_metrics"):
        _METRICS,
    ("SchedulerDisaggregationDecodeMixin._handle_kv_checksum_mismatch", "false", "self.metrics_reporter.enable_metrics"):
        _METRICS,
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
}
EXPLAINED: dict[tuple[str, str, str], str] = {
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "delete", "req.expected_kv_checksum = 0"):
        "without it a request verified once is verified again when a retraction brings it back, after decode wrote its "
        "own tokens into its last page: no handoff case retracts a request (retraction and restore are not built)",
    ("SchedulerDisaggregationDecodeMixin._verify_kv_checksums", "delete",
     "mismatched = all_reduce_flags(mismatched, self.attn_tp_cpu_group, dist.ReduceOp.MAX)"):
        "the drop set agreed across decode attention-TP ranks: the handoff probe runs one decode rank, whose reduction "
        "is its own flags",
    ("DecodeTransferQueue._commit_transfer_to_req", "true", "self._kv_checksum_comparable(signature)"):
        "comparing a digest from a prefill of another layout aborts a healthy handoff: the incomparable cases are short "
        "handoffs only, since the option's first releases require matching layouts (PR #39500), so no guard asks that a "
        "full one from another layout be accepted",
    ("SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch", "delete",
     "self.ngram_embedding_manager.prepare_for_forward(batch, chunked_req=self.chunked_req)"):
        "the n-gram embedding's preparation of the batch: no case runs a model with n-gram embeddings, and they hold "
        "no page",
}
