"""Which lines of the tree's own files a case ran (docs/probe-contract.md, ``lines``).

One recorder serves every case (and the mutation runner): started in the case's forked child, it
notes each line executed in a file under the tree's root and nothing else. On 3.12+ it is
``sys.monitoring`` (each line reported once, then disabled); on 3.11 ``sys.settrace``, whose global
function answers ``None`` for code outside the tree, so a frame of torch or the standard library
costs one call and no line events. The ranges format and its two conversions live here, standard
library only, so the host reads them with the same code (runner/judge/coverage.py).

A code object's file name is not trusted alone: a tree can rename its own code (``co_filename``
replaced at import) so that its lines seem to run elsewhere. Code named after a real file outside
the tree, run with the globals of a module the tree's file loaded, is its module's: its lines are
recorded under that module's file, and the file is noted in ``hidden`` (code there ran under
another file's name, so its lines as recorded may not be where they are). Code named ``<...>`` (a
dataclass's generated ``__init__``, run with its module's globals) is generated, not renamed.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable
from typing import Any

Ranges = list[list[int]]  # sorted, merged, inclusive [start, end] pairs


def ranges(lines: Iterable[int]) -> Ranges:
    """``{3, 1, 2, 7}`` -> ``[[1, 3], [7, 7]]``."""
    out: Ranges = []
    for line in sorted(set(lines)):
        if out and line == out[-1][1] + 1:
            out[-1][1] = line
        else:
            out.append([line, line])
    return out


def expand(spans: Iterable[Iterable[int]]) -> set[int]:
    """The lines of some ranges (the inverse of :func:`ranges`)."""
    found: set[int] = set()
    for start, end in spans:
        found.update(range(start, end + 1))
    return found


class Recorder:
    """Lines executed in files under ``root``, while started; :meth:`stop` returns them by path
    relative to ``root`` (``/``-separated), ``None`` when something else took the tracer over
    in between (the record would then be partial: no claim is better than a wrong one)."""

    def __init__(self, root: str) -> None:
        self.prefix = os.path.abspath(root) + os.sep
        self.files: dict[str, set[int]] = {}  # absolute file name -> lines
        self.inside: dict[str, bool] = {}  # file name as code objects spell it -> under root
        self.displaced = False
        self.hidden: set[str] = set()  # absolute files of tree modules whose code ran under another file's name
        self.homes: dict[int, tuple[dict, str | None]] = {}  # id(globals) -> (globals, its module's file if the tree's)
        self._impl: _Settrace | _Monitoring = _Monitoring(self) if hasattr(sys, "monitoring") else _Settrace(self)

    def lines_of(self, filename: str) -> set[int] | None:
        """The set collecting ``filename``'s lines, or None for a file outside the tree."""
        inside = self.inside.get(filename)
        if inside is None:
            inside = self.inside[filename] = (
                not filename.startswith("<") and os.path.abspath(filename).startswith(self.prefix))
        if not inside:
            return None
        return self.files.setdefault(filename, set())

    def home(self, code: Any, globals_: dict) -> set[int] | None:
        """For code named after a file outside the tree: the set collecting the lines of the tree
        module whose globals it runs with, when its name is a real file's (renamed code); else None."""
        cached = self.homes.get(id(globals_))
        if cached is None or cached[0] is not globals_:
            spec = globals_.get("__spec__")
            found = next((path for path in (globals_.get("__file__"), getattr(spec, "origin", None))
                          if isinstance(path, str) and self.lines_of(path) is not None), None)
            cached = self.homes[id(globals_)] = (globals_, found)
        if cached[1] is None or code.co_filename.startswith("<"):
            return None
        self.hidden.add(cached[1])
        return self.lines_of(cached[1])

    def start(self) -> "Recorder":
        self._impl.start()
        return self

    def relative(self, filename: str) -> str:
        return os.path.abspath(filename)[len(self.prefix):].replace(os.sep, "/")

    def stop(self) -> dict[str, Ranges] | None:
        self._impl.stop()
        if self.displaced:
            return None
        by_path: dict[str, set[int]] = {}
        for filename, lines in self.files.items():
            # a module's code starts at line 0 (3.11 reports it when the module runs): not a line of the file
            lines = {line for line in lines if isinstance(line, int) and line > 0}
            if lines:
                by_path.setdefault(self.relative(filename), set()).update(lines)
        return {path: ranges(lines) for path, lines in sorted(by_path.items())}

    def renamed(self) -> list[str]:
        """The tree's files (relative) whose code ran under another file's name while recording."""
        return sorted({self.relative(f) for f in self.hidden})


class _Settrace:
    """3.11: a global trace function that keeps to the tree's files, and a line tracer per file."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.local: dict[str, tuple[Any, Any] | None] = {}  # file name -> (its line tracer, add), None: outside
        self.foreign: dict[int, dict] = {}  # id(globals) -> globals of a module not loaded from the tree
        self.thread = 0  # the case's own thread, once started

    @staticmethod
    def _tracer(lines: set[int]) -> tuple[Any, Any]:
        add = lines.add

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "line":
                add(frame.f_lineno)
            return local

        return local, add

    def global_trace(self, frame: Any, event: str, arg: Any) -> Any:
        filename = frame.f_code.co_filename
        try:
            entry = self.local[filename]
        except KeyError:
            lines = self.recorder.lines_of(filename)
            entry = self.local[filename] = None if lines is None else self._tracer(lines)
        if entry is None:  # named outside the tree: renamed code of a tree module, or not the tree's
            globals_ = frame.f_globals
            if self.foreign.get(id(globals_)) is globals_:
                return None  # the common case, kept cheap: a library's own code with its own globals
            lines = self.recorder.home(frame.f_code, globals_)
            if lines is None:
                if self.recorder.homes[id(globals_)][1] is None:
                    self.foreign[id(globals_)] = globals_
                return None
            local, add = self._tracer(lines)
            add(frame.f_lineno)
            return local
        local, add = entry
        add(frame.f_lineno)  # the function's first line: it was entered
        return local

    def start(self) -> None:
        global _ACTIVE
        _watch()
        threading.settrace(self.global_trace)
        sys.settrace(self.global_trace)
        self.thread = threading.get_ident()
        _ACTIVE = self

    def stop(self) -> None:
        global _ACTIVE
        _ACTIVE = None
        current = sys.gettrace()
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
        if getattr(current, "__func__", None) is not _Settrace.global_trace or getattr(current, "__self__", None) is not self:
            self.recorder.displaced = True


_ACTIVE: _Settrace | None = None  # the recorder running in this process, if any
_WATCHING = False


def _watch() -> None:
    """Note any ``sys.settrace`` while a recorder runs (an audit hook: it cannot be removed), so a
    tree that turns the tracer off and on again around its own code leaves no record, not a
    record that says its lines did not run."""
    global _WATCHING
    if not _WATCHING:
        sys.addaudithook(_audit)
        _WATCHING = True


def _audit(event: str, args: tuple) -> None:
    # a thread the case starts sets the tracer in its own bootstrap (threading.settrace): not a displacement
    if event == "sys.settrace" and _ACTIVE is not None and threading.get_ident() == _ACTIVE.thread:
        _ACTIVE.recorder.displaced = True


class _Monitoring:
    """3.12+: ``sys.monitoring``; a code object outside the tree is disabled at its first start, a
    line of the tree once it has been seen."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.mon: Any = sys.monitoring  # type: ignore[attr-defined]
        self.tool = self.mon.COVERAGE_ID
        self.renamed: dict[Any, set[int]] = {}  # renamed code of a tree module -> its module's lines

    def _start(self, code: Any, offset: int) -> Any:
        lines = self.recorder.lines_of(code.co_filename)
        if lines is None:
            # the frame that starts is the callback's caller; a library's code is disabled for good below
            lines = self.recorder.home(code, sys._getframe(1).f_globals)
            if lines is None:
                return self.mon.DISABLE
            self.renamed[code] = lines
        lines.add(code.co_firstlineno)
        self.mon.set_local_events(self.tool, code, self.mon.events.LINE)
        return self.mon.DISABLE  # its lines report themselves from now on; its later starts add nothing

    def _line(self, code: Any, line: int) -> Any:
        lines = self.recorder.lines_of(code.co_filename)
        if lines is None:
            lines = self.renamed.get(code)
        if lines is not None:
            lines.add(line)
        return self.mon.DISABLE

    def start(self) -> None:
        if self.mon.get_tool(self.tool) is not None:  # taken: by whom, the record could not say
            self.recorder.displaced = True
            return
        self.mon.use_tool_id(self.tool, "lines")
        self.mon.register_callback(self.tool, self.mon.events.PY_START, self._start)
        self.mon.register_callback(self.tool, self.mon.events.LINE, self._line)
        self.mon.set_events(self.tool, self.mon.events.PY_START)

    def stop(self) -> None:
        if self.recorder.displaced:
            return
        if self.mon.get_tool(self.tool) != "lines":
            self.recorder.displaced = True
            return
        self.mon.set_events(self.tool, 0)
        self.mon.free_tool_id(self.tool)


def canonical(spans: object) -> bool:
    """Whether ``spans`` is a ranges list as :func:`ranges` writes it (non-empty, sorted, merged,
    inclusive, from line 1), checked without expanding it."""
    if not isinstance(spans, list) or not spans:
        return False
    after = 1  # the first line the next range may start on
    for span in spans:
        if not (isinstance(span, list) and len(span) == 2 and all(type(n) is int for n in span)
                and after <= span[0] <= span[1]):
            return False
        after = span[1] + 2  # adjacent ranges would have been merged
    return True
