"""Probe for L6 (a local id): a retracted request's KV is restored only after the forward pass still in flight.

Decode retracts a request under memory pressure (the tree's ``release_req``: its KV backed up to the host pool,
its pages freed) and queues it (``DecodePreallocQueue.add``, retracted). Under overlap scheduling the next batch's
forward is launched before the last batch's results are processed, so a request that finished last step still has
its forward in flight, writing its next token's KV into a page it was just given; its pages go back as it finishes.
The retracted request is then resumed (the tree's ``resume_retracted_reqs``: budget, preallocation, restore of its
KV into its new pages) and may be given that page. Its restore must land after that write, or the page holds the
finished request's KV instead of its own.

What runs is the tree's: decode's tree cache with its host pool (``lifetime.decode_hicache``), the retraction and
its host backup, the preallocation queue's budget and preallocation, the restore, and the HiCache DMA engine
(``L2TransferEngine``: its start event recorded on the scheduling stream and waited on by the copy stream). What
stands in: the device's streams and events (``doubles.Device``: work lands at the latest point the tree's waits
allow), the DMA copy itself (bytes moved between a device page and a host slot, on the current stream), and the
forward pass in flight (a write of the finished request's KV into its new page, launched on the forward stream).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import duties_6, tree
from .case import Case, Probe
from .doubles import Device, Double, Journal, strict_subject
from .lifetime import DECODE, IMPORTS, UNIFIED, decode_hicache, keep_flag, server_args
from .plain import JSON, plain

NAME = "decode0"
RID = "req-R"  # the retracted request, resumed
FINISHED = "req-F"  # the request that finishes the step before
OWNERS = {1: RID, 2: FINISHED, 3: f"{FINISHED} (forward in flight)"}  # a page's KV: 100 * owner + position
PROMPT = 4  # tokens of each prompt; the retracted request has decoded two more
L2 = "sglang.srt.mem_cache.l2_transfer"
BATCH = "sglang.srt.managers.schedule_batch"
BACKUPS = {"host-pool": "host_pool", "cpu-tensor": "cpu_tensor"}


class RestoreScene:
    """One decode rank: its tree cache, allocator and preallocation queue (the tree's), the device (``Device``), the
    retracted request and the one that finishes the step before its resume."""

    def __init__(self, journal: Journal, point: Mapping[str, str]) -> None:
        self.journal, self.point = journal, dict(point)
        self.steps: list[dict[str, JSON]] = []
        self.overlap = point["overlap"] == "on"
        self.cache, _ = decode_hicache(journal, NAME)
        backend = BACKUPS[point["backup"]]
        # a decode server's configuration, its retraction backing KV up as the case's backup says
        options = dict(enable_hierarchical_cache=True, hicache_write_policy="write_back", disaggregation_mode="decode",
                       disaggregation_decode_retraction_backup=backend)
        if tree.publish_config(**options) is None:
            raise tree.Missing("sglang.srt.runtime_context.publish")
        # the same configuration as an argument: 0.5.18's release_req reads the server's mode from it
        self.decode_args = tree.resolve("sglang.srt.server_args.ServerArgs")(model_path="dummy", **options)
        if not any(hasattr(self.cache, n) for n in ("restore_kv_cache", "retraction_restore")):
            raise tree.Missing(f"{UNIFIED}.restore_kv_cache")
        self.r2t = self.cache.req_to_token_pool
        self.allocator = self.cache.token_to_kv_pool_allocator
        self.kv = self.allocator.get_kvcache()
        # a decode server's allocator sorts the pages it frees (need_sort = disaggregation mode decode or prefill)
        self.allocator.need_sort = True
        self.device = Device()
        tree.module(L2).device_module = self.device
        controller = self.cache.cache_controller
        controller.l2_transfer_engine = tree.resolve(f"{L2}.L2TransferEngine")(controller.io_backend)
        self.host: dict[tuple[int, int], tuple[Any, Any]] = {}  # (layer, host slot) -> the bytes copied there
        self._dma(controller.mem_pool_host)
        self._platform()
        # the event loop runs under the scheduling stream; the model runner's forward stream runs the forward only with
        # overlap (the tree's run_batch), without it the forward runs on the scheduling stream
        self.schedule = self.device.stream_named("schedule")
        forward_stream = self.device.stream_named("forward")
        self.forward = forward_stream if self.overlap else self.schedule
        self.device.set_stream(self.schedule)
        self.scheduler = Double(
            journal, f"{NAME}.scheduler", enable_overlap=self.overlap, schedule_stream=self.schedule,
            forward_stream=forward_stream, last_batch=None, enable_hisparse=False, waiting_queue=[],
            enable_decode_hicache=False,  # the stock decode: no prefix load-back from its host tier
            running_batch=Double(journal, f"{NAME}.running_batch", reqs=[]),
            tp_worker=Double(journal, f"{NAME}.tp_worker", is_hybrid_swa=False),
            output_streamer=Double(journal, f"{NAME}.output_streamer", recorded=("stream_output",)),
            server_args=server_args())  # earlier trees read the server configuration from the scheduler
        self.prealloc = strict_subject(
            tree.resolve(f"{DECODE}.DecodePreallocQueue"), journal, f"{NAME}.prealloc_queue",
            req_to_token_pool=self.r2t, token_to_kv_pool_allocator=self.allocator, token_to_kv_pool=self.kv,
            tree_cache=self.cache, scheduler=self.scheduler, queue=[], retracted_queue=[],
            transfer_queue=Double(journal, f"{NAME}.transfer_queue", queue=[]),
            num_reserved_decode_tokens=2, max_total_num_tokens=self.allocator.size)
        self.resumed: list[str] = []
        self.in_flight: list[int] = []

    # --- the DMA copy: bytes between a device page and a host slot, on the current stream -----------------
    def _dma(self, group: Any) -> None:
        """Every host pool the controller's transfers name (a group of them where the tree keeps one)."""
        entries = getattr(group, "entry_map", None) or {}
        for host_pool in [group, *(e.host_pool for e in entries.values())]:
            self._dma_pool(host_pool)

    def _dma_pool(self, host_pool: Any) -> None:
        for name in ("load_to_device_per_layer", "load_to_device_per_layer_physical"):
            if hasattr(host_pool, name):
                setattr(host_pool, name, self._copy(load=True))
        for name in ("backup_from_device_all_layer", "backup_from_device_all_layer_physical"):
            if hasattr(host_pool, name):
                setattr(host_pool, name, self._copy(load=False))

    def _copy(self, load: bool) -> Any:
        def copy(device_pool: Any, host_indices: Any, device_indices: Any, *rest: Any, **kwargs: Any) -> None:
            hosts = [int(h) for h in host_indices.tolist()]
            slots = [int(s) for s in device_indices.tolist()]
            layers = [int(rest[0])] if load else list(range(len(device_pool.k_buffer)))

            def effect() -> None:
                for layer in layers:
                    k, v = device_pool.k_buffer[layer], device_pool.v_buffer[layer]
                    for h, s in zip(hosts, slots):
                        if load:
                            k[s], v[s] = self.host[(layer, h)]
                        else:
                            self.host[(layer, h)] = (k[s].clone(), v[s].clone())

            self.device.issue("host-to-device copy" if load else "device-to-host copy", slots, effect)

        return copy

    def _platform(self) -> None:
        """The device synchronization the pool's own copies make (``current_platform.synchronize()`` in
        ``get_cpu_copy``/``load_cpu_copy``: a no-op on CPU) is this device's; the pool's own restore copy is recorded
        as it finishes."""
        cls = type(self.kv)
        own = getattr(cls, "load_cpu_copy", None)
        module_globals = getattr(own, "__globals__", {})
        platform = module_globals.get("current_platform")
        if platform is not None:
            device = self.device

            class Platform:
                def __getattr__(self, name: str) -> Any:
                    return getattr(platform, name)

                def synchronize(self, *args: Any) -> None:
                    device.synchronize()

            module_globals["current_platform"] = Platform()
        if own is not None:
            kv = self.kv

            def load_cpu_copy(kv_cache_cpu: Any, indices: Any, *args: Any, **kwargs: Any) -> Any:
                result = own(kv, kv_cache_cpu, indices, *args, **kwargs)
                self.device.ran("host-to-device copy", [int(i) for i in indices.tolist()])
                return result

            kv.load_cpu_copy = load_cpu_copy

    # --- the pool's content -------------------------------------------------------------------------------
    def write(self, slots: list[int], owner: int) -> None:
        for position, slot in enumerate(slots):
            self.kv.k_buffer[0][slot] = 100 * owner + position
            self.kv.v_buffer[0][slot] = 100 * owner + position

    def holder(self, slot: int) -> str:
        value = int(self.kv.k_buffer[0][slot].flatten()[0].item())
        owner, position = divmod(value, 100)
        return f"{OWNERS[owner]}[{position}]" if owner in OWNERS else "unwritten"

    def slots(self, req: Any, length: int) -> list[int]:
        return [int(s) for s in self.r2t.req_to_token[tree._kv_holder(req).req_pool_idx, :length].tolist()]

    def note(self, step: str, **fields: JSON) -> None:
        self.steps.append({"seq": len(self.device.log), "step": step, **fields})

    # --- the script ---------------------------------------------------------------------------------------
    def drive(self) -> None:
        finished = tree.make_req(FINISHED, PROMPT, "DECODE")
        subject = tree.make_req(RID, PROMPT, "DECODE")
        for token in (11, 12):  # decoded two tokens: the KV of all but the last is written
            subject.output_ids.append(token)
        self.subject = subject
        self.admit(finished)
        self.write(self.slots(finished, PROMPT), 2)
        self.admit(subject)
        self.length = len(subject.origin_input_ids) + len(subject.output_ids) - 1
        self.write(self.slots(subject, self.length), 1)
        self.allocator.alloc(self.allocator.available_size())  # the rest of the running batch holds every other page
        self.note("running", pages={FINISHED: self.slots(finished, PROMPT), RID: self.slots(subject, self.length)})
        release = tree.resolve(f"{BATCH}.release_req")
        wanted = {"req": subject, "remaing_req_count": 1, "req_to_token_pool": self.r2t,
                  "token_to_kv_pool_allocator": self.allocator, "tree_cache": self.cache, "hisparse_coordinator": None,
                  "server_args": self.decode_args}
        saved = release(**{k: v for k, v in wanted.items() if tree.accepts(release, k)})
        self.prealloc.add(subject, is_retracted=True)
        self.note("retracted", rid=RID, backed_up=plain(saved), queued=[r.rid for r in self.prealloc.retracted_queue])
        if self.point["in_flight"] == "finished":  # the next batch's forward was launched with it, before its result
            row = tree._kv_holder(finished).req_pool_idx
            page = [int(p) for p in self.allocator.alloc(1).tolist()]
            self.r2t.req_to_token[row, PROMPT] = page[0]
            tree.give_kv(finished, PROMPT + 1, row)
            self.in_flight = page
            self.device.launch(self.forward, f"forward ({FINISHED}'s next token)", page,
                               lambda: self.write_at(page[0], 300))
        name, _ = keep_flag()
        tree.module(DECODE).release_kv_cache(finished, self.cache, **{name: False})  # it finished: its pages go back
        self.note("finished", rid=FINISHED)
        returned = self.prealloc.resume_retracted_reqs()
        # what the tree hands its scheduler's waiting queue (anything but a list of requests resumes none of them)
        self.resumed = [r.rid for r in returned] if isinstance(returned, list) else []
        self.note("resume", resumed=self.resumed, returned=plain(returned) if not isinstance(returned, list) else "list")
        self.device.drain()
        self.note("step ends")

    def admit(self, req: Any) -> None:
        """``req`` left the preallocation queue as the tree's ``pop_preallocated`` lets it: its prompt matched against
        the tree cache (nothing cached: the root, locked) and its KV preallocated."""
        self.prealloc._match_prefix_and_lock(req)
        self.prealloc._pre_alloc(req)

    def write_at(self, slot: int, value: int) -> None:
        self.kv.k_buffer[0][slot] = value
        self.kv.v_buffer[0][slot] = value

    def effects(self) -> dict[str, JSON]:
        subject = self.subject
        holds = tree.holds_kv(subject)
        slots = self.slots(subject, self.length) if holds else []
        return {
            "subject": RID,
            "config": {"overlap": self.overlap, "backup": self.point["backup"]},
            "steps": list(self.steps),
            "device": list(self.device.log),
            "in_flight": list(self.in_flight),
            "resumed": list(self.resumed),
            "retracted": [r.rid for r in self.prealloc.retracted_queue],
            "request": {"is_retracted": bool(getattr(subject, "is_retracted", False)), "holds_kv": holds,
                        "length": self.length, "slots": slots},
            "pages": [{"slot": s, "holds": self.holder(s)} for s in slots],
        }


REQUIRES = (
    f"{DECODE}.DecodePreallocQueue.resume_retracted_reqs",
    f"{DECODE}.DecodePreallocQueue._pre_alloc",
    # how decode matches and locks a request's prompt in its tree cache (before it, inline in pop_preallocated)
    f"{DECODE}.DecodePreallocQueue._match_prefix_and_lock",
    f"{BATCH}.release_req",
    f"{UNIFIED}.init_hicache",
    f"{L2}.L2TransferEngine",
    "sglang.srt.mem_cache.pool_host.common._cuda_host_register",
)


def cases() -> tuple[Case, ...]:
    return tuple(Case.of(duties_6, point, lambda journal, point=point: RestoreScene(journal, point), REQUIRES)
                 for point in duties_6.SPACE.points())


PROBE = Probe(id="lifetime-restore", fix=6, imports=IMPORTS + (L2, UNIFIED.rsplit(".", 1)[0]), table=duties_6,
              cases=cases())

