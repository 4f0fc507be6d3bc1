"""Probe for #39500 (gate 3, transfer/read): does decode go on to read pages the handoff never wrote?

Decode reserved the pages of a 4-token prompt; the handoff writes fewer: the prefill request was
cut to its 1-token placeholder (the incident's rejected request), the engine lands only part of
what was sent, or prefill reports success before its write lands. Transfer-complete is not proof:
the case follows the request through the tree's own code, the prefill's last-chunk send (which
digests the KV it sends where the tree has the checksum), the transfer worker, the decode manager's
status handling, the decode transfer queue's poll and commit, and the admission of the committed
request into the batch that runs (where the tree verifies the digest), and observes which pages
the batch would read. The pages were used before by another request, so an unwritten page holds
that request's KV.

Run in the default configuration and with ``--disaggregation-enable-kv-checksum`` on, with
prefill and decode KV layouts that the checksum can compare and, with it on, ones it cannot (a
prefill of another TP width: each side digests other bytes). The checksum kernel is a GPU kernel;
here a digest over the page-ownership model's contents (which request's KV, at which position, in
which layout) stands in for it, computed over exactly the pages the tree asks for. Guard: a full
handoff is committed and read, only its own KV; batched ahead of a short one that the checksum
drops (another request's handoff, or a health check's, in the next room, committed in the same
decode step), it still is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import duties_39500, tree
from .case import Case, Probe
from .doubles import Double, Journal, strict_subject
from .lifetime import COMMON, DECODE, IMPORTS, PAGES, PREFILL_MIXIN, RID, ROOM, SCHEDULER, Scene, Shape, metadata_buffers
from .pages import PagePool
from .plain import JSON

FIRST_CHUNK = 2  # where chunked prefill ends the chunk before the last (tokens)
CACHED = 2  # tokens of the prompt a decode prefix-cache hit holds (page size 1: pages)
EARLIER_TENANT = "req-X"  # whose KV the reserved pages held before
BESIDE = "req-C"  # a healthy request whose full handoff commits beside the subject's, in its own room, batched ahead of it
HEALTH_CHECK = "sglang.srt.constants.HEALTH_CHECK_RID_PREFIX"  # how the tree names its health checks' requests
PREVIOUS = "req-R"  # the request whose verified handoff held the subject's decode metadata slot just before it
PREFIX = "req-P"  # an earlier request whose prompt began as the subject's: its KV, as prefill computed and sent it
# another earlier request with the same prefix, handed to decode by another prefill instance: KV of the same tokens,
# other bytes (computed in another batch)
ELSEWHERE = "req-Q"
CACHE = "prefix-cache"  # what holds the pages of a cached prefix on either side
PROMPT = PAGES  # decode reserved one page per token of a 4-token prompt (page size 1)
OUTPUT_TOKEN = 7
ROW = 2 * PROMPT  # a request's row in req_to_token spans its context, longer than its prompt (slots past it unset)
LAYOUTS = {"comparable": [64], "incomparable": [32]}  # prefill's per-page KV item lengths; decode's are [64]
CHECKSUM = "disaggregation_enable_kv_checksum"


@dataclass(frozen=True)
class HandoffShape:
    """``sent``: tokens (= pages) of the prefill request, so pages its last chunk sends; ``lands``:
    of those, how many the engine writes before reporting success (None: all); ``early``: prefill
    reports success while its write is still in flight (it lands after decode admitted the request);
    ``layout``: whether prefill's KV layout is one decode's checksum can compare with;
    ``prefill_checksum``: with the option on, whether prefill runs with it too (off: a prefill not yet
    restarted with it, while decode is); ``beside``: another request's full handoff (``full``: ``BESIDE``;
    ``health-check``: a health check's, its rid as the tree prefixes one; ``unverified``: ``BESIDE``'s, sent
    by a prefill instance not yet running the option; in the next room) is committed in the same decode step and batched ahead of the subject's, so that the batch's
    verification tells the two apart ("": none); ``cached``: tokens of the subject's
    prompt decode's prefix cache held (``PREFIX``'s KV, as prefill computed and sent it; prefill's own
    prefix cache kept the same), so decode reserved and prefill sends only the rest; ``first_chunk``: chunked
    prefill sent the subject's prompt up to this token as a chunk of its own before the last one (0: one chunk);
    ``slot``: the subject's decode metadata slot is ``fresh`` (never used), or ``reused``: ``PREVIOUS`` held it, its
    full handoff sent (by a prefill instance running the option as decode does), committed and read in the decode step
    before, and the subject was given the slot the tree's own code freed then (taken again as the tree left it);
    ``aborted``: the same, but its client aborted it after its handoff landed (KV and metadata row written, the success
    still on the wire): the tree's deferred release gives its pages and slot back on prefill's acknowledgement;
    ``prefix_from``: with ``cached``, whose computation of the prefix decode's cache holds: ``this-prefill``'s (the
    KV prefill holds too), or ``another-prefill``'s (``ELSEWHERE``: the same tokens' KV from another prefill instance,
    other bytes)."""

    config: str = "default"
    prefill_checksum: bool = True
    sent: int = PROMPT
    lands: int | None = None
    early: bool = False
    layout: str = "comparable"
    beside: str = ""
    cached: int = 0
    first_chunk: int = 0
    slot: str = "fresh"
    prefix_from: str = "this-prefill"


class Digest:
    """Stands in for the checksum kernel: a digest of what the given pages hold in the pool (which
    request's KV, at which position) and of the layout the side digests, so that the same KV compares
    equal across prefill and decode only when the layouts agree."""

    def __init__(self, pool: Callable[[], PagePool], layout: list[int], journal: Journal, name: str) -> None:
        self.pool, self.layout, self.journal, self.name = pool, layout, journal, name  # pool: the side's pool, when asked
        self.computed: list[dict[str, JSON]] = []

    def compute(self, page_indices: Any, state_indices: Any = None, *args: Any, **kwargs: Any) -> int:
        # the kernel takes the tree's page-index tensor as its own helper shapes it (what it was given
        # fails there as it would fail the kernel's wrapper: in the tree's code)
        shape = getattr(tree.module("sglang.srt.disaggregation.checksum"), "_to_page_indices_gpu", None)
        if shape is not None:
            page_indices = shape(page_indices, 1)
        pages = [int(p) for p in page_indices.tolist()]
        held = self.pool().holds(pages)
        value = int.from_bytes(hashlib.sha256(repr((self.layout, held)).encode()).digest()[:7], "big") | 1
        if self.journal.live:
            self.computed.append({"side": self.name, "pages": pages, "holds": [list(h) if h else None for h in held]})
        return value


class HandoffScene(Scene):
    commit_stand_in = False

    def __init__(self, journal: Journal, shape: HandoffShape) -> None:
        self.handoff = shape
        self.option = self._publish(shape.config == "with-kv-checksum")
        self.batches: list[dict[str, JSON]] = []
        self.digests: list[Digest] = []
        super().__init__(journal, Shape(config=shape.config))
        decode = self.decode[0]
        self.beside = self._beside_rid(shape.beside)
        self.rids = [self.beside, RID] if self.beside else [RID]  # in the order decode preallocated them
        self.previous = PREVIOUS if shape.slot in ("reused", "aborted") else ""
        self.everyone = [self.previous, *self.rids] if self.previous else list(self.rids)  # in the order they come
        self.rooms = {RID: ROOM, self.beside: ROOM + 1, self.previous: ROOM + 2}
        self.rows = {RID: 1, self.beside: 2, self.previous: 3}  # each request's row of req_to_token, on both sides
        self.sending_previous = False  # the previous owner's prefill runs the option as decode does
        self.metadata_of: dict[str, Any] = {}  # rid -> the metadata buffers of the prefill instance that sent it
        # room for every request's reservation (the digest reads the rank's pool when it computes)
        decode.pool = PagePool(PAGES * len(self.everyone), self.clock)
        self._earlier_tenant(decode.pool)
        self.prefill_pool = PagePool(PAGES * len(self.everyone), self.clock)
        self.decode_prefix = self._cached_prefix(decode.pool)
        self.prefill_pages: dict[str, list[int]] = {}
        self.prefill_reqs = {rid: self._prefill_request(rid) for rid in self.everyone}

    @staticmethod
    def _beside_rid(kind: str) -> str:
        if kind == "health-check":
            return f"{tree.resolve(HEALTH_CHECK)}_req-C"
        return BESIDE if kind else ""

    # --- configuration ---------------------------------------------------------------------------

    @staticmethod
    def _publish(on: bool) -> str:
        """Publish the server configuration the case runs under: the stock one, or with the checksum
        option on where the tree's ServerArgs has it ("absent" otherwise: the tree has no checksum)."""
        if not on:
            return "off"
        if not tree.accepts(tree.resolve("sglang.srt.server_args.ServerArgs"), CHECKSUM):
            return "absent"
        if tree.publish_config(**{CHECKSUM: True}) is None:  # the option, but no context the tree reads it from
            raise tree.Missing("sglang.srt.runtime_context.publish")
        return "on"

    def _checksum_on(self) -> bool:
        """The tree's own gate: what its queues read at start-up (``get_disagg()``'s option)."""
        try:
            context = tree.module("sglang.srt.runtime_context")
        except ImportError:
            return False
        disagg = getattr(context, "get_disagg", None)
        return bool(disagg is not None and getattr(disagg(), CHECKSUM, False))

    def _signature(self, layout: list[int], side: str = "decode") -> int:
        """The layout signature the tree ships beside a digest, where it has one (0: none)."""
        if not (self._checksum_on() if side == "decode" else self._prefill_checksum_on()):
            return 0
        try:
            signature = tree.resolve("sglang.srt.disaggregation.utils.kv_layout_signature")
        except tree.Missing:
            return 0
        return signature(self._kv_args(layout))

    def _kv_args(self, layout: list[int]) -> Double:
        return Double(self.journal, f"kv_args{layout}", page_size=1, kv_cache_dtype_str="auto", kv_layout=None,
                      swa_kv_cache_layout=None, state_types=[], kv_item_lens=list(layout), state_item_lens=[],
                      kv_data_ptrs=[0x10000], aux_data_ptrs=[0x20000], state_data_ptrs=[])

    def metadata_flags(self) -> dict[str, Any]:
        return {"kv_checksum_enabled": self._checksum_on()}

    def _prefill_checksum_on(self) -> bool:
        return self._checksum_on() and (self.handoff.prefill_checksum or self.sending_previous)

    def _digest(self, pool: Callable[[], PagePool], layout: list[int], side: str) -> Digest | None:
        if not (self._checksum_on() if side == "decode" else self._prefill_checksum_on()):
            return None
        digest = Digest(pool, layout, self.journal, side)
        self.digests.append(digest)
        return digest

    def decode_queue_state(self, rank: Any) -> dict[str, Any]:
        return {"_skipped_checksum_signatures": set()}

    def decode_scheduler_state(self, rank: Any) -> dict[str, Any]:
        journal, torch = self.journal, tree.torch()
        self.decode_row = torch.zeros((4, ROW), dtype=torch.int64)  # rows: self.rows
        kv_manager = strict_subject(tree.resolve(f"{COMMON}.CommonKVManager"), journal, "decode0.prealloc_kv_manager")
        import random

        return {
            "disagg_decode_prealloc_queue": Double(
                journal, "decode0.prealloc_queue", queue=[], retracted_queue=[], kv_manager=kv_manager,
                kv_checksum_signature=self._signature(LAYOUTS["comparable"]),
                kv_checksum_mismatch_injector=random.Random(0)),
            "kv_checksum_computer": self._digest(lambda: rank.pool, LAYOUTS["comparable"], "decode"),
            "req_to_token_pool": Double(journal, "decode0.req_to_token_pool", req_to_token=self.decode_row),
            "token_to_kv_pool_allocator": Double(journal, "decode0.token_to_kv_pool_allocator", page_size=1,
                                                 get_kvcache=lambda: Double(journal, "decode0.kv_pool")),
            "tree_cache": Double(journal, "decode0.tree_cache",
                                 cache_finished_req=lambda req, *args, **flags: self._release(req, None, *args, **flags)),
            "metrics_collector": Double(journal, "decode0.metrics_collector", recorded=("increment_transfer_failed_reqs",)),
            "batch_result_processor": Double(journal, "decode0.batch_result_processor",
                                             recorded=("_maybe_update_reasoning_tokens",)),
            "waiting_queue": [], "chunked_req": None, "future_map": Double(journal, "future_map"),
            "ngram_embedding_manager": Double(journal, "ngram_embedding_manager", recorded=("prepare_for_forward",)),
            "attn_tp_cpu_group": Double(journal, "attn_tp_cpu_group"),
            "_get_new_prebuilt_batch": self._batch_of_waiting,
        }

    # --- the two sides' KV before the handoff ------------------------------------------------------

    def _earlier_tenant(self, pool: PagePool) -> None:
        """The pages decode reserves were another request's before: its KV is still in them."""
        pages = pool.alloc(EARLIER_TENANT, len(pool.free_list))
        pool.land(pool.begin(EARLIER_TENANT, -1, pages))
        pool.free(EARLIER_TENANT, pages, "finished")

    def _prefix_owner(self, pool: PagePool) -> str:
        """Whose KV of the cached prefix a side's cache holds."""
        decode_side = self.handoff.prefix_from == "another-prefill" and pool is self.decode[0].pool
        return ELSEWHERE if decode_side else PREFIX

    def _cached_prefix(self, pool: PagePool) -> list[int]:
        """The pages of the subject's prompt prefix a side's prefix cache holds: ``PREFIX``'s KV at positions
        0.. (the same KV on both sides: prefill computed it once, sent it, and both caches kept it)."""
        if not self.handoff.cached:
            return []
        pages = pool.alloc(CACHE, self.handoff.cached)
        owner = self._prefix_owner(pool)
        pool.land(pool.begin(CACHE, -1, pages, [(owner, i) for i in range(len(pages))]))
        return pages

    def _sent(self, rid: str) -> int:
        return self.handoff.sent if rid == RID else PROMPT

    def _prefix(self, rid: str) -> int:
        """Tokens of ``rid``'s prompt decode's prefix cache held: prefill sends only what follows them."""
        return self.handoff.cached if rid == RID else 0

    def _prefill_request(self, rid: str) -> Any:
        """The request on prefill after its forward: ``sent`` tokens of KV in its row (its own, positions 0..);
        the request beside it, its whole prompt."""
        torch = tree.torch()
        sent, prefix = self._sent(rid), self._prefix(rid)
        cached = self._cached_prefix(self.prefill_pool) if prefix else []
        own = self.prefill_pool.alloc(rid, sent - prefix)
        self.prefill_pool.land(self.prefill_pool.begin(rid, -1, own, [(rid, i) for i in range(prefix, sent)]))
        pages = cached + own
        req = tree.make_req(rid, sent, "PREFILL", self.rooms[rid])
        tree.give_kv(req, sent, self.rows[rid])
        req.metadata_buffer_index = 3 + self.everyone.index(rid)
        req.output_ids = [OUTPUT_TOKEN]
        if prefix:  # as the prefill bootstrap queue's finalize_bootstrap sets them from decode's prefix length
            if not hasattr(req, "disagg_decode_prefix_len"):
                raise tree.Missing("sglang.srt.managers.schedule_batch.Req.disagg_decode_prefix_len")
            req.start_send_idx = req.disagg_decode_prefix_len = prefix
        if not hasattr(self, "prefill_row"):
            self.prefill_row = torch.zeros((4, ROW), dtype=torch.int64)
        self.prefill_row[self.rows[rid], : len(pages)] = torch.tensor(pages)
        self.prefill_pages[rid] = pages
        return req

    # --- prefill: the last chunk ------------------------------------------------------------------

    def send(self, rids: list[str] | None = None) -> None:
        """The prefill scheduler sends the last chunk of each of ``rids`` (None: the subject's and the one beside
        it): the tree's ``send_kv_chunk``, whose later form digests the KV it sends before handing the chunk to the
        sender. The previous owner of the subject's slot is sent by a prefill instance running the option."""
        journal = self.journal
        prefill = self.prefill[0]
        rids = self.rids if rids is None else rids
        self.sending_previous = self.previous in rids
        self.prefill_metadata = metadata_buffers(kv_checksum_enabled=self._prefill_checksum_on())
        self.metadata_of.update({rid: self.prefill_metadata for rid in rids})

        def scheduler_of(checksum: bool, name: str) -> Any:
            """The prefill scheduler sending; without ``checksum``, one of an instance not yet running the
            option (no digest, no layout signature)."""
            return strict_subject(
                tree.resolve(SCHEDULER), journal, name,
                kv_checksum_computer=(self._digest(lambda: self.prefill_pool, LAYOUTS[self.handoff.layout], "prefill")
                                      if checksum else None),
                token_to_kv_pool_allocator=Double(journal, "prefill0.token_to_kv_pool_allocator", page_size=1,
                                                  get_kvcache=lambda: Double(journal, "prefill0.kv_pool")),
                req_to_token_pool=Double(journal, "prefill0.req_to_token_pool", req_to_token=self.prefill_row),
                disagg_metadata_buffers=self.prefill_metadata,
                disagg_prefill_bootstrap_queue=Double(
                    journal, "prefill0.bootstrap_queue",
                    kv_checksum_signature=self._signature(LAYOUTS[self.handoff.layout], "prefill") if checksum else 0),
                _send_kv_chunk=self._chunk_to_sender,
            )

        scheduler = scheduler_of(True, "prefill0.scheduler")
        unverified = scheduler_of(False, "prefill1.scheduler") if self.handoff.beside == "unverified" else None
        split = hasattr(tree.resolve(PREFILL_MIXIN), "_send_kv_chunk")
        self.sent_upto = {rid: self._prefix(rid) for rid in rids}  # what the tree's start_send_idx tracks
        for rid in rids:
            req = self.prefill_reqs[rid]
            first = self.handoff.first_chunk if rid == RID else 0
            sends = unverified if unverified is not None and rid != RID else scheduler
            if first:  # chunked prefill: the chunk before the last, as the scheduler sends one (its end given)
                self._chunk = None
                if split:
                    sends.send_kv_chunk(req, last_chunk=False, end_idx=first)
                else:
                    self._chunk_to_sender(req, last_chunk=False, end_idx=first)
                self._hand_on(prefill, rid, "prefill sends a chunk")
            self._chunk = None
            if split:
                # as the scheduler sends a finished request's last chunk: no end given, the tree's own
                # send path takes it from the request's extend range
                if hasattr(req, "set_extend_range"):
                    req.set_extend_range(first, self._sent(rid))
                elif hasattr(req, "extend_end"):  # later trees keep only the range's end
                    req.extend_end = self._sent(rid)
                sends.send_kv_chunk(req, last_chunk=True)
            else:  # the tree sends straight from send_kv_chunk: nothing of it digests or checks the chunk
                self._chunk_to_sender(req, last_chunk=True, end_idx=self._sent(rid))
            self._hand_on(prefill, rid, "prefill sends its last chunk")
        self.sending_previous = False

    def _hand_on(self, prefill: Any, rid: str, step: str) -> None:
        """What the tree's send path handed the sender goes to the prefill KV manager's transfer queue."""
        if self._chunk is None:  # the tree's send path handed nothing to the sender
            self.note("prefill sends nothing", rid=rid)
            return
        self.note(step, rid=rid, pages=self._chunk["num_kv_tokens"])
        prefill.manager.add_transfer_request(**{
            k: v for k, v in self._chunk.items() if tree.accepts(prefill.manager.add_transfer_request, k)})

    def _chunk_to_sender(self, req: Any, last_chunk: bool = False, end_idx: Any = None, **kwargs: Any) -> None:
        """What the sender is handed: with the last chunk, the request's metadata row (as the tree's send path
        fills it); the KV pages from where the previous chunk ended (or the prefix decode held) up to
        ``end_idx``, placed past what was sent before."""
        import numpy as np

        if last_chunk:
            self.metadata_of[req.rid].set_buf(req)
        count = int(end_idx if end_idx is not None else self._sent(req.rid))
        start, base = self.sent_upto[req.rid], self._prefix(req.rid)
        self.sent_upto[req.rid] = count
        if hasattr(req, "start_send_idx"):  # as the tree's send path moves it past what it sent
            req.start_send_idx = count
        self._chunk = {"bootstrap_room": self.rooms[req.rid],
                       "kv_indices": np.array(self.prefill_pages[req.rid][start:count], dtype=np.int32),
                       "index_slice": slice(start - base, count - base), "is_last_chunk": last_chunk, "is_last": last_chunk,
                       "aux_index": req.metadata_buffer_index, "state_indices": None, "num_kv_tokens": count - start}

    # --- the engine, for this probe: what lands of the sent pages, and when ---------------------------

    def write(self, prefill: Any, decode: Any, pages: list[int], sources: list[int] | None = None) -> int:
        """The write into decode's ``pages`` (whose owner says which request's they are): the request beside
        the subject always lands whole; the subject's as the case says."""
        rid = decode.pool.owner.get(pages[0], RID) if pages else RID
        row = [int(p) for p in self.decode_row[self.rows[rid], :PROMPT].tolist()]
        held = self.prefill_pool.holds([self.prefill_pages[rid][row.index(p)] for p in pages])  # by position
        transfer = decode.pool.begin(rid, prefill.rank, pages, [h for h in held if h is not None])
        if rid != RID:
            decode.pool.land(transfer)
            return 0
        if self.handoff.early:
            self.late.append(transfer)  # reported done; lands after decode admitted the request
            return 0
        decode.pool.land(transfer, self.handoff.lands)
        return 0

    def aux(self, decode: Any, index: int) -> None:
        """The aux transfer: the prefill metadata row of the request whose decode row is ``index`` lands in
        it (what RDMA copies, byte for byte: the buffers the sending prefill instance has; a buffer it lacks, as one
        not running the checksum lacks the digest's, leaves decode's row of it as it was). The row's owner is the
        request admitted last into it."""
        torch = tree.torch()
        rid = next(r.rid for r in reversed(list(decode.requests.values())) if r.metadata_index == index)
        for name, value in vars(self.metadata_of[rid]).items():
            if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == 16:
                getattr(decode.metadata, name)[index] = value[self.prefill_reqs[rid].metadata_buffer_index]

    # --- decode: the batch that runs -----------------------------------------------------------------

    def _batch_of_waiting(self, running_batch: Any = None) -> Any:
        """What the tree's batch builder hands its admission checks: the committed requests waiting, in
        one batch (``process_prebuilt`` prepares it: recorded; ``run`` is its forward)."""
        decode = self.decode[0]
        waiting = list(decode.scheduler.waiting_queue)
        decode.scheduler.waiting_queue = []
        if not waiting:
            return None
        reqs = list(waiting)

        def filter_batch(keep_indices: Any = None, **kwargs: Any) -> None:
            reqs[:] = [r for i, r in enumerate(reqs) if keep_indices is None or i in keep_indices]

        prepared: list[bool] = []
        return Double(self.journal, "decode0.batch", reqs=reqs, filter_batch=filter_batch,
                      is_empty=lambda: not reqs, batch_size=lambda: len(reqs), prepared=prepared,
                      process_prebuilt=lambda *args, **kwargs: prepared.append(True))

    def run(self, batch: Any) -> None:
        """The batch the scheduler got back runs, as its caller runs a prebuilt batch: only when it holds
        a request; a batch never prepared (``process_prebuilt``) has nothing to run on; the forward
        reads every page of each request's prompt."""
        decode = self.decode[0]
        if batch.is_empty():
            return
        if not batch.prepared:
            self.batches.append({"runs": [], "unprepared": [r.rid for r in batch.reqs]})
            return
        for req in batch.reqs:
            owner = self._prefix_owner(decode.pool)
            matched = {page: (owner, i) for i, page in enumerate(self.decode_prefix)} if req.rid == RID else {}
            decode.pool.read(req.rid, [int(p) for p in self.decode_row[self.rows[req.rid], : len(req.origin_input_ids)].tolist()],
                             matched)
        self.batches.append({"runs": [r.rid for r in batch.reqs]})

    def admit_decode(self, rids: list[str] | None = None) -> None:
        """Decode preallocates each of ``rids`` (None: the subject and the one beside it); the subject, past a
        previous owner, gets the metadata slot the tree freed for it (a fresh one if the tree freed none)."""
        decode = self.decode[0]
        torch = tree.torch()
        for rid in self.rids if rids is None else rids:
            prefix = self.decode_prefix if rid == RID else []
            slot = None
            if rid == RID and self.previous:
                held = decode.requests[self.previous].metadata_index
                slot = held if held in decode.metadata_frees else None
                self.note("the previous owner's metadata slot " + ("freed: reused" if slot is not None else
                                                                   "never freed: a fresh one"), slot=held)
            decode.admit(rid, self.rooms[rid], self.rows[rid], PROMPT - len(prefix), slot=slot)
            self.decode_row[self.rows[rid], :PROMPT] = torch.tensor(prefix + decode.requests[rid].pages)
            if prefix:  # as decode's preallocation sets it on a prefix match: the tree cache owns [0, here),
                req = decode.requests[rid].req  # kept on the request's KV record from 0.5.19, on the request before
                owner = next((o for o in (getattr(req, "kv", None), req) if hasattr(o, "cache_protected_len")), None)
                if owner is None:
                    raise tree.Missing("sglang.srt.managers.schedule_batch.Req.kv.cache_protected_len")
                owner.cache_protected_len = len(prefix)

    def decode_step(self) -> None:
        """The decode event loop: the transfer queue hands over what completed, then the batch is built."""
        decode = self.decode[0]
        for req in decode.queue.pop_transferred():
            decode.committed.append(req.rid)
            decode.scheduler.waiting_queue.append(req)
        if hasattr(decode.queue, "resolve_deferred_releases"):
            decode.queue.resolve_deferred_releases()
        get = getattr(decode.scheduler, "get_new_prebuilt_batch")
        running = Double(self.journal, "decode0.running_batch", batch_size=lambda: 0, reqs=[])
        if hasattr(tree.resolve(f"{DECODE}.SchedulerDisaggregationDecodeMixin"), "_get_new_prebuilt_batch"):
            batch = get(running)
        else:  # the tree builds and runs the batch in one method: nothing of it checks the KV first
            batch = self._batch_of_waiting(running)
            if batch is not None:
                batch.process_prebuilt(None)
        if batch is not None:
            self.run(batch)
        self.note("decode step")

    def effects(self) -> dict[str, JSON]:
        decode = self.decode[0]
        request = decode.requests[RID]
        out = super().effects()
        out.update({
            "handoff": {"sent": self.handoff.sent, "lands": self.handoff.lands, "early": self.handoff.early,
                        "layout": self.handoff.layout, "reserved": PROMPT - self.handoff.cached,
                        "cached": self.handoff.cached},
            "beside": ({"rid": self.beside, "request": tree.request_state(decode.requests[self.beside].req)}
                       if self.beside else None),
            **({"previous": {"rid": self.previous, "aborted": self.handoff.slot == "aborted",
                             "request": tree.request_state(decode.requests[self.previous].req),
                             "slot": decode.requests[self.previous].metadata_index,
                             "subject_slot": request.metadata_index}} if self.previous else {}),
            "checksum": {"option": self.option, "on": self._checksum_on(),
                         "digests": [c for d in self.digests for c in d.computed]},
            "batches": list(self.batches),
            "request": tree.request_state(request.req),
        })
        return out


def script(scene: HandoffScene) -> None:
    if scene.previous:  # the previous owner of the subject's slot: its whole handoff, committed and read
        scene.admit_decode([scene.previous])
        for p in scene.prefill:
            p.bootstrap(scene.previous, scene.rooms[scene.previous])
        scene.send([scene.previous])
        scene.prefill[0].work()
        if scene.handoff.slot == "aborted":  # its client aborts it while the success is still on the wire
            for d in scene.decode:
                d.abort(scene.previous)
            scene.note("decode aborts", rid=scene.previous)
            scene.deliver("ABORT")
        scene.deliver("status")
        scene.decode_step()
        if scene.handoff.slot == "aborted":  # prefill's acknowledgement: the deferred release gives the slot back
            scene.deliver("ABORT_ACK")
            scene.decode_step()
    scene.admit_decode()
    for rid in scene.rids:
        for p in scene.prefill:
            p.bootstrap(rid, scene.rooms[rid])
        scene.note("bootstrapped", rid=rid)
    scene.send()
    scene.prefill[0].work()
    scene.deliver("status")
    scene.decode_step()
    scene.land_late()
    scene.decode_step()


class Handoff:
    def __init__(self, journal: Journal, shape: HandoffShape) -> None:
        self.scene = HandoffScene(journal, shape)

    def drive(self) -> None:
        script(self.scene)

    def effects(self) -> dict[str, JSON]:
        return self.scene.effects()


REQUIRES = (f"{DECODE}.DecodeTransferQueue.pop_transferred", f"{DECODE}.DecodeTransferQueue._commit_transfer_to_req",
            f"{DECODE}.SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch", f"{PREFILL_MIXIN}.send_kv_chunk",
            "sglang.srt.disaggregation.mooncake.conn.MooncakeKVManager.transfer_worker")


def shape_of(point: dict[str, str]) -> HandoffShape:
    transfer = point["transfer"]
    return HandoffShape(config=point["config"], prefill_checksum=point["prefill"] != "without",
                        sent=1 if transfer == "short" else PROMPT,
                        lands=2 if transfer == "partial" else None, early=transfer == "early", layout=point["layout"],
                        beside={"beside": "full", "beside-health-check": "health-check",
                                "beside-unverified": "unverified"}.get(point["batch"], ""), cached=CACHED if point["decode_cache"] == "prefix-hit" else 0,
                        first_chunk=FIRST_CHUNK if point["chunks"] == "two" else 0)


def _cases() -> tuple[Case, ...]:
    return tuple(Case.of(duties_39500, p, lambda journal, shape=shape_of(p): Handoff(journal, shape), REQUIRES)
                 for p in duties_39500.SPACE.points())


PROBE = Probe(id="handoff", fix=39500, imports=IMPORTS, cases=_cases(), table=duties_39500)
