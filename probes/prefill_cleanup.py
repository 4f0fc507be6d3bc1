"""Probe for fix #36988: what prefill result processing does with an aborted request.

Drives the tree's own ``SchedulerDisaggregationPrefillMixin.process_batch_result_disagg_prefill``
on a scheduler whose collaborators are strict recording doubles. Before the fix the final result
of an aborted request was treated like any other: re-inserted into the inflight (transfer) queue
and, once bootstrapped, its last KV chunk sent, even for a request that had already been retired.
After it the request is retired exactly once: sender told to abort, metadata buffer, KV, HiCache
and Mamba state freed, finished and streamed once; a late result of a retired request is ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import tree
from .case import Case, Probe
from . import duties
from .doubles import Double, Journal, KVTransport, output_streamer, strict_subject
from .plain import JSON, plain

PREFILL = "sglang.srt.disaggregation.prefill"
MIXIN = f"{PREFILL}.SchedulerDisaggregationPrefillMixin"
SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
NEXT_TOKEN = 11
METADATA_INDEX = 7


@dataclass(frozen=True)
class Shape:
    """The request as the result finds it.

    ``abort``: ``pending`` (marked while running, in ``to_finish``), ``retired`` (already
    finished with an abort and stripped of resources) or ``none``. ``chunks_in_flight`` holds,
    per processed result, whether a later chunk of the request is still running.
    """

    abort: str = "pending"
    holds_kv: bool = True
    holds_mamba: bool = False
    metadata_index: int = METADATA_INDEX
    grammar_rejects: bool = False
    grammar_accepts: bool = False
    sender_abort_fails: bool = False
    chunks_in_flight: tuple[bool, ...] = (False,)
    middle_chunks: int | None = None  # results still to come before the last (default: one per chunk in flight)
    has_sender: bool = True
    bootstrapped: bool = True  # False: optimistic prefill, bootstrap still pending
    overlap: bool = False  # overlap scheduling, where the tree has it: a middle chunk's KV is sent from result processing


def _inflight_queue(prefill: Any) -> str:
    """The scheduler's transfer (inflight) queue; the first PD trees spelt it ``infight``."""
    mixin = prefill.SchedulerDisaggregationPrefillMixin
    typo = hasattr(mixin, "process_disagg_prefill_infight_queue")
    return "disagg_prefill_infight_queue" if typo else "disagg_prefill_inflight_queue"


class ResultScene:
    """A prefill scheduler that ran a forward for one request and now processes its result(s)."""

    def __init__(self, journal: Journal, rid: str, shape: Shape) -> None:
        self.journal = journal
        self.shape = shape
        prefill = tree.module(PREFILL)
        self.overlap = shape.overlap and tree.overlap_prefill(prefill)
        self.releases: list[dict[str, JSON]] = []
        tree.single_rank_polls(prefill, journal)
        if hasattr(prefill, "release_kv_cache"):  # earlier trees call the tree cache directly
            prefill.release_kv_cache = journal.method("mem_cache", "release_kv_cache", self._release_kv_cache)
        self.result_cls = tree.batch_result_class()
        self.req = self._request(journal, rid, shape)
        streamer, self.streamed = output_streamer(journal)
        # The tree's own Scheduler: its methods run; only those it has can be recorded instead.
        metadata = Double(journal, "metadata_allocator", recorded=("free",))  # shared, as in the server
        self.scheduler = strict_subject(
            tree.resolve(SCHEDULER),
            journal,
            "scheduler",
            batch_result_processor=Double(
                journal,
                "batch_result_processor",
                recorded=("move_logprobs_to_cpu",),
                snapshot_auxiliary_output_starts=lambda batch, result: [],
            ),
            spec_algorithm=Double(journal, "spec_algorithm", is_eagle=lambda: False),
            tree_cache=Double(
                journal,
                "tree_cache",
                recorded=("cache_unfinished_req", "checkpoint", "finish"),
                supports_mamba=lambda: False,
                # what ``release_kv_cache`` does, called directly by trees that predate it
                cache_finished_req=lambda req, **flags: self._release_kv_cache(req, None, **flags),
            ),
            output_streamer=streamer,
            metrics_reporter=Double(
                journal, "metrics_reporter", recorded=("report_prefill_stats",), enable_metrics=False
            ),
            req_to_metadata_buffer_idx_allocator=metadata,
            send_kv_chunk=journal.method("scheduler", "send_kv_chunk"),
            maybe_send_health_check_signal=journal.method("scheduler", "maybe_send_health_check_signal"),
            **{_inflight_queue(prefill): []},
            # with overlap scheduling, trees before 0.5.4 take the forward's tokens from the worker
            tp_worker=Double(
                journal,
                "tp_worker",
                resolve_batch_result=lambda bid: self._worker_answer("resolve_batch_result"),
                resolve_last_batch_result=lambda launch_done=None: self._worker_answer("resolve_last_batch_result"),
            ),
            # where a yielded optimistic request would be re-queued
            waiting_queue=[],
            # the tree's own bootstrap queue: 0.5.13-0.5.15 finalize an optimistic request's bootstrap there
            disagg_prefill_bootstrap_queue=strict_subject(
                prefill.PrefillBootstrapQueue,
                journal,
                "prefill_bootstrap_queue",
                queue=[],
                token_to_kv_pool=Double(journal, "token_to_kv_pool", page_size=1),
                req_to_metadata_buffer_idx_allocator=metadata,
            ),
            disagg_prefill_pending_chunk_rids=set() if shape.abort == "retired" else {self.req.rid},
            enable_hicache_storage=True,
            chunked_req=None,
            # without overlap, middle chunks are sent by the chunked-prefill step, not here
            enable_overlap=self.overlap,
            # a rank that logs no stats, for trees whose own metrics methods run here (0.5.7-0.5.12)
            temp_prefill_info=None,
            enable_metrics=False,
            is_stats_logging_rank=False,
            current_scheduler_metrics_enabled=False,
            # read by the optimistic-prefill retry path of the trees that have it (0.5.13 on)
            server_args=Double(
                journal, "server_args", **tree.server_defaults("optimistic_prefill_retries", "optimistic_prefill_attempts")
            ),
            attn_cp_cpu_group=Double(journal, "attn_cp_cpu_group"),
            attn_tp_cpu_group=Double(journal, "attn_tp_cpu_group"),
        )
        self.batch = Double(
            journal,
            "batch",
            reqs=[self.req],
            spec_info=None,
            prefill_stats=None,
            dp_cooperation_info=None,
            return_logprob=False,
            next_batch_sampling_info=None,
        )
        self.before = tree.request_state(self.req)
        self.snapshots: list[dict[str, JSON]] = []

    @staticmethod
    def _request(journal: Journal, rid: str, shape: Shape) -> Any:
        req = tree.make_req(rid, 16, "PREFILL")
        if not shape.bootstrapped and not hasattr(req, "pending_bootstrap"):
            raise tree.Missing("sglang.srt.managers.schedule_batch.Req.pending_bootstrap")  # no optimistic prefill
        if not shape.bootstrapped and any(shape.chunks_in_flight):
            # a later chunk in flight while the bootstrap is pending: only trees that keep chunking an optimistic
            # request until a bootstrapped one waits (0.5.16 on); before, process_prefill_chunk stops it
            tree.resolve(f"{MIXIN}.has_bootstrapped_waiting_req")
        poll = tree.kv_poll()
        transport = KVTransport(
            journal,
            # what a sender answers a tree that asks: handshake done, or (optimistic) still in progress
            poll_state=poll.WaitingForInput if shape.bootstrapped else poll.Bootstrapping,
            abort_error=RuntimeError("transport is down") if shape.sender_abort_fails else None,
        )
        req.disagg_kv_sender = transport.endpoint("sender", backend=None) if shape.has_sender else None
        if shape.has_sender:  # the base sender's answer: decode holds no prefix of this request
            name = req.disagg_kv_sender.double_name()
            object.__setattr__(
                req.disagg_kv_sender, "pop_decode_prefix_len", journal.method(name, "pop_decode_prefix_len", lambda: 0)
            )
        req.pending_bootstrap = not shape.bootstrapped
        req.metadata_buffer_index = shape.metadata_index
        middle = len(shape.chunks_in_flight) - 1 if shape.middle_chunks is None else shape.middle_chunks
        tree.set_middle_chunks(req, middle)
        if shape.holds_kv:
            tree.give_kv(req, len(req.origin_input_ids))
        if shape.holds_mamba:
            tree.give_mamba(req)
        if shape.abort == "pending":
            tree.mark_abort(req)
        elif shape.abort == "retired":
            req.finished_reason = tree.abort_reason()
        if shape.grammar_accepts:
            req.grammar = Double(journal, "grammar", recorded=("accept_token",), finished=False)
        if shape.grammar_rejects:
            req.grammar = Double(
                journal,
                "grammar",
                accept_token=journal.method(
                    "grammar", "accept_token", raises=ValueError("token not allowed")
                ),
            )
        return req

    def _release_kv_cache(self, req: Any, tree_cache: Any, **flags: Any) -> None:
        """Records the release and hands the request's KV row and Mamba slot back, as the tree
        cache would; ``is_insert`` (later spelt ``checkpoint``) says whether the KV enters the
        radix tree."""
        if self.journal.live:
            self.releases.append(
                {
                    "rid": req.rid,
                    "is_insert": bool(flags.get("is_insert", flags.get("checkpoint", True))),
                    "flags": plain(flags),
                    "kv": tree.holds_kv(req),
                    "mamba": tree.holds_mamba(req),
                }
            )
        tree.drop_kv(req)

    def _worker_answer(self, name: str) -> Any:
        return tree.worker_results(self.result.logits_output, [NEXT_TOKEN])[name]

    def drive(self) -> None:
        for in_flight in self.shape.chunks_in_flight:
            self.scheduler.chunked_req = self.req if in_flight else None
            self.result = result = tree.batch_result(self.result_cls, tree.torch().tensor([NEXT_TOKEN]))
            self.scheduler.process_batch_result_disagg_prefill(self.batch, result)
            self.snapshots.append(self._snapshot())

    def _snapshot(self) -> dict[str, JSON]:
        """Cumulative effects after one processed result."""
        calls = self.journal.calls
        return {
            "inflight_queue": [req.rid for req in getattr(self.scheduler, _inflight_queue(tree.module(PREFILL)))],
            "requeued": [req.rid for req in self.scheduler.waiting_queue]
            + [req.rid for req in self.scheduler.disagg_prefill_bootstrap_queue.queue],
            "kv_chunks_sent": [
                {"args": e["args"], "kwargs": e["kwargs"]} for e in calls("scheduler", "send_kv_chunk")
            ],
            "sender_calls": [
                e["call"] for e in self.journal.entries if str(e["actor"]).startswith("kv_sender")
            ],
            "metadata_frees": [e["args"][0] for e in calls("metadata_allocator", "free")],
            "kv_releases": list(self.releases),
            "tree_cache_calls": [{k: e[k] for k in ("call", "args", "kwargs")} for e in calls("tree_cache")],
            "streamed": [list(call) for call in self.streamed],
            "pending_chunk_rids": plain(self.scheduler.disagg_prefill_pending_chunk_rids),
            "request": tree.request_state(self.req),
        }

    def effects(self) -> dict[str, JSON]:
        return {"before": self.before, "results": self.snapshots, "overlap": self.overlap}


# --- cases ---------------------------------------------------------------------------------------


def result_case(case_id: str, role: str, title: str, shape: Shape) -> Case:
    return Case(
        id=case_id,
        site="prefill-result",
        role=role,
        title=title,
        duties=duties.declared("prefill-cleanup", case_id),
        build=lambda journal: ResultScene(journal, case_id, shape),
        requires=(f"{MIXIN}.process_batch_result_disagg_prefill",),
    )


PROBE = Probe(
    id="prefill-cleanup",
    fix=36988,
    imports=(
        "sglang.srt.managers.schedule_batch",
        "sglang.srt.sampling.sampling_params",
        "sglang.srt.server_args",
        "sglang.srt.runtime_context",
        "sglang.srt.disaggregation.utils",
        "sglang.srt.disaggregation.base",
        PREFILL,
        "sglang.srt.managers.utils",
        "sglang.srt.managers.scheduler",
    ),
    cases=(
        result_case(
            "aborted-final-result",
            "bug",
            "final prefill result of an aborted request that owns KV and a metadata buffer",
            Shape(),
        ),
        result_case(
            "late-result-after-retire",
            "bug",
            "late prefill result of a request that was already retired",
            Shape(abort="retired", holds_kv=False, metadata_index=-1),
        ),
        result_case(
            "aborted-middle-chunk",
            "bug",
            "aborted request's middle-chunk result while its last chunk is still in flight, then its last",
            Shape(chunks_in_flight=(True, False), overlap=True),
        ),
        result_case(
            "sender-abort-raises",
            "bug",
            "final result of an aborted request whose KV sender fails to abort",
            Shape(sender_abort_fails=True),
        ),
        result_case(
            "grammar-rejection",
            "bug",
            "final prefill result whose sampled token the grammar rejects",
            Shape(abort="none", grammar_rejects=True),
        ),
        result_case(
            "mamba-before-kv",
            "bug",
            "final result of an aborted request holding Mamba state but no KV and no KV sender yet",
            Shape(holds_kv=False, holds_mamba=True, metadata_index=-1, has_sender=False),
        ),
        result_case(
            "metadata-only",
            "bug",
            "final result of an aborted request holding a metadata buffer but no KV or Mamba state",
            Shape(holds_kv=False),
        ),
        result_case(
            "aborted-yielded-chunk",
            "bug",
            "aborted optimistic request's middle-chunk result when no later chunk of it is in flight",
            Shape(middle_chunks=1, bootstrapped=False),
        ),
        result_case(
            "healthy-final-result",
            "guard",
            "final prefill result of a healthy bootstrapped request",
            Shape(abort="none"),
        ),
        result_case(
            "healthy-grammar-result",
            "guard",
            "final prefill result of a healthy request whose grammar accepts the sampled token",
            Shape(abort="none", grammar_accepts=True),
        ),
        result_case(
            "healthy-chunked-result",
            "guard",
            "healthy request's middle-chunk result, then its final one",
            Shape(abort="none", chunks_in_flight=(True, False), overlap=True),
        ),
        result_case(
            "healthy-yielded-result",
            "guard",
            "healthy optimistic request's middle-chunk result when no later chunk of it is in flight (it yields)",
            Shape(abort="none", middle_chunks=1, bootstrapped=False),
        ),
        result_case(
            "healthy-yielded-bootstrapped",
            "guard",
            "healthy bootstrapped request's middle-chunk result when no later chunk of it is in flight",
            Shape(abort="none", middle_chunks=1),
        ),
        result_case(
            "healthy-optimistic-chunked",
            "guard",
            "healthy optimistic request's middle-chunk result while its last chunk is in flight, then its last",
            Shape(abort="none", chunks_in_flight=(True, False), bootstrapped=False),
        ),
        result_case(
            "healthy-optimistic-result",
            "guard",
            "final prefill result of a healthy request whose bootstrap is still pending (optimistic prefill)",
            Shape(abort="none", bootstrapped=False),
        ),
    ),
)
