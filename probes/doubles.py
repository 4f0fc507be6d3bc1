"""Strict recording doubles for SGLang's collaborators.

A double answers only for the members it was built with and records every call into a
:class:`Journal`. Anything else raises :class:`DoubleGap` *and* is noted in the journal, so a gap
is reported as a harness gap (``where: "double"``) even when SGLang code swallows the exception.
This is deliberate: the published pre-fix "failures" were AttributeErrors from a permissive stub,
and a gap in our model must never pass for a behaviour of the tree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .plain import JSON, plain


class DoubleGap(Exception):
    """A double was asked for something it does not model: a harness gap, never a behaviour."""


class Journal:
    """What the doubles saw during one case, in order, as deterministic JSON."""

    def __init__(self) -> None:
        self.live = False  # set-up calls are not effects; the case runner opens the journal
        self.entries: list[dict[str, JSON]] = []
        self.gaps: list[str] = []
        self._counts: dict[str, int] = {}

    def gap(self, what: str) -> DoubleGap:
        self.gaps.append(what)
        return DoubleGap(f"the double does not model {what}")

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

    def method(self, actor: str, call: str, effect: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """A recorded method; ``effect`` (same arguments) supplies its behaviour and result."""

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.record(actor, call, args, kwargs)
            return effect(*args, **kwargs) if effect is not None else None

        recorded.__name__ = call
        return recorded


class Double:
    """Members are declared at construction; every other attribute raises :class:`DoubleGap`.

    ``recorded`` names methods that record their call and return None; ``members`` are plain
    values or callables (build those with :meth:`Journal.method` to record them too).
    """

    def __init__(self, journal: Journal, name: str, recorded: tuple[str, ...] = (), **members: Any) -> None:
        object.__setattr__(self, "_journal", journal)
        object.__setattr__(self, "_name", name)
        for call in recorded:
            object.__setattr__(self, call, journal.method(name, call))
        for key, value in members.items():
            object.__setattr__(self, key, value)

    def double_name(self) -> str:
        return self._name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)  # keep Python's own protocols working
        raise self._journal.gap(f"{self._name}.{attr}")

    def __repr__(self) -> str:
        return f"<double {self._name}>"


def strict_subject(cls: type, journal: Journal, name: str, **state: Any) -> Any:
    """An instance of a real SGLang class built without its ``__init__``.

    Its methods are SGLang's own; its attributes are exactly ``state``. Reading an attribute we
    did not set is a gap in our model of the object, reported like any other double gap.
    """
    subject_cls = type(cls.__name__, (Double, cls), {"__module__": __name__})
    subject = object.__new__(subject_cls)
    Double.__init__(subject, journal, name, **state)
    return subject


class KVEndpoint(Double):
    """A KV sender or receiver: records construction and every transport call."""

    def __init__(self, journal: Journal, name: str, poll_state: Any, abort_error: Exception | None) -> None:
        def abort() -> None:
            if abort_error is not None:
                raise abort_error

        super().__init__(
            journal,
            name,
            recorded=("init", "send", "send_metadata", "clear"),
            poll=journal.method(name, "poll", lambda: poll_state),
            abort=journal.method(name, "abort", abort),
            pop_decode_prefix_len=journal.method(name, "pop_decode_prefix_len", lambda: 0),
        )


class KVTransport:
    """Stands in for ``get_kv_class``: hands out recording senders and receivers.

    ``constructed`` lists what SGLang built, with its backend and constructor arguments.
    Asking for any other transport class (manager, args, bootstrap server) is a gap.
    """

    def __init__(self, journal: Journal, poll_state: Any, abort_error: Exception | None = None) -> None:
        self.journal = journal
        self.poll_state = poll_state
        self.abort_error = abort_error
        self.constructed: list[dict[str, JSON]] = []

    def __call__(self, backend: Any, class_type: Any) -> Callable[..., KVEndpoint]:
        role = getattr(class_type, "name", str(class_type)).lower()
        if role not in ("sender", "receiver"):
            raise self.journal.gap(f"get_kv_class({plain(class_type)})")

        def construct(*args: Any, **kwargs: Any) -> KVEndpoint:
            return self.endpoint(role, backend, args, kwargs)

        return construct

    def endpoint(self, role: str, backend: Any, args: tuple = (), kwargs: dict | None = None) -> KVEndpoint:
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
        return KVEndpoint(self.journal, name, self.poll_state, self.abort_error)
