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

import importlib.util
import pathlib
from collections.abc import Callable
from typing import Any

from . import tree
from .case import Case, Probe
from . import duties
from .doubles import Double, Journal, KVTransport, ever_assigned, output_streamer, strict_subject
from .plain import JSON

PREFILL = "sglang.srt.disaggregation.prefill"
DECODE = "sglang.srt.disaggregation.decode"
UTILS = "sglang.srt.disaggregation.utils"
SCHEDULER = "sglang.srt.managers.scheduler"

CAPACITY = 1024  # the KV pool both doors check against
REJECTION = "Input length (1500 tokens) exceeds the maximum allowed length (1018 tokens)."
NUM_KV_HEADS = 8


def _transport(journal: Journal) -> KVTransport:
    return KVTransport(journal, poll_state=tree.kv_poll().Bootstrapping)


def _backend() -> dict[str, Any]:
    """The door's transfer backend (a real, non-fake label it only passes to ``get_kv_class``),
    where the tree has a choice of backends."""
    backend = tree.transfer_backend()
    return {} if backend is None else {"transfer_backend": backend}


def beam_groups() -> bool:
    """Whether the tree's scheduler keeps beam groups (a ``beam_coordinator``, 0.5.19 on): only then
    has a rejected request a group to retire, and only then does the scene give it one."""
    return ever_assigned(tree.resolve(f"{SCHEDULER}.Scheduler"), "beam_coordinator")


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
    }


class PrefillDoor(_Door):
    def __init__(self, journal: Journal, req: Any, flags: dict[str, bool]) -> None:
        super().__init__(journal, req)
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
        self.door.add(self.req, **extra)

    def queues(self) -> dict[str, list[str]]:
        return {"bootstrap": [req.rid for req in self.door.queue]}


class DecodeDoor(_Door):
    def __init__(self, journal: Journal, req: Any, flags: dict[str, bool]) -> None:
        super().__init__(journal, req)
        self.flags = flags
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
        # One prefill peer already known with dp_size 1: the door's cache-hit fast path.
        peer = Double(journal, "prefill_info", dp_size=1)
        self.door = strict_subject(
            decode.DecodePreallocQueue,
            journal,
            "decode_prealloc_queue",
            scheduler=self.scheduler,
            queue=[],
            pending_reqs=[],
            retracted_queue=[],
            kv_manager=Double(journal, "kv_manager", prefill_info_table=PeerTable(journal, {_peer_address(decode, req): peer})),
            **_backend(),
            token_to_kv_pool=kv_pool,
            token_to_kv_pool_allocator=allocator,
            max_total_num_tokens=CAPACITY,
            num_reserved_decode_tokens=0,
            bootstrap_port=tree.BOOTSTRAP_PORT,  # where the first trees took the peer's port from
        )

    def drive(self) -> None:
        self.door.add(self.req, **self.flags)

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


# --- requests as they reach a door ---------------------------------------------------------------

Request = Callable[[Journal, str, str], Any]  # (journal, rid, mode) -> Req


def rejected(journal: Journal, rid: str, mode: str) -> Any:
    """Over-long prompt rejected at intake: abort pending in ``to_finish``, prompt cut to 1 token."""
    req = tree.make_req(rid, 1500, mode)
    tree.reject_at_intake(req, REJECTION)
    return req


def _in_session(journal: Journal, rid: str, mode: str, streaming: bool) -> Any:
    """A rejected turn of a session, where the tree's request carries its session (``Req.session``,
    0.5.10 on; before, a request names its session by id only and holds nothing of it)."""
    req = rejected(journal, rid, mode)
    if not ever_assigned(type(req), "session"):
        raise tree.Missing("sglang.srt.managers.schedule_batch.Req.session")
    req.session = Double(journal, "session", streaming=streaming, recorded=("abort_req",))
    return req


def rejected_in_session(journal: Journal, rid: str, mode: str) -> Any:
    """A rejected turn of a streaming session, which ``create_req`` marked in flight."""
    return _in_session(journal, rid, mode, streaming=True)


def rejected_in_plain_session(journal: Journal, rid: str, mode: str) -> Any:
    """A rejected turn of a session that does not stream: nothing of it is in flight to release."""
    return _in_session(journal, rid, mode, streaming=False)


def valid(journal: Journal, rid: str, mode: str) -> Any:
    return tree.make_req(rid, 16, mode)


def _marked(rid: str, mode: str) -> Any:
    """A request that was running when an abort was marked on it ("abort method 3")."""
    req = tree.make_req(rid, 16, mode)
    tree.mark_abort(req)  # pending: ``finished()`` still says False
    return req


def holding_metadata(journal: Journal, rid: str, mode: str) -> Any:
    """Preempted prefill requeue: KV already released, metadata buffer still held."""
    req = _marked(rid, mode)
    req.metadata_buffer_index = 7
    return req


def holding_kv(journal: Journal, rid: str, mode: str) -> Any:
    """Re-entry that still holds its KV row (released by its queue, not by the door)."""
    req = _marked(rid, mode)
    tree.give_kv(req, len(req.origin_input_ids))
    return req


def holding_mamba(journal: Journal, rid: str, mode: str) -> Any:
    """Re-entry that holds Mamba state and no KV."""
    req = _marked(rid, mode)
    tree.give_mamba(req)
    return req


def holding_backup(journal: Journal, rid: str, mode: str) -> Any:
    """Preempted requeue that still owns a host retraction backup."""
    req = _marked(rid, mode)
    tree.give_retraction_backup(req, Double(journal, "retraction_backup"))
    return req


def retracted(journal: Journal, rid: str, mode: str) -> Any:
    """Re-entry carrying nothing: ``release_req`` freed KV, short sequences take no backup."""
    return _marked(rid, mode)


def preempted(journal: Journal, rid: str, mode: str) -> Any:
    """Priority preemption requeues through a bare ``_add_request_to_queue``: no door flag, only
    ``reset_for_retract``'s ``is_retracted`` mark and no resources left."""
    req = _marked(rid, mode)
    req.is_retracted = True
    return req


# --- cases ---------------------------------------------------------------------------------------


def rejected_case(door: type[_Door], name: str = "rejected", request: Request = rejected, what: str = "") -> Case:
    prefill = door is PrefillDoor
    return _case(
        door,
        name,
        role="bug",
        title=f"request{what} rejected for length reaches the {'prefill' if prefill else 'decode'} admission door",
        request=request,
        extra_requires=("sglang.srt.managers.utils.validate_input_length",),
    )


def guard_case(door: type[_Door], name: str, title: str, request: Request, **flags: bool) -> Case:
    return _case(door, name, role="guard", title=title, request=request, flags=flags)


def _case(
    door: type[_Door],
    name: str,
    *,
    role: str,
    title: str,
    request: Request,
    flags: dict[str, bool] | None = None,
    extra_requires: tuple[str, ...] = (),
) -> Case:
    """One door, one request shape; ``name`` is both the case's suffix and the request's rid."""
    flags = flags or {}
    prefill = door is PrefillDoor
    module, site = (PREFILL, "prefill-door") if prefill else (DECODE, "decode-door")
    add = f"{module}.{'PrefillBootstrapQueue' if prefill else 'DecodePreallocQueue'}.add"
    mode = "PREFILL" if prefill else "DECODE"
    return Case(
        id=f"{site}-{name}",
        site=site,
        role=role,
        title=title,
        duties=duties.declared("admission", f"{site}-{name}"),
        build=lambda journal: door(journal, request(journal, name, mode), flags),
        requires=(add, *(f"{add}({flag})" for flag in flags), *extra_requires),
    )


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
    cases=(
        rejected_case(PrefillDoor),
        rejected_case(DecodeDoor),
        rejected_case(PrefillDoor, "rejected-session", rejected_in_session, " of a streaming session"),
        rejected_case(PrefillDoor, "rejected-plain-session", rejected_in_plain_session, " of a non-streaming session"),
        guard_case(PrefillDoor, "valid", "valid request at the prefill admission door", valid),
        guard_case(DecodeDoor, "valid", "valid request at the decode admission door", valid),
        guard_case(
            PrefillDoor,
            "reentry-metadata",
            "aborted-while-running request re-enters the prefill door holding a metadata buffer",
            holding_metadata,
        ),
        guard_case(
            PrefillDoor,
            "reentry-backup",
            "aborted-while-running request re-enters the prefill door holding a retraction backup",
            holding_backup,
        ),
        guard_case(
            PrefillDoor,
            "reentry-kv",
            "aborted-while-running request re-enters the prefill door holding its KV",
            holding_kv,
        ),
        guard_case(
            PrefillDoor,
            "reentry-mamba",
            "aborted-while-running request re-enters the prefill door holding Mamba state",
            holding_mamba,
        ),
        guard_case(
            DecodeDoor,
            "retracted",
            "retracted decode request with a pending abort re-enters the decode door",
            retracted,
            is_retracted=True,
        ),
        guard_case(
            DecodeDoor,
            "rebootstrap",
            "re-bootstrapping decode request with a pending abort re-enters the decode door",
            retracted,
            is_rebootstrap=True,
        ),
        guard_case(
            PrefillDoor,
            "preempted",
            "preempted request holding nothing re-enters the prefill door with a pending abort",
            preempted,
        ),
        guard_case(
            DecodeDoor,
            "preempted",
            "preempted request holding nothing re-enters the decode door with a pending abort",
            preempted,
        ),
    ),
)
