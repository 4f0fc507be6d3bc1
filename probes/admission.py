"""Probe for fix #38935: a request rejected at intake must not pass the PD admission doors.

``set_finish_with_abort`` leaves the verdict in ``to_finish`` and shrinks the prompt to one token,
so ``finished()`` still says False. Before the fix both doors (``PrefillBootstrapQueue.add`` and
``DecodePreallocQueue.add``) admitted such a request: a KV sender or receiver was built and the
request queued for a handoff. After it, the door retires the request instead.

The guard cases pin what the fix must not change: valid requests, and re-entering / retracted /
preempted requests that carry an abort marker but whose queue still owns resources (upstream's
own tests for #38935 say those must reach their queue, not be retired at the door).
"""

from __future__ import annotations

import functools
import importlib.util
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

from . import tree
from .case import Case, Probe
from . import duties_38935
from .doubles import Double, Journal, KVTransport, ever_assigned, output_streamer, read_sources, strict_subject
from .plain import JSON

PREFILL = "sglang.srt.disaggregation.prefill"
DECODE = "sglang.srt.disaggregation.decode"
UTILS = "sglang.srt.disaggregation.utils"
SCHEDULER = "sglang.srt.managers.scheduler"

CAPACITY = 1024  # the KV pool both doors check against
OVER_CAPACITY = 1100  # a prompt intake passed that the pool cannot hold
REJECTION = "Input length (1500 tokens) exceeds the maximum allowed length (1018 tokens)."
NUM_KV_HEADS = 8
DP_SIZE = 4  # a data-parallel prefill peer: the room (tree.BOOTSTRAP_ROOM) resolves to rank 4242 % 4 = 2, not 0


def _transport(journal: Journal) -> KVTransport:
    return KVTransport(journal, poll_state=tree.kv_poll().Bootstrapping)


def _backend() -> dict[str, Any]:
    """The door's transfer backend (a real, non-fake label it only passes to ``get_kv_class``),
    where the tree has a choice of backends."""
    backend = tree.transfer_backend()
    return {} if backend is None else {"transfer_backend": backend}


@functools.cache
def beam_groups() -> bool:
    """Whether the tree's scheduler keeps beam groups (a ``beam_coordinator``, 0.5.19 on): only then
    has a rejected request a group to retire, and only then does the scene give it one."""
    return ever_assigned(tree.resolve(f"{SCHEDULER}.Scheduler"), "beam_coordinator")


@functools.cache
def cache_abort_release() -> bool:
    """Whether the tree can release the cache-side state of an aborted request: the scheduler's
    ``_release_aborted_request`` (0.5.20 on) or a tree cache's ``release_aborted_request`` (HiCache
    storage, 0.5.2 on). Before, nothing a request registers with the cache has an abort release."""
    if hasattr(tree.resolve(f"{SCHEDULER}.Scheduler"), "_release_aborted_request"):
        return True
    spec = importlib.util.find_spec("sglang.srt.mem_cache")
    for folder in spec.submodule_search_locations if spec else ():
        for path in sorted(pathlib.Path(folder).rglob("*.py")):
            if "def release_aborted_request" in path.read_text(encoding="utf-8", errors="replace"):
                return True
    return False


def _scheduler(journal: Journal, streamer: Double) -> Any:
    """The scheduler as the doors see it: an instance of the tree's own ``Scheduler`` class.

    Calls into its retire path (``retire_unadmitted_request``) are recorded and run the tree's code;
    a tree whose class lacks the method answers as it would in production, with an AttributeError,
    never with a retirement the double made up. The cache-side release is read where it lands, at
    the tree cache, however the tree's retire path reaches it. HiCache storage is on, so an era's own
    release of an aborted request's storage state (``release_aborted_request``, before the cache had
    outcomes) runs where the tree guards it by that option.
    """
    beams = {"beam_coordinator": Double(journal, "beam_coordinator", recorded=("retire_group",))} if beam_groups() else {}
    return strict_subject(
        tree.resolve(f"{SCHEDULER}.Scheduler"),
        journal,
        "scheduler",
        spies=("retire_unadmitted_request",),
        output_streamer=streamer,
        stream_output=streamer.stream_output,  # trees before the output streamer stream from the scheduler
        **beams,
        tree_cache=Double(journal, "tree_cache", recorded=("finish", "release_aborted_request")),
        enable_hicache_storage=True,
        enable_hisparse=False,
        server_args=Double(journal, "server_args"),  # read only for a fake transfer, which ours is not
    )


class _Door:
    """Shared by both doors: one request, one ``add`` call, the same effects vocabulary."""

    def __init__(self, journal: Journal, req: Any) -> None:
        self.journal = journal
        self.req = req
        self.transport = _transport(journal)
        streamer, self.streamed = output_streamer(journal)
        self.scheduler = _scheduler(journal, streamer)
        self.before = _state(req)

    def queues(self) -> dict[str, list[str]]:
        raise NotImplementedError

    def effects(self) -> dict[str, JSON]:
        return {
            "before": self.before,
            "queues": self.queues(),
            "kv_endpoints": self.transport.constructed,
            "kv_calls": [e for e in self.journal.entries if str(e["actor"]).startswith("kv_") and e["actor"] != "kv_manager"],
            "peer_lookups": len(self.journal.calls("kv_manager", "prefill_info_table.get")),
            "retired": [e["args"][0] for e in self.journal.calls("scheduler", "retire_unadmitted_request")],
            "streamed": self.streamed,
            "tree_cache_calls": [{k: e[k] for k in ("call", "args", "kwargs")} for e in self.journal.calls("tree_cache")],
            "cache_release": cache_abort_release(),
            "beam_groups": beam_groups(),
            "beam_retired": [e["args"][0] for e in self.journal.calls("beam_coordinator", "retire_group")],
            "session_aborted": [self.req.rid for _ in self.journal.calls("session", "abort_req")],
            "request": _state(self.req),
        }


def _state(req: Any) -> dict[str, JSON]:
    """The request's state, and whether it holds a host retraction backup (a re-entry must keep it)."""
    return {
        **tree.request_state(req),
        "holds_backup": tree.retraction_backup(req) is not None,
        "has_session": getattr(req, "session", None) is not None,
        "return_logprob": bool(getattr(req, "return_logprob", False)),
    }


class PrefillDoor(_Door):
    def __init__(self, journal: Journal, req: Any, flags: dict[str, bool], peer_kind: str = "known") -> None:
        super().__init__(journal, req)
        self.flags = flags
        prefill = tree.module(PREFILL)
        tree.route_kv_endpoints(prefill, self.transport.get_kv_class)  # child process only
        self.door = strict_subject(
            prefill.PrefillBootstrapQueue,
            journal,
            "prefill_bootstrap_queue",
            scheduler=self.scheduler,
            queue=[],
            kv_manager=Double(journal, "kv_manager"),
            **_backend(),
            bootstrap_port=tree.BOOTSTRAP_PORT,
            tp_rank=0,
            pp_rank=0,
            max_total_num_tokens=CAPACITY,
            max_input_len=CAPACITY,
        )

    def drive(self) -> None:
        extra = {"num_kv_heads": NUM_KV_HEADS} if tree.accepts(self.door.add, "num_kv_heads") else {}
        self.door.add(self.req, **extra, **self.flags)

    def queues(self) -> dict[str, list[str]]:
        return {"bootstrap": [req.rid for req in self.door.queue]}


class DecodeDoor(_Door):
    def __init__(self, journal: Journal, req: Any, flags: dict[str, bool], peer_kind: str = "known") -> None:
        super().__init__(journal, req)
        self.flags = flags
        self.peer_kind = peer_kind
        decode = tree.module(DECODE)
        tree.route_kv_endpoints(decode, self.transport.get_kv_class)
        kv_pool = Double(journal, "token_to_kv_pool")
        allocator = Double(
            journal,
            "token_to_kv_pool_allocator",
            page_size=1,
            get_kvcache=lambda: kv_pool,
            prealloc_ceiling_fits=lambda full, swa: None,  # no unified byte ceiling: token capacity decides
        )
        # One prefill peer already known (the door's cache-hit fast path), with dp_size 1 or running data
        # parallelism and following bootstrap rooms; or none yet.
        dp = {"dp_size": DP_SIZE, "follow_bootstrap_room": True} if peer_kind == "known-dp" else {"dp_size": 1}
        peer = Double(journal, "prefill_info", **dp)
        peers = {_peer_address(decode, req): peer} if peer_kind != "unknown" else {}
        self.door = strict_subject(
            decode.DecodePreallocQueue,
            journal,
            "decode_prealloc_queue",
            scheduler=self.scheduler,
            queue=[],
            pending_reqs=[],
            retracted_queue=[],
            kv_manager=Double(journal, "kv_manager", prefill_info_table=PeerTable(journal, peers)),
            **_backend(),
            token_to_kv_pool=kv_pool,
            token_to_kv_pool_allocator=allocator,
            max_total_num_tokens=CAPACITY,
            num_reserved_decode_tokens=0,
            bootstrap_port=tree.BOOTSTRAP_PORT,  # where the first trees took the peer's port from
        )

    def drive(self) -> None:
        self.door.add(self.req, **self.flags)

    def effects(self) -> dict[str, JSON]:
        """Also whether the door resolves the request's prefill peer itself (``_resolve_prefill_dp_rank``): only
        such a door initialises a receiver (a fake transfer's at once); before, that happened after the door."""
        peer = {"dp_size": DP_SIZE, "room": int(self.req.bootstrap_room)} if self.peer_kind == "known-dp" else None
        return {**super().effects(), "door_resolves_peer": hasattr(type(self.door), "_resolve_prefill_dp_rank"),
                **({"peer": peer} if peer else {})}

    def queues(self) -> dict[str, list[str]]:
        return {
            "prealloc": [entry.req.rid for entry in self.door.queue],
            "pending": [entry.req.rid for entry in self.door.pending_reqs],
            "retracted": [req.rid for req in self.door.retracted_queue],
        }


class PeerTable(dict):
    """The decode side's table of known prefill peers; a lookup is recorded (the door that looks its
    peer up must initialise the receiver with it)."""

    def __init__(self, journal: Journal, peers: dict) -> None:
        super().__init__(peers)
        self.journal = journal

    def get(self, key: Any, default: Any = None) -> Any:
        self.journal.record("kv_manager", "prefill_info_table.get", (key,))
        return super().get(key, default)


def _peer_address(decode: Any, req: Any) -> str:
    """The key the decode door looks its prefill peer up by, spelled by the tree itself."""
    spell = getattr(decode, "_bootstrap_addr", None)
    port = getattr(req, "bootstrap_port", None) or tree.BOOTSTRAP_PORT  # first trees: the queue's port
    return spell(req) if spell is not None else f"{req.bootstrap_host}:{port}"


# --- requests as they reach a door: one point of the case space (probes/duties_38935.py SPACE) ---------


def request(journal: Journal, rid: str, mode: str, point: Mapping[str, str]) -> Any:
    """A real ``Req`` in the state ``point`` names, made the way the tree's own code makes it."""
    abort = point["abort"]
    length = 1500 if abort == "rejected" else OVER_CAPACITY if point["capacity"] == "exceeds" else 16
    req = tree.make_req(rid, length, mode)
    if point["transfer"] == "fake":  # the warm-up request's address: the fake transfer backend serves it
        req.bootstrap_host = tree.resolve(f"{UTILS}.FAKE_BOOTSTRAP_HOST")
    if point["priority"] == "set":  # what the tokenizer passes as Req(priority=...) when priority scheduling is on
        if not hasattr(req, "priority"):
            raise tree.Missing("sglang.srt.managers.schedule_batch.Req.priority")
        req.priority = 5
    for flag, field in (("stream", "stream"), ("logprob", "return_logprob")):  # what the client asked for
        if point[flag] == "on":
            if not hasattr(req, field):
                raise tree.Missing(f"sglang.srt.managers.schedule_batch.Req.{field}")
            setattr(req, field, True)
    if abort == "rejected":  # over-long prompt: abort pending in ``to_finish``, prompt cut to 1 token
        tree.reject_at_intake(req, REJECTION)
        if point["finish"] == "applied":  # the tree's own transition: to_finish becomes finished_reason
            req.update_finish_state()
    elif abort == "marked":  # "abort method 3": ``finished()`` still says False
        tree.mark_abort(req)
    if point["entry"] == "preempted":  # ``reset_for_retract``'s mark; nothing else declares the re-entry
        req.is_retracted = True
    HOLD[point["holds"]](journal, req)
    if point["holds"] == "metadata":
        req.metadata_buffer_index = int(point["slot"])
    if point["session"] != "none":
        _in_session(journal, req, streaming=point["session"] == "session")
    return req


def _hold_metadata(journal: Journal, req: Any) -> None:
    req.metadata_buffer_index = 7


HOLD: dict[str, Callable[[Journal, Any], None]] = {
    "nothing": lambda journal, req: None,
    "metadata": _hold_metadata,
    "kv": lambda journal, req: tree.give_kv(req, len(req.origin_input_ids)),
    "mamba": lambda journal, req: tree.give_mamba(req),
    "backup": lambda journal, req: tree.give_retraction_backup(req, Double(journal, "retraction_backup")),
}


def _in_session(journal: Journal, req: Any, streaming: bool) -> None:
    """A turn of a session, where the tree's request carries its session (``Req.session``, 0.5.10 on;
    before, a request names its session by id only and holds nothing of it)."""
    if not ever_assigned(type(req), "session"):
        raise tree.Missing("sglang.srt.managers.schedule_batch.Req.session")
    req.session = Double(journal, "session", streaming=streaming, recorded=("abort_req",))


# --- cases: every reachable point of the space ---------------------------------------------------

FLAGS = {"retracted": "is_retracted", "rebootstrap": "is_rebootstrap"}  # the entries a door declares by a flag


def point_case(point: Mapping[str, str]) -> Case:
    """The case of one point: its door, its request, the flag its entry passes; ``requires`` names the
    door's ``add`` and the flag's parameter (a door without it cannot be entered that way: not
    applicable), and for a rejection the tree's own length check."""
    space = duties_38935.SPACE
    prefill = point["door"] == "prefill"
    door, module, queue = (PrefillDoor, PREFILL, "PrefillBootstrapQueue") if prefill else (DecodeDoor, DECODE, "DecodePreallocQueue")
    add = f"{module}.{queue}.add"
    case_id = space.case_id(point)
    rid = case_id.split("-door-", 1)[1]
    mode = "PREFILL" if prefill else "DECODE"
    flags = {FLAGS[point["entry"]]: True} if point["entry"] in FLAGS else {}
    needs = {  # what a state needs of the tree besides the door: its own length check, capacity check, ...
        "sglang.srt.managers.utils.validate_input_length": point["abort"] == "rejected",
        "sglang.srt.managers.schedule_batch.Req.update_finish_state": point["finish"] == "applied",
        f"{module}.{queue}._check_if_req_exceed_kv_capacity": point["capacity"] == "exceeds",
        f"{UTILS}.FAKE_BOOTSTRAP_HOST": point["transfer"] == "fake",
        f"{DECODE}.DecodePreallocQueue._resolve_prefill_dp_rank": point["peer"] in ("unknown", "known-dp"),
    }
    peer_kind = point["peer"]
    return Case.of(duties_38935, point, lambda journal: door(journal, request(journal, rid, mode, point), flags, peer_kind),
                   (add, *(f"{add}({flag})" for flag in flags), *(api for api, needed in needs.items() if needed)))


PROBE = Probe(
    id="admission",
    fix=38935,
    imports=(
        "sglang.srt.managers.schedule_batch",
        "sglang.srt.sampling.sampling_params",
        "sglang.srt.server_args",
        "sglang.srt.runtime_context",
        UTILS,
        "sglang.srt.disaggregation.base",
        PREFILL,
        DECODE,
        SCHEDULER,
    ),
    cases=tuple(point_case(p) for p in duties_38935.SPACE.points()),
    table=duties_38935,
    warm=lambda: (beam_groups(), cache_abort_release(), read_sources(
        tree.resolve(f"{SCHEDULER}.Scheduler"), tree.resolve(f"{PREFILL}.PrefillBootstrapQueue"),
        tree.resolve(f"{DECODE}.DecodePreallocQueue"), tree.resolve("sglang.srt.managers.schedule_batch.Req"))),
)
