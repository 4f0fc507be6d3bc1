"""NIXL's side of the lifetime scene (``probes/lifetime.py``), shared by L3 (``probes/nixl_completion.py``) and the NIXL
cases of lifetime-drain (#40645): the NIXL agents as a transport double, the tree's ``NixlKVManager`` built without its
``__init__`` for either role, the hand-off of a room to prefill, and the lifetime scene's NIXL ranks.

What stands in is the transport only (``NixlAgent``): the NIXL agents (a write posted with ``transfer`` begins writing
decode's memory, lands or fails when the case says, ``check_xfer_state`` reads its state, and a notification posted
with a write is delivered to the decode agent's ``get_new_notifs`` once that write landed, as NIXL delivers it). The
NIXL library itself is not needed: the tree imports it only in the manager's ``__init__``, which is not run.
"""

from __future__ import annotations

import functools
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import tree
from .doubles import Double, Journal, strict_subject
from .duties_lifetime import NIXL
from .lifetime import UTILS, DecodeRank, PrefillRank, Rank, RoomStatus, Stop, _dataclass, decode_endpoint
from .pages import PagePool, Transfer
from .plain import JSON

MANAGER = f"{NIXL}.NixlKVManager"
STATE_TYPE = "sglang.srt.disaggregation.base.conn.StateType"
ROOM = tree.BOOTSTRAP_ROOM
RID = "req-A"
PAGES = 4
PREFILL_AGENT, DECODE_AGENT = "prefill-agent-0", "decode-agent-0"
# decode's registered memory, as its KVArgsRegisterInfo tells prefill: one MLA KV buffer (a page is one item), the
# metadata buffer (a row is one item), and one buffer per state component (a slot is one item)
KV_BASE, AUX_BASE, ITEM = 0x300000, 0x400000, 64
STATE_BASES = (0x600000, 0x700000)
STATE_SLOTS = ((2,), (3,))  # the request's slot in each state component on decode (prefill's: the one before)
AUX_ROW = 3
STATES = ("SWA", "DSA")  # the two kinds of state of the model, by the tree's StateType names


@dataclass
class Write:
    """One NIXL write prefill posted: where in decode's memory it goes, the notification NIXL delivers with it."""

    handle: int
    what: str  # "kv", "state 0", "state 1", "aux"
    indices: list[int]
    notif: bytes | None
    state: str = "created"  # created | in flight | landed | failed
    transfer: Transfer | None = None  # the pages' write, for the KV


def named(agent: Double, name: str) -> Double:
    """The agent's ``name`` (the NIXL agent name peers address it by)."""
    object.__setattr__(agent, "name", name)
    return agent


class NixlAgent:
    """The two NIXL agents (transport only). Prefill's posts writes into decode's registered memory (its KV pages
    are ``pool``'s); a write is in flight until the case lands or fails it; ``check_xfer_state`` answers its state
    (each call first runs ``in_flight``: the case's steps held for while the batch is in flight); ``fails`` says
    which writes fail; ``unreadable`` which writes' state NIXL cannot read (``check_xfer_state`` raises, the write
    still running); a landed write is told to ``landed`` and its notification goes to decode's
    ``get_new_notifs``."""

    def __init__(self, journal: Journal, pool: PagePool, note: Callable[..., None], in_flight: Callable[[], None],
                 fails: Callable[[Write], bool], landed: Callable[[Write], None] = lambda write: None,
                 unreadable: Callable[[Write], bool] = lambda write: False) -> None:
        self.journal, self.pool, self.note = journal, pool, note
        self.in_flight, self.fails, self.landed, self.unreadable = in_flight, fails, landed, unreadable
        self.writes: dict[int, Write] = {}
        self.notifs: list[bytes] = []  # delivered to the decode agent, not yet taken

    def prefill(self) -> Double:
        journal = self.journal
        return named(Double(journal, "prefill0.nixl_agent", get_xfer_descs=self.descs, initialize_xfer=self.initialize,
                            transfer=self.post, check_xfer_state=self.check, check_remote_metadata=lambda name: True,
                            release_xfer_handle=lambda handle: None), PREFILL_AGENT)

    def decode(self) -> Double:
        return named(Double(self.journal, "decode0.nixl_agent", get_new_notifs=self.take_notifs), DECODE_AGENT)

    def descs(self, rows: Any, mem_kind: str, *args: Any, **kwargs: Any) -> list[tuple[int, int]]:
        """A descriptor list: (address, length) per row, as the tree built them."""
        return [(int(r[0]), int(r[1])) for r in (rows.tolist() if hasattr(rows, "tolist") else rows)]

    def initialize(self, op: str, src: list, dst: list[tuple[int, int]], peer: str, notif: bytes = b"",
                   *args: Any, **kwargs: Any) -> int:
        if op != "WRITE" or peer != DECODE_AGENT:
            raise self.journal.gap(f"a NIXL {op} to {peer}")
        what, indices = self.region(dst)
        handle = len(self.writes) + 1
        self.writes[handle] = Write(handle, what, indices, bytes(notif) if notif else None)
        return handle

    def region(self, dst: list[tuple[int, int]]) -> tuple[str, list[int]]:
        """Which of decode's buffers the rows address, and which items of it."""
        for what, base in (("kv", KV_BASE), ("aux", AUX_BASE), *((f"state {i}", b) for i, b in enumerate(STATE_BASES))):
            if all(base <= a < base + 0x100000 for a, _ in dst):
                return what, sorted({(a - base) // ITEM + k for a, n in dst for k in range(max(1, n // ITEM))})
        raise self.journal.gap(f"a NIXL write to addresses {[hex(a) for a, _ in dst]}")

    def post(self, handle: int, *args: Any, **kwargs: Any) -> str:
        write = self.writes[handle]
        write.state = "in flight"
        if write.what == "kv":
            write.transfer = self.pool.begin(RID, 0, write.indices)
        self.note("write posted", write=write.what)
        return "PROC"

    def check(self, handle: int, *args: Any, **kwargs: Any) -> str:
        self.in_flight()
        write = self.writes[handle]
        if write.state == "in flight" and self.unreadable(write):
            error = RuntimeError(f"NIXL could not read the state of the {write.what} write")
            self.journal.scripted.append(error)  # told by the case: the tree's handling of it is observed
            self.note("write state unreadable", write=write.what)
            raise error
        if write.state == "in flight":
            self.settle(write, fails=self.fails(write))
        return {"landed": "DONE", "failed": "ERR"}.get(write.state, "PROC")

    def settle(self, write: Write, fails: bool = False) -> None:
        """The write ends: it lands (its notification is delivered to decode), or fails (nothing is delivered)."""
        if fails:
            write.state = "failed"
            if write.transfer is not None:
                self.pool.fail(write.transfer)
        else:
            write.state = "landed"
            if write.transfer is not None:
                self.pool.land(write.transfer)
            if write.notif is not None:
                self.notifs.append(write.notif)
            self.landed(write)
        self.note(f"write {write.state}", write=write.what)

    def take_notifs(self) -> dict[str, list[bytes]]:
        taken, self.notifs = self.notifs, []
        return {PREFILL_AGENT: taken} if taken else {}

    def unlanded(self) -> list[str]:
        """The room's writes not landed: in flight, failed, or never posted."""
        return sorted(w.what for w in self.writes.values() if w.state != "landed")

    def effects(self) -> list[dict[str, JSON]]:
        return [{"what": w.what, "indices": w.indices, "state": w.state, "notified": w.notif is not None}
                for w in self.writes.values()]


def nixl_manager(rank: Rank, spies: tuple[str, ...] = (), **state: Any) -> Any:
    """The tree's ``NixlKVManager`` of ``rank`` (a lifetime scene rank: its role, wire and clock), built without its
    ``__init__`` (no NIXL agent, no sockets, no threads): ``state`` is what its role adds."""
    journal = rank.scene.journal
    return strict_subject(
        tree.resolve(MANAGER), journal, f"{rank.name}.kv_manager", spies=spies,
        **{**rank.manager_state(), "is_mla_backend": True, **state},
        kv_args=Double(journal, f"{rank.name}.kv_args", **kv_args(rank.role)),
        enable_all_cp_ranks_for_transfer=False, is_dummy_cp_rank=False, kv_shard_size=1, kv_shard_rank=0,
        deferred_bootstrap=None, defer_decode_allocation=False, sender_trace_module=None, _staging_ctx=None,
        _staging_handler=None, _dcp_pack_buffers=[], _dcp_pack_max_tokens=None, dcp_size=1, dcp_rank=0,
        prep_handles={}, src_mem_kind="VRAM", state_tp_size=1, transfer_source_rank=0,
        exceptions={}, _prepared_state_plans={}, _state_layout_rejections={}, _peer_reload_lock=threading.Lock(),
        waiting_timeout=300, bootstrap_timeout=300,
    )


def kv_args(role: str) -> dict[str, Any]:
    """What a ``role`` manager's ``kv_args`` register: one MLA KV buffer, the metadata buffer, the two states."""
    states = tree.resolve(STATE_TYPE)
    prefill = role == "prefill"
    return dict(kv_data_ptrs=[0x100000 if prefill else KV_BASE], kv_item_lens=[ITEM], kv_data_lens=[ITEM * PAGES],
                kv_data_mem_kinds=["VRAM"], kv_layer_ids=[0],
                aux_data_ptrs=[0x200000 if prefill else AUX_BASE], aux_item_lens=[ITEM], aux_data_lens=[ITEM * 8],
                state_types=[getattr(states, s) for s in STATES],
                state_data_ptrs=[[0x500000 + i * 0x100000] if prefill else [b] for i, b in enumerate(STATE_BASES)],
                state_item_lens=[[ITEM] for _ in STATES], state_data_lens=[[ITEM * 8] for _ in STATES],
                state_layer_ids=[[] for _ in STATES], state_dim_per_tensor=[],
                gpu_id=0, engine_rank=0, pp_rank=0, page_size=1, num_draft_entries=0)


def decode_state(agent: NixlAgent) -> dict[str, Any]:
    """What a decode ``NixlKVManager`` holds beside a manager's state: its NIXL agent (``agent``'s decode side), its
    trackers of the rooms it waits on and of their drain acknowledgements."""
    return dict(disaggregation_mode=tree.resolve(f"{UTILS}.DisaggregationMode").DECODE, agent=agent.decode(),
                required_prefill_response_num_table={}, prefill_response_tracker=defaultdict(set),
                addr_to_rooms_tracker=defaultdict(set),
                transfer_statuses=defaultdict(tree.resolve(f"{NIXL}.TransferStatus")) if hasattr(
                    tree.module(NIXL), "TransferStatus") else {},
                _deferred_abort_ack_tracker={}, _deferred_abort_generation=0, heartbeat_interval=2, max_failures=1,
                _start_heartbeat_checker_thread=lambda: None)


def send_pages(sender: Any, start: int, end: int, state_indices: list[list[int]] | None) -> None:
    """The prefill scheduler hands pages ``start`` to ``end`` (and the state slots of the last chunk) to the room's
    sender: the tree's ``send``, which numbers the chunk and tells the last from the pages its ``init`` expects."""
    import numpy as np

    send = sender.send
    wanted = {"kv_indices": np.arange(start, end, dtype=np.int32), "state_indices": state_indices}
    send(**{k: v for k, v in wanted.items() if tree.accepts(send, k)})


def hand_room(manager: Any, pages: list[int], aux_row: int, state_slots: list[list[int]]) -> Any:
    """Decode rank 0's destinations for the room (its ``pages``, metadata row ``aux_row``, state slots) and its
    registered memory, as prefill's bootstrap thread records them from its messages; then the prefill scheduler's
    sender for the room (the tree's constructor) and its ``init``: the room waits for its chunks."""
    import numpy as np

    conn = tree.module(NIXL)
    d_ip, d_port = decode_endpoint(0)
    manager.transfer_infos[ROOM] = {DECODE_AGENT: _dataclass(
        conn.TransferInfo, room=ROOM, endpoint=d_ip, dst_port=d_port, agent_name=DECODE_AGENT,
        dst_kv_indices=np.array(pages, dtype=np.int32), dst_aux_index=aux_row, required_dst_info_num=1,
        dst_state_indices=state_slots, decode_prefix_len=0, is_dummy=False)}
    manager.decode_kv_args_table[DECODE_AGENT] = _dataclass(
        conn.KVArgsRegisterInfo, room="None", endpoint=d_ip, dst_port=d_port, agent_name=DECODE_AGENT,
        agent_metadata=b"", dst_kv_ptrs=[KV_BASE], dst_kv_mem_kinds=["VRAM"], dst_aux_ptrs=[AUX_BASE],
        dst_state_data_ptrs=[[b] for b in STATE_BASES], gpu_id=0, decode_tp_size=1, decode_tp_rank=0,
        dst_kv_item_len=ITEM, dst_kv_item_lens=[ITEM], dst_kv_layer_ids=[0], dst_num_slots=PAGES,
        dst_state_item_lens=[[ITEM] for _ in STATES], dst_state_layer_ids=[[] for _ in STATES],
        dst_homogeneous_mem_kind="VRAM", dst_state_data_lens=[[ITEM * 8] for _ in STATES])
    sender = new_sender(manager)
    manager.update_status(ROOM, tree.kv_poll().WaitingForInput)
    sender.init(PAGES, 0)
    return sender


def new_sender(manager: Any) -> Any:
    """The prefill scheduler's sender for the room: the tree's constructor as the scheduler calls it (earlier trees
    also take the peer ranks)."""
    made = tree.module(NIXL).NixlKVSender
    return made(manager, f"{tree.BOOTSTRAP_HOST}:{tree.BOOTSTRAP_PORT}", ROOM,
                **{k: v for k, v in (("dest_tp_ranks", [0]), ("pp_rank", 0)) if tree.accepts(made, k)})


# --- NIXL's ranks in the lifetime scene (``Shape.backend`` "nixl") ------------------------------------------------


class NixlDecodeRank(DecodeRank):
    """A lifetime scene's decode rank on NIXL: the tree's decode ``NixlKVManager`` (its listener thread body takes
    prefill's status messages and ABORT_ACKs) and ``NixlKVReceiver``; its memory is written by the NIXL agents
    (``agent``), its KV pages this rank's page pool. The scene's one decode rank. A NIXL decode without a listener
    thread (0.5.18 and earlier: it took no status message and no acknowledgement from prefill) cannot be this rank:
    the NIXL cases are not applicable there, naming it."""

    conn = NIXL
    # its kv_args name the model's state kinds by the tree's StateType
    requires = (f"{MANAGER}._start_decode_listener_thread", f"{NIXL}.NixlKVReceiver", STATE_TYPE)

    def make_manager(self) -> Any:
        scene = self.scene
        self.agent = NixlAgent(scene.journal, self.pool, scene.note, self.in_flight, landed=self.landed,
                               fails=lambda write: self.failing(write) == "stops", unreadable=self.unreadable)
        return nixl_manager(self, spies=("note_abort_ack",), **decode_state(self.agent))

    def listener(self) -> Callable[[], None]:
        return self.manager._start_decode_listener_thread

    def receiver(self) -> tuple[type, dict[str, Any]]:
        return tree.module(NIXL).NixlKVReceiver, {"started_transfer": False, "chunk_staging_infos": []}

    def in_flight(self) -> None:
        """The steps the case holds for prefill rank 0's write into this rank: run while the batch is in flight."""
        hold = self.scene.holds.pop((0, self.rank), None)
        if hold is not None:
            hold()

    def failing(self, write: Write) -> str | None:
        """How prefill rank 0's KV write into this rank fails where the case fails it (``Scene.failing``)."""
        return self.scene.failing.get((0, self.rank)) if write.what == "kv" else None

    def unreadable(self, write: Write) -> bool:
        """A failed write that "keeps writing": NIXL cannot read its state; it and the writes posted with it (still
        running: nobody waits for them) land with the scene's late writes."""
        if self.failing(write) != "keeps writing":
            return False
        late = {what for what, _, _ in self.scene.late_writes}
        self.scene.late_writes += [(w.what, 0, functools.partial(self.agent.settle, w)) for w in self.agent.writes.values()
                                   if w.state == "in flight" and w.what not in late]
        return True

    def landed(self, write: Write) -> None:
        if write.what == "aux":
            self.scene.aux(self, write.indices[0])


class CountedRoomStatus(RoomStatus):
    """NIXL's ``request_status``: its transfer worker tests a taken chunk's room for presence before counting the chunk,
    and for its status (``check_status``: ``get``) after. The step held for the worker's test of the room runs at the
    status test, the chunk counted, as at the first test of Mooncake's worker, which counts first."""

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key)

    def get(self, key: Any, default: Any = None) -> Any:
        hold, self.hold = self.hold, None
        if hold is not None:
            hold()
        return super().get(key, default)


class NixlPrefillRank(PrefillRank):
    """A lifetime scene's prefill rank on NIXL: the tree's prefill ``NixlKVManager`` (its own transfer worker, its
    bootstrap thread body taking decode's ABORTs) and ``NixlKVSender``, writing through the decode rank's NIXL
    agents."""

    conn = NIXL
    room_status = CountedRoomStatus
    requires = (f"{MANAGER}.transfer_worker", f"{MANAGER}._start_bootstrap_thread", f"{MANAGER}.add_transfer_request",
                f"{NIXL}.NixlKVSender")

    def make_manager(self) -> Any:
        agent = self.scene.decode[0].agent
        return nixl_manager(self, disaggregation_mode=tree.resolve(f"{UTILS}.DisaggregationMode").PREFILL,
                            agent=agent.prefill(), request_status=self.status, transfer_infos={},
                            decode_kv_args_table={}, req_to_decode_prefix_len={}, transfer_queues=[self._queue()])

    def listener(self) -> Callable[[], None]:
        return self.manager._start_bootstrap_thread

    def bootstrap(self, rid: str, room: int = ROOM, published: bool = False) -> None:
        """Decode rank 0's preallocation for ``rid`` reached this rank (its bootstrap thread recorded it): the scene's
        one room, its destinations handed (NIXL's cases never send them over the wire). ``published``: they are
        left to decode's own messages: the scheduler's sender alone, its room bootstrapping."""
        request = self.scene.decode[0].requests[rid]
        self.senders[rid] = new_sender(self.manager) if published else hand_room(
            self.manager, request.pages, request.metadata_index, [])

    def send_chunk(self, start: int, end: int, last: bool) -> None:
        """The chunk through the room's sender, as the scheduler sends (NIXL's ``add_transfer_request`` takes the
        chunk's number from it in trees before 0.5.23); the sender tells the last chunk itself."""
        if self.scene.active in self.senders:
            send_pages(self.senders[self.scene.active], start, end, None)

    def work(self) -> None:
        try:
            self.manager.transfer_worker(self.manager.transfer_queues[0], None, 0)
        except Stop:
            pass
