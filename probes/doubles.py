"""Strict recording doubles for SGLang's collaborators.

A double answers only for the members it was built with and records every call into a
:class:`Journal`. Anything else raises :class:`DoubleGap` *and* is noted in the journal, so a gap
is reported as a harness gap (``where: "double"``) even when SGLang code swallows the exception.
This is deliberate: the published pre-fix "failures" were AttributeErrors from a permissive stub,
and a gap in our model must never pass for a behaviour of the tree.

Every modelled method runs inside a recording wrapper from this module, so a call with arguments
the model does not expect fails in a frame of this file (a gap), never in SGLang's frame.

A double never supplies behaviour the tree lacks: an instance of a real SGLang class
(:func:`strict_subject`) or a double tied to one (``spec``) only records and replaces methods
that class has. Asking it for a member the class neither has nor ever assigns is what Python
would answer, an AttributeError (:class:`Absent`), and a read by name (``getattr`` with a default,
``hasattr``) of a member the double does not model answers as Python would for an object without
it; both are noted in the journal.
"""

from __future__ import annotations

import contextlib
import dis
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FunctionType
from typing import Any

from .plain import JSON, plain


class DoubleGap(Exception):
    """A double was asked for something it does not model: a harness gap, never a behaviour.

    ``asked_at`` is the frame that asked (file, line, function), outside this module.
    """

    def __init__(self, message: str, asked_at: tuple[str, int, str] | None) -> None:
        super().__init__(message)
        self.asked_at = asked_at


class Absent(AttributeError):
    """What Python raises for a member the object does not have.

    ``tree_lacks``: the tree's own class has no such member and never assigns it, so in
    production the same AttributeError escapes: a behaviour of the tree, not a gap of ours.
    """

    def __init__(self, message: str, tree_lacks: bool) -> None:
        super().__init__(message)
        self.tree_lacks = tree_lacks


class Journal:
    """What the doubles saw during one case, in order, as deterministic JSON.

    ``scripted`` holds the failures a case told a double to raise: if one escapes, it is the
    tree's handling of it that failed, so it is attributed to the frame that called the double.
    """

    def __init__(self) -> None:
        self.live = False  # set-up calls are not effects; the case runner opens the journal
        self.entries: list[dict[str, JSON]] = []
        self.gaps: list[DoubleGap] = []
        self.absent: list[str] = []  # members asked for that the object does not have (see Absent)
        self.scripted: list[BaseException] = []
        self._counts: dict[str, int] = {}

    def gap(self, what: str) -> DoubleGap:
        """Note a gap and return the exception to raise (the tree may swallow it; the note stays)."""
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename == __file__:
            frame = frame.f_back
        asked_at = None if frame is None else (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        self.gaps.append(DoubleGap(f"the double does not model {what}", asked_at))
        return self.gaps[-1]

    def lacking(self, what: str, tree_lacks: bool) -> Absent:
        """Note a member the object does not have and return the AttributeError to raise."""
        why = "the tree's class has no such member" if tree_lacks else "read by name; the double does not model it"
        self.absent.append(f"{what}: {why}")
        return Absent(f"{what}: {why}", tree_lacks)

    def record(self, actor: str, call: str, args: tuple = (), kwargs: dict | None = None) -> None:
        if self.live:
            self.entries.append(
                {"actor": actor, "call": call, "args": plain(list(args)), "kwargs": plain(kwargs or {})}
            )

    def calls(self, actor: str, call: str | None = None) -> list[dict[str, JSON]]:
        return [e for e in self.entries if e["actor"] == actor and call in (None, e["call"])]

    def next_name(self, stem: str) -> str:
        """Deterministic names for objects SGLang creates (``kv_sender#1``, ...)."""
        self._counts[stem] = self._counts.get(stem, 0) + 1
        return f"{stem}#{self._counts[stem]}"

    def method(
        self,
        actor: str,
        call: str,
        effect: Callable[..., Any] | None = None,
        raises: BaseException | None = None,
    ) -> Callable[..., Any]:
        """A recorded method: ``effect`` (same arguments) supplies its result, ``raises`` a
        scripted failure."""
        if raises is not None:
            self.scripted.append(raises)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.record(actor, call, args, kwargs)
            if raises is not None:
                raise raises
            return effect(*args, **kwargs) if effect is not None else None

        recorded.__name__ = call
        recorded.recorded = True  # type: ignore[attr-defined]
        return recorded


class Double:
    """Members are declared at construction; every other attribute raises :class:`DoubleGap`.

    ``recorded`` names methods that only record their call (and return None). In ``members``,
    plain functions become recorded methods; anything else is a plain attribute value. With
    ``spec`` (the real class the double stands for) a method the class lacks is left out.
    """

    _spec: type | None = None

    def __init__(
        self, journal: Journal, name: str, recorded: tuple[str, ...] = (), spec: type | None = None, **members: Any
    ) -> None:
        object.__setattr__(self, "_journal", journal)
        object.__setattr__(self, "_name", name)
        if spec is not None:
            object.__setattr__(self, "_spec", spec)
        for call in recorded:
            if spec is None or hasattr(spec, call):
                object.__setattr__(self, call, journal.method(name, call))
        for key, value in members.items():
            if isinstance(value, FunctionType):
                if spec is not None and not hasattr(spec, key) and not ever_assigned(spec, key):
                    continue  # never a method the tree's class does not have
                if not getattr(value, "recorded", False):
                    value = journal.method(name, key, value)
            object.__setattr__(self, key, value)

    def double_name(self) -> str:
        return self._name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)  # keep Python's own protocols working
        what = f"{self._name}.{attr}"
        if self._spec is not None and not ever_assigned(self._spec, attr):
            raise self._journal.lacking(what, tree_lacks=True)
        if _read_by_name(sys._getframe(1)):
            raise self._journal.lacking(what, tree_lacks=False)
        raise self._journal.gap(what)

    def __repr__(self) -> str:
        return f"<double {self._name}>"


_DIRECT_READS = {op for name, op in dis.opmap.items() if name.startswith("LOAD_") and ("ATTR" in name or "METHOD" in name)}


def _read_by_name(frame: Any) -> bool:
    """Whether the frame asks through ``getattr``/``hasattr`` (a call), not ``obj.attr``."""
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] not in _DIRECT_READS


_ASSIGNED = re.compile(r"\bself\.(\w+)\s*(?::[^=\n]*)?=(?!=)|setattr\(\s*self\s*,\s*[\"'](\w+)[\"']")
_DYNAMIC = re.compile(r"setattr\(\s*self\s*,\s*[^\"'\s]")


@dataclass
class _Source:
    """One module's source, with what it assigns to ``self`` by name read once."""

    text: str
    assigned: frozenset[str]  # ``self.<attr> = ...`` and ``setattr(self, "<attr>", ...)``
    dynamic: bool  # a ``setattr(self, <variable>, ...)``: any name it spells as a string may be set

    @classmethod
    def read(cls, path: str) -> "_Source":
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        return cls(text, frozenset(a or b for a, b in _ASSIGNED.findall(text)), bool(_DYNAMIC.search(text)))


_SOURCES: dict[str, _Source] = {}


def ever_assigned(cls: type, attr: str) -> bool:
    """Whether any module defining a class of ``cls``'s MRO assigns ``self.<attr>`` (or sets it
    by name): then a real instance may hold it and its absence here is a gap of our model."""
    for source in _mro_sources(cls):
        if source is None:
            return True  # no source to read: assume it could be set
        if attr in source.assigned or (source.dynamic and re.search(rf"[\"']{re.escape(attr)}[\"']", source.text)):
            return True
    return False


def _mro_sources(cls: type) -> Iterator[_Source | None]:
    """The source of each module defining a class of ``cls``'s MRO (None where there is none to read)."""
    for klass in cls.__mro__:
        if klass is object or klass.__module__ == __name__:
            continue
        module = sys.modules.get(klass.__module__)
        try:
            path = inspect.getsourcefile(module) if module is not None else None
        except TypeError:
            path = None
        if path is None:
            yield None
            continue
        if path not in _SOURCES:
            _SOURCES[path] = _Source.read(path)
        yield _SOURCES[path]


def read_sources(*classes: type) -> None:
    """Read once what :func:`ever_assigned` reads of these classes (in the harness's parent, so every case
    inherits it)."""
    for cls in classes:
        for _ in _mro_sources(cls):
            pass


def strict_subject(cls: type, journal: Journal, name: str, spies: tuple[str, ...] = (), **state: Any) -> Any:
    """An instance of a real SGLang class built without its ``__init__``.

    Its methods are SGLang's own; its attributes are exactly ``state``. A function in ``state``
    replaces a method by a recorded one only where the class has that method; ``spies`` records
    calls into the class's own methods and runs them. Reading an attribute we did not set is a gap
    in our model of the object, unless the class neither has nor ever assigns it (then it is
    :class:`Absent`, as in production).
    """
    subject_cls = type(cls.__name__, (Double, cls), {"__module__": __name__})
    for spy in spies:
        own = getattr(cls, spy, None)
        if callable(own):
            setattr(subject_cls, spy, _spy(journal, name, spy, own))
    subject = object.__new__(subject_cls)
    Double.__init__(subject, journal, name, spec=cls, **state)
    return subject


def _spy(journal: Journal, actor: str, call: str, own: Callable[..., Any]) -> Callable[..., Any]:
    def spied(self: Any, *args: Any, **kwargs: Any) -> Any:
        journal.record(actor, call, args, kwargs)
        return own(self, *args, **kwargs)

    spied.__name__ = call
    return spied


class KVTransport:
    """Stands in for ``get_kv_class``: hands out recording KV senders and receivers.

    ``constructed`` lists what SGLang built, with backend and constructor arguments; each
    endpoint models and records ``init``, ``send``, ``abort`` and ``poll``.
    Asking for any other transport class (manager, args, bootstrap server) is a gap.
    """

    def __init__(self, journal: Journal, poll_state: Any, abort_error: BaseException | None = None) -> None:
        self.journal = journal
        self.poll_state = poll_state
        self.abort_error = abort_error
        self.constructed: list[dict[str, JSON]] = []
        self.get_kv_class = journal.method("transport", "get_kv_class", self._lookup)

    def _lookup(self, backend: Any, class_type: Any) -> Callable[..., Double]:
        role = str(getattr(class_type, "name", class_type)).lower()
        if role not in ("sender", "receiver"):
            raise self.journal.gap(f"get_kv_class({plain(class_type)})")

        def construct(*args: Any, **kwargs: Any) -> Double:
            return self.endpoint(role, backend, args, kwargs)

        return construct

    def endpoint(self, role: str, backend: Any, args: tuple = (), kwargs: dict | None = None) -> Double:
        name = self.journal.next_name(f"kv_{role}")
        if self.journal.live:
            self.constructed.append(
                {
                    "name": name,
                    "backend": plain(backend),
                    "args": plain(list(args)),
                    "kwargs": plain(kwargs or {}),
                }
            )
        return Double(
            self.journal,
            name,
            recorded=("init", "send"),
            poll=lambda: self.poll_state,
            abort=self.journal.method(name, "abort", raises=self.abort_error),
        )


def output_streamer(journal: Journal) -> tuple[Double, list[list[dict[str, JSON]]]]:
    """The scheduler's output streamer: records each call with every request as its client
    receives it at that moment (rid and finish reason) and, where the call says it, whether the
    stream carries logprobs (``return_logprob``, its first argument after the requests)."""
    streamed: list[list[dict[str, JSON]]] = []

    def stream_output(reqs: Any, *args: Any, **kwargs: Any) -> None:
        if journal.live:
            flag = {"return_logprob": plain(args[0] if args else kwargs["return_logprob"])} if (
                args or "return_logprob" in kwargs) else {}
            streamed.append([{"rid": req.rid, "finished_reason": plain(req.finished_reason), **flag} for req in reqs])

    return Double(journal, "output_streamer", stream_output=stream_output), streamed


def same_signature(own: Callable[..., Any], around: Callable[[Callable[[], Any], Any], Any]) -> Callable[..., Any]:
    """A function with exactly ``own``'s parameters that runs ``around(call, first_argument)``, ``call``
    running ``own`` with the arguments given. A call ``own`` would refuse (a missing or unexpected argument)
    is refused before any frame of ours runs, so the TypeError is the caller's, as in production: the
    tree's own code raised, never the harness."""
    sig = inspect.signature(own)
    defaults = {p.name: p.default for p in sig.parameters.values() if p.default is not p.empty}
    params, call, starred = [], [], False
    kinds = [p.kind for p in sig.parameters.values()]
    for n, p in enumerate(sig.parameters.values()):
        text = p.name + (f"=_defaults[{p.name!r}]" if p.name in defaults else "")
        if p.kind is p.VAR_POSITIONAL:
            text, starred = "*" + p.name, True
            call.append("*" + p.name)
        elif p.kind is p.VAR_KEYWORD:
            text = "**" + p.name
            call.append("**" + p.name)
        elif p.kind is p.KEYWORD_ONLY:
            if not starred:
                params.append("*")
                starred = True
            call.append(f"{p.name}={p.name}")
        else:
            call.append(p.name)
        params.append(text)
        if p.kind is p.POSITIONAL_ONLY and (n + 1 == len(kinds) or kinds[n + 1] is not p.POSITIONAL_ONLY):
            params.append("/")
    first = next(iter(sig.parameters), None)
    source = (f"def {own.__name__}({', '.join(params)}):\n"
              f"    return _around(lambda: _own({', '.join(call)}), {first or 'None'})\n")
    namespace: dict[str, Any] = {"_around": around, "_own": own, "_defaults": defaults}
    exec(compile(source, f"<same signature as {own.__name__}>", "exec"), namespace)  # noqa: S102
    return namespace[own.__name__]



class Device:
    """The accelerator's streams and events as the tree's code sees them (``torch.cuda``'s ``Stream``, ``Event``,
    ``stream()``, ``current_stream()``, ``synchronize()``), which CPU torch lacks.

    Work on a stream is ordered only by what the tree asked for: a stream's ``wait_stream``/``wait_event``, an event's
    ``record``/``wait``, a host ``synchronize``. Work the scene ``launch``-es (a forward pass in flight) lands at the
    latest point that ordering allows: just before work is ``issue``-d on a stream made to wait for it (a DMA copy,
    which runs at once), when the host synchronizes on it, else when the scene ends the step (``drain``). Every call
    and landing is logged in order (``log``); the double adds no ordering of its own."""

    class _Stream:
        def __init__(self, device: "Device", name: str) -> None:
            self.device, self.name = device, name
            self.after: set[int] = set()  # the ops this stream's next work is ordered after
            self.ops: set[int] = set()  # the ops issued or launched on it

        def frontier(self) -> set[int]:
            return self.after | self.ops

        def wait_stream(self, other: "Device._Stream") -> None:
            self.after |= other.frontier()
            self.device.note("wait_stream", stream=self.name, on=other.name)

        def wait_event(self, event: "Device._Event") -> None:
            self.after |= event.after
            self.device.note("wait_event", stream=self.name, name=event.name)

        def record_event(self, event: "Device._Event | None" = None) -> "Device._Event":
            event = event or self.device.Event()
            event.record(self)
            return event

        def synchronize(self) -> None:
            self.device.note("stream synchronize", stream=self.name)
            self.device.land(self.frontier())

        def query(self) -> bool:
            return not (self.frontier() & set(self.device.pending))

        def __repr__(self) -> str:
            return f"<stream {self.name}>"

    class _Event:
        def __init__(self, device: "Device", name: str) -> None:
            self.device, self.name = device, name
            self.after: set[int] = set()

        def record(self, stream: "Device._Stream | None" = None) -> None:
            stream = stream or self.device.current
            self.after = stream.frontier()
            self.device.note("record", name=self.name, stream=stream.name)

        def wait(self, stream: "Device._Stream | None" = None) -> None:
            (stream or self.device.current).wait_event(self)

        def synchronize(self) -> None:
            self.device.note("event synchronize", name=self.name)
            self.device.land(self.after)

        def query(self) -> bool:
            return not (self.after & set(self.device.pending))

        def elapsed_time(self, other: Any) -> float:
            return 0.0

    def __init__(self) -> None:
        self.log: list[dict[str, JSON]] = []
        self.pending: dict[int, tuple[str, list[int], Callable[[], None]]] = {}  # op -> (label, slots, its effect)
        self.counts: dict[str, int] = {}
        self.default = Device._Stream(self, "default")
        self.current = self.default

    def _name(self, stem: str) -> str:
        self.counts[stem] = self.counts.get(stem, 0) + 1
        return f"{stem}#{self.counts[stem]}"

    def note(self, what: str, **fields: JSON) -> None:
        self.log.append({"seq": len(self.log) + 1, "event": what, **fields})

    # what the tree's code calls (torch.cuda's names)
    def Stream(self, *args: Any, **kwargs: Any) -> "Device._Stream":  # noqa: N802 - torch's name
        return self.stream_named(self._name("stream"))

    def Event(self, *args: Any, **kwargs: Any) -> "Device._Event":  # noqa: N802 - torch's name
        return Device._Event(self, self._name("event"))

    def stream_named(self, name: str) -> "Device._Stream":
        return Device._Stream(self, name)

    def current_stream(self, *args: Any) -> "Device._Stream":
        return self.current

    def set_stream(self, stream: "Device._Stream") -> None:
        self.current = stream

    @contextlib.contextmanager
    def stream(self, stream: "Device._Stream | None") -> Iterator[None]:
        saved = self.current
        self.current = stream or saved
        try:
            yield
        finally:
            self.current = saved

    StreamContext = stream

    def synchronize(self, *args: Any) -> None:
        self.note("device synchronize")
        self.land(set(self.pending))

    # what the scene and the transport stand-ins do
    def launch(self, stream: "Device._Stream", label: str, slots: list[int], effect: Callable[[], None]) -> int:
        """Work enqueued on ``stream`` that has not run yet (a forward pass in flight)."""
        op = len(self.log) + 1
        self.pending[op] = (label, slots, effect)
        stream.ops.add(op)
        self.note("launch", op=op, label=label, stream=stream.name, slots=slots)
        return op

    def issue(self, label: str, slots: list[int], effect: Callable[[], None]) -> None:
        """Work on the current stream that runs now (a DMA copy): what it is ordered after lands first."""
        stream = self.current
        self.land(stream.after)
        op = len(self.log) + 1
        stream.ops.add(op)
        effect()
        self.note("lands", op=op, label=label, stream=stream.name, slots=slots)

    def ran(self, label: str, slots: list[int]) -> None:
        """Work the tree's own code did on the current stream (a copy it made itself), recorded as it finished: what it
        was ordered after lands only where the tree waited for it."""
        op = len(self.log) + 1
        self.current.ops.add(op)
        self.note("lands", op=op, label=label, stream=self.current.name, slots=slots)

    def land(self, ops: set[int]) -> None:
        for op in sorted(ops & set(self.pending)):
            label, slots, effect = self.pending.pop(op)
            effect()
            self.note("lands", op=op, label=label, slots=slots)

    def drain(self) -> None:
        """The step ends: work still in flight lands."""
        self.land(set(self.pending))
