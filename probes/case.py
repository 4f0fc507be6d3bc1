"""Cases and the one mechanism that runs them (inside the forked child).

A case builds a scene (real SGLang objects wired to recording doubles), drives SGLang once,
then reads the scene's effects and judges each duty it declares (``probes/duties_*.py``). Failures
are attributed honestly: to our own set-up, to a gap in a double, or to the tree's code. Two
failures are the tree's behaviour and observed as such (``effects["escaped"]``): a failure the case
scripted (a transport whose ``abort()`` raises) that the tree let escape, and an AttributeError
for a member the tree's own class does not have.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

from . import tree
from .doubles import Absent, DoubleGap, Journal
from .effects import Duty, classify, judged, signature
from .plain import JSON, plain

ROLES = ("bug", "guard")
_DOUBLES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "doubles.py")


class Scene(Protocol):
    def drive(self) -> None: ...

    def effects(self) -> dict[str, JSON]: ...


@dataclass(frozen=True)
class Case:
    """One observation. ``duties`` are what it checks, by ``checks``: its fix's table alone (``probes/duties_N.py``,
    duty id -> row), so a probe's identity covers its own table and no other fix's; its bug signature is their
    conjunction: any failed duty makes it a bug (for a guard case: a regression, a valid or re-entering request
    dropped).

    ``requires`` names the APIs the case drives; if the tree lacks one the case is not
    applicable. The fix's own names never belong there: without the fix the case must run.
    """

    id: str
    site: str
    role: str
    title: str
    duties: tuple[str, ...]
    build: Callable[[Journal], Scene]
    requires: tuple[str, ...]
    checks: Mapping[str, Duty]

    def __post_init__(self) -> None:
        assert self.site and self.role in ROLES, self.id
        assert self.duties and all(d in self.checks for d in self.duties), self.id

    @classmethod
    def of(cls, table: ModuleType, point: Mapping[str, str], build: Callable[[Journal], Scene],
           requires: tuple[str, ...], uses: tuple[ModuleType, ...] = ()) -> "Case":
        """The case of one point of a fix's case space (``table``: its ``probes/duties_N.py``): id, site, role,
        title and duties as the space says, judged by that table and the other fixes' tables whose rows its
        rules name (``uses``: the lifetime defences build on each other's promises)."""
        space = table.SPACE
        return cls(id=space.case_id(point), site=space.site_of(point), role=space.role(point),
                   title=space.title(point) or space.case_id(point), duties=space.duties(point), build=build,
                   requires=requires, checks={duty.id: duty for t in (table, *uses) for duty in t.DUTIES})

    @property
    def signature(self) -> str:
        return signature(self.duties)

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
    """``warm``: done once in the harness's parent after the import, before any case is forked, so every
    case inherits it instead of paying it again (reading the tree's sources to learn what it has)."""

    id: str
    fix: int
    imports: tuple[str, ...]  # SGLang modules the harness imports once, before forking
    cases: tuple[Case, ...]
    table: ModuleType  # its fix's probes/duties_N.py: the code mutate changes, the mutants argued equivalent
    warm: Callable[[], None] | None = None


@dataclass(frozen=True)
class Places:
    """Where files live, to attribute a failure and print frames without absolute paths."""

    sglang_root: str | None
    probes_dir: str

    def attribute(self, exc: BaseException, scripted: bool) -> tuple[str | None, str | None]:
        """``(where, frame)`` from the innermost frame that is the tree's or ours.

        ``where`` is ``sglang`` or ``double`` (None: our own code). A scripted failure that
        escaped a double, or a stand-in of a probe that raised it as the case told it to, is charged to
        the code that called the double or stand-in.
        """
        frames = [
            (frame, line)
            for frame, line in traceback.walk_tb(exc.__traceback__)
            if not (scripted and os.path.abspath(frame.f_code.co_filename) == _DOUBLES_FILE)
        ]
        if scripted:  # raised as told by a stand-in of a probe (a wire's reset): charged to the code that called it
            outside = [i for i, (frame, _) in enumerate(frames)
                       if not _inside(os.path.abspath(frame.f_code.co_filename), self.probes_dir)]
            if outside:
                frames = frames[: outside[-1] + 1]
        where = None
        for frame, _ in reversed(frames):
            path = os.path.abspath(frame.f_code.co_filename)
            if self.sglang_root and _inside(path, self.sglang_root):
                where = "sglang"
                break
            if _inside(path, self.probes_dir):
                where = "double" if path == _DOUBLES_FILE else None
                break
        if not frames:
            return where, None
        frame, line = frames[-1]
        return where, self.spot(frame.f_code.co_filename, line, frame.f_code.co_name)

    def frame(self, exc: BaseException) -> str | None:
        """``path:line in func`` of the innermost frame; for a gap, of the code that asked."""
        if isinstance(exc, DoubleGap) and exc.asked_at is not None:
            return self.spot(*exc.asked_at)
        return self.attribute(exc, scripted=False)[1]

    def tree_frame(self, exc: BaseException) -> str | None:
        """``path:line in func`` of the innermost frame of the tree's own code, if any: for a failure
        raised in a library the tree called, the tree's line that called it."""
        inside = [
            (frame, line)
            for frame, line in traceback.walk_tb(exc.__traceback__)
            if self.sglang_root and _inside(os.path.abspath(frame.f_code.co_filename), self.sglang_root)
        ]
        if not inside:
            return None
        frame, line = inside[-1]
        return self.spot(frame.f_code.co_filename, line, frame.f_code.co_name)

    def in_tree(self, text: str) -> str:
        """``text`` with this machine's path of the tree cut to the tree's own paths (``sglang/...``)."""
        return text.replace(os.path.abspath(self.sglang_root) + os.sep, "") if self.sglang_root else text

    def spot(self, path: str, line: int, func: str) -> str:
        return f"{self.display(path)}:{line} in {func}"

    def display(self, path: str) -> str:
        if path.startswith("<"):  # <frozen ...>, <string>: not a file
            return path
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
    journal = Journal()
    phase = "setup"
    try:
        missing = unmet(case)
        if missing is not None:
            return _result("not_applicable", missing=missing)
        tree.publish_defaults()
        try:
            scene = case.build(journal)
        except tree.Missing as missing:  # found on a real object while setting the scene up
            return _result("not_applicable", missing=missing.args[0])
        phase = "drive"
        journal.live = True
        escaped = None
        try:
            scene.drive()
        except Exception as exc:
            escaped = _escaped(exc, journal, places)
            if escaped is None:
                raise
        journal.live = False
        if journal.gaps:  # the tree caught it, but a gap is never a behaviour
            raise journal.gaps[0]
        phase = "observe"
        effects = plain(scene.effects())
        if escaped is not None:
            effects["escaped"] = escaped
        if journal.absent:
            effects["absent"] = list(journal.absent)
        held = judged(case.duties, case.checks, effects)
    except Exception as exc:  # every failure becomes an outcome; the run itself goes on
        return _result("error", failure=_failure(exc, phase, journal, places))
    return _result("observed", effects=effects, bug=classify(held) == "bug")


def unmet(case: Case) -> str | None:
    """The first API the case drives that the tree lacks, or None. Asking changes nothing in the tree,
    so the harness may ask before forking: a case the tree cannot run costs no process."""
    for api in case.requires:
        try:
            tree.resolve(api)
        except tree.Missing:
            return api
    return None


def not_applicable(missing: str) -> dict[str, JSON]:
    return _result("not_applicable", missing=missing)


def _escaped(exc: Exception, journal: Journal, places: Places) -> dict[str, JSON] | None:
    """The failure as an effect when it is the tree's behaviour: a scripted failure or a member
    its class lacks, escaping from the tree's own frames. None: an error like any other."""
    scripted = any(exc is s for s in journal.scripted)
    if not (scripted or (isinstance(exc, Absent) and exc.tree_lacks)) or journal.gaps:
        return None
    where, frame = places.attribute(exc, scripted=True)
    if where != "sglang":
        return None
    return {"type": type(exc).__name__, "message": str(exc) or type(exc).__name__, "frame": frame}


def _failure(exc: Exception, phase: str, journal: Journal, places: Places) -> dict[str, JSON]:
    """Charge a failure: a gap (even one the tree swallowed) to the doubles, a failure in the
    tree's frames to the tree, anything else to our own set-up."""
    if journal.gaps:
        exc, where = journal.gaps[0], "double"
        frame = places.frame(exc)
    else:
        where, frame = places.attribute(exc, scripted=any(exc is s for s in journal.scripted))
        if phase != "drive" or where is None:
            where = "setup"
    return error(type(exc).__name__, str(exc) or type(exc).__name__, where, frame)


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
