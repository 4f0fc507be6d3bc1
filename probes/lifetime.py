"""The lifetime scene: one bootstrap room handed from prefill to decode over the tree's own code.

What runs is the tree's: the prefill Mooncake KV manager's ABORT handling and transfer worker
(its outstanding-chunk count, its drain acknowledgements), the prefill KV sender's ``poll`` and
``clear``, the decode KV manager's message handling (status and ``ABORT_ACK``), the decode KV
receiver's ``abort``, the decode scheduler's ``abort_request``, and the decode transfer queue's
``pop_transferred`` and deferred releases. Each rank's message loop is the tree's own thread body,
captured instead of started and run once per message delivered.

What stands in (``probes/pages.py``): the decode KV pool and its allocator (``release_kv_cache``
gives the request's pages back to it), the RDMA engine (``send_kvcache`` begins a write into the
decode pages, which lands, fails or lands partly when the case says), the wire (every multipart
message is logged and delivered, dropped or held back by the case), and the clock (the tree's
``time`` reads a logical clock only the case advances). The tree's configuration gates
(``enable_deferred_decode_kv_release``, the release timeout) are evaluated from the tree's own
``__init__`` expressions, under the environment of the case's configuration.

A case is a script of steps in the order the ranks' threads could interleave them; a step held
"in flight" runs inside the engine's write, before it lands. A case on NIXL (``Shape.backend``) runs the
tree's NIXL managers, sender and receiver instead, its writes through NIXL agent doubles (``probes/nixl.py``).
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import logging
import math
import os
import textwrap
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields, is_dataclass
from types import SimpleNamespace
from typing import Any

from . import tree
from .duties_lifetime import MIXED
from .case import Case
from .doubles import Absent, Double, DoubleGap, Journal, output_streamer, strict_subject
from .pages import Clock, PagePool, Transfer
from .plain import JSON, plain

COMMON = "sglang.srt.disaggregation.common.conn"
MOONCAKE = "sglang.srt.disaggregation.mooncake.conn"
DECODE = "sglang.srt.disaggregation.decode"
PREFILL = "sglang.srt.disaggregation.prefill"
PREFILL_MIXIN = f"{PREFILL}.SchedulerDisaggregationPrefillMixin"
UTILS = "sglang.srt.disaggregation.utils"
SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
MANAGER = f"{MOONCAKE}.MooncakeKVManager"
QUEUE = f"{DECODE}.DecodeTransferQueue"
HISPARSE = "sglang.srt.managers.hisparse_coordinator.HiSparseCoordinator"
IMPORTS = (
    "sglang.srt.managers.schedule_batch",
    "sglang.srt.sampling.sampling_params",
    "sglang.srt.server_args",
    "sglang.srt.runtime_context",
    UTILS,
    "sglang.srt.disaggregation.base",
    COMMON,
    MOONCAKE,
    PREFILL,
    DECODE,
    "sglang.srt.managers.io_struct",
    "sglang.srt.managers.scheduler",
)

ROOM = tree.BOOTSTRAP_ROOM
STATE_TYPE = "sglang.srt.disaggregation.base.conn.StateType"  # a hybrid model's state kinds (its Mamba slot)
STATE_SLOT = 2  # the request's state slot on decode (prefill's is the one before)
PAGES = 4  # pages decode reserved for the request, on each decode rank: the whole pool, so a freed page is reused
RID = "req-A"
NEXT_RID = "req-B"  # the request the freed pages go to next
NEIGHBOUR, NEIGHBOUR_ROOM = "req-N", ROOM + 1  # another request on the same decode ranks, in its own room

DEFERRED_ENV = "SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE"
# Configurations: the environment a case runs under. "default" sets nothing: the tree's own defaults.
CONFIGS: dict[str, dict[str, str]] = {
    "default": {},
    "with-deferred-release": {DEFERRED_ENV: "true"},
    "without-deferred-release": {DEFERRED_ENV: "false"},
    MIXED: {DEFERRED_ENV: "true"},
}
# What a configuration sets in one role's environment alone, over CONFIGS (each role is its own server)
ROLE_ENV: dict[str, dict[str, dict[str, str]]] = {MIXED: {"prefill": {DEFERRED_ENV: "false"}}}


@contextlib.contextmanager
def role_env(config: str, role: str) -> Iterator[None]:
    """The case's environment as ``role``'s server has it while its ranks are built (their ``__init__`` gates read
    it then), restored after."""
    own = ROLE_ENV.get(config, {}).get(role, {})
    saved = {name: os.environ.get(name) for name in own}
    os.environ.update(own)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class Stop(BaseException):
    """Ends a loop of the tree's the scene drives (a thread body, the transfer worker): not an
    ``Exception``, so the tree's own ``except Exception`` never takes it for a failure."""


def prefill_endpoint(rank: int) -> tuple[str, int]:
    return f"192.0.2.{11 + rank}", 16000 + rank  # TEST-NET-1: never a real peer


def decode_endpoint(rank: int) -> tuple[str, int]:
    return f"192.0.2.{21 + rank}", 17000 + rank


def session_of(rank: int) -> str:
    ip, port = decode_endpoint(rank)
    return f"{ip}:{port}"


# --- the tree's configuration, as its own __init__ computes it --------------------------------


def init_value(cls: type, attr: str, subject: Any) -> tuple[bool, Any]:
    """``self.<attr> = <expr>`` as the first ``__init__`` in ``cls``'s MRO that assigns it computes it,
    evaluated with ``self`` bound to ``subject`` in that module's globals: the tree's own gate for a
    configuration, read at the moment the case runs (its environment set). (False, None) when no
    ``__init__`` assigns it: the tree has no such setting."""
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or not inspect.isfunction(init):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(init))
        except (OSError, TypeError):
            continue
        for node in ast.walk(ast.parse(source)):
            if (isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
                    and any(isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name)
                            and t.value.id == "self" for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))):
                expr = compile(ast.Expression(node.value), f"<{klass.__name__}.__init__: self.{attr}>", "eval")
                return True, eval(expr, init.__globals__, {"self": subject})  # noqa: S307 - the tree's own expression
    return False, None


def configure(journal: Journal, cls: type, subject: Any, attrs: tuple[str, ...]) -> dict[str, JSON]:
    """Set each of ``attrs`` on ``subject`` as the tree's ``__init__`` would; what each came to."""
    seen = {}
    for attr in attrs:
        found, value = init_value(cls, attr, subject)
        if found:
            object.__setattr__(subject, attr, value)
        seen[attr] = plain(value) if found else "absent"
    return seen


# --- the wire --------------------------------------------------------------------------------


class Wire:
    """Every multipart message a rank sends, in order. The case delivers, drops (lost) or holds
    back (late) each; a delivered message runs the receiving rank's own message loop once."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.log: list[dict[str, Any]] = []
        self.routes: dict[str, Callable[[list[bytes]], None]] = {}
        # endpoint -> the first frame of the message whose send to it fails once (a connection reset; None: the next)
        self.resets: dict[str, bytes | None] = {}

    def socket(self, journal: Journal, sender: str, endpoint: str) -> Double:
        def send_multipart(frames: list[bytes], *args: Any, **kwargs: Any) -> None:
            if endpoint in self.resets and self.resets[endpoint] in (None, bytes(frames[0])):
                import zmq

                del self.resets[endpoint]
                self.log.append({"seq": self.clock.tick(), "t": self.clock.now, "from": sender, "to": endpoint,
                                 "frames": [bytes(f) for f in frames], "fate": "failed to send"})
                reset = zmq.ZMQError(zmq.ECONNRESET if hasattr(zmq, "ECONNRESET") else 104, "connection reset")
                # scripted: the case told the wire to fail this send. If the tree lets it escape its own code
                # (0.5.13's send_metadata has no failure path), that is its behaviour, observed as
                # effects["escaped"] naming the tree's frame that let it through; never a harness error
                journal.scripted.append(reset)
                raise reset
            self.log.append({"seq": self.clock.tick(), "t": self.clock.now, "from": sender, "to": endpoint,
                             "frames": [bytes(f) for f in frames], "fate": "pending"})

        return Double(journal, f"socket:{sender}->{endpoint}", send_multipart=send_multipart,
                      setsockopt=lambda *a, **k: None, close=lambda *a, **k: None)

    def pending(self, kind: str | None = None, to: str | None = None) -> list[dict[str, Any]]:
        return [m for m in self.log if m["fate"] == "pending" and (kind is None or kind_of(m) == kind)
                and (to is None or m["to"] == to)]

    def deliver(self, message: dict[str, Any]) -> None:
        message["fate"] = "delivered"
        message["delivered"] = self.clock.tick()
        self.routes[message["to"]](message["frames"])

    def drop(self, message: dict[str, Any]) -> None:
        message["fate"] = "lost"

    def effects(self) -> list[dict[str, JSON]]:
        return [{"seq": m["seq"], "t": m["t"], "from": m["from"], "to": m["to"], "kind": kind_of(m),
                 "frames": [f.decode("ascii", "replace") for f in m["frames"]], "fate": m["fate"],
                 **({"delivered": m["delivered"]} if "delivered" in m else {})} for m in self.log]


def kind_of(message: dict[str, Any]) -> str:
    head = message["frames"][0] if message["frames"] else b""
    if head in (b"ABORT", b"ABORT_ACK"):
        return head.decode()
    if message.get("kind"):
        return message["kind"]
    return "status"


def tcp(endpoint: tuple[str, int]) -> str:
    return f"tcp://{endpoint[0]}:{endpoint[1]}"


def threading_capture(captured: list[Callable[[], None]]) -> SimpleNamespace:
    """The ``threading`` a conn module sees: everything real except ``Thread``, whose target is kept
    for the scene to run (a message loop runs once per message delivered) instead of started."""

    class Thread:
        def __init__(self, target: Callable[[], None] | None = None, *args: Any, **kwargs: Any) -> None:
            self.target = target
            if target is not None:
                captured.append(target)

        def start(self) -> None:
            pass

        def is_alive(self) -> bool:
            return False

        def join(self, timeout: Any = None) -> None:
            pass

    return SimpleNamespace(**{**vars(threading), "Thread": Thread})


def server_args() -> Any:
    """The stock server configuration, as the tree's own ``ServerArgs`` holds it."""
    return tree.resolve("sglang.srt.server_args.ServerArgs")(model_path="dummy")


def single_rank_reduce(modules: list[Any], journal: Journal) -> None:
    """A value all-reduced over a one-rank group is that rank's own (no process group exists on CPU):
    the tree's reducers (``_all_reduce_polls``, later ``all_reduce_flags``), wherever a module of
    it looks them up, answer so, recorded. Trees that reduce inline in ``poll_and_all_reduce`` (no
    reducer of its own) get that function answering with each poller's own poll."""
    utils = modules[0]
    if not hasattr(utils, "_all_reduce_polls") and not hasattr(utils, "all_reduce_flags"):
        for module_ in modules:
            if hasattr(module_, "poll_and_all_reduce"):
                module_.poll_and_all_reduce = journal.method(
                    "collective", "poll_and_all_reduce", lambda pollers, group, *a, **k: [int(p.poll()) for p in pollers])
    for module_ in modules:
        if hasattr(module_, "_all_reduce_polls"):
            module_._all_reduce_polls = journal.method("collective", "_all_reduce_polls",
                                                       lambda polls, group: list(polls))
        if hasattr(module_, "all_reduce_flags"):
            module_.all_reduce_flags = journal.method("collective", "all_reduce_flags",
                                                      lambda flags, group=None, op=None: list(flags))


class Diverged(BaseException):
    """The decode ranks reached different all-reduces, or some reached one the others never did: a server's ranks
    would wait there forever. The tree's behaviour, observed (``Group.diverged``): the case's script stops there, as
    nothing later happens in a hung server. Not an ``Exception``, so the tree's own handlers never take it."""


class Group:
    """The decode ranks' process group as the tree's all-reduces see it, for a case whose ranks must agree as the
    server's do (one rank holding pages for another): a decode step of every rank runs at once, each rank in its
    own thread but one at a time, in rank order (deterministic); a rank's all-reduce waits until every rank has
    reached it, and each gets the reduction of every rank's values. Ranks that reach different all-reduces (a
    server would hang) are recorded (``diverged``) and stop the case (``Diverged``)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.diverged: list[dict[str, Any]] = []  # each all-reduce the ranks did not reach alike
        self.cond = threading.Condition()
        self.local = threading.local()
        self.state: dict[int, str] = {}  # rank -> "ready" | "waiting" | "done"
        self.deposits: dict[int, tuple[list[int], str]] = {}
        self.results: dict[int, list[int] | None] = {}
        self.errors: dict[int, BaseException] = {}
        self.turn: int | None = None

    def run(self, steps: list[Callable[[], None]]) -> None:
        self.state, self.deposits, self.results, self.errors = {r: "ready" for r in range(len(steps))}, {}, {}, {}
        self.turn = 0
        threads = [threading.Thread(target=self._body, args=(r, step), daemon=True) for r, step in enumerate(steps)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for rank in sorted(self.errors):
            raise self.errors[rank]

    def _body(self, rank: int, step: Callable[[], None]) -> None:
        self.local.rank = rank
        with self.cond:
            self.cond.wait_for(lambda: self.turn == rank)
        try:
            step()
        except BaseException as exc:  # handed to the scene's thread, which raises it as the step's own
            if not (isinstance(exc, Stop) and self.errors):  # not the stop another rank's error caused
                self.errors[rank] = exc
        with self.cond:
            self.state[rank] = "done"
            self._pass()

    def _pass(self) -> None:
        """The rank that ran stopped (at an all-reduce, or done): the next ready rank runs; when every rank
        waits, the reduction is made and they go on in rank order."""
        ready = [r for r in sorted(self.state) if self.state[r] == "ready"]
        waiting = [r for r in sorted(self.state) if self.state[r] == "waiting"]
        if ready:
            self.turn = ready[0]
        elif waiting:
            values = [self.deposits[r] for r in waiting]
            agreed = len(waiting) == len(self.state) and len({(len(v), op) for v, op in values}) == 1
            reduced: list[int] | None = None
            if not agreed and not self.errors:
                self.diverged.append({"waiting": {str(r): {"size": len(self.deposits[r][0]), "op": self.deposits[r][1]}
                                                  for r in waiting},
                                      "done": [r for r in sorted(self.state) if self.state[r] == "done"]})
            if agreed and not self.errors:  # after a rank's step raised, the others stop at their all-reduce
                how = {"MAX": max, "MIN": min, "SUM": sum}[values[0][1]]
                reduced = [how(column) for column in zip(*(v for v, _ in values))]
            for r in waiting:
                self.results[r] = None if reduced is None else list(reduced)
                self.state[r] = "ready"
            self.deposits = {}
            self.turn = waiting[0]
        else:
            self.turn = None
        self.cond.notify_all()

    def size(self) -> int:
        """The group's world size: its ranks (1 outside ``run``, where each rank answers with its own values)."""
        return len(self.state) if getattr(self.local, "rank", None) is not None else 1

    def all_reduce(self, flags: list[int], op: Any) -> list[int]:
        """``flags`` reduced by ``op`` over every decode rank (this thread's rank's own values where no group step
        runs: a call outside ``run``)."""
        rank = getattr(self.local, "rank", None)
        name = next((n for n in ("MAX", "MIN", "SUM") if n in str(getattr(op, "name", op)).upper()), None)
        if rank is None:
            return list(flags)
        if name is None:
            raise self.journal.gap(f"an all-reduce by {op!r}")
        with self.cond:
            self.deposits[rank] = ([int(f) for f in flags], name)
            self.state[rank] = "waiting"
            self._pass()
            self.cond.wait_for(lambda: self.turn == rank)
            result = self.results.pop(rank)
        if self.errors:
            raise Stop()
        if result is None:
            raise Diverged()
        return result


def group_reduce(modules: list[Any], journal: Journal, ranks: Group) -> None:
    """The tree's reducers answering over the decode ``ranks``. Where the tree has ``all_reduce_flags`` (0.5.23 on) its
    own reducers run and only ``torch.distributed`` as its utils module sees it stands in (``get_world_size``, the
    group's; ``all_reduce``, the group's reduction in place). Earlier trees' reducers (as ``single_rank_reduce``
    finds them) are replaced: ``_all_reduce_polls`` and an inline ``poll_and_all_reduce`` by MIN (no rank commits
    ahead of its peers)."""
    utils = modules[0]

    def flags_reduce(flags: list[int], group: Any = None, op: Any = None) -> list[int]:
        return list(flags) if not flags else ranks.all_reduce(list(flags), op)

    if hasattr(utils, "all_reduce_flags") and hasattr(utils, "dist"):
        # the tree's own reducers run (all_reduce_flags, and _all_reduce_polls through it): only the collective
        # stands in, torch.distributed as they see it
        def all_reduce(tensor: Any, op: Any = None, group: Any = None, **kwargs: Any) -> None:
            reduced = ranks.all_reduce([int(v) for v in tensor.tolist()], op)
            tensor.copy_(tree.torch().tensor(reduced, dtype=tensor.dtype))

        utils.dist = Double(journal, "torch.distributed", ReduceOp=utils.dist.ReduceOp, all_reduce=all_reduce,
                            get_world_size=lambda group=None: ranks.size())
        return
    if not hasattr(utils, "_all_reduce_polls") and not hasattr(utils, "all_reduce_flags"):
        for module_ in modules:
            if hasattr(module_, "poll_and_all_reduce"):
                module_.poll_and_all_reduce = journal.method(
                    "collective", "poll_and_all_reduce",
                    lambda pollers, group, *a, **k: ranks.all_reduce([int(p.poll()) for p in pollers], "MIN"))
    for module_ in modules:
        if hasattr(module_, "_all_reduce_polls"):
            module_._all_reduce_polls = journal.method("collective", "_all_reduce_polls",
                                                       lambda polls, group: ranks.all_reduce(list(polls), "MIN"))
        if hasattr(module_, "all_reduce_flags"):
            module_.all_reduce_flags = journal.method("collective", "all_reduce_flags", flags_reduce)


def clocked_time(clock: Clock) -> SimpleNamespace:
    """The ``time`` a module of the tree sees: the case's logical clock."""
    import time as real

    return SimpleNamespace(**{**vars(real), "time": clock.monotonic, "monotonic": clock.monotonic,
                              "perf_counter": clock.monotonic, "sleep": lambda seconds: None})


class TreeLog(logging.Handler):
    """What the tree's disaggregation code logs during a case: its warnings and errors, and every
    failure it swallowed (a record with a traceback, or a message saying something failed). A
    swallowed failure raised in this package's stand-ins is a gap of ours, never a behaviour: the case
    stops as an error naming it."""

    LOGGER = "sglang.srt.disaggregation"

    def __init__(self, journal: Journal, clock: Clock) -> None:
        super().__init__(logging.DEBUG)
        self.journal, self.clock = journal, clock
        self.records: list[dict[str, JSON]] = []
        logger = logging.getLogger(self.LOGGER)
        logger.addHandler(self)
        logger.setLevel(logging.DEBUG)

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage().splitlines()[0][:300] if record.getMessage() else ""
        failed = record.exc_info is not None or message.lower().startswith("failed")
        if record.levelno < logging.WARNING and not failed:
            return
        if record.exc_info and record.exc_info[2] is not None:
            here = os.path.dirname(os.path.abspath(__file__))
            import traceback

            if any(os.path.abspath(f.filename).startswith(here + os.sep) for f in traceback.extract_tb(record.exc_info[2])):
                self.journal.gap(f"a stand-in that raised {record.exc_info[0].__name__} inside the tree "
                                 f"({message[:120]})")
        self.records.append({"seq": self.clock.tick(), "logger": record.name.removeprefix("sglang.srt."),
                             "level": record.levelname, "message": message})


# --- the ranks ---------------------------------------------------------------------------------


def keep_flag() -> tuple[str, Any]:
    """The flag by which the tree's ``release_kv_cache`` keeps a released request's KV in the prefix
    cache (``is_insert``, later ``checkpoint``) and its default (True where none: a call must say);
    trees without it give pages back through ``cache_finished_req(req, is_insert=...)``, True by default."""
    try:
        release = tree.resolve("sglang.srt.mem_cache.common.release_kv_cache")
    except tree.Missing:
        return "is_insert", True
    params = list(inspect.signature(release).parameters.values())[2:]
    if not params:
        return "is_insert", False
    default = params[0].default
    return params[0].name, True if default is inspect.Parameter.empty else default


def _dataclass(cls: type, **values: Any) -> Any:
    """An instance of one of the tree's dataclasses with ``values`` for the fields it has; the
    others keep their defaults, or None when they have none."""
    names = {f.name for f in fields(cls)} if is_dataclass(cls) else set(inspect.signature(cls).parameters)
    required = {n for n, p in inspect.signature(cls).parameters.items() if p.default is inspect.Parameter.empty}
    return cls(**{**{n: None for n in required}, **{k: v for k, v in values.items() if k in names}})


def _trace_null() -> Any:
    """The tree's no-op trace context (where its tracing lives moved between releases)."""
    for name in ("sglang.srt.observability.trace.TraceNullContext", "sglang.srt.tracing.trace.TraceNullContext",
                 "sglang.srt.utils.trace.TraceNullContext"):
        try:
            return tree.resolve(name)()
        except tree.Missing:
            continue
    return None


def metadata_buffers(**flags: Any) -> Any:
    """The tree's own ``MetadataBuffers`` (CPU tensors), small: what decode's metadata gate, commit and
    release read and reset. ``flags``: keyword options the tree's constructor takes (others left out)."""
    cls = tree.resolve(f"{UTILS}.MetadataBuffers")
    accepted = inspect.signature(cls).parameters
    wanted = {"size": 16, "hidden_size": 8, "hidden_states_dtype": tree.torch().float32, "max_sampling_mask_tokens": 0,
              **flags}
    return cls(**{k: v for k, v in wanted.items() if k in accepted})


HICACHE = "hicache-restore-fails"  # the failure: decode's HiCache load-back of the request's cached prefix comes up short
HICACHE_DEVICE = 32  # tokens of the decode tree cache's own device pool (the tree's allocator, on CPU tensors)
UNIFIED = "sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache"


class Transport:
    """The HiCache controller's device<->host DMA engine (the tree's ``L2TransferEngine``: it "runs resolved
    transfers without owning cache state"): each transfer it is handed is recorded and done at once (CPU torch has
    no copy streams; the bytes are not what the case is about); its completion events are done. Nothing the tree
    decides (what to back up, evict, load back, or whether a load-back fits) is made here."""

    class _Done:
        def record(self, *args: Any, **kwargs: Any) -> None:
            pass

        def wait(self, *args: Any, **kwargs: Any) -> None:
            pass

        def synchronize(self) -> None:
            pass

        def query(self) -> bool:
            return True

        def elapsed_time(self, other: Any) -> float:
            return 0.0

    class _Stream:
        def wait_stream(self, *args: Any) -> None:
            pass

        def wait_event(self, *args: Any) -> None:
            pass

        def synchronize(self) -> None:
            pass

    def __init__(self, journal: Journal, name: str) -> None:
        self.journal, self.name = journal, name
        self.device_to_host_stream = self._Stream()
        self.host_to_device_stream = self._Stream()

    def _completion(self) -> Any:
        done = tree.resolve("sglang.srt.mem_cache.l2_transfer.TransferCompletion")
        fields_ = list(getattr(done, "_fields", ()))
        return done(**{f: (False if f == "timing_enabled" else self._Done()) for f in fields_})

    def submit_device_to_host(self, transfers: list[Any], *args: Any, **kwargs: Any) -> Any:
        self.journal.record(self.name, "device_to_host", ([plain(t.host_indices.tolist()) for t in transfers],), {})
        return self._completion()

    def submit_host_to_device(self, transfers: list[Any], *args: Any, transfer_layer_id_max: int = 0,
                              on_layer_done: Callable[[int], None] | None = None, **kwargs: Any) -> Any:
        self.journal.record(self.name, "host_to_device", ([plain(t.host_indices.tolist()) for t in transfers],), {})
        for layer in range(transfer_layer_id_max):
            if on_layer_done is not None:
                on_layer_done(layer)
        return self._completion()


DECODE_HICACHE = "sglang.srt.disaggregation.decode_hicache_mixin"
STORAGE_HIT = "query_storage_hit_length"


def _reads(module_name: str, attribute: str) -> bool:
    """Whether a method of the tree's module reads ``attribute`` (the names its code objects use)."""
    if not tree._is_module(module_name):
        return False
    return any(attribute in getattr(getattr(f, "__code__", None), "co_names", ())
               for c in vars(tree.module(module_name)).values() if isinstance(c, type) for f in vars(c).values())


def decode_hicache(journal: Journal, name: str) -> tuple[Any, int]:
    """Decode's tree cache with HiCache on, as the tree's own start-up builds it (``UnifiedRadixCache`` and its
    ``init_hicache``: the tree's host pool and ``HybridCacheController``), on CPU tensors, write-back: the tree's
    own code decides what is backed up, evicted and loaded back. What stands in is the transport only: the host
    pool's CUDA registration (``cudaHostRegister`` of its pages for DMA, which CPU torch cannot make) and the
    controller's DMA engine (``Transport``). Returns the cache and the length of the prompt prefix it will hold
    (the tree's load-back threshold and 2: a prefix the tree would load back when there is room)."""
    torch = tree.torch()
    if tree.publish_config(enable_hierarchical_cache=True, hicache_write_policy="write_back") is None:
        raise tree.Missing("sglang.srt.runtime_context.publish")
    server_args = tree.resolve("sglang.srt.server_args.ServerArgs")(
        model_path="dummy", enable_hierarchical_cache=True, hicache_write_policy="write_back")

    def made(cls_name: str, **wanted: Any) -> Any:
        cls = tree.resolve(cls_name)
        accepted = inspect.signature(cls).parameters
        return cls(**{k: v for k, v in wanted.items() if k in accepted})

    r2t = made("sglang.srt.mem_cache.memory_pool.ReqToTokenPool", size=4, max_context_len=64, device="cpu",
               enable_memory_saver=False)
    kv = made("sglang.srt.mem_cache.memory_pool.MHATokenToKVPool", size=HICACHE_DEVICE, page_size=1,
              dtype=torch.float16, head_num=1, head_dim=8, layer_num=1, device="cpu", enable_memory_saver=False,
              enable_alt_stream=False)
    allocator = made("sglang.srt.mem_cache.allocator.token.TokenToKVPoolAllocator", size=HICACHE_DEVICE,
                     dtype=torch.float16, device="cpu", kvcache=kv, need_sort=False)
    full = tree.resolve("sglang.srt.mem_cache.unified_cache.components.ComponentType").FULL
    params = made("sglang.srt.mem_cache.cache_init_params.CacheInitParams", disable=False, req_to_token_pool=r2t,
                  token_to_kv_pool_allocator=allocator, page_size=1, tree_components=(full,))
    cache = tree.resolve(UNIFIED)(params)
    host = tree.module("sglang.srt.mem_cache.pool_host.common")
    saved = host._cuda_host_register
    host._cuda_host_register = journal.method(f"{name}.host_pool", "cuda_host_register")
    # the host pool's size check reads the machine's free memory, bounded by the process's memory cgroup: the sandbox
    # hides the cgroup filesystems (the tree then raises), so it reads as on a machine that exposes none (the tree's
    # own answer there: no bound but the machine's); the host pool here is a few KiB
    memory = tree.module("sglang.srt.mem_cache.host_memory") if tree._is_module("sglang.srt.mem_cache.host_memory") else None
    headroom = getattr(memory, "_cgroup_memory_headroom", None)
    if headroom is not None:
        memory._cgroup_memory_headroom = journal.method(f"{name}.machine", "cgroup_memory_headroom")
    try:
        cache.init_hicache(server_args, params)
    finally:
        host._cuda_host_register = saved
        if headroom is not None:
            memory._cgroup_memory_headroom = headroom
    cache.cache_controller.l2_transfer_engine = Transport(journal, f"{name}.hicache_dma")
    return cache, max(int(getattr(cache, "load_back_threshold", 0)), 1) + 2


def hold_prefix(cache: Any, tokens: list[int]) -> None:
    """Decode's tree cache once held ``tokens``' KV (an earlier request's, cached at its finish) and, under device
    pressure, demoted it to host memory: the tree's own insert, then its eviction (write-back: backed up, then its
    device pages freed). Then the decode batch running holds every other device page: nothing of the tree's is
    evictable, so a load-back has nowhere to go."""
    from array import array

    radix = tree.resolve("sglang.srt.mem_cache.radix_cache.RadixKey")
    base = tree.module("sglang.srt.mem_cache.base_prefix_cache")
    allocator = cache.token_to_kv_pool_allocator
    cache.insert(base.InsertParams(key=radix(token_ids=array("q", tokens)), value=allocator.alloc(len(tokens))))
    cache.evict(base.EvictParams(num_tokens=len(tokens)))
    allocator.alloc(allocator.available_size())


class Rank:
    """What a prefill and a decode rank share: the tree's MooncakeKVManager made without its
    ``__init__`` (no sockets, no threads), with only the state its code reads, and its message loop."""

    role = ""
    conn = MOONCAKE  # the transfer backend's module, whose threads ``start`` captures

    def __init__(self, scene: "Scene", rank: int, endpoint: tuple[str, int]) -> None:
        self.scene, self.rank, self.endpoint = scene, rank, endpoint
        self.name = f"{self.role}{rank}"
        self.threads: list[Callable[[], None]] = []
        self.inbox: list[list[bytes]] = []

    def manager_state(self) -> dict[str, Any]:
        journal, name = self.scene.journal, self.name
        return dict(
            request_status={}, failure_records={}, failure_lock=threading.Lock(),
            _staging_outstanding=defaultdict(int), _deferred_ack_targets={}, _deferred_ack_fanout_snapshots={},
            _deferred_ack_poisoned_rooms=set(),
            _socket_cache={}, _socket_send_locks=defaultdict(threading.Lock), _socket_lock=threading.Lock(),
            enable_staging=False, enable_trace=False, _stopped=False, _worker_threads=[],
            is_mla_backend=self.scene.shape.layout == "mla", is_hybrid_mla_backend=False, attn_tp_size=1,
            attn_tp_rank=self.rank, attn_cp_size=1, attn_cp_rank=0, pp_size=1, pp_rank=0, attn_dp_rank=0,
            server_socket=Double(journal, f"{name}.server_socket", recv_multipart=self._recv),
            local_ip=self.endpoint[0], rank_port=self.endpoint[1],
            _connect=lambda endpoint, is_ipv6=False: self.scene.wire.socket(journal, name, endpoint),
            _make_worker_recv=lambda socket, timeout_ms=500: self._recv,
            _bind_server_socket=lambda: None,  # earlier trees bind when their threads start: the wire is ours
        )

    def start(self, start: Callable[[], None]) -> None:
        """Run the tree's ``start_*_thread``, keeping the thread bodies it starts; route this
        rank's endpoint to its message loop."""
        conn = tree.module(self.conn)
        saved = conn.threading
        conn.threading = threading_capture(self.threads)
        try:
            start()
        finally:
            conn.threading = saved
        self.scene.wire.routes[tcp(self.endpoint)] = self.handle

    def _recv(self, *args: Any, **kwargs: Any) -> list[bytes]:
        if not self.inbox:
            raise Stop()
        return self.inbox.pop(0)

    def handle(self, frames: list[bytes]) -> None:
        """One message through this rank's own message loop (the first thread body it started)."""
        self.inbox.append(frames)
        try:
            self.threads[0]()
        except Stop:
            pass


class RoomStatus(dict):
    """A prefill manager's ``request_status``: a dict. A step the case holds for the next test of a room's
    presence in it runs just before that test answers: another thread of the rank (the ABORT handler) running
    while the transfer worker, having taken and counted a chunk, is about to check its room."""

    def __init__(self) -> None:
        super().__init__()
        self.hold: Callable[[], None] | None = None

    def __contains__(self, key: object) -> bool:
        hold, self.hold = self.hold, None
        if hold is not None:
            hold()
        return super().__contains__(key)


class PrefillRank(Rank):
    """One prefill rank: its KV manager, and a KV sender per request."""

    role = "prefill"
    room_status = RoomStatus  # the class of its manager's request_status
    requires = (f"{MANAGER}.transfer_worker", f"{MANAGER}.start_prefill_thread", f"{MANAGER}.add_transfer_request",
                f"{MOONCAKE}.MooncakeKVSender")

    def __init__(self, scene: "Scene", rank: int) -> None:
        super().__init__(scene, rank, prefill_endpoint(rank))
        journal = scene.journal
        self.queue_items: list[Any] = []
        self.senders: dict[str, Any] = {}
        self.concluded: set[str] = set()
        self.status = self.room_status()
        self.manager = self.make_manager()
        self.config = configure(journal, tree.module(COMMON).CommonKVManager, self.manager,
                                ("enable_deferred_decode_kv_release",))
        self.start(self.listener())

    def make_manager(self) -> Any:
        """The tree's prefill KV manager of this rank's backend (Mooncake's), built without its ``__init__``."""
        journal, scene = self.scene.journal, self.scene
        modes = tree.resolve(f"{UTILS}.DisaggregationMode")
        return strict_subject(
            tree.resolve(MANAGER), journal, f"{self.name}.kv_manager",
            **{**self.manager_state(), "request_status": self.status, **self._layout()},
            disaggregation_mode=modes.PREFILL, transfer_infos={}, decode_kv_args_table={},
            req_to_decode_prefix_len={},
            session_lock=threading.Lock(), failed_sessions=set(), session_failures=defaultdict(int),
            state_layout_rejections={},
            bootstrap_port=tree.BOOTSTRAP_PORT, bootstrap_timeout=300,
            pp_group=Double(journal, f"{self.name}.pp_group", is_last_rank=True, is_first_rank=True),
            kv_args=Double(journal, f"{self.name}.kv_args", kv_data_ptrs=[0x10000], kv_item_lens=[64],
                           aux_data_ptrs=[0x20000], aux_item_lens=[64], page_size=1, **self._state_args()),
            transfer_queues=[self._queue()],
            send_kvcache=self._send_kvcache, send_aux=self._send_aux,
            **({"state_tp_size": 1, "engine": Double(journal, f"{self.name}.engine",
                                                     batch_transfer_sync=self._batch_transfer_sync)}
               if scene.shape.state else {}),
        )

    def listener(self) -> Callable[[], None]:
        """The tree's start of this rank's message loop (the bootstrap thread, which also takes decode's ABORTs)."""
        return self.manager.start_prefill_thread

    def _layout(self) -> dict[str, Any]:
        """Where this rank sits: a tensor-parallel rank (the scene's default, as ``manager_state`` has it), or
        context-parallel rank ``rank`` of two, each holding the whole (replicated) state."""
        if self.scene.shape.layout == "cp":
            return {"attn_tp_rank": 0, "attn_cp_size": 2, "attn_cp_rank": self.rank}
        return {}

    def dummy(self) -> bool:
        """Whether decode gave this rank a dummy destination: an MLA model's KV is read from one prefill rank
        (rank 0), the others are told the room with no pages (the tree's ``is_dummy``)."""
        return self.scene.shape.layout == "mla" and self.rank != 0

    def _state_args(self) -> dict[str, Any]:
        """The prefill pool's state buffers as its ``kv_args`` register them: none, or (a hybrid model) one
        Mamba state pool of one layer, its slots one item each, in the tree's own ``StateType``."""
        if not self.scene.shape.state:
            return {"state_data_ptrs": [], "state_item_lens": []}
        mamba = tree.resolve(STATE_TYPE).MAMBA
        return {"state_types": [mamba], "state_data_ptrs": [[0x50000]], "state_item_lens": [[32]],
                "state_dim_per_tensor": [], "state_layer_ids": [[0]]}

    def bootstrap(self, rid: str, room: int = ROOM, published: bool = False) -> None:
        """Every decode rank's preallocation for ``rid`` reached this rank: its destinations are
        known and its room (``room``) waits for input; the scheduler holds a KV sender for it. With
        ``published`` the destinations are left to decode's own metadata messages, which this rank's
        bootstrap thread takes in (``DecodeRank.publish``): the room only starts bootstrapping here."""
        import numpy as np

        conn = tree.module(MOONCAKE)
        scene, journal = self.scene, self.scene.journal
        infos = {}
        for d in (d for d in scene.decode if d.rank not in scene.unlearned):  # a rank that never learned us never published
            ip, port = d.endpoint
            request = d.requests[rid]
            dummy = self.dummy()  # what TransferInfo.from_zmq makes of a dummy message: no pages, no row, no state
            infos[session_of(d.rank)] = _dataclass(
                conn.TransferInfo, room=room, endpoint=ip, dst_port=port, mooncake_session_id=session_of(d.rank),
                dst_kv_indices=np.array([] if dummy else request.pages, dtype=np.int32),
                dst_aux_index=None if dummy else request.metadata_index,
                dst_state_indices=[[STATE_SLOT]] if scene.shape.state and not dummy else [],
                required_dst_info_num=len(scene.decode), is_dummy=dummy)
            self.manager.decode_kv_args_table[session_of(d.rank)] = _dataclass(
                conn.KVArgsRegisterInfo, room="None", endpoint=ip, dst_port=port,
                mooncake_session_id=session_of(d.rank), dst_kv_ptrs=[0x30000], dst_aux_ptrs=[0x40000],
                dst_state_data_ptrs=[[0x60000]] if scene.shape.state else [], dst_tp_rank=d.rank, dst_attn_tp_size=1,
                dst_kv_item_len=64, dst_state_item_lens=[[32]] if scene.shape.state else [], dst_state_dim_per_tensor=[],
                dst_kv_layer_ids=[0], dst_state_layer_ids=[[0]] if scene.shape.state else [])
        poll = tree.kv_poll()
        self.manager.update_status(room, poll.Bootstrapping)
        if not published:
            self.manager.transfer_infos[room] = infos
            self.manager.update_status(room, poll.WaitingForInput)
        self.senders[rid] = strict_subject(
            conn.MooncakeKVSender, journal, f"{self.name}.kv_sender.{rid}", kv_mgr=self.manager, bootstrap_room=room,
            conclude_state=None, init_time=0, aux_index=0, trace_ctx=_trace_null())

    def _queue(self) -> Double:
        def get(*args: Any, **kwargs: Any) -> Any:
            if not self.queue_items:
                raise Stop()
            return self.queue_items.pop(0)

        return Double(self.scene.journal, f"{self.name}.transfer_queue",
                      put=lambda item: self.queue_items.append(item), get=get)

    # the engine: what this rank's worker asks the transfer engine to write
    def _send_kvcache(self, session_id: str, src: Any, dst_ptrs: Any, dst_indices: Any, *args: Any, **kwargs: Any) -> int:
        decode = next(d for d in self.scene.decode if session_of(d.rank) == session_id)
        return self.scene.write(self, decode, [int(p) for p in dst_indices])

    def _send_aux(self, req: Any, prefill_aux_index: Any, dst_aux_ptrs: Any, *args: Any, **kwargs: Any) -> int:
        decode = next(d for d in self.scene.decode if d.endpoint == (req.endpoint, req.dst_port))
        if (self.rank, decode.rank) in self.scene.aux_failing:  # the engine's aux write returns failure
            self.scene.note("aux write fails", rank=self.rank)
            if self.scene.shape.failed_write == "keeps writing":  # the engine gave up waiting; the write goes on
                self.scene.late_writes.append(("aux", self.rank, lambda: self.scene.aux(decode, int(req.dst_aux_index))))
            return -1
        self.scene.aux(decode, int(req.dst_aux_index))
        return 0

    def _batch_transfer_sync(self, session_id: str, src: Any, dst: Any, lengths: Any, *args: Any, **kwargs: Any) -> int:
        """The engine's write of the request's state slot (the scene's state writes are only these): it lands,
        or returns failure where the case fails it (with ``failed_write`` "keeps writing" it still lands later)."""
        fails = self.rank in self.scene.state_failing
        self.scene.note("state write fails" if fails else "state write lands", rank=self.rank, session=session_id)
        if fails and self.scene.shape.failed_write == "keeps writing":
            self.scene.late_writes.append(("state", self.rank, lambda: None))  # decode's state slot is not modelled
        return -1 if fails else 0

    def send_last_chunk(self, start: int = 0) -> None:
        """The scheduler hands the request's last chunk (its pages from ``start`` on) to the sender: the tree's
        ``add_transfer_request`` (a rank that never took the request's metadata has no sender for it: nothing to
        send). A hybrid model's last chunk carries its state slot."""
        self.send_chunk(start, PAGES, last=True)

    def send_chunk(self, start: int, end: int, last: bool) -> None:
        """One chunk of the request's KV, pages ``start`` to ``end``: the last carries the aux index (and the
        state slot of a hybrid model), an earlier one neither (as the tree's ``send`` hands them on)."""
        import numpy as np

        if self.scene.active not in self.senders:
            return
        add = self.manager.add_transfer_request
        wanted = {"bootstrap_room": ROOM, "kv_indices": np.arange(start, end, dtype=np.int32),
                  "index_slice": slice(start, end), "is_last_chunk": last, "is_last": last,
                  "aux_index": 0 if last else None,
                  "state_indices": [[STATE_SLOT - 1]] if last and self.scene.shape.state else None,
                  "num_kv_tokens": end - start}
        add(**{k: v for k, v in wanted.items() if tree.accepts(add, k)})

    def work(self) -> None:
        """The transfer worker takes what is queued, through the tree's own ``transfer_worker``."""
        try:
            self.manager.transfer_worker(self.manager.transfer_queues[0],
                                         Double(self.scene.journal, f"{self.name}.executor"))
        except Stop:
            pass

    def poll_and_clear(self, rid: str) -> None:
        """What the prefill scheduler does with a sender that reports Failed: conclude it (the tree's
        ``failure_exception``, which clears the room and raises the transfer error it records, or the exception its
        transfer worker stored: the scheduler takes any, a stand-in's gap aside)."""
        sender = self.senders.get(rid)
        if sender is None or rid in self.concluded or sender.poll() != tree.kv_poll().Failed:
            return  # a concluded sender left the scheduler's queue: it is never polled again
        self.concluded.add(rid)
        try:
            sender.failure_exception()
        except Exception as exc:
            if isinstance(exc, (DoubleGap, Absent)):
                raise
            raised = {} if type(exc).__name__ == "KVTransferError" else {"raised": type(exc).__name__}
            self.scene.note("prefill concludes", rank=self.rank, rid=rid, **raised)

    def outstanding(self) -> int:
        return int(self.manager._staging_outstanding.get(ROOM, 0))


@dataclass
class Request:
    """One request's life on one decode rank: its pages, metadata row, KV receiver, queue entry."""

    rid: str
    pages: list[int]
    metadata_index: int
    req: Any = None
    receiver: Any = None
    entry: Any = None  # its DecodeRequest in the transfer queue


class DecodeRank(Rank):
    """One decode rank: its KV pool (the stand-in), its KV manager, the tree's DecodeTransferQueue,
    and a scheduler whose ``abort_request`` is the tree's."""

    role = "decode"
    requires = (f"{MANAGER}.start_decode_thread", f"{MOONCAKE}.MooncakeKVReceiver")

    def __init__(self, scene: "Scene", rank: int) -> None:
        super().__init__(scene, rank, decode_endpoint(rank))
        journal = scene.journal
        modes = tree.resolve(f"{UTILS}.DisaggregationMode")
        decode = tree.module(DECODE)
        # with a neighbour, its pages too (it takes the first half)
        self.pool = PagePool(PAGES * (2 if scene.shape.neighbour else 1), scene.clock)
        self.requests: dict[str, Request] = {}
        self.next_pages: list[int] | None = None
        self.committed: list[str] = []
        self.handed: list[str] = []  # the requests pop_transferred returned (the scheduler's to decode)
        self.manager = self.make_manager()
        self.config = configure(journal, tree.module(COMMON).CommonKVManager, self.manager,
                                ("enable_deferred_decode_kv_release",))
        streamer, self.streamed = output_streamer(journal)
        # decode's HiCache, the tree's own, where the case's failure is its load-back coming up short
        self.hicache, self.prefix = decode_hicache(journal, self.name) if scene.shape.failure == HICACHE else (None, 0)
        if self.hicache is not None and _reads(DECODE_HICACHE, STORAGE_HIT) and not hasattr(self.hicache, STORAGE_HIT):
            # decode's HiCache asks its cache what the storage tier holds; a tree whose unified cache cannot answer
            # (0.5.18: its server builds the HiRadixCache for decode HiCache) has no such decode on this cache
            raise tree.Missing(f"{UNIFIED}.{STORAGE_HIT}")
        self.metadata = metadata_buffers(**scene.metadata_flags())
        self.metadata_frees: list[int] = []
        self.logical_releases: list[dict[str, JSON]] = []  # a HiSparse decode's release_kv_cache: logical indices only
        # one scheduler, as in the server: the transfer queue's and the one the abort reaches
        self.scheduler = strict_subject(tree.resolve(SCHEDULER), journal, f"{self.name}.scheduler", **{
            **dict(chunked_req=None, mm_receiver=None, waiting_queue=[], dllm_config=None, enable_hicache_storage=False,
                   grammar_manager=Double(journal, "grammar_manager", recorded=("abort_requests",)),
                   disaggregation_mode=modes.DECODE, collect_inflight_reqs=lambda: [],
                   ps=Double(journal, "parallel_state", pp_size=1), pp_size=1,
                   enable_decode_hicache=self.hicache is not None, enable_hisparse=scene.shape.hisparse,
                   output_streamer=streamer,
                   metrics_reporter=Double(journal, "metrics_reporter", enable_metrics=False),
                   # nothing is running yet; earlier trees read the server configuration from the scheduler
                   running_batch=Double(journal, "running_batch", reqs=[]), last_batch=None, cur_batch=None,
                   is_generation=True, enable_metrics=False, grammar_queue=[],
                   stream_output=streamer.stream_output,  # earlier trees stream from the scheduler itself
                   server_args=server_args()),
            # the tree's Scheduler holds None where HiSparse is off (its __init__'s default)
            "hisparse_coordinator": self._hisparse() if scene.shape.hisparse else None,
            **scene.decode_scheduler_state(self),
        })
        self.queue = strict_subject(
            tree.resolve(QUEUE), journal, f"{self.name}.transfer_queue",
            queue=[], gloo_group=Double(journal, "gloo_group"), tp_rank=0, metadata_buffers=self.metadata,
            req_to_metadata_buffer_idx_allocator=Double(journal, f"{self.name}.metadata_allocator",
                                                        free=lambda idx: self.metadata_frees.append(int(idx))),
            # the tree cache gives a failed request's pages back (trees before release_kv_cache call it directly)
            tree_cache=self.hicache if self.hicache is not None else
            self.scheduler.tree_cache if "tree_cache" in vars(self.scheduler) else
            Double(journal, f"{self.name}.tree_cache",
                   cache_finished_req=lambda req, *args, **flags: scene._release(req, None, *args, **flags)),
            spec_algorithm=Double(journal, "spec_algorithm", is_none=lambda: True, is_eagle=lambda: False,
                                  is_standalone=lambda: False, is_ngram=lambda: False),
            enable_staging=False, staging_handler=None, _deferred_releases=[], enable_host_receive=False,
            scheduler=self.scheduler,
            # without decode's HiCache nothing of it is held (with it, the tree's own cleanup runs)
            **({} if self.hicache is not None else {"_clean_hicache_prefetch_resources": lambda decode_req: None}),
            # the lifetime cases never look past the commit: it stands for the request starting to decode
            # (reading its pages); the handoff probe runs the tree's own commit and what follows it
            **({"_commit_transfer_to_req": self._commit} if scene.commit_stand_in else {}),
            **scene.decode_queue_state(self),
        )
        object.__setattr__(self.scheduler, "disagg_decode_transfer_queue", self.queue)
        self.config.update(configure(journal, decode.DecodeTransferQueue, self.queue,
                                     ("enable_deferred_kv_release", "deferred_kv_release_timeout")))
        self.start(self.listener())

    def make_manager(self) -> Any:
        """The tree's decode KV manager of this rank's backend (Mooncake's), built without its ``__init__``."""
        journal, rank = self.scene.journal, self.rank
        return strict_subject(
            tree.resolve(MANAGER), journal, f"{self.name}.kv_manager", spies=("note_abort_ack",),
            **self.manager_state(),
            disaggregation_mode=tree.resolve(f"{UTILS}.DisaggregationMode").DECODE,
            required_prefill_response_num_table={},
            prefill_response_tracker=defaultdict(set), addr_to_rooms_tracker=defaultdict(set),
            _deferred_abort_ack_tracker={}, _deferred_abort_generation=0, _staging_handler=None,
            # the transfer engine's session id for this rank (what later trees' send_metadata sends)
            engine=Double(journal, f"{self.name}.engine", get_session_id=lambda: session_of(rank)),
            waiting_timeout=300, heartbeat_interval=2, max_failures=1,
            _start_heartbeat_checker_thread=lambda: None,
        )

    def listener(self) -> Callable[[], None]:
        """The tree's start of this rank's message loop (status messages and ABORT_ACKs from prefill)."""
        return self.manager.start_decode_thread

    def receiver(self) -> tuple[type, dict[str, Any]]:
        """The tree's KV receiver class of this rank's backend, and the state of it only that backend's has."""
        return tree.module(MOONCAKE).MooncakeKVReceiver, {"session_id": session_of(self.rank)}

    def _hisparse(self) -> Any:
        """The tree's own ``HiSparseCoordinator`` (made without its ``__init__``), holding the state its
        ``request_finished`` reads, for 4 request rows: no device buffer of its own yet (the transfer writes the
        host pool directly), no backup pending, no overlapped batch. Its host pool stands in as this rank's page
        pool: the pages decode hands prefill are host pages, and ``free`` gives them back to it."""
        torch, journal, name = tree.torch(), self.scene.journal, self.name
        rows, width = 4, 2 * PAGES

        def allocated(req_to_host_pool: Any, req_pool_idx: Any, allocated_len: Any) -> Any:
            row = req_to_host_pool[int(req_pool_idx), : int(allocated_len)]
            return row[row >= 0]

        def free(indices: Any) -> None:
            pages = [int(p) for p in indices.tolist()]
            self.pool.free(self.pool.owner.get(pages[0], "") if pages else "", pages, "hisparse request_finished")

        return strict_subject(
            tree.resolve(HISPARSE), journal, f"{name}.hisparse_coordinator",
            decode_producer_stream=None, _has_pending_backup=False,
            req_to_token_pool=Double(journal, f"{name}.hisparse_req_to_token_pool",
                                     req_to_token=torch.zeros((rows, width), dtype=torch.int64)),
            req_device_buffer_size=torch.zeros(rows, dtype=torch.int64),
            req_to_device_buffer=torch.zeros((rows, width), dtype=torch.int64),
            req_device_buffer_tokens=torch.full((1, rows, width), -1, dtype=torch.int64),
            req_device_buffer_token_locs=torch.full((1, rows, width), -1, dtype=torch.int64),
            mem_pool_device=Double(journal, f"{name}.hisparse_device_pool",
                                   translate_loc_from_full_to_compressed=lambda locs: locs,
                                   full_to_hisparse_device_index_mapping=torch.zeros(4 * width, dtype=torch.int64)),
            mem_pool_host=Double(journal, f"{name}.hisparse_host_pool", allocated_host_indices=allocated, free=free),
            req_to_host_pool=torch.full((rows, width), -1, dtype=torch.int64),
            req_to_host_pool_allocated_len=torch.zeros(rows, dtype=torch.int64),
            lru_slots=torch.zeros((1, rows, width), dtype=torch.int64), _lru_init=torch.zeros(width, dtype=torch.int64),
            spec_swap=Double(journal, f"{name}.hisparse_spec_swap", recorded=("free_unrotated_scratch", "clear_scratch")),
            _skip_first_backup=torch.zeros(rows, dtype=torch.bool),
            token_to_kv_pool_allocator=Double(journal, f"{name}.hisparse_allocator", recorded=("free_hisparse_indices",)),
        )

    def admit(self, rid: str, room: int = ROOM, row: int = 1, reserve: int = PAGES, slot: int | None = None) -> None:
        """``rid`` was preallocated here and waits for its KV in ``room``: its pages, metadata row, KV
        receiver (bootstrapped with every prefill rank) and transfer-queue entry; ``row``: its row of req_to_token;
        ``reserve``: the pages reserved for the KV prefill sends (fewer than its prompt's past a prefix decode held);
        ``slot``: a metadata row the tree's own code freed before (taken again as it was left; None: a fresh row)."""
        journal, scene = self.scene.journal, self.scene
        decode = tree.module(DECODE)
        receiver, own = self.receiver()
        request = Request(rid=rid, pages=self.pool.alloc(rid, reserve),
                          metadata_index=3 + len(self.requests) if slot is None else slot)
        poll = tree.kv_poll()
        # what the receiver's constructor registers on its manager (the constructor itself, which opens
        # connections to the bootstrap server, is not run)
        bootstrap_addr = f"{tree.BOOTSTRAP_HOST}:{tree.BOOTSTRAP_PORT}"
        # the prefill ranks that answer with a status (a dummy one never does: the tree's MLA mapping counts one)
        self.manager.required_prefill_response_num_table[room] = len([p for p in scene.prefill if not p.dummy()])
        self.manager.addr_to_rooms_tracker[bootstrap_addr].add(room)
        self.manager.prefill_response_tracker.setdefault(room, set())
        self.manager.update_status(room, poll.Bootstrapping)
        self.manager.update_status(room, poll.WaitingForInput)
        infos = self.prefill_infos()
        request.receiver = strict_subject(
            receiver, journal, f"{self.name}.kv_receiver.{rid}", **own,
            kv_mgr=self.manager, bootstrap_room=room, conclude_state=None, abort_notified=False,
            bootstrap_infos=infos if (scene.reached is None or scene.reached) and self.rank not in scene.unlearned else None,
            init_time=0,
            bootstrap_addr=bootstrap_addr, required_dst_info_num=len(scene.decode),
            _abort_generation=None, require_staging=False,
            _connect_to_bootstrap_server=lambda info: (
                scene.wire.socket(journal, self.name, tcp((info["rank_ip"], info["rank_port"]))), threading.Lock()),
            invalidate_cached_bootstrap_infos=journal.method(f"{self.name}.kv_receiver.{rid}",
                                                             "invalidate_cached_bootstrap_infos"),
        )
        request.req = tree.make_req(rid, self.prefix + PAGES, "DECODE", room)
        if getattr(request.req, "vocab_size", 0) is None:  # the model's vocabulary, which the request learns from it
            request.req.vocab_size = 32000
        tree.give_kv(request.req, PAGES, row)
        if scene.shape.hisparse:  # as the tree's HiSparse preallocation records the host pages it gave the request
            coordinator = self.scheduler.hisparse_coordinator
            coordinator.req_to_host_pool[row, : len(request.pages)] = tree.torch().tensor(request.pages)
            coordinator.req_to_host_pool_allocated_len[row] = len(request.pages)
        request.req.metadata_buffer_index = request.metadata_index
        if hasattr(self.metadata, "bootstrap_room") and slot is None:  # a fresh row's room: what later trees' gate reads
            self.metadata.bootstrap_room[request.metadata_index, 0] = 0
        match = {}
        if self.hicache is not None:  # its prompt's prefix is on decode's host tier: the tree's own preallocation match
            hold_prefix(self.hicache, list(request.req.origin_input_ids[: self.prefix]))
            prealloc = strict_subject(tree.resolve(f"{DECODE}.DecodePreallocQueue"), journal,
                                      f"{self.name}.prealloc_queue", tree_cache=self.hicache, scheduler=self.scheduler,
                                      token_to_kv_pool_allocator=self.hicache.token_to_kv_pool_allocator,
                                      token_to_kv_pool=self.hicache.token_to_kv_pool_allocator.get_kvcache())
            match = {"prefix_match": prealloc._match_prefix_and_lock(request.req)}
        request.entry = _dataclass(decode.DecodeRequest, req=request.req, kv_receiver=request.receiver,
                                   metadata_buffer_index=request.metadata_index, **match)
        self.queue.queue.append(request.entry)
        self.requests[rid] = request

    def prefill_infos(self) -> list[dict[str, Any]]:
        """The bootstrap infos of the scene's prefill ranks, as a receiver that learned them holds them."""
        return [{"rank_ip": p.endpoint[0], "rank_port": p.endpoint[1], "is_dummy": p.dummy()} for p in self.scene.prefill]

    def wait_in_prealloc(self, rid: str, learned: bool = False) -> None:
        """``rid`` entered the preallocation queue and waits there for its prefill's parallel info: its KV receiver
        is what the tree's constructor leaves (the room registered as bootstrapping; no ``init()`` yet, so no
        bootstrap infos and no publish time), and it holds no pages or metadata row yet. ``learned``: it learned its
        prefill ranks (its bootstrap infos) and waits for pages: its destinations are still unpublished."""
        journal, scene = self.scene.journal, self.scene
        receiver, own = self.receiver()
        decode = tree.module(DECODE)
        request = Request(rid=rid, pages=[], metadata_index=-1)
        bootstrap_addr = f"{tree.BOOTSTRAP_HOST}:{tree.BOOTSTRAP_PORT}"
        self.manager.addr_to_rooms_tracker[bootstrap_addr].add(ROOM)
        self.manager.prefill_response_tracker.setdefault(ROOM, set())
        self.manager.update_status(ROOM, tree.kv_poll().Bootstrapping)
        request.receiver = strict_subject(
            receiver, journal, f"{self.name}.kv_receiver.{rid}", **own,
            spies=("abort",), kv_mgr=self.manager, bootstrap_room=ROOM, conclude_state=None, abort_notified=False,
            init_time=None, bootstrap_addr=bootstrap_addr, _abort_generation=None,
            require_staging=False, **({"bootstrap_infos": self.prefill_infos()} if learned else {}),
            _connect_to_bootstrap_server=lambda info: (
                scene.wire.socket(journal, self.name, tcp((info["rank_ip"], info["rank_port"]))), threading.Lock()),
            invalidate_cached_bootstrap_infos=journal.method(f"{self.name}.kv_receiver.{rid}",
                                                             "invalidate_cached_bootstrap_infos"),
        )
        request.req = tree.make_req(rid, PAGES, "DECODE")
        self.scheduler.disagg_decode_prealloc_queue.queue.append(
            _dataclass(decode.DecodeRequest, req=request.req, kv_receiver=request.receiver))
        self.requests[rid] = request

    def publish(self, rid: str, deliver: bool = False) -> None:
        """The receiver sends its destinations to its prefill ranks: the tree's ``send_metadata`` (the
        prefill ranks reached took them in the scene's bootstrap; a send that fails, fails in the tree).
        ``deliver``: each message goes through its prefill rank's own bootstrap thread instead."""
        import numpy as np

        request = self.requests[rid]
        receiver = request.receiver
        receiver.init_time = None  # not yet published
        first = len(self.scene.wire.log)
        send = receiver.send_metadata
        wanted = {"kv_indices": np.array(request.pages, dtype=np.int32), "aux_index": request.metadata_index}
        try:
            send(**{k: v for k, v in wanted.items() if tree.accepts(send, k)})
        finally:  # also when a failed send escapes the tree's send_metadata: what went out is its metadata
            for message in self.scene.wire.log[first:]:
                message["kind"] = "metadata"
                if message["fate"] == "pending" and not deliver:
                    message["fate"] = "taken by the prefill rank's bootstrap"
        for message in self.scene.wire.log[first:] if deliver else ():
            if message["fate"] == "pending":
                self.scene.wire.deliver(message)

    def metadata_written(self, index: int) -> None:
        """The aux transfer landed: the metadata row names the room (what the decode metadata gate reads,
        in the trees whose rows carry it)."""
        if hasattr(self.metadata, "bootstrap_room"):
            self.metadata.bootstrap_room[index, 0] = ROOM

    def _commit(self, decode_req: Any) -> bool:
        """The committed request starts decoding: its attention reads every page it reserved. Answers as the
        tree's own commit answers a commit that went through (trees that read it: leave the queue)."""
        rid = decode_req.req.rid
        self.committed.append(rid)
        self.pool.read(rid, self.requests[rid].pages)
        return True

    def release(self, req: Any, cached: bool = False) -> None:
        """``release_kv_cache``: the request's pages go back to the allocator (the stand-in pool);
        ``cached``: the tree asked the prefix cache to keep their KV first. On a HiSparse decode it gives back the
        request's logical indices only (its KV is in host pages, which the coordinator frees): recorded."""
        if self.scene.shape.hisparse:
            self.logical_releases.append({"seq": self.scene.clock.tick(), "t": self.scene.clock.now, "rid": req.rid,
                                          "cached": cached})
            tree.drop_kv(req)
            return
        self.pool.free(req.rid, self.requests[req.rid].pages, "release_kv_cache", cached=cached)
        tree.drop_kv(req)

    def abort(self, rid: str) -> None:
        """A client abort of ``rid`` reaches this decode rank's scheduler: the tree's ``abort_request``."""
        cls = tree.resolve("sglang.srt.managers.io_struct.AbortReq")
        accepted = inspect.signature(cls).parameters
        self.scheduler.abort_request(cls(**{k: v for k, v in (("rid", rid), ("abort_all", False)) if k in accepted}))

    def step(self) -> None:
        """One pass of the decode event loop over the transfer queue: poll, then the deferred
        releases; then pages that are free go to the next request. A request handed over starts
        decoding (trees that commit inline, without ``_commit_transfer_to_req``, never called ours)."""
        for req in self.queue.pop_transferred() or ():
            self.handed.append(req.rid)  # what the tree hands its scheduler to decode: a request left out never runs
            if req.rid not in self.committed:
                self._commit(SimpleNamespace(req=req))
        if hasattr(self.queue, "resolve_deferred_releases"):
            self.queue.resolve_deferred_releases()
        if self.scene.reuse and self.next_pages is None and len(self.pool.free_list) >= PAGES:
            self.next_pages = self.pool.alloc(NEXT_RID, PAGES)

    def held(self) -> list[str]:
        return [entry[0].req.rid for entry in getattr(self.queue, "_deferred_releases", None) or ()]

    def effects(self) -> dict[str, JSON]:
        return {
            "rank": self.rank, **plain(self.pool.effects()),
            "requests": {rid: {"pages": r.pages, "metadata_index": r.metadata_index,
                               "notified": bool(getattr(r.receiver, "abort_notified", False)),
                               **({"receiver_aborted": len(self.scene.journal.calls(f"{self.name}.kv_receiver.{rid}",
                                                                                    "abort"))}
                                  if r.metadata_index < 0 else {})}
                         for rid, r in self.requests.items()},
            "next": self.next_pages, "committed": list(self.committed), "handed": list(self.handed),
            "held": self.held(),
            "metadata_frees": list(self.metadata_frees),
            # how the tree's HiCache restore of each request's cached prefix ended (PENDING, READY, FAILED)
            **({"hicache": {rid: str(getattr(r.entry.hicache_restore_status, "name", r.entry.hicache_restore_status))
                            for rid, r in self.requests.items() if r.entry is not None}}
               if self.hicache is not None else {}),
            "acks_noted": [e["args"] for e in self.scene.journal.calls(f"{self.name}.kv_manager", "note_abort_ack")],
            "streamed": [list(c) for c in self.streamed],
            **({"logical_releases": list(self.logical_releases)} if self.scene.shape.hisparse else {}),
        }


def state_result_tested() -> bool:
    """Whether the tree's transfer worker keeps the result of its state write (``x = self.maybe_send_extra(...)``)
    to test it; trees that call it as a statement never learn that it failed."""
    source = textwrap.dedent(inspect.getsource(tree.resolve(f"{MANAGER}.transfer_worker")))
    return any(isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and isinstance(node.value, ast.Call)
               and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "maybe_send_extra"
               for node in ast.walk(ast.parse(source)))


# a transfer backend's decode and prefill rank classes (``probes/nixl.py`` has NIXL's)
Ranks = tuple[type[DecodeRank], type[PrefillRank]]


class Scene:
    """The ranks, the wire, the clock; the case's script drives them."""

    commit_stand_in = True

    def metadata_flags(self) -> dict[str, Any]:
        return {}

    def aux(self, decode: "DecodeRank", index: int) -> None:
        """The aux transfer lands in decode's metadata row ``index``."""
        decode.metadata_written(index)

    def decode_queue_state(self, rank: "DecodeRank") -> dict[str, Any]:
        """What else a decode rank's transfer queue holds in this scene."""
        return {}

    def decode_scheduler_state(self, rank: "DecodeRank") -> dict[str, Any]:
        """What else a decode rank's scheduler holds in this scene."""
        journal = self.journal
        return {"disagg_decode_prealloc_queue": Double(journal, f"decode{rank.rank}.prealloc_queue", queue=[],
                                                       retracted_queue=[]),
                **(self.flush_state(rank) if self.shape.flush else {})}

    def flush_state(self, rank: "DecodeRank") -> dict[str, Any]:
        """What the tree's ``flush_cache`` and ``is_fully_idle`` read of a decode scheduler with nothing running (no
        batch, no waiting request, no other cache in use), and what a flush clears: the allocator's ``clear`` gives
        every page of the rank's pool back (the stand-in pool), the other pools only record theirs."""
        journal, name = self.journal, f"decode{rank.rank}"
        return {
            "running_batch": Double(journal, f"{name}.running_batch", reqs=[], is_empty=lambda: True),
            "dllm_manager": Double(journal, f"{name}.dllm_manager", any_staging_reqs=lambda: False),
            "enable_overlap": False, "result_queue": [], "_engine_paused": False, "decode_offload_manager": None,
            "enable_hierarchical_cache": False, "enable_lmcache": False, "draft_worker": None, "cur_batch_for_debug": None,
            "grammar_manager": Double(journal, f"{name}.grammar_manager", grammar_queue=[],
                                      recorded=("abort_requests", "clear")),
            "metrics_reporter": Double(journal, f"{name}.metrics_reporter", enable_metrics=False,
                                       is_stats_logging_rank=False, recorded=("reset_metrics",)),
            "tree_cache": Double(journal, f"{name}.tree_cache", recorded=("reset",),
                                 cache_finished_req=lambda req, *args, **flags: self._release(req, None, *args, **flags)),
            "req_to_token_pool": Double(journal, f"{name}.req_to_token_pool", recorded=("clear", "reset_aux_cache_allocator")),
            "token_to_kv_pool_allocator": Double(journal, f"{name}.token_to_kv_pool_allocator",
                                                 clear=lambda: rank.pool.clear("flush_cache")),
        }

    def flush(self) -> None:
        """A cache flush reaches every decode rank's scheduler: the tree's ``flush_cache`` (which clears the pools
        only when its ``is_fully_idle`` says nothing is in use)."""
        for d in self.decode:
            flushed = d.scheduler.flush_cache(empty_cache=False)
            self.note("flush", rank=d.rank, flushed=bool(flushed))

    def __init__(self, journal: Journal, shape: "Shape", ranks: "Ranks" = (DecodeRank, PrefillRank)) -> None:
        """``ranks``: the decode and prefill rank classes of the case's transfer backend (Mooncake's by default)."""
        self.journal, self.shape = journal, shape
        if shape.failure == "state-write-fails" and not state_result_tested():
            # the tree's worker drops the state write's result: a failed one is no failure of the transfer (the
            # room concludes Success), so the case's failure does not exist in it
            raise tree.Missing(f"{MANAGER}.transfer_worker: a test of maybe_send_extra's result")
        for name, value in CONFIGS.get(shape.config, {}).items():
            os.environ[name] = value
        self.clock = Clock()
        self.wire = Wire(self.clock)
        self.log = TreeLog(journal, self.clock)
        self.steps: list[dict[str, JSON]] = []
        decode_cls, prefill_cls = ranks
        decode_mod, conn, common, utils = (tree.module(n) for n in (DECODE, prefill_cls.conn, COMMON, UTILS))
        time_ = clocked_time(self.clock)
        for mod in (decode_mod, conn, common):
            if hasattr(mod, "time"):
                mod.time = time_
        # a case whose decode ranks must agree reduces over them (Group); the others reduce each rank's own
        self.group = Group(journal) if shape.group else None
        if self.group is not None:
            group_reduce([utils, decode_mod], journal, self.group)
        else:
            single_rank_reduce([utils, decode_mod], journal)
        self.keep_flag = keep_flag()
        decode_mod.release_kv_cache = self._release
        with role_env(shape.config, "decode"):
            self.decode = [decode_cls(self, d) for d in range(shape.decode_ranks)]
        with role_env(shape.config, "prefill"):
            self.prefill = [prefill_cls(self, p) for p in range(shape.prefill_ranks)]
        self.holds: dict[tuple[int, int], Callable[[], None]] = {}  # (prefill, decode) -> steps run while that write is in flight
        self.failing: dict[tuple[int, int], str] = {}  # (prefill, decode) -> "stops" | "keeps writing"
        self.late: list[Transfer] = []  # writes reported failed that are still landing
        self.late_writes: list[tuple[str, int, Callable[[], None]]] = []  # the same of aux and state writes: (what, rank, land)
        self.active = RID  # the request whose KV the prefill ranks write
        self.reached: int | None = None  # how many prefill ranks took the request's metadata (None: all)
        self.unlearned: set[int] = set()  # decode ranks that never learned their prefill ranks
        self.reuse = True  # free pages go to the next request as soon as a decode step sees them
        self.aux_failing: set[tuple[int, int]] = set()  # (prefill, decode) whose aux write the engine fails
        self.state_failing: set[int] = set()  # prefill ranks whose state write the engine fails
        self.peer_late: list[dict[str, Any]] = []  # acknowledgements to decode rank 1 held back past the timeout

    def start_request(self, rid: str, reached: int | None = None, published: bool = False,
                      pending: bool = False, unpublished: bool = False) -> None:
        """``rid`` takes the room: preallocated on every decode rank, bootstrapped on every prefill rank
        (on the first ``reached`` only: the others never took its metadata; 0: decode never learned
        its prefill ranks); ``published``: its destinations reach the prefill ranks as decode's own
        metadata messages, through their bootstrap threads.
        ``pending``: it still waits in decode's preallocation queue for its prefill's parallel info
        (nothing reserved, no prefill rank known). ``unpublished``: it waits there for pages, its prefill ranks known
        (nothing reserved, its destinations never published); each prefill rank holds its sender, bootstrapping."""
        self.active, self.reached = rid, reached
        self.unlearned = {1} if self.shape.failure in PEER_UNLEARNED else set()  # decode ranks without prefill ranks
        for d in self.decode:
            if pending or unpublished:
                d.wait_in_prealloc(rid, learned=unpublished)
            else:
                d.admit(rid)
        for p in self.prefill[: len(self.prefill) if reached is None else reached]:
            p.bootstrap(rid, published=published or unpublished)
        for d in self.decode if published else ():
            d.publish(rid, deliver=True)
        self.note("bootstrapped", rid=rid)

    def _release(self, req: Any, tree_cache: Any = None, *args: Any, **flags: Any) -> None:
        """The tree's ``release_kv_cache(req, tree_cache, <keep>)`` (or ``cache_finished_req``): which
        decode rank's request it was, and whether the call asked the prefix cache to keep the KV (the
        tree's own flag, ``is_insert`` or ``checkpoint``, its default where the call leaves it out)."""
        name, default = self.keep_flag
        cached = flags.get(name, args[0] if args else default)
        rank = next(d for d in self.decode if req.rid in d.requests and d.requests[req.rid].req is req)
        rank.release(req, cached=bool(cached))

    def write(self, prefill: PrefillRank, decode: DecodeRank, pages: list[int]) -> int:
        """The engine: the write begins; the steps held for it run while it is in flight; then it
        lands, or fails."""
        transfer = decode.pool.begin(self.active, prefill.rank, pages)
        hold = self.holds.pop((prefill.rank, decode.rank), None)
        if hold is not None:
            hold()
        failing = self.failing.get((prefill.rank, decode.rank))
        if failing == "stops":
            decode.pool.fail(transfer)
        elif failing == "keeps writing":  # the engine gave up waiting; the write itself goes on
            self.late.append(transfer)
        else:
            decode.pool.land(transfer)
            return 0
        return -1

    def land_late(self) -> None:
        """Writes reported failed that were still running land now (each noted: what it wrote, which prefill rank)."""
        for transfer in self.late:
            next(d for d in self.decode if transfer in d.pool.transfers).pool.land(transfer)
            self.note("failed write lands", write="kv", rank=transfer.rank)
        for what, rank, land in self.late_writes:
            land()
            self.note("failed write lands", write=what, rank=rank)
        self.late, self.late_writes = [], []

    def note(self, step: str, **fields: JSON) -> None:
        self.steps.append({"seq": self.clock.tick(), "t": self.clock.now, "step": step, **fields})

    def deliver(self, kind: str, fate: str = "delivered") -> None:
        messages = self.wire.pending(kind)
        if kind == "ABORT_ACK" and self.shape.peer_acks:  # decode rank 1's acknowledgements: late or lost
            peer = [m for m in messages if m["to"].endswith(f":{decode_endpoint(1)[1]}")]
            for message in peer:
                if self.shape.peer_acks == "lost":
                    self.wire.drop(message)
                else:
                    message["fate"] = "held back"
                    self.peer_late.append(message)
            if peer:
                self.note(f"ABORT_ACK to decode rank 1 {'lost' if self.shape.peer_acks == 'lost' else 'held back'}",
                          count=len(peer))
            messages = [m for m in messages if m not in peer]
        for message in messages:
            if fate == "lost":
                self.wire.drop(message)
            else:
                self.wire.deliver(message)
        if messages:
            self.note(f"{kind} {fate}", count=len(messages))

    def hold_back(self, kind: str) -> list[dict[str, Any]]:
        """Pending messages of ``kind`` that the case delivers later, in order."""
        held = self.wire.pending(kind)
        for message in held:
            message["fate"] = "held back"
        return held

    def deliver_held(self, held: list[dict[str, Any]]) -> None:
        for message in held:
            self.wire.deliver(message)
        if held:
            self.note("late messages delivered", count=len(held))

    def decode_steps(self) -> None:
        if self.group is not None:
            self.group.run([d.step for d in self.decode])
        for d in self.decode if self.group is None else ():
            d.step()
        self.note("decode steps")

    def advance(self, seconds: int) -> None:
        self.clock.advance(seconds)
        self.note("clock", seconds=seconds)

    def timeout(self) -> int:
        """The deferred-release timeout the tree configured, in whole seconds (30 where it has none,
        the first value trees gave it: the case still waits that long before its last step)."""
        value = getattr(self.decode[0].queue, "deferred_kv_release_timeout", None)
        return math.ceil(value) if isinstance(value, (int, float)) else 30

    def effects(self) -> dict[str, JSON]:
        return {
            "subject": RID,
            "config": {"name": self.shape.config, "env": dict(CONFIGS.get(self.shape.config, {})),
                       **({"roles": ROLE_ENV[self.shape.config]} if self.shape.config in ROLE_ENV else {}),
                       "prefill": [p.config for p in self.prefill], "decode": [d.config for d in self.decode]},
            "timeout": self.timeout(),
            "steps": list(self.steps),
            "wire": self.wire.effects(),
            "outstanding": [p.outstanding() for p in self.prefill],
            "decode": [d.effects() for d in self.decode],
            "log": list(self.log.records),
            # the rooms of other requests the case holds (what the tree's log names them by)
            **({"others": {NEIGHBOUR: NEIGHBOUR_ROOM}} if self.shape.neighbour else {}),
            **({"diverged": list(self.group.diverged)} if self.group is not None else {}),
        }


EARLIER = "req-A0"  # the request that held the room before RID (a stale acknowledgement's)
# failures where decode rank 1 never learned its prefill ranks (rank 0 did: it publishes, and with "-writing" prefill
# is writing rank 0's pages when rank 1's failure is seen)
PEER_UNLEARNED = ("peer-bootstrap-fails", "peer-bootstrap-fails-writing")


@dataclass(frozen=True)
class Shape:
    """The room's deployment and what happens to its transfer.

    ``failure``: ``decode-abort`` (a client abort at decode), ``prefill-failure`` (prefill rank 0's
    write fails; decode did not initiate it), ``metadata-send-fails`` (decode's metadata reached
    prefill rank 0, which writes, but its send to prefill rank 1 failed: decode marks the room failed
    itself), ``bootstrap-fails`` (decode never learned its prefill ranks: nothing can write its pages)
    or ``none`` (a healthy transfer). ``in_flight``: prefill
    rank 0's write to decode rank 0 is inside the engine while it happens (else nothing was sent
    yet). ``clears``: the prefill scheduler concludes the failed sender, clearing the room, before
    that write drains (with two decode ranks, between their two ABORTs). ``acks``: the drain
    acknowledgements are ``delivered``, ``lost``, ``late`` (after the timeout), or ``reset`` (their
    send fails at prefill). ``stale_ack``: the
    room's previous request was aborted and its acknowledgement, held back on the wire, arrives
    while this request's write is in flight. ``failed_write``: the failed write ``stops``, or
    ``keeps writing`` (the engine reported failure while the write still runs; it lands later): a KV write, or the
    aux or state write of ``aux-write-fails`` and ``state-write-fails``.
    ``late_conclusion``: the prefill scheduler concludes the failed sender only after decode's release
    timeout (busy with a long batch), so only the worker's and the ABORT handler's own acknowledgements
    can release the pages in time. ``chunk`` (a decode abort with nothing in flight): ``queued`` (the
    request's last chunk waits in prefill's transfer queue, not yet taken by the worker, when the abort
    arrives: the worker takes it after, or after the scheduler cleared the room with ``clears``), ``taken``
    (the abort arrives as the worker, having taken the chunk, first tests its room in ``request_status``) or
    ``landed`` (prefill's write landed and the room succeeded before the abort; the success status is
    still on its way to decode), else ``""`` (nothing sent yet). ``wire_bootstrap``: decode's destinations
    reach prefill as its receiver's own metadata messages (``send_metadata``), taken in by each prefill
    rank's bootstrap thread, instead of being handed to prefill by the scene. ``publish``: decode's destinations
    reached ``all`` prefill ranks, or (``partial``) only rank 0: decode's send to rank 1 failed (a
    connection reset) before the failure (a ``decode-abort``: the client's abort reaches decode after
    that, while rank 0's write is in flight). ``peer-bootstrap-fails``: of two decode ranks, rank 1 never
    learned its prefill ranks while rank 0 published to them (no prefill rank knows rank 1's pages;
    nothing is written); ``peer-bootstrap-fails-writing``: the same, seen while prefill's write into rank 0's pages
    is in flight. ``group``: the decode ranks' all-reduces reduce over every rank, as the
    server's (``Group``), not each rank's own values.
    ``chunks``: the request's KV goes in that many chunks (with two, the
    first half lands and decode polls the room before the last chunk is sent). ``layout``: the prefill ranks
    are ``tp`` ranks (each writes every page), ``mla`` (an MLA model: decode reads rank 0, rank 1 gets a dummy
    destination), or ``cp`` (context-parallel ranks, decode pulling from both; only CP rank 0 sends the
    replicated state). ``state``: a hybrid model,
    whose last chunk also carries its Mamba state slot (written after the KV, before the aux). ``peer_acks``:
    the drain acknowledgements to decode rank 1 alone arrive ``late`` (after the release timeout) or are ``lost``
    (the others are delivered): the ranks' own readings of the room's readiness differ. ``flush``: a cache flush
    (the scheduler's own ``flush_cache``) reaches every decode rank ``held`` (while the aborted request's pages are
    held for a write in flight) or ``idle`` (after everything was released). More
    ``failure`` values: ``aux-write-fails`` (prefill rank 0's KV lands, its aux write fails),
    ``state-write-fails`` (its KV lands, the state write fails), ``aborted-then-write-fails`` (decode
    aborts the request twice, the client's disconnect and its explicit abort, while prefill rank 0's
    write is in flight; that write then fails). ``hisparse``: a HiSparse decode (``--enable-hisparse``): the
    transfer's destination is each decode rank's HiSparse host pool (the pages decode hands prefill are host pages,
    recorded in the coordinator's ``req_to_host_pool`` as its preallocation does), which the tree's own
    ``HiSparseCoordinator.request_finished`` frees; ``release_kv_cache`` gives back only the logical indices.
    ``neighbour``: another request on the same decode ranks, in its own room, was aborted just before this one
    started and its ABORT lost on the wire: decode holds its pages to the release timeout, ahead of this request
    in the deferred releases (a release due on this request's acknowledgements must not wait for it).
    ``backend``: the transfer backend whose KV managers, sender and receiver run (``mooncake``, or ``nixl``: its
    writes NIXL agent transfers, one prefill and one decode rank, the KV of an MLA model). ``write_fails``: prefill
    rank 0's write into decode rank 0, in flight at a decode abort, then fails as ``failed_write`` says.
    ``unpublished`` (a decode abort with nothing sent): the request still waits in decode's preallocation queue for
    pages, its receiver knowing its prefill ranks but never having published its destinations (its ABORT unarmed);
    the prefill ranks hold its sender, bootstrapping, and never send a chunk.
    """

    config: str = "default"
    decode_ranks: int = 1
    prefill_ranks: int = 1
    failure: str = "decode-abort"
    in_flight: bool = True
    clears: bool = False
    acks: str = "delivered"
    stale_ack: bool = False
    failed_write: str = "stops"
    late_conclusion: bool = False
    chunk: str = ""
    publish: str = "all"
    group: bool = False
    wire_bootstrap: bool = False
    chunks: int = 1
    state: bool = False
    layout: str = "tp"
    hisparse: bool = False
    peer_acks: str = ""
    flush: str = ""
    neighbour: bool = False
    backend: str = "mooncake"
    write_fails: bool = False
    unpublished: bool = False


def script(scene: Scene) -> None:
    """The case's interleaving, step by step (see ``Shape``)."""
    shape = scene.shape
    stale: list[dict[str, Any]] = []
    if shape.neighbour:  # held for the timeout (nobody will acknowledge it) before the request takes its room
        scene.reuse = False
        for d in scene.decode:
            d.admit(NEIGHBOUR, room=NEIGHBOUR_ROOM, row=2)
            d.abort(NEIGHBOUR)
        for message in scene.wire.pending("ABORT"):
            scene.wire.drop(message)
        scene.note("decode aborts; its ABORT lost", rid=NEIGHBOUR)
        scene.decode_steps()
        scene.reuse = True
    if shape.stale_ack:
        scene.reuse = False
        scene.start_request(EARLIER)
        for d in scene.decode:
            d.abort(EARLIER)
        scene.note("decode aborts", rid=EARLIER)
        scene.deliver("ABORT")
        stale = scene.hold_back("ABORT_ACK")
        scene.decode_steps()
        scene.advance(scene.timeout() + 1)
        scene.decode_steps()
        for p in scene.prefill:
            p.poll_and_clear(EARLIER)
        scene.reuse = True
    scene.start_request(RID, reached=1 if shape.publish == "partial" else
                        {"metadata-send-fails": 1, "bootstrap-fails": 0, "aborted-before-init": 0}.get(shape.failure),
                        published=shape.wire_bootstrap, pending=shape.failure == "aborted-before-init",
                        unpublished=shape.unpublished)

    def metadata_send_fails() -> None:  # decode's send of its destinations to prefill rank 1 fails; rank 0 took them
        scene.wire.resets[tcp(prefill_endpoint(1))] = None
        for d in scene.decode:
            d.publish(RID)
        scene.note("decode's metadata send to prefill rank 1 failed")

    if shape.publish == "partial":
        metadata_send_fails()
    if shape.acks == "reset":  # each drain acknowledgement's send fails at prefill: it never leaves
        for d in scene.decode:
            scene.wire.resets[tcp(d.endpoint)] = b"ABORT_ACK"

    def aborts() -> None:
        for d in scene.decode:
            d.abort(RID)
            scene.note("decode aborts", rank=d.rank, rid=RID)
            scene.deliver("ABORT")
            if shape.clears:
                for p in scene.prefill:
                    p.poll_and_clear(RID)
        scene.deliver_held(stale)
        scene.decode_steps()
        scene.deliver("ABORT")
        if shape.flush == "held":  # the pages are held for the write still in flight: a flush must not clear them
            scene.flush()
            scene.decode_steps()

    def prefill_rank_fails() -> None:
        scene.prefill[0].work()
        scene.note("prefill rank 0 write failed")
        scene.deliver("status")
        scene.decode_steps()
        scene.deliver("ABORT")
        scene.deliver("ABORT_ACK")
        scene.decode_steps()
        scene.deliver("ABORT")

    def restore_fails() -> None:  # decode's event loop runs its HiCache restore: the load-back comes up short
        scene.decode_steps()
        scene.note("decode's HiCache restore ran", status=[d.effects().get("hicache", {}).get(RID) for d in scene.decode])
        scene.deliver("ABORT")

    def decode_learns_failure() -> None:
        scene.decode_steps()
        scene.deliver("ABORT")

    def bootstrap_fails(who: str) -> None:
        for d in scene.decode:
            d.publish(RID)
        scene.note(f"{who} could not learn its prefill ranks")
        scene.decode_steps()

    def peer_fails() -> None:
        bootstrap_fails("decode rank 1")
        scene.deliver("ABORT")

    def write_holding(step: Callable[[], None]) -> None:
        """Every prefill rank sends its last chunk and writes it; ``step`` runs while rank 0's write into decode
        rank 0 is in flight."""
        for p in scene.prefill:
            p.send_last_chunk()
        scene.holds[(0, 0)] = step
        for p in scene.prefill:
            p.work()

    if shape.failure == HICACHE:
        write_holding(restore_fails)
    elif shape.failure == "none":
        for p in scene.prefill:
            p.send_last_chunk()
            p.work()
    elif shape.failure == "metadata-send-fails":
        metadata_send_fails()
        write_holding(decode_learns_failure)
    elif shape.failure == "bootstrap-fails":
        bootstrap_fails("decode")
    elif shape.failure == "peer-bootstrap-fails":
        peer_fails()
    elif shape.failure == "peer-bootstrap-fails-writing":  # as above, while prefill writes decode rank 0's pages
        write_holding(peer_fails)
    elif shape.failure == "prefill-failure":
        start = 0
        if shape.chunks > 1:  # the first half lands; decode's event loop polls the room meanwhile
            start = PAGES // 2
            for p in scene.prefill:
                p.send_chunk(0, start, last=False)
                p.work()
            scene.note("first chunk written")
            scene.deliver("status")
            scene.decode_steps()
        scene.failing[(0, 0)] = shape.failed_write
        for p in scene.prefill:
            p.send_last_chunk(start)
        if shape.layout == "mla":  # the dummy rank's worker takes its chunk first: it writes nothing
            scene.prefill[1].work()
            scene.note("prefill rank 1 (dummy destination) done")
            prefill_rank_fails()
        elif shape.in_flight and len(scene.prefill) > 1:
            scene.holds[(1, 0)] = prefill_rank_fails
            scene.prefill[1].work()
        else:
            prefill_rank_fails()
    elif shape.failure in ("aux-write-fails", "state-write-fails"):
        if shape.failure == "aux-write-fails":
            scene.aux_failing.add((0, 0))
        else:
            scene.state_failing.add(0)
        for p in scene.prefill:
            p.send_last_chunk()
            p.work()
        scene.note(f"prefill rank 0 {shape.failure.removesuffix('-fails')} failed")
        scene.deliver("status")
        scene.decode_steps()
        scene.deliver("ABORT")
    elif shape.failure == "aborted-before-init":  # the client's abort reaches the preallocation queue
        for d in scene.decode:
            d.abort(RID)
            scene.note("decode aborts", rank=d.rank, rid=RID)
        scene.deliver("ABORT")
    elif shape.failure == "aborted-then-write-fails":
        def aborted_twice() -> None:
            for d in scene.decode:
                for _ in range(2):
                    d.abort(RID)
                    scene.note("decode aborts", rank=d.rank, rid=RID)
            scene.deliver("ABORT")

        scene.failing[(0, 0)] = shape.failed_write
        for p in scene.prefill:
            p.send_last_chunk()
        scene.holds[(0, 0)] = aborted_twice
        scene.prefill[0].work()
        scene.note("prefill rank 0 write failed")
        scene.deliver("status")
        scene.deliver("ABORT_ACK")
        scene.decode_steps()
        scene.deliver("ABORT")
    elif shape.in_flight:
        if shape.write_fails:
            scene.failing[(0, 0)] = shape.failed_write
        write_holding(aborts)
    elif shape.chunk:
        for p in scene.prefill:  # the last chunk is queued; with "landed" the worker writes it before the abort
            p.send_last_chunk()
            if shape.chunk == "landed":
                p.work()
        if shape.chunk == "taken":  # the abort arrives as rank 0's worker, the chunk taken and counted, checks its room
            scene.prefill[0].status.hold = aborts
        else:
            aborts()
        for p in scene.prefill:  # the worker takes what is queued only now: a chunk of an aborted room writes nothing
            p.work()
    else:
        aborts()
        # the forward finishes after the abort: its chunk must be refused, nothing written (a sender still
        # bootstrapping, its destinations unpublished, is never sent to)
        for p in scene.prefill if not shape.unpublished else ():
            p.send_last_chunk()
            p.work()
    scene.land_late()
    scene.note("writes done")
    for p in scene.prefill:
        p.work()
    scene.deliver("status")
    late = []
    if shape.acks == "late":
        late = scene.hold_back("ABORT_ACK")
    else:
        scene.deliver("ABORT_ACK", fate="lost" if shape.acks == "lost" else "delivered")
    scene.decode_steps()
    if not shape.late_conclusion:
        for p in scene.prefill:
            p.poll_and_clear(RID)
    scene.deliver("ABORT_ACK", fate="lost" if shape.acks == "lost" else "delivered")
    scene.decode_steps()
    scene.advance(scene.timeout() + 1)
    scene.decode_steps()
    if shape.late_conclusion:  # a prefill scheduler busy past decode's timeout concludes the sender only now
        for p in scene.prefill:
            p.poll_and_clear(RID)
        scene.deliver("ABORT_ACK")
        scene.decode_steps()
    if late:
        late += scene.hold_back("ABORT_ACK")
        scene.deliver_held(late)
        scene.decode_steps()
    if scene.peer_late:
        scene.deliver_held(scene.peer_late)
        scene.decode_steps()
    if shape.flush == "idle":  # everything went back: a flush clears the pool
        scene.flush()


class LifetimeScene:
    def __init__(self, journal: Journal, shape: Shape, ranks: "Ranks") -> None:
        self.scene = Scene(journal, shape, ranks)

    def drive(self) -> None:
        try:
            script(self.scene)
        except Diverged:  # the ranks' collectives differ: a server hangs there; what happened so far is observed
            self.scene.note("decode ranks diverged")

    def effects(self) -> dict[str, JSON]:
        return self.scene.effects()


# --- cases ---------------------------------------------------------------------------------------

# What every lifetime case drives: the scene cannot be set without them (the defences' own names never
# belong here: a tree without a defence must still run its cases and show the bug), besides its backend's own
# (``PrefillRank.requires``, ``DecodeRank.requires``).
REQUIRES = (
    f"{QUEUE}.pop_transferred",
    # the commit of a completed transfer as a step of its own (trees that commit inline, 0.5.5 and
    # earlier, check the committed request against model state this scene does not build)
    f"{QUEUE}._commit_transfer_to_req",
    f"{SCHEDULER}.abort_request",
)


def space_cases(table: Any, shape_of: Callable[[Mapping[str, str]], Shape], uses: tuple[Any, ...] = (),
                backends: Mapping[str, Ranks] | None = None) -> tuple[Case, ...]:
    """Every reachable point of a lifetime probe's case space (``table``: its ``probes/duties_N.py``; ``uses``: the
    other tables whose rows its rules name) as a case: its site is the configuration it runs under, its duties
    the space's. ``backends``: the rank classes of each transfer backend its shapes name besides Mooncake's."""
    def ranks(shape: Shape) -> Ranks:
        return {**(backends or {}), "mooncake": (DecodeRank, PrefillRank)}[shape.backend]

    def requires(shape: Shape) -> tuple[str, ...]:
        # run the tree's send_metadata
        publishes = (shape.failure in ("metadata-send-fails", "bootstrap-fails", *PEER_UNLEARNED)
                     or shape.publish == "partial" or shape.wire_bootstrap)
        hicache = (f"{DECODE}.DecodeTransferQueue._try_hicache_queue_load_back", f"{DECODE}.DecodePreallocQueue._match_prefix_and_lock",
                   f"{UNIFIED}.init_hicache", "sglang.srt.mem_cache.l2_transfer.TransferCompletion",
                   "sglang.srt.mem_cache.pool_host.common._cuda_host_register")
        decode_cls, prefill_cls = ranks(shape)
        return (prefill_cls.requires + decode_cls.requires + REQUIRES
                + ((f"{MOONCAKE}.MooncakeKVReceiver.send_metadata",) if publishes else ())
                + (hicache if shape.failure == HICACHE else ())
                + ((STATE_TYPE, f"{MANAGER}.maybe_send_extra") if shape.state else ())
                + ((f"{HISPARSE}.request_finished",) if shape.hisparse else ())
                + ((f"{SCHEDULER}.flush_cache",) if shape.flush else ()))

    return tuple(Case.of(table, point, lambda journal, shape=shape_of(point): LifetimeScene(journal, shape, ranks(shape)),
                         requires(shape_of(point)), uses)
                 for point in table.SPACE.points())
