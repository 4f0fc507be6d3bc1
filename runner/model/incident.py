"""An executable, synthetic model of the PD-disaggregation incident (BRIEF, "The incident").

Why: the write-ups backed their reasoning with small state machines. This one lets a reader watch
the two faults combine into a cross-tenant read, end to end, and see which of the seven steps each
defence stops. It is plain Python written for diffprobe, not SGLang code; every receipt says so.

Scale: one page holds 32,768 tokens, so the incident's own numbers (context 1,048,576, prefill
pool 681,280) fit in a few dozen pages. The decode pool is shared by all tenants and, as on a GPU,
releasing a page does not clear it.

The state machine and its situations are one file on purpose: its digest is the model receipts'
probe version (runner/model/observe.py), so a change to either makes old receipts not comparable.
Pure: nothing here imports runner.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict

PAGE = 32_768
CONTEXT = 1_048_576
SHORT_POOL = 681_280
FIXED_POOL = 2_040_000  # "about 2.04 M tokens" after the incident's fix
DECODE_PAGES = 64
HEADROOM = (5, 4)  # pool must cover 1.25 x the context
TRANSFER_TIMEOUT_S = 300
STEPS = {0: "intake", 1: "bootstrap", 2: "prefill admission", 3: "prefill forward", 4: "transfer",
         5: "decode admission", 6: "decode attention", 7: "response"}
FAULTS = ("pool_short", "abort_looks_alive")
DEFENCES = ("pool_check", "reject_at_admission", "abort_cleanup", "transfer_check", "deferred_release")


class Switches(BaseModel):
    """Faults (on by default, as in the incident) and defences (off by default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    pool_short: bool = True  # prefill KV pool smaller than the advertised context
    abort_looks_alive: bool = True  # abort waits in to_finish; finished() reads finished_reason
    pool_check: bool = False  # context limited to pool / 1.25 (the pool gate)
    reject_at_admission: bool = False  # #38935 style: retire rejected, not-yet-admitted requests at entry
    abort_cleanup: bool = False  # #36988 style: terminal cleanup of aborted prefill results
    transfer_check: bool = False  # decode refuses when fewer pages arrived than it reserved
    deferred_release: bool = False  # #41404/#41023 style: no reuse while a write may still land


SHORT = {"pool_check": "pool", "reject_at_admission": "reject", "abort_cleanup": "cleanup",
         "transfer_check": "xfer", "deferred_release": "defer"}
CONFIGS: dict[str, Switches] = {
    "faults-off": Switches(pool_short=False, abort_looks_alive=False),
    "incident": Switches(),
    **{f"+{SHORT[d]}": Switches(**{d: True}) for d in DEFENCES},
    "all": Switches(**{d: True for d in DEFENCES}),
}


def pages_for(tokens: int) -> int:
    return math.ceil(tokens / PAGE)


@dataclass
class Page:
    owner: str | None = None  # tenant holding the page now
    data: str | None = None  # tenant whose KV the page holds; survives release
    landing: str | None = None  # a write still in flight into this page
    held: bool = False  # released, kept out of reuse until the write lands


class Pool:
    """Decode-side KV pages shared by every tenant."""

    def __init__(self, pages: int, deferred: bool):
        self.pages = [Page() for _ in range(pages)]
        self.deferred = deferred

    def reserve(self, n: int, tenant: str) -> list[int]:
        ids = [i for i, p in enumerate(self.pages) if p.owner is None and not p.held][:n]
        for i in ids:
            self.pages[i].owner = tenant
        return ids

    def write(self, ids: list[int], tenant: str, *, landed: bool = True) -> None:
        for i in ids:
            if landed:
                self.pages[i].data = tenant
            else:
                self.pages[i].landing = tenant

    def land(self, ids: list[int]) -> None:
        for i in ids:
            p = self.pages[i]
            if p.landing:
                p.data, p.landing, p.held = p.landing, None, False

    def release(self, ids: list[int]) -> None:
        for i in ids:
            p = self.pages[i]
            p.owner, p.held = None, self.deferred and p.landing is not None


@dataclass
class Req:
    """The fields of SGLang's ``Req`` that the incident turns on, and nothing else."""

    rid: str
    tenant: str
    tokens: int
    prompt: int = 0  # tokens the prefill forward runs
    to_finish: str | None = None
    finished_reason: str | None = None
    holds: set[str] = field(default_factory=set)
    pages: list[int] = field(default_factory=list)
    admitted_before: bool = False  # re-entering or preempted

    def __post_init__(self) -> None:
        self.prompt = self.prompt or self.tokens

    def set_finish_with_abort(self, why: str) -> None:
        self.to_finish, self.prompt = why, 1

    def update_finish_state(self) -> None:
        self.finished_reason = self.finished_reason or self.to_finish

    def finished(self) -> bool:
        return self.finished_reason is not None


def unadmitted_reject(req: Req) -> bool:
    """#38935's predicate: rejected and holding nothing yet. Re-entering or preempted requests may
    hold KV/metadata and carry an abort marker; they must go through normal cleanup instead."""
    return req.to_finish is not None and not req.holds and not req.admitted_before


@dataclass
class Served:
    status: int | None
    stopped_at: int | None = None
    stopped_by: str | None = None
    read: list[str | None] = field(default_factory=list)


class Cluster:
    """One prefill and one decode worker under a set of switches, with a step trace."""

    def __init__(self, sw: Switches):
        self.sw = sw
        pool = SHORT_POOL if sw.pool_short else FIXED_POOL
        self.context = min(CONTEXT, pool * HEADROOM[1] // HEADROOM[0]) if sw.pool_check else CONTEXT
        self.max_req_input_len = min(CONTEXT, pool)  # the scheduler rejects len >= this
        self.decode = Pool(DECODE_PAGES, sw.deferred_release)
        self.trace: list[str] = []
        self.created: Counter[str] = Counter()
        self.freed: Counter[str] = Counter()
        self.inflight: list[str] = []
        self.retired: set[str] = set()

    def log(self, req: Req, step: int, text: str) -> None:
        self.trace.append(f"{req.rid} ({req.tenant}) step {step} {STEPS[step]}: {text}")

    def acquire(self, req: Req, *resources: str) -> None:
        for r in resources:
            self.created[r] += 1
            req.holds.add(r)

    def release(self, req: Req) -> None:
        for r in sorted(req.holds):
            self.freed[f"{req.rid}:{r}"] += 1
            if r == "decode_pages":
                self.decode.release(req.pages)
        req.holds.clear()

    def end(self, req: Req, step: int, status: int, why: str) -> Served:
        self.release(req)
        self.log(req, step, f"{why} -> HTTP {status}")
        return Served(status, step, why)

    def retire(self, req: Req, step: int, why: str) -> Served:
        self.retired.add(req.rid)
        return self.end(req, step, 400, why)

    # --- the seven steps ----------------------------------------------------------------

    def intake(self, req: Req) -> Served | None:
        if req.tokens > self.context:
            return self.end(req, 0, 400, f"{req.tokens} tokens exceed the context {self.context}"
                            + (" (limited to the pool by the pool/context check)" if self.sw.pool_check else ""))
        if req.tokens >= self.max_req_input_len:
            req.set_finish_with_abort("input too long")
            self.log(req, 0, f"{req.tokens} >= max_req_input_len {self.max_req_input_len}: abort stored in to_finish, "
                        "prompt swapped for a 1-token placeholder")
            if not self.sw.abort_looks_alive:
                req.update_finish_state()
        if self.sw.reject_at_admission and unadmitted_reject(req):
            return self.retire(req, 1, "rejected and not yet admitted: retired at the admission entry, before bootstrap")
        return None

    def bootstrap(self, req: Req) -> None:
        req.pages = self.decode.reserve(pages_for(req.tokens), req.tenant)
        self.acquire(req, "bootstrap", "metadata_buffer", "kv_sender", "kv_receiver", "decode_pages")
        self.log(req, 1, f"decode reserved {len(req.pages)} pages for {req.tenant} ({req.tokens} tokens announced)")

    def forward(self, req: Req) -> int:
        self.created["forward"] += 1
        self.log(req, 3, f"forward ran {req.prompt} token(s): {pages_for(req.prompt)} page(s) of KV")
        return pages_for(req.prompt)

    def prefill_result(self, req: Req, written: int, *, pending_chunks: bool = False) -> str:
        """What prefill does with a forward's result: #36988's site."""
        if req.rid in self.retired:
            if self.sw.abort_cleanup:
                self.log(req, 4, f"late result of retired {req.rid} ignored")
                return "ignored"
            self.decode.write(req.pages[:written], req.tenant)
            self.log(req, 4, f"late result of retired {req.rid} sent a KV chunk into pages {req.pages[:written]}")
            return "sent after retire"
        if req.finished():
            self.release(req)
            return "released"
        if req.to_finish and self.sw.abort_cleanup:
            self.release(req)
            self.log(req, 4, "aborted result: cleaned up, not re-queued, nothing sent, no transfer-complete")
            return "cleaned up"
        if pending_chunks:
            self.inflight.append(req.rid)
            self.log(req, 4, "finished() is false: aborted result re-inserted into the inflight queue as incomplete")
            return "re-queued"
        return "sent"

    def serve(self, req: Req, *, deliver: int | None = None, meanwhile: Callable[[], None] | None = None) -> Served:
        """A new request through the seven steps. ``deliver`` caps the pages the transport delivers;
        ``meanwhile`` runs between decode admission and attention (late writes, late results)."""
        if (ended := self.intake(req)) is not None:
            return ended
        self.bootstrap(req)
        if req.finished():
            return self.end(req, 2, 400, "finished() is true: not admitted")
        self.log(req, 2, "finished() is false: admitted" + (", although rejected" if req.to_finish else ""))
        written = self.forward(req)
        if self.prefill_result(req, written) == "cleaned up":
            return self.end(req, 4, 504, f"decode waited {TRANSFER_TIMEOUT_S} s for transfer-complete")
        sent = req.pages[: written if deliver is None else min(written, deliver)]
        self.decode.write(sent, req.tenant)
        self.log(req, 4, f"sent {len(sent)} of {len(req.pages)} reserved page(s), then transfer-complete")
        if self.sw.transfer_check and len(sent) < len(req.pages):
            return self.end(req, 5, 500, f"transferred {len(sent)} < reserved {len(req.pages)} pages: refused")
        if req.finished():
            return self.end(req, 5, 400, "finished() is true: refused")
        self.log(req, 5, "finished() is false: accepted")
        if meanwhile:
            meanwhile()
        read = [self.decode.pages[i].data for i in req.pages]
        self.log(req, 6, "attention read " + describe(read, req.tenant))
        self.release(req)
        self.log(req, 7, "HTTP 200")
        return Served(200, read=read)

    def readmit(self, req: Req, step: Literal[2, 5]) -> Served:
        """A request already holding resources comes back to an admission queue."""
        if self.sw.reject_at_admission and unadmitted_reject(req):
            self.retired.add(req.rid)
            self.log(req, step, "retired at the admission entry; its resources are not released")
            return Served(400, step, "retired at entry")
        if req.to_finish:
            req.update_finish_state()
            return self.end(req, step, 400, "abort handled by the queue: resources released")
        self.log(req, step, "re-admitted")
        read = [self.decode.pages[i].data for i in req.pages]
        self.log(req, 6, "attention read " + describe(read, req.tenant))
        self.release(req)
        return Served(200, read=read)


def describe(read: list[str | None], tenant: str) -> str:
    counts = Counter("unwritten" if d is None else ("own" if d == tenant else f"{d} (stale, another tenant)") for d in read)
    return ", ".join(f"{n} page(s) {what}" for what, n in counts.items())


# --- situations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Situation:
    id: str
    probe: Literal["model-handoff", "model-admission"]
    role: Literal["bug", "guard"]
    site: str
    title: str
    signature: str
    run: Callable[[Cluster], tuple[dict, bool]]


SITUATIONS: list[Situation] = []


def situation(probe, role, site, title, signature):
    def register(fn: Callable[[Cluster], tuple[dict, bool]]):
        SITUATIONS.append(Situation(fn.__name__.replace("_", "-"), probe, role, site, title, signature, fn))
        return fn
    return register


def request_effects(c: Cluster, req: Req, served: Served) -> dict:
    read = served.read
    foreign = Counter(d for d in read if d not in (None, req.tenant))
    return {
        "status": served.status, "stopped_at": served.stopped_at, "stopped_by": served.stopped_by,
        "pages_reserved": len(req.pages), "pages_read": len(read),
        "foreign_pages_read": dict(foreign), "own_pages_read": sum(d == req.tenant for d in read),
        "response_built_from": describe(read, req.tenant) if read else None,
    }


def leak(c: Cluster, req: Req, served: Served) -> tuple[dict, bool]:
    effects = request_effects(c, req, served)
    return effects, served.status == 200 and bool(effects["foreign_pages_read"])


def earlier_tenant(c: Cluster) -> None:
    """Tenant A's long conversation fills decode pages, finishes, and leaves them stale."""
    c.serve(Req("a-1", "tenant-A", 540_000))


@situation("model-handoff", "bug", "steps 1-7", "the incident: prompt over the pool, under the context",
           "HTTP 200 with a response built from another tenant's stale pages")
def over_pool_prompt(c: Cluster):
    earlier_tenant(c)
    b = Req("b-1", "tenant-B", 900_000)
    return leak(c, b, c.serve(b))


@situation("model-handoff", "guard", "steps 1-7", "a long prompt within the pool is served from its own pages",
           "not served, or served with pages of another tenant")
def within_pool_prompt(c: Cluster):
    earlier_tenant(c)
    b = Req("b-1", "tenant-B", 500_000)
    effects, leaked = leak(c, b, served := c.serve(b))
    return effects, leaked or served.status != 200


@situation("model-handoff", "bug", "step 4 prefill result (#36988)", "a chunked prefill aborted mid-way",
           "the aborted result is re-inserted into the inflight queue, or its resources are not freed exactly once")
def aborted_chunk_result(c: Cluster):
    b = Req("b-1", "tenant-B", 100_000)
    c.bootstrap(b)
    c.forward(b)
    b.set_finish_with_abort("client abort")
    if not c.sw.abort_looks_alive:
        b.update_finish_state()
    outcome = c.prefill_result(b, 1, pending_chunks=True)
    freed = {k.split(":")[1]: v for k, v in c.freed.items() if k.startswith("b-1:")}
    held = ["bootstrap", "decode_pages", "kv_receiver", "kv_sender", "metadata_buffer"]
    effects = {"status": None, "stopped_at": 4 if outcome != "re-queued" else None, "stopped_by": outcome,
               "requeued": "b-1" in c.inflight, "freed": {r: freed.get(r, 0) for r in held}}
    return effects, effects["requeued"] or any(v != 1 for v in effects["freed"].values())


@situation("model-handoff", "bug", "step 4 late result (#36988)", "a late prefill result of an already retired request",
           "the late result writes KV into pages now owned by another tenant")
def late_result_after_retire(c: Cluster):
    b = Req("b-1", "tenant-B", 100_000)
    c.bootstrap(b)
    written = c.forward(b)
    c.retire(b, 4, "aborted while its result was in flight")
    outcome: list[str] = []
    d = Req("c-1", "tenant-C", 100_000)
    effects, leaked = leak(c, d, c.serve(d, meanwhile=lambda: outcome.append(c.prefill_result(b, written))))
    stopped = outcome == ["ignored"]
    return {**effects, "late_result": outcome[0], "stopped_at": 4 if stopped else effects["stopped_at"]}, leaked


@situation("model-handoff", "bug", "steps 4-6 transfer vs reservation (#30233)",
           "transfer-complete after fewer pages than decode reserved",
           "HTTP 200 while decode attention read pages the transfer never wrote")
def short_transfer(c: Cluster):
    earlier_tenant(c)
    b = Req("b-1", "tenant-B", 500_000)
    return leak(c, b, c.serve(b, deliver=1))


@situation("model-handoff", "bug", "step 4 release after a failed transfer (#41404)",
           "pages freed while an RDMA write may still land",
           "another tenant's request reads pages overwritten by the late write")
def late_write_after_free(c: Cluster):
    b = Req("b-1", "tenant-B", 300_000)
    c.bootstrap(b)
    c.forward(b)
    c.decode.write(b.pages, b.tenant, landed=False)
    pages = list(b.pages)
    c.end(b, 4, 500, "transfer failed on one peer while writes were in flight")
    d = Req("c-1", "tenant-C", 300_000)
    effects, leaked = leak(c, d, c.serve(d, meanwhile=lambda: c.decode.land(pages)))
    reused = bool(set(pages) & set(d.pages))
    return {**effects, "pages_reused_while_write_pending": reused, "stopped_at": 4 if not reused else effects["stopped_at"]}, leaked


HANDOFF = ("bootstrap", "metadata_buffer", "kv_sender", "kv_receiver", "decode_pages", "forward")


def admission(c: Cluster, req: Req, side: tuple[str, ...]) -> tuple[dict, bool]:
    """Serve an over-limit request; the bug is any handoff object created on this side once it was
    rejected (under a configuration where it fits, it is not rejected and may create them)."""
    served = c.serve(req)
    created = {r: c.created[r] for r in side}
    rejected = req.to_finish is not None or served.stopped_at == 0
    effects = {"status": served.status, "stopped_at": served.stopped_at, "stopped_by": served.stopped_by,
               "rejected": rejected, "created": created, "tokens": req.tokens}
    return effects, rejected and any(created.values())


@situation("model-admission", "bug", "prefill admission entry (#38935)", "a rejected request, prefill side",
           "bootstrap, metadata buffer, KV sender or forward pass created for a rejected request")
def reject_prefill_side(c: Cluster):
    return admission(c, Req("b-1", "tenant-B", 900_000), ("bootstrap", "metadata_buffer", "kv_sender", "forward"))


@situation("model-admission", "bug", "decode admission entry (#38935)", "a rejected request, decode side",
           "KV receiver created or decode pages reserved for a rejected request")
def reject_decode_side(c: Cluster):
    return admission(c, Req("b-1", "tenant-B", 900_000), ("kv_receiver", "decode_pages"))


@situation("model-admission", "bug", "scheduler intake boundary", "a prompt of exactly max_req_input_len tokens (rejected: >=)",
           "any handoff object created for a request the scheduler rejected")
def reject_at_limit(c: Cluster):
    return admission(c, Req("b-1", "tenant-B", c.max_req_input_len), HANDOFF)


def served_own(c: Cluster, req: Req, served: Served) -> tuple[dict, bool]:
    effects, leaked = leak(c, req, served)
    return effects, leaked or served.status != 200 or not effects["own_pages_read"]


@situation("model-admission", "guard", "prefill and decode admission", "a valid short request",
           "dropped, or not served from its own pages")
def valid_short(c: Cluster):
    b = Req("b-1", "tenant-B", 1_000)
    return served_own(c, b, c.serve(b))


@situation("model-admission", "guard", "scheduler intake boundary", "the longest prompt this deployment accepts",
           "dropped, or not served from its own pages")
def valid_longest(c: Cluster):
    b = Req("b-1", "tenant-B", min(c.context, c.max_req_input_len - 1))
    effects, bad = served_own(c, b, c.serve(b))
    return {**effects, "tokens": b.tokens}, bad


def holding(c: Cluster, req: Req, resources: tuple[str, ...], step: Literal[2, 5]) -> tuple[dict, bool]:
    """A request holding resources re-enters admission; it must not be retired at the entry."""
    req.admitted_before = True
    if "decode_pages" in resources:
        req.pages = c.decode.reserve(pages_for(req.tokens), req.tenant)
        c.decode.write(req.pages, req.tenant)
    c.acquire(req, *resources)
    served = c.readmit(req, step)
    freed = {r: c.freed[f"{req.rid}:{r}"] for r in resources}
    orphaned = req.rid in c.retired and bool(req.holds)
    effects = {"status": served.status, "stopped_at": served.stopped_at, "stopped_by": served.stopped_by,
               "retired_at_entry": req.rid in c.retired, "resources_orphaned": orphaned, "freed": freed,
               "own_pages_read": sum(d == req.tenant for d in served.read)}
    wrong = orphaned or any(v != 1 for v in freed.values())
    if not req.to_finish:
        wrong = wrong or served.status != 200
    return effects, wrong


@situation("model-admission", "guard", "prefill admission entry (#38935)",
           "a re-entering request holding a metadata buffer, with an abort marker",
           "retired at the entry with its metadata buffer orphaned, or freed other than exactly once")
def reentry_holding_metadata(c: Cluster):
    b = Req("b-1", "tenant-B", 100_000, to_finish="abort")
    return holding(c, b, ("metadata_buffer", "kv_sender"), 2)


@situation("model-admission", "guard", "decode admission entry (#38935)", "a preempted request holding its KV pages",
           "dropped instead of resumed from its own pages")
def preempted_holding_pages(c: Cluster):
    return holding(c, Req("b-1", "tenant-B", 100_000), ("kv_receiver", "decode_pages"), 5)


@situation("model-admission", "guard", "decode admission entry (#38935)", "a preempted request holding KV pages, with an abort marker",
           "retired at the entry with its pages orphaned, or pages freed other than exactly once")
def preempted_with_abort(c: Cluster):
    return holding(c, Req("b-1", "tenant-B", 100_000, to_finish="abort"), ("kv_receiver", "decode_pages"), 5)


@situation("model-admission", "guard", "bootstrap queue (#38935)",
           "a bootstrapped request aborted while waiting, holding every handoff resource",
           "retired at the entry with its resources orphaned, or freed other than exactly once")
def bootstrapped_then_aborted(c: Cluster):
    b = Req("b-1", "tenant-B", 100_000, to_finish="client abort")
    return holding(c, b, ("bootstrap", "metadata_buffer", "kv_sender", "kv_receiver", "decode_pages"), 2)
