"""Cases and the one mechanism that runs them (inside the forked child).

A case builds a scene (real SGLang objects wired to recording doubles), drives SGLang once,
then reads the scene's effects and matches them against its bug signature. Failures are
attributed honestly: to our own set-up, to a gap in a double, or to the tree's code.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from . import tree
from .doubles import DoubleGap, Journal
from .plain import JSON, plain

SITES = ("prefill-door", "decode-door", "prefill-result")
ROLES = ("bug", "guard")
_DOUBLES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "doubles.py")


class Scene(Protocol):
    def drive(self) -> None: ...

    def effects(self) -> dict[str, JSON]: ...


@dataclass(frozen=True)
class Case:
    """One observation. ``matches`` is the bug signature; ``signature`` says it in one line.

    For a guard case the signature describes the regression (a valid request dropped).
    ``requires`` names the APIs the case drives; if the tree lacks one the case is not
    applicable. The fix's own names never belong there: without the fix the case must run.
    """

    id: str
    site: str
    role: str
    title: str
    signature: str
    matches: Callable[[dict[str, JSON]], bool]
    build: Callable[[Journal], Scene]
    requires: tuple[str, ...]

    def __post_init__(self) -> None:
        assert self.site in SITES and self.role in ROLES, self.id

    def header(self) -> dict[str, JSON]:
        return {
            "id": self.id,
            "site": self.site,
            "role": self.role,
            "title": self.title,
            "signature": self.signature,
        }


@dataclass(frozen=True)
class Probe:
    id: str
    fix: int
    imports: tuple[str, ...]  # SGLang modules the harness imports once, before forking
    cases: tuple[Case, ...]


@dataclass(frozen=True)
class Places:
    """Where files live, to attribute a failure and print frames without absolute paths."""

    sglang_root: str | None
    probes_dir: str

    def where_from(self, tb: TracebackType | None) -> str | None:
        """``sglang`` or ``double`` for the innermost frame that is ours or the tree's."""
        for frame, _ in reversed(list(traceback.walk_tb(tb))):
            path = os.path.abspath(frame.f_code.co_filename)
            if self.sglang_root and _inside(path, self.sglang_root):
                return "sglang"
            if path == _DOUBLES_FILE:
                return "double"
            if _inside(path, self.probes_dir):
                return None
        return None

    def frame(self, exc: BaseException) -> str | None:
        frames = list(traceback.walk_tb(exc.__traceback__))
        if isinstance(exc, DoubleGap):  # point at the code that asked, not at the double
            frames = [f for f in frames if os.path.abspath(f[0].f_code.co_filename) != _DOUBLES_FILE]
        if not frames:
            return None
        frame, line = frames[-1]
        return f"{self.display(frame.f_code.co_filename)}:{line} in {frame.f_code.co_name}"

    def display(self, path: str) -> str:
        path = os.path.abspath(path)
        if self.sglang_root and _inside(path, self.sglang_root):
            return os.path.relpath(path, self.sglang_root).replace(os.sep, "/")
        if _inside(path, self.probes_dir):
            return "probes/" + os.path.relpath(path, self.probes_dir).replace(os.sep, "/")
        parts = path.replace(os.sep, "/").split("/")
        for marker in ("site-packages", "dist-packages"):
            if marker in parts:
                return "/".join(parts[parts.index(marker) + 1 :])
        return "/".join(parts[-2:])  # stdlib: keep it short and machine-independent


def _inside(path: str, root: str) -> bool:
    return path.startswith(os.path.abspath(root) + os.sep)


def error(kind: str, message: str, where: str, frame: str | None = None) -> dict[str, JSON]:
    return {"type": kind, "message": message, "where": where, "frame": frame}


def run_case(case: Case, places: Places) -> dict[str, JSON]:
    """Run one case to its outcome; the caller adds the header and the duration."""
    for api in case.requires:
        try:
            tree.resolve(api)
        except tree.Missing:
            return _result("not_applicable", missing=api)

    journal = Journal()
    phase = "setup"
    try:
        tree.publish_defaults()
        scene = case.build(journal)
        phase = "drive"
        journal.live = True
        scene.drive()
        journal.live = False
        if journal.gaps:
            raise DoubleGap(f"the double does not model {journal.gaps[0]} (the tree caught it)")
        phase = "observe"
        effects = plain(scene.effects())
    except Exception as exc:  # every failure becomes an outcome; the run itself goes on
        return _result("error", failure=_attribute(exc, phase, journal, places))

    return _result("observed", effects=effects, bug=case.matches(effects))


def _attribute(exc: Exception, phase: str, journal: Journal, places: Places) -> dict[str, JSON]:
    if isinstance(exc, DoubleGap) or journal.gaps:
        where = "double"
    else:
        where = (places.where_from(exc.__traceback__) if phase == "drive" else None) or "setup"
    message = str(exc) or type(exc).__name__
    return error(type(exc).__name__, message, where, places.frame(exc))


def _result(
    outcome: str,
    *,
    effects: dict[str, JSON] | None = None,
    bug: bool = False,
    failure: dict[str, JSON] | None = None,
    missing: str | None = None,
) -> dict[str, Any]:
    classification = ("bug" if bug else "clean") if outcome == "observed" else "inconclusive"
    return {
        "outcome": outcome,
        "classification": classification,
        "effects": effects,
        "error": failure,
        "missing": missing,
    }
