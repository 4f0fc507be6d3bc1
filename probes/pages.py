"""A page-ownership model of a KV pool, its allocator and the transfer engine that writes into it.

The tree decides when pages are reserved, when they go back to the allocator and when a transfer
is told to stop; this model only keeps the facts those decisions act on, on CPU: which request owns
each page, which request's write landed in it and when, and which transfers could still write it.
It stands in for RDMA: it shows ordering and ownership, never hardware timing. A transfer can be
held in flight and completed later, fail, or complete partially; the times are a logical clock
that only the case advances.

Two effects are observed here, never inferred from the tree's bookkeeping: a write landing in a
page another request owns (``foreign_writes``), and a read of a page no write of the reading
request reached (``unwritten_reads``). Frees record whether a transfer could still write the page
at that moment (``freed_while_writable``), and a page given back twice, or by a request that does
not own it, is a ``double_free``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class Clock:
    """Logical seconds for the tree's ``time.monotonic()``/``time.time()``, which only a case moves,
    and one sequence over everything observed, so that order is known within a second."""

    def __init__(self) -> None:
        self.now = 0
        self.seq = 0

    def tick(self) -> int:
        self.seq += 1
        return self.seq

    def monotonic(self) -> int:
        return self.now

    def advance(self, seconds: int) -> None:
        self.now += seconds


@dataclass
class Transfer:
    """One write of a request's pages by one prefill rank: in flight from ``begin`` until it lands or fails."""

    id: int
    writer: str  # the request whose KV is written
    rank: int  # the prefill rank writing
    pages: list[int]
    began: int
    sources: list[tuple[str, int]] = field(default_factory=list)  # per page: the (request, position) of the KV it carries
    landed: list[int] = field(default_factory=list)
    state: str = "in flight"  # in flight | landed | partial | failed


class PagePool:
    """Decode-side KV pages: an allocator that reuses the page freed last first (LIFO: the order
    that makes a freed page's reuse quickest, so a late write meets its new owner), the owner of
    each page, and the last write landed in it."""

    def __init__(self, size: int, clock: Clock) -> None:
        self.clock = clock
        self.size = size
        self.free_list = list(range(size - 1, -1, -1))  # pop() hands out page 0 first
        self.owner: dict[int, str] = {}
        self.content: dict[int, dict[str, Any]] = {}
        self.transfers: list[Transfer] = []
        self.events: list[dict[str, Any]] = []
        self.foreign_writes: list[dict[str, Any]] = []
        self.unwritten_reads: list[dict[str, Any]] = []
        self.freed_while_writable: list[dict[str, Any]] = []
        self.double_frees: list[dict[str, Any]] = []

    def _event(self, kind: str, **fields: Any) -> None:
        self.events.append({"seq": self.clock.tick(), "t": self.clock.now, "event": kind, **fields})

    # --- the allocator ------------------------------------------------------------------------

    def alloc(self, rid: str, count: int) -> list[int]:
        if count > len(self.free_list):
            raise RuntimeError(f"the pool has {len(self.free_list)} free pages, {rid} asked for {count}")
        pages = [self.free_list.pop() for _ in range(count)]
        for page in pages:
            self.owner[page] = rid
        self._event("alloc", rid=rid, pages=pages)
        return pages

    def free(self, rid: str, pages: list[int], how: str, cached: bool = False) -> None:
        """``rid``'s pages go back to the allocator (``how``: which path of the tree gave them back;
        ``cached``: the release asked the prefix cache to keep their KV for later requests first)."""
        for page in pages:
            if self.owner.get(page) != rid:
                self.double_frees.append({"t": self.clock.now, "rid": rid, "page": page, "how": how,
                                          "owner": self.owner.get(page)})
                continue
            writers = [t.rank for t in self.in_flight() if page in t.pages and page not in t.landed]
            if writers:
                self.freed_while_writable.append({"t": self.clock.now, "rid": rid, "page": page, "how": how,
                                                  "ranks": sorted(set(writers))})
            del self.owner[page]
            self.free_list.append(page)
        self._event("free", rid=rid, pages=list(pages), how=how, cached=cached)

    def clear(self, how: str) -> None:
        """The allocator's ``clear``: every page is free again, whoever owned it (a cache flush). A page a
        transfer could still write is recorded as freed while writable, under the request that owned it."""
        for page, rid in sorted(self.owner.items()):
            writers = [t.rank for t in self.in_flight() if page in t.pages and page not in t.landed]
            if writers:
                self.freed_while_writable.append({"t": self.clock.now, "rid": rid, "page": page, "how": how,
                                                  "ranks": sorted(set(writers))})
        owned = {rid: sorted(p for p, r in self.owner.items() if r == rid) for rid in sorted(set(self.owner.values()))}
        self.owner.clear()
        self.free_list = list(range(self.size - 1, -1, -1))
        self._event("clear", how=how, owned=owned)

    def held_by(self, rid: str) -> list[int]:
        return sorted(p for p, owner in self.owner.items() if owner == rid)

    # --- the transfer engine ------------------------------------------------------------------

    def begin(self, writer: str, rank: int, pages: list[int], sources: list[tuple[str, int]] | None = None) -> Transfer:
        """A write of ``writer``'s KV into ``pages`` starts; ``sources`` says which of its KV each page
        gets (by default the writer's positions 0, 1, ... in order)."""
        transfer = Transfer(id=len(self.transfers) + 1, writer=writer, rank=rank, pages=list(pages),
                            began=self.clock.now,
                            sources=list(sources) if sources is not None else [(writer, i) for i in range(len(pages))])
        self.transfers.append(transfer)
        self._event("write begins", rid=writer, rank=rank, pages=list(pages), transfer=transfer.id)
        return transfer

    def land(self, transfer: Transfer, count: int | None = None) -> None:
        """The first ``count`` pages of the transfer land (all by default): each is now the writer's
        KV, whoever owns the page by then."""
        todo = [p for p in transfer.pages if p not in transfer.landed]
        for page in todo[: len(todo) if count is None else count]:
            owner = self.owner.get(page)
            if owner != transfer.writer:
                self.foreign_writes.append({"t": self.clock.now, "writer": transfer.writer, "rank": transfer.rank,
                                            "page": page, "owner": owner})
            source = transfer.sources[transfer.pages.index(page)]
            self.content[page] = {"rid": source[0], "position": source[1], "t": self.clock.now, "transfer": transfer.id}
            transfer.landed.append(page)
        transfer.state = "landed" if len(transfer.landed) == len(transfer.pages) else "partial"
        self._event("write lands", rid=transfer.writer, rank=transfer.rank, pages=list(transfer.landed),
                    transfer=transfer.id)

    def fail(self, transfer: Transfer, landed: int = 0) -> None:
        """The transfer ends in error after ``landed`` of its pages were written."""
        if landed:
            self.land(transfer, landed)
        transfer.state = "failed"
        self._event("write fails", rid=transfer.writer, rank=transfer.rank, transfer=transfer.id)

    def in_flight(self) -> list[Transfer]:
        return [t for t in self.transfers if t.state in ("in flight", "partial")]

    # --- reads --------------------------------------------------------------------------------

    def read(self, rid: str, pages: list[int], matched: dict[int, tuple[str, int]] | None = None) -> None:
        """``rid``'s attention reads ``pages``: every page no write of ``rid`` reached is observed.
        ``matched``: pages of ``rid``'s prefix that the prefix cache matched for it, each with the KV (request,
        position) the cache keeps there; such a page is read as its own while it still holds that KV."""
        for index, page in enumerate(pages):
            written = self.content.get(page)
            kept = (matched or {}).get(page)
            if kept is not None:
                if written is not None and (written["rid"], written["position"]) == tuple(kept):
                    continue
            elif written is not None and written["rid"] == rid:
                continue
            self.unwritten_reads.append({"t": self.clock.now, "rid": rid, "page": page, "index": index,
                                         "holds": None if written is None else written["rid"]})
        self._event("read", rid=rid, pages=list(pages))

    def holds(self, pages: list[int]) -> list[tuple[str, int] | None]:
        """What KV each page holds now: (request, position), or None for a page nothing wrote."""
        return [None if self.content.get(p) is None else (self.content[p]["rid"], self.content[p]["position"])
                for p in pages]

    def effects(self) -> dict[str, Any]:
        return {
            "events": list(self.events),
            "foreign_writes": list(self.foreign_writes),
            "unwritten_reads": list(self.unwritten_reads),
            "freed_while_writable": list(self.freed_while_writable),
            "double_frees": list(self.double_frees),
            "transfers": [{"id": t.id, "writer": t.writer, "rank": t.rank, "pages": t.pages, "landed": t.landed,
                           "state": t.state} for t in self.transfers],
        }
