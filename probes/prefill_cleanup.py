"""Probe for fix #36988: what prefill result processing does with an aborted request.

Drives the tree's own ``SchedulerDisaggregationPrefillMixin.process_batch_result_disagg_prefill``
on a scheduler whose collaborators are strict recording doubles. Before the fix the final result
of an aborted request was treated like any other: re-inserted into the inflight (transfer) queue
and, once bootstrapped, its last KV chunk sent, even for a request that had already been retired.
After it the request is retired exactly once: sender told to abort, metadata buffer, KV, HiCache
and Mamba state freed, finished and streamed once; a late result of a retired request is ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import tree
from .case import Case, Probe
from . import duties_36988
from .effects import names_request
from .doubles import Double, Journal, KVTransport, output_streamer, read_sources, same_signature, strict_subject
from .plain import JSON, plain

PREFILL = "sglang.srt.disaggregation.prefill"
MIXIN = f"{PREFILL}.SchedulerDisaggregationPrefillMixin"
SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
RESULT_PROCESSOR = "sglang.srt.managers.scheduler_components.batch_result_processor.SchedulerBatchResultProcessor"
NEXT_TOKEN = 11
METADATA_INDEX = 7
COMPANION = "companion"  # the other request of a batch of two: aborted while the same forward ran
COMPANION_METADATA = 3


class TransportError(Exception):
    """A transport's own failure class: derives from Exception only, so only a handler as broad as the
    tree's ``except Exception`` catches it (a narrower one lets it escape)."""


@dataclass(frozen=True)
class Shape:
    """The request as the result finds it, from one point of the case space (``probes/duties_36988.py``
    PREFILL_CLEANUP).

    ``abort``: ``none``, ``pending`` (marked while running, in ``to_finish``) or ``retired`` (already
    finished with an abort and stripped of resources). ``steps`` holds, per processed result, what of
    the request is still in flight: ``chunking`` (its next chunk: it is the scheduler's chunked_req),
    ``last`` (its last chunk, launched ahead by overlap scheduling) or ``none``.
    """

    abort: str = "pending"
    holds_kv: bool = True
    holds_mamba: bool = False
    metadata_index: int = METADATA_INDEX
    grammar: str = "none"  # none, accepts, rejects
    mask: str = "off"  # off, ok, rejects
    discard: bool = False
    sender_abort_fails: bool = False
    failure: str = "runtime"  # what a failing sender.abort() raises: runtime (RuntimeError) or transport
    has_sender: bool = True
    steps: tuple[str, ...] = ("none",)
    middle_chunks: int = 0  # results still to come before the last
    bootstrapped: bool = True  # False: optimistic prefill, bootstrap still pending
    overlap: bool = False  # overlap scheduling: a middle chunk's KV is sent from result processing
    hicache: bool = True
    batch: str = "alone"  # alone, after-aborted (second of two), before-aborted (first of two)
    mid_range: bool = False  # its extend range that of a middle chunk (ends inside the input)
    logprob: bool = False  # the client asked for logprobs

    @classmethod
    def of(cls, point: Mapping[str, str]) -> "Shape":
        steps, middle = PHASES[point["phase"]]
        holds = point["holds"]
        return cls(
            abort=point["abort"],
            holds_kv=holds == "kv-metadata",
            holds_mamba=holds == "mamba",
            metadata_index=int(point["slot"]) if holds in ("kv-metadata", "metadata") else -1,
            grammar=point["grammar"],
            mask=point["mask"],
            discard=point["discard"] == "discarded",
            sender_abort_fails=point["sender"] == "fails",
            failure=point["failure"],
            has_sender=point["sender"] != "none",
            steps=steps,
            middle_chunks=middle,
            bootstrapped=point["bootstrap"] == "done",
            overlap=point["overlap"] == "on",
            hicache=point["hicache"] == "on",
            batch=point["batch"],
            mid_range=point["extent"] == "mid",
            logprob=point["logprob"] == "on",
        )


# phase -> (what is in flight when each result is processed, middle chunks before the last)
PHASES = {
    "final": (("none",), 0),
    "chunked": (("chunking", "none"), 1),
    "last-launched": (("last", "none"), 1),
    "yielded": (("none",), 1),
}


INSERTS = ("insert_req", "checkpoint", "cache_unfinished_req")  # tree-cache calls keeping KV in the radix tree


def _inserts(call: Mapping[str, Any]) -> bool:
    """Whether a tree-cache call made during a release kept the request's KV in the radix tree."""
    if call["call"] == "cache_finished_req":
        return bool(call["kwargs"].get("is_insert", True))
    return call["call"] in INSERTS


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
        if shape.overlap and not tree.overlap_prefill(prefill):  # no overlap loop in this tree
            raise tree.Missing(f"{MIXIN}.event_loop_overlap_disagg_prefill")
        self.overlap = shape.overlap
        self.releases: list[dict[str, JSON]] = []
        self.releasing = False  # inside the tree's own release_kv_cache
        self.spans: list[tuple[int, int, str]] = []  # journal entries each release made: (start, end, rid)
        tree.single_rank_polls(prefill, journal)
        own_release = hasattr(prefill, "release_kv_cache")  # earlier trees call the tree cache directly
        if own_release:
            prefill.release_kv_cache = self._watched_release(prefill.release_kv_cache)
        self.result_cls = tree.batch_result_class()
        self.req = self._request(journal, rid, shape)
        # the other request of a batch of two: aborted while the same forward ran, holding its KV and its own
        # metadata buffer, in the same phase as the subject's first result (it is not the chunked request)
        self.companion = None if shape.batch == "alone" else self._request(journal, COMPANION, Shape(
            abort="pending", metadata_index=COMPANION_METADATA, steps=("none",), middle_chunks=shape.middle_chunks,
            bootstrapped=shape.bootstrapped))
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
                recorded=("move_logprobs_to_cpu", "add_sampling_mask_return_values"),
                snapshot_auxiliary_output_starts=lambda batch, result: [],
                # copying a logprob request's values into it: data, not a lifetime; recorded, never run
                logprob_result_processor=Double(journal, "logprob_result_processor",
                                                recorded=("add_logprob_return_values",)),
                **self._mask_decision(),
            ),
            spec_algorithm=Double(journal, "spec_algorithm", is_eagle=lambda: False),
            tree_cache=Double(
                journal,
                "tree_cache",
                recorded=("cache_unfinished_req", "checkpoint", "finish", "insert_req", "free_kv_row", "unpin", "unlock",
                          "on_release"),
                # a mamba-capable tree cache where the request holds Mamba state (only such a cache gives it one)
                supports_mamba=lambda: shape.holds_mamba,
                claim_kv_row=lambda req: False,  # no streaming session keeps the row
                # the tree cache's own release of a finished request: inside the tree's release_kv_cache it hands
                # the row back; trees that predate release_kv_cache call it directly (the release is recorded then)
                cache_finished_req=lambda req, **flags: tree.drop_kv(req) if self.releasing
                else self._release_kv_cache(req, None, **flags),
                **(self._pools(journal) if own_release else {}),
            ),
            output_streamer=streamer,
            metrics_reporter=Double(
                journal, "metrics_reporter", recorded=("report_prefill_stats",), enable_metrics=False
            ),
            req_to_metadata_buffer_idx_allocator=metadata,
            send_kv_chunk=journal.method("scheduler", "send_kv_chunk"),
            # trees before the batch result processor copy logprob values on the scheduler itself
            add_logprob_return_values=journal.method("scheduler", "add_logprob_return_values"),
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
            disagg_prefill_pending_chunk_rids=(set() if shape.abort == "retired" else {self.req.rid})
            | ({COMPANION} if self.companion is not None else set()),
            enable_hicache_storage=shape.hicache,
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
            return_logprob=shape.logprob,  # as a real batch: whether any of its requests asked for logprobs
            next_batch_sampling_info=None,
        )
        self.before = tree.request_state(self.req)
        self.snapshots: list[dict[str, JSON]] = []

    @staticmethod
    def _request(journal: Journal, rid: str, shape: Shape) -> Any:
        req = tree.make_req(rid, 16, "PREFILL")
        if not shape.bootstrapped and not hasattr(req, "pending_bootstrap"):
            raise tree.Missing("sglang.srt.managers.schedule_batch.Req.pending_bootstrap")  # no optimistic prefill
        if not shape.bootstrapped and any(step != "none" for step in shape.steps):
            # a later chunk in flight while the bootstrap is pending: only trees that keep chunking an optimistic
            # request until a bootstrapped one waits (0.5.16 on); before, process_prefill_chunk stops it
            tree.resolve(f"{MIXIN}.has_bootstrapped_waiting_req")
        poll = tree.kv_poll()
        transport = KVTransport(
            journal,
            # what a sender answers a tree that asks: handshake done, or (optimistic) still in progress
            poll_state=poll.WaitingForInput if shape.bootstrapped else poll.Bootstrapping,
            abort_error=(TransportError if shape.failure == "transport" else RuntimeError)("transport is down")
            if shape.sender_abort_fails else None,
        )
        req.disagg_kv_sender = transport.endpoint("sender", backend=None) if shape.has_sender else None
        if shape.has_sender:  # the base sender's answer: decode holds no prefix of this request
            name = req.disagg_kv_sender.double_name()
            object.__setattr__(
                req.disagg_kv_sender, "pop_decode_prefix_len", journal.method(name, "pop_decode_prefix_len", lambda: 0)
            )
        req.pending_bootstrap = not shape.bootstrapped
        req.metadata_buffer_index = shape.metadata_index
        tree.set_middle_chunks(req, shape.middle_chunks)
        if shape.holds_kv:
            tree.give_kv(req, len(req.origin_input_ids))
        if shape.holds_mamba:
            tree.give_mamba(req)
        if shape.abort == "pending":
            tree.mark_abort(req)
        elif shape.abort == "retired":
            req.finished_reason = tree.abort_reason()
        if shape.grammar == "accepts":
            req.grammar = Double(journal, "grammar", recorded=("accept_token",), finished=False)
        elif shape.grammar == "rejects":
            req.grammar = Double(
                journal,
                "grammar",
                accept_token=journal.method(
                    "grammar", "accept_token", raises=ValueError("token not allowed")
                ),
            )
        if shape.mask != "off":
            tree.ask_sampling_mask(req)
        if shape.discard:
            tree.discard_output(req)
        if "last" in shape.steps:
            tree.launch_last_chunk(req)
        if shape.mid_range:
            tree.ran_middle_chunk(req)
        if shape.logprob:
            req.return_logprob = True
        return req

    def _pools(self, journal: Journal) -> dict[str, Any]:
        """What the tree's own release_kv_cache gives a request's rows back to: the tree's own
        ``ReqToTokenPool`` (its ``free`` runs; only the rows it frees are recorded) and the KV and Mamba
        allocators (recorded)."""
        pool = strict_subject(
            tree.resolve("sglang.srt.mem_cache.memory_pool.ReqToTokenPool"), journal, "req_to_token_pool",
            free_rows=journal.method("req_to_token_pool", "free_rows"), free_slots=[],
            mamba_allocator=Double(journal, "mamba_allocator", recorded=("free",)))
        return {"req_to_token_pool": pool,
                "token_to_kv_pool_allocator": Double(journal, "token_to_kv_pool_allocator", recorded=("free",), page_size=1)}

    def _watched_release(self, own: Callable[..., Any]) -> Callable[..., Any]:
        """The tree's own ``release_kv_cache``, run as it is; what it did is read where it lands: whether
        the tree cache was asked to keep the KV in the radix tree (an insert or checkpoint, or a
        ``cache_finished_req`` with ``is_insert``), and what the request held before."""

        def around(call: Callable[[], Any], req: Any) -> Any:
            held, start = (tree.holds_kv(req), tree.holds_mamba(req)), len(self.journal.entries)
            self.releasing = True
            try:
                return call()
            except Exception as exc:
                # the tree's own release failing on a state its own code produced (a pre-fix tree releasing a
                # request that holds no KV with a cache that is not Mamba-capable): if it escapes result
                # processing, that is observed (effects["escaped"]), as a scripted failure is, never a harness error
                self.journal.scripted.append(exc)
                raise
            finally:
                self.releasing = False
                if self.journal.live:
                    self.spans.append((start, len(self.journal.entries), req.rid))
                    calls = [e for e in self.journal.entries[start:] if e["actor"] == "tree_cache"]
                    self.releases.append({
                        "rid": req.rid,
                        "is_insert": any(_inserts(e) for e in calls),
                        "kv": held[0],
                        "mamba": held[1],
                    })

        # the tree's own parameters: a call the tree's function would refuse is refused in the tree's frame
        return same_signature(own, around)

    def _release_kv_cache(self, req: Any, tree_cache: Any, **flags: Any) -> None:
        """(Trees that call the tree cache's ``cache_finished_req`` directly.) Records the release and
        hands the request's KV row and Mamba slot back, as the tree cache would; ``is_insert`` (later spelt ``checkpoint``) says whether the KV enters the
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

    def _mask_decision(self) -> dict[str, Any]:
        """Where the request asked for its sampling mask, the decision on it is the tree's own
        (``get_sampling_mask_finish_reason`` of its batch result processor, on the status the sampler
        reported); the double only records that it was asked."""
        if self.shape.mask == "off":
            return {}
        decide = tree.resolve(f"{RESULT_PROCESSOR}.get_sampling_mask_finish_reason")
        return {"get_sampling_mask_finish_reason": lambda status: decide(None, status=status)}

    def _reqs(self, first: bool) -> list[Any]:
        """The batch of one processed result: the subject, and on its first result the other request of a
        batch of two, ahead of it or behind it."""
        if self.companion is None or not first:
            return [self.req]
        return [self.companion, self.req] if self.shape.batch == "after-aborted" else [self.req, self.companion]

    def _result(self, reqs: list[Any]) -> Any:
        """The forward's result: a sampled token per request and, where the request asked for its sampling
        mask, the sampler's status for it in a real ``LogitsProcessorOutput``."""
        result = tree.batch_result(self.result_cls, tree.torch().tensor([NEXT_TOKEN] * len(reqs)))
        if self.shape.mask != "off":
            logits = result.logits_output if result.logits_output is not None else tree.logits_output()
            logits.next_token_sampling_mask_status = [tree.sampling_mask_status(self.shape.mask == "ok")] * len(reqs)
            result.logits_output = logits
        if any(req.return_logprob for req in reqs):
            # a forward of a batch that asked for logprobs reports each request's extend range; these ask for
            # output logprobs only (logprob_start_len unset: the range starts at its end, no input logprobs)
            ranges = [len(req.origin_input_ids) for req in reqs]
            result.extend_input_len_per_req, result.extend_logprob_start_len_per_req = ranges, list(ranges)
            if result.logits_output is None:  # such a forward returns its logits output (trees up to 0.5.5 read it here)
                result.logits_output = tree.logits_output()
        return result

    def _worker_answer(self, name: str) -> Any:
        return tree.worker_results(self.result.logits_output, [NEXT_TOKEN] * len(self.batch.reqs))[name]

    def drive(self) -> None:
        for n, step in enumerate(self.shape.steps):
            self.scheduler.chunked_req = self.req if step == "chunking" else None
            reqs = self._reqs(first=n == 0)
            object.__setattr__(self.batch, "reqs", reqs)
            self.result = result = self._result(reqs)
            self.scheduler.process_batch_result_disagg_prefill(self.batch, result)
            self.snapshots.append(self._snapshot())

    def _snapshot(self) -> dict[str, JSON]:
        """Cumulative effects on the subject after one processed result (the other request of a batch of two
        is told apart by its rid, its KV sender and its metadata buffer)."""
        calls, rid = self.journal.calls, self.req.rid
        other = self.companion
        others_sender = other.disagg_kv_sender.double_name() if other is not None else None
        mine = lambda rids: [r for r in rids if r == rid]  # noqa: E731
        return {
            "inflight_queue": mine(req.rid for req in getattr(self.scheduler, _inflight_queue(tree.module(PREFILL)))),
            "requeued": mine([req.rid for req in self.scheduler.waiting_queue]
                             + [req.rid for req in self.scheduler.disagg_prefill_bootstrap_queue.queue]),
            "kv_chunks_sent": [
                {"args": e["args"], "kwargs": e["kwargs"]} for e in calls("scheduler", "send_kv_chunk")
                if other is None or not names_request(e["args"][:1] + list(e["kwargs"].values()), COMPANION)
            ],
            "sender_calls": [
                e["call"] for e in self.journal.entries
                if str(e["actor"]).startswith("kv_sender") and e["actor"] != others_sender
            ],
            "metadata_frees": [e["args"][0] for e in calls("metadata_allocator", "free")
                               if other is None or e["args"][0] != COMPANION_METADATA],
            "kv_releases": [r for r in self.releases if r["rid"] == rid],
            "tree_cache_calls": [{k: e[k] for k in ("call", "args", "kwargs")} for n, e in enumerate(self.journal.entries)
                                 if e["actor"] == "tree_cache" and not self._others(n, e)],
            # a call streaming nothing is kept as it is (nobody's, and visible); one streaming only the other is dropped
            "streamed": [[i for i in call if i["rid"] == rid] for call in self.streamed
                         if not call or any(i["rid"] == rid for i in call)],
            "grammar_calls": [e["call"] for e in calls("grammar")],
            "pending_chunk_rids": mine(plain(self.scheduler.disagg_prefill_pending_chunk_rids)),
            "request": tree.request_state(self.req),
        }

    def _others(self, n: int, entry: Mapping[str, Any]) -> bool:
        """Whether journal entry ``n`` is the other request's: it names it, or its release made it."""
        if self.companion is None:
            return False
        return names_request([entry["args"], entry["kwargs"]], COMPANION) or any(
            start <= n < end and rid == COMPANION for start, end, rid in self.spans)

    def effects(self) -> dict[str, JSON]:
        return {"before": self.before, "results": self.snapshots, "overlap": self.overlap}


# --- cases: every reachable point of the space -----------------------------------------------------


def point_case(point: Mapping[str, str]) -> Case:
    case_id, shape = duties_36988.SPACE.case_id(point), Shape.of(point)
    return Case.of(duties_36988, point, lambda journal: ResultScene(journal, case_id, shape),
                   (f"{MIXIN}.process_batch_result_disagg_prefill",))


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
    cases=tuple(point_case(p) for p in duties_36988.SPACE.points()),
    table=duties_36988,
    warm=lambda: read_sources(tree.resolve(SCHEDULER), tree.resolve(f"{PREFILL}.PrefillBootstrapQueue"),
                              tree.resolve("sglang.srt.managers.schedule_batch.Req")),
)
