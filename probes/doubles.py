"""Strict recording doubles for SGLang's collaborators.

A double answers only for the members it was built with and records every call into a
:class:`Journal`. Anything else raises :class:`DoubleGap` *and* is noted in the journal, so a gap
is reported as a harness gap (``where: "double"``) even when SGLang code swallows the exception.
This is deliberate: the published pre-fix "failures" were AttributeErrors from a permissive stub,
and a gap in our model must never pass for a behaviour of the tree.

Every modelled method runs inside a recording wrapper from this module, so a call with arguments
the model does not expect fails in a frame of this file (a gap), never in SGLang's frame.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
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


class Journal:
    """What the doubles saw during one case, in order, as deterministic JSON.

    ``scripted`` holds the failures a case told a double to raise: if one escapes, it is the
    tree's handling of it that failed, so it is attributed to the frame that called the double.
    """

    def __init__(self) -> None:
        self.live = False  # set-up calls are not effects; the case runner opens the journal
        self.entries: list[dict[str, JSON]] = []
        self.gaps: list[DoubleGap] = []
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
    plain functions become recorded methods; anything else is a plain attribute value.
    """

    def __init__(self, journal: Journal, name: str, recorded: tuple[str, ...] = (), **members: Any) -> None:
        object.__setattr__(self, "_journal", journal)
        object.__setattr__(self, "_name", name)
        for call in recorded:
            object.__setattr__(self, call, journal.method(name, call))
        for key, value in members.items():
            if isinstance(value, FunctionType) and not getattr(value, "recorded", False):
                value = journal.method(name, key, value)
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

    Its methods are SGLang's own; its attributes are exactly ``state`` (functions there replace
    a method by a recorded one). Reading an attribute we did not set is a gap in our model of the
    object, reported like any other double gap.
    """
    subject_cls = type(cls.__name__, (Double, cls), {"__module__": __name__})
    subject = object.__new__(subject_cls)
    Double.__init__(subject, journal, name, **state)
    return subject


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
