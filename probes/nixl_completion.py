"""Probe for L3 (0.5.23): a NIXL decode takes a transfer as done only once prefill reported every write of it landed,
never from the NIXL notifications that reached it; a send after the sender concluded is dropped.

One room handed from one prefill rank to one decode rank over the tree's own NIXL code: the prefill
``NixlKVManager``'s transfer worker (its writes, its wait for every write to settle, its status messages), the prefill
``NixlKVSender``, the decode ``NixlKVManager``'s message loop (its listener thread body) and the decode
``NixlKVReceiver``'s ``poll``. The model is a hybrid one (an MLA KV pool and two kinds of state, the tree's own
``StateType`` SWA and DSA), so the last chunk's writes are its KV pages, two state components and the metadata row.

What stands in is the transport only (``NixlAgent``): the NIXL agents (a write posted with ``transfer`` begins writing
decode's memory, lands or fails when the case says, ``check_xfer_state`` reads its state, and a notification posted
with a write is delivered to the decode agent's ``get_new_notifs`` once that write landed, as NIXL delivers it), the
zmq wire of the lifetime scene (``probes/lifetime.py``: every message logged and delivered through the receiving
rank's own loop) and the clock. The decode pages are the page-ownership model (``probes/pages.py``): a read of a page
no write of the request reached is observed, never inferred.

A case holds one write (a state component, the KV pages or the metadata row) in flight while decode polls, every
other write landed and its notification delivered, then lands or fails it; or sends a chunk after the sender
concluded. The NIXL library itself is not needed: the tree imports it only in the manager's ``__init__``, which is not
run (the managers are the tree's class built without it, as the lifetime scene builds Mooncake's).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import duties_3, tree
from .case import Case, Probe
from .doubles import Double, Journal, strict_subject
from .duties_lifetime import NIXL
from .lifetime import (COMMON, CONFIGS, UTILS, Rank, Stop, TreeLog, Wire, clocked_time, configure, decode_endpoint,
                       prefill_endpoint, tcp)
from .nixl import (AUX_ROW, MANAGER, PAGES, RID, ROOM, STATE_SLOTS, STATE_TYPE, NixlAgent, decode_state, hand_room,
                   nixl_manager, send_pages)
from .pages import Clock, PagePool
from .plain import JSON, plain

IMPORTS = ("sglang.srt.server_args", "sglang.srt.runtime_context", UTILS, "sglang.srt.disaggregation.base", COMMON,
           NIXL)
REQUIRES = (f"{NIXL}.NixlKVSender", f"{NIXL}.NixlKVReceiver", f"{MANAGER}.transfer_worker",
            f"{MANAGER}._start_decode_listener_thread", f"{MANAGER}.maybe_send_extra", STATE_TYPE)

class NixlRank(Rank):
    """A rank whose KV manager is the tree's ``NixlKVManager`` (built without its ``__init__``: no NIXL agent, no
    sockets, no threads), its message loop the tree's own thread body."""

    conn = NIXL

    def __init__(self, scene: "NixlScene", role: str, endpoint: tuple[str, int]) -> None:
        self.role = role
        super().__init__(scene, 0, endpoint)

    def manager(self, **state: Any) -> Any:
        made = nixl_manager(self, **state)
        self.config = configure(self.scene.journal, tree.module(COMMON).CommonKVManager, made,
                                ("enable_deferred_decode_kv_release",))
        return made


class NixlScene:
    """The two ranks, the agents, the wire, the clock; ``drive`` runs the case's script."""

    def __init__(self, journal: Journal, shape: "Shape") -> None:
        self.journal, self.shape = journal, shape
        for name, value in CONFIGS.get(shape.config, {}).items():
            os.environ[name] = value
        self.clock = Clock()
        self.wire = Wire(self.clock)
        self.log = TreeLog(journal, self.clock)
        self.pool = PagePool(PAGES, self.clock)
        self.agent = NixlAgent(journal, self.pool, self.note, self.while_in_flight,
                               fails=lambda write: write.what == shape.held and shape.fate == "fails")
        self.steps: list[dict[str, JSON]] = []
        self.polls: list[dict[str, JSON]] = []
        self.sender_polls: list[dict[str, JSON]] = []
        self.held_steps_run = False
        time_ = clocked_time(self.clock)
        for name in (NIXL, COMMON):
            if hasattr(tree.module(name), "time"):
                tree.module(name).time = time_
        modes = tree.resolve(f"{UTILS}.DisaggregationMode")
        self.decode = NixlRank(self, "decode", decode_endpoint(0))
        self.decode_manager = self.decode.manager(**decode_state(self.agent))
        self.decode.start(self.decode_manager._start_decode_listener_thread)
        self.prefill = NixlRank(self, "prefill", prefill_endpoint(0))
        self.queue: list[Any] = []
        self.queued: list[dict[str, JSON]] = []
        self.prefill_manager = self.prefill.manager(
            disaggregation_mode=modes.PREFILL, agent=self.agent.prefill(), transfer_infos={}, decode_kv_args_table={},
            req_to_decode_prefix_len={}, transfer_queues=[Double(journal, "prefill0.transfer_queue", put=self._put,
                                                                 get=self._get)])
        self.receiver: Any = None
        self.sender: Any = None

    # --- the queue between the sender and the transfer worker ----------------------------------------------
    def _put(self, chunk: Any) -> None:
        self.queued.append({"seq": self.clock.tick(), "last": bool(chunk.is_last_chunk),
                            "pages": [int(p) for p in chunk.prefill_kv_indices]})
        self.queue.append(chunk)

    def _get(self, *args: Any, **kwargs: Any) -> Any:
        if not self.queue:
            raise Stop()
        return self.queue.pop(0)

    def note(self, step: str, **fields: JSON) -> None:
        self.steps.append({"seq": self.clock.tick(), "t": self.clock.now, "step": step, **fields})

    # --- the request ------------------------------------------------------------------------------------
    def start_request(self) -> None:
        """Decode preallocated the request (its pages, metadata row and state slots) and its receiver sent them to
        prefill (the tree's ``send_metadata``; prefill's bootstrap thread took them in, as the lifetime scene's
        bootstrap has it); prefill's scheduler made its sender (the tree's constructor) and ``init``."""
        import numpy as np

        journal, poll = self.journal, tree.kv_poll()
        conn = tree.module(NIXL)
        pages = self.pool.alloc(RID, PAGES)
        dm = self.decode_manager
        bootstrap_addr = f"{tree.BOOTSTRAP_HOST}:{tree.BOOTSTRAP_PORT}"
        dm.required_prefill_response_num_table[ROOM] = 1
        dm.addr_to_rooms_tracker[bootstrap_addr].add(ROOM)
        dm.prefill_response_tracker.setdefault(ROOM, set())
        dm.update_status(ROOM, poll.Bootstrapping)
        dm.update_status(ROOM, poll.WaitingForInput)
        ip, port = prefill_endpoint(0)
        self.receiver = strict_subject(
            conn.NixlKVReceiver, journal, f"decode0.kv_receiver.{RID}", kv_mgr=dm, bootstrap_room=ROOM,
            conclude_state=None, abort_notified=False, started_transfer=False, init_time=None,
            bootstrap_infos=[{"rank_ip": ip, "rank_port": port, "is_dummy": False}], bootstrap_addr=bootstrap_addr,
            required_dst_info_num=1, _abort_generation=None, require_staging=False, chunk_staging_infos=[],
            _connect_to_bootstrap_server=lambda info: (
                self.wire.socket(journal, "decode0", tcp((info["rank_ip"], info["rank_port"]))), threading.Lock()),
            invalidate_cached_bootstrap_infos=journal.method(f"decode0.kv_receiver.{RID}",
                                                             "invalidate_cached_bootstrap_infos"))
        first = len(self.wire.log)
        send = self.receiver.send_metadata
        wanted = {"kv_indices": np.array(pages, dtype=np.int32), "aux_index": AUX_ROW,
                  "state_indices": [list(s) for s in STATE_SLOTS]}
        send(**{k: v for k, v in wanted.items() if tree.accepts(send, k)})
        for message in self.wire.log[first:]:
            message["kind"] = "metadata"
            if message["fate"] == "pending":
                message["fate"] = "taken by the prefill rank's bootstrap"
        self.sender = hand_room(self.prefill_manager, pages, AUX_ROW, [list(s) for s in STATE_SLOTS])
        self.note("bootstrapped", rid=RID)

    def send_chunks(self) -> None:
        """Prefill's scheduler hands the request's chunks to its sender (the tree's ``send``): its pages in one chunk,
        or in two; the last carries its state slots."""
        bounds = [0, PAGES] if self.shape.chunks == 1 else [0, PAGES // 2, PAGES]
        for start, end in zip(bounds, bounds[1:]):
            send_pages(self.sender, start, end, [[s[0] - 1] for s in STATE_SLOTS] if end == PAGES else None)
            self.note("sent", rid=RID, pages=list(range(start, end)))

    def work(self) -> None:
        """The transfer worker takes what is queued, through the tree's own ``transfer_worker``."""
        try:
            self.prefill_manager.transfer_worker(self.prefill_manager.transfer_queues[0], None, 0)
        except Stop:
            pass
        self.note("worker idle")

    def while_in_flight(self) -> None:
        """The steps the case runs while the batch's writes are in flight (once): every write but the held one
        lands, then decode polls, and the messages prefill sent so far reach decode."""
        if self.held_steps_run:
            return
        self.held_steps_run = True
        for write in list(self.agent.writes.values()):
            if write.state == "in flight" and write.what != self.shape.held:
                self.agent.settle(write)
        self.decode_polls("while a write is in flight")
        self.deliver()
        self.decode_polls("while a write is in flight")

    def deliver(self) -> None:
        """Prefill's messages reach decode's loop (decode's to prefill stay logged: prefill's bootstrap thread, which
        takes them, is not part of the scene)."""
        for message in self.wire.pending():
            if message["to"] in self.wire.routes:
                self.wire.deliver(message)
        self.note("messages delivered")

    def decode_polls(self, when: str) -> None:
        """Decode's transfer queue polls the receiver (the tree's ``poll``); what it said, and which writes of the
        room had not landed then."""
        result = poll_name(self.receiver.poll())
        # the room's writes not landed, and its chunks still waiting in the transfer queue (nothing of them written)
        unlanded = self.agent.unlanded() + ["a queued chunk"] * len(self.queue)
        self.polls.append({"seq": self.clock.tick(), "when": when, "result": result, "unlanded": unlanded})
        if result == "Success" and RID not in self.read:
            self.read.add(RID)
            self.pool.read(RID, self.pool.held_by(RID))  # the request enters a batch: its attention reads its pages

    def sender_polls_(self, when: str) -> None:
        self.sender_polls.append({"seq": self.clock.tick(), "when": when, "result": poll_name(self.sender.poll())})

    def drive(self) -> None:
        self.read: set[str] = set()
        self.start_request()
        if self.shape.late == "after-abort":  # prefill's scheduler aborts the request before its chunk is sent
            self.sender.abort()
            self.sender_polls_("after the abort")
            self.note("sender aborted")
        self.send_chunks()
        self.work()
        self.deliver()
        self.decode_polls("after the transfer")
        if self.shape.fate == "fails" and self.polls[-1]["result"] not in ("Success", "Failed"):
            # no word of the failure from prefill (trees before the shared failure notification): decode's own timeout
            self.clock.advance(self.decode_manager.waiting_timeout + 1)
            self.note("clock", seconds=self.decode_manager.waiting_timeout + 1)
            self.decode_polls("after decode's waiting timeout")
        self.sender_polls_("after the transfer")
        if self.shape.late == "after-success":
            self.note("late send")
            self.send_chunks()
            self.work()
            self.deliver()
            self.decode_polls("after the late send")
            self.sender_polls_("after the late send")
        elif self.shape.late == "after-abort":
            self.note("late send")
            self.send_chunks()
            self.work()
            self.deliver()
            self.sender_polls_("after the late send")

    def effects(self) -> dict[str, JSON]:
        return {
            "subject": RID,
            "config": {"name": self.shape.config, "env": dict(CONFIGS.get(self.shape.config, {})),
                       "prefill": self.prefill.config, "decode": self.decode.config},
            "steps": list(self.steps),
            "wire": self.wire.effects(),
            "writes": self.agent.effects(),
            "queued": list(self.queued),
            "polls": list(self.polls),
            "sender_polls": list(self.sender_polls),
            "pool": plain(self.pool.effects()),
            "log": list(self.log.records),
        }


def poll_name(result: Any) -> JSON:
    """A poll's answer by its name in the tree's own ``KVPoll`` (a class of int constants)."""
    poll = tree.kv_poll()
    return next((n for n in ("Failed", "Bootstrapping", "WaitingForInput", "Transferring", "Success")
                 if getattr(poll, n, None) == result), plain(result))


@dataclass(frozen=True)
class Shape:
    config: str = "default"
    layout: str = "mla"  # what the lifetime scene's ranks read: the KV pool is an MLA one
    held: str = "none"  # the write held in flight while decode polls: none, "kv", "state 1", "aux"
    fate: str = "lands"
    late: str = "none"  # a send after the sender concluded: none, after-success, after-abort
    chunks: int = 1  # the chunks the request's pages are sent in


HELD = {"none": "none", "state": "state 1", "kv": "kv", "aux": "aux"}


def shape_of(point: Mapping[str, str]) -> Shape:
    return Shape(config=point["config"], held=HELD[point["held"]], fate=point["fate"], late=point["late"],
                 chunks=int(point["chunks"]))


PROBE = Probe(id="nixl-completion", fix=3, imports=IMPORTS, table=duties_3,
              cases=tuple(Case.of(duties_3, point, lambda journal, shape=shape_of(point): NixlScene(journal, shape),
                                  REQUIRES) for point in duties_3.SPACE.points()))
