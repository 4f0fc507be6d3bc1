"""Run one pytest file inside a tree's environment and record each test's and subtest's outcome.

    <env python> -I /abs/probes/pytest_outcomes.py --out FILE [--root DIR] TEST_FILE

The entry point of ``diffprobe upstream-tests``. pytest (the shared layer's) runs as a plain
``pytest TEST_FILE`` would (same options, same verbosity, so the same outcomes and the same summary
line), with :class:`Recorder` handed over as a plugin *object*: nothing is loaded by name, and the
directory that holds ``probes/`` never reaches ``sys.path`` (the harness, whose helpers this reuses,
is loaded by file location too). Standard library and pytest only; the tree's ``sglang`` is whatever
the test file imports. Each outcome is the one pytest reports, read after pytest's own hooks had
their say (a test whose ``subtests`` failed is turned into a failure by pytest itself; a unittest
test whose ``subTest`` blocks failed stays passed, its subtests failed).

Why attribute failures: an upstream test's stubs stand in for SGLang's collaborators, and an old
tree can fall through to a stub the test never meant it to reach. So every exception says where it
came from (``origin``): ``stub`` (an ``AttributeError`` on a ``SimpleNamespace``, a mock or an object
of a class the test's files define, or anything raised inside ``unittest.mock``); ``environment``
(a module that is neither the tree's nor the test directory's cannot be imported: the environment
lacks it, whoever imported it; ``module`` names it); else the innermost frame's owner: ``sglang``
(the tree's files), ``test`` (the test file, its ``conftest.py`` files and helper modules:
everything under the rootdir ``--root``, by default the file's directory), ``other``. A file is the
tree's when its path as Python imported it lies under the tree's root as Python finds it (no
symlink resolved on either side: an environment imports the tree through an overlay of symlinks).
``assertion`` is true only for the test's own verdict: an ``AssertionError`` or ``pytest.fail``
raised by the test's files or a mock's ``assert_*`` -- never an ``assert`` inside SGLang.

``wanted`` names what the test itself asked of the tree when that is what failed: a module or name
its own ``import`` could not get (``sglang.x.y.name``), the target of a ``mock.patch`` that could not
be found (``sglang.x.Class.attr``), or an attribute its own code read from one of the tree's modules,
classes or their instances. Whether the tree's source lacks it is decided on the host, from the
stored tree (runner/evidence/targets.py); here only the name and where the test asked for it.

Every exception also carries what the host needs to tell a test of another era from a behaviour,
as data and never as wording: its ``frames`` (owner, path under the owner's root, line, function);
for a ``TypeError`` raised at a call that crossed between the test's files and the tree (either
way), the ``call``: the positions of the call in its frame and the place of the code it called,
looked up without running anything (``inspect.getattr_static``); for an ``AttributeError`` on an
instance of one of the tree's classes, ``unset``: the class, the attribute and the instance's own
attribute names (whether its constructor built it is read on the host); for a mock's
``assert_called_with`` (or ``assert_called_once_with``) that failed on the last call's arguments,
the ``mock_call``: the shape expected and the shape received (positional count,
keyword names), where the test asserted it and where the call was made (the plugin remembers, per
mock, the instruction that last called it: the caller's code and offset, nothing run); for a
``ValueError`` raised by unpacking, or an ``IndexError`` by indexing, a tuple in the test's own frame
(or by the tree's frame unpacking what it assigns or iterates: the first item of another length),
the ``unpacked``: how many names (or which index) the test wanted, the tuple's length, and where the
tuple was read from, looked up statically (names, attributes by ``inspect.getattr_static``, items of
plain dicts, lists and tuples by a literal key): the tree class whose instance attribute holds it and
how many subscripts deep, or the tree's own tuple class. Whether the call's arguments fit the callee,
the tree's constructor sets the attribute, the tree's call site could ever make the expected call or
the tree's code ever builds a tuple of the length the test wants, is read on the host from the
stored code (runner/judge/targets.py), never from what runs here.

The file (``diffprobe.pytest-outcomes/5``) is rewritten atomically as each test starts and ends, so
a run killed at its deadline still says what finished and what was running.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import dis
import functools
import importlib.util
import inspect
import itertools
import linecache
import os
import platform
import re
import sys
import traceback
import types
import unittest.mock
from collections import Counter
from typing import Any

import pytest

SCHEMA = "diffprobe.pytest-outcomes/5"
HERE = os.path.dirname(os.path.abspath(__file__))
MOCK_FILE = os.path.abspath(unittest.mock.__file__)
MESSAGE_LIMIT = 300
FRAME_LIMIT = 40  # innermost frames kept per exception: the call that failed and who made it
ATTRIBUTE_LIMIT = 400  # attribute names kept of an instance that lacked one (SGLang's managers hold ~100)
CALLER = "_diffprobe_caller"  # a mock's __dict__ key: (code, instruction offset) of its last caller
KEYS = (int, str, bytes)  # a subscript's key read statically only of these exact types: hashing them runs no code


def load_harness() -> types.ModuleType:
    """``probes/harness.py`` by file location (it loads the ``probes`` package the same way)."""
    spec = importlib.util.spec_from_file_location("probes.harness", os.path.join(HERE, "harness.py"))
    assert spec is not None and spec.loader is not None
    harness = importlib.util.module_from_spec(spec)
    sys.modules["probes.harness"] = harness
    spec.loader.exec_module(harness)
    return harness


harness = load_harness()
from probes.case import Places  # noqa: E402  (importable only once the harness loaded the package)


class Recorder:
    """The pytest plugin: per test and per subtest, the outcome and an attributed exception."""

    def __init__(self, out: str, test_file: str, root: str | None = None) -> None:
        self.out = out
        self.test_file = os.path.abspath(test_file)
        self.test_dir = os.path.abspath(root or os.path.dirname(self.test_file))
        self.places = Places(sglang_root=harness.find_sglang_root(), probes_dir=HERE)
        remember_mock_callers()
        self.open: dict[str, dict[str, Any]] = {}  # nodeid -> the record being assembled
        self.subtest_names: Counter[str] = Counter()
        self.doc: dict[str, Any] = {
            "schema": SCHEMA,
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "platform": platform.platform(),
            "pytest": pytest.__version__,
            "sglang_root": self.places.sglang_root,
            "complete": False,
            "exit_status": None,
            "collected": [],
            "collection_errors": [],
            "running": None,
            "results": [],
            "summary": [],
            "materials": {},
            "standins": [],
        }

    # --- hooks -------------------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]):
        """Attach the attributed exception to the report; a subtest's report is a copy of this one."""
        report = yield
        if call.excinfo is not None and not report.skipped:
            report.diffprobe_exception = self.describe(call.excinfo.value)
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector):
        """The same for a collection failure; pytest wraps import failures, the cause is what counts."""
        report = yield
        call = report.__dict__.get("call")  # pytest drops it before reporting
        if report.failed and call is not None and call.excinfo is not None:
            exc = call.excinfo.value
            if exc.__cause__ is not None and isinstance(exc, pytest.Collector.CollectError):
                exc = exc.__cause__
            report.diffprobe_exception = self.describe(exc)
        return report

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.doc["collection_errors"].append({"id": report.nodeid or os.path.basename(self.test_file),
                                                  "exception": self.exception(report)})
            self.save()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.doc["collected"] = [{"id": item.nodeid, "title": _doc_line(item)} for item in session.items]
        self.save()

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.open[nodeid] = _test_record(nodeid)
        self.doc["running"] = nodeid
        self.save()

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """After pytest's own hooks: its terminal reporter turns a passed test with failed
        ``subtests`` into a failure while reporting it, and that is the outcome pytest gives."""
        record = self.open.setdefault(report.nodeid, _test_record(report.nodeid))
        if getattr(report, "context", None) is not None:  # pytest's subtests and unittest's subTest
            self.subtest(record, report)
            return
        record["duration_ms"] += int(report.duration * 1000)
        if record["outcome"] not in (None, "passed", "xpassed"):
            return  # the first failing phase is the one that counts
        if report.failed:
            through_subtests = not hasattr(report, "diffprobe_exception") and record["failed_subtests"]
            record.update(outcome="failed" if report.when == "call" else "error", phase=report.when,
                          exception=None if through_subtests else self.exception(report))
        elif report.skipped:
            record.update(phase=report.when, **_skipped(report))
        elif report.when == "call":
            record.update(outcome="xpassed" if hasattr(report, "wasxfail") else "passed", phase="call")

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        record = self.open.pop(nodeid)
        subtests = record.pop("subtests")
        self.doc["results"] += [record, *subtests]
        self.doc["running"] = None
        self.save()

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        root, modules = self.places.sglang_root, list(sys.modules)
        terminal = session.config.pluginmanager.get_plugin("terminalreporter")
        summary = [text for text, _ in terminal.build_summary_stats_line()[0]] if terminal else []
        self.doc.update(complete=True, exit_status=int(exitstatus), summary=summary,
                        materials=harness.materials(root, harness.imported_files(root, modules)),
                        standins=sorted(harness.standins_among(modules)))
        self.save()

    # --- records -----------------------------------------------------------------------------

    def subtest(self, parent: dict[str, Any], report: pytest.TestReport) -> None:
        name = f"{parent['id']} {_subtest_description(report.context)}"
        self.subtest_names[name] += 1
        if self.subtest_names[name] > 1:  # the same message and parameters twice: keep both apart
            name = f"{name} #{self.subtest_names[name]}"
        record = _record(name, parent["id"])
        record.update(phase="call", duration_ms=int(report.duration * 1000))
        if report.failed:
            record.update(outcome="failed", exception=self.exception(report))
            parent["failed_subtests"] += 1
        elif report.skipped:
            record.update(_skipped(report))
        else:
            record["outcome"] = "passed"
        parent["subtests"].append(record)

    def exception(self, report: pytest.TestReport | pytest.CollectReport) -> dict[str, Any]:
        """The attributed exception, or for a failure without one (a strict XPASS) its report line."""
        return getattr(report, "diffprobe_exception", None) or {
            "type": "Failed", "message": self.clean(str(report.longrepr)), "origin": "other", "assertion": False,
            "frame": None, "module": None, "raised_as": None, "wanted": None, "frames": [], "call": None, "unset": None,
            "mock_call": None, "unpacked": None,
        }

    def describe(self, exc: BaseException) -> dict[str, Any]:
        """The failure, told by the exception that started it.

        An exception raised while handling another (``raise ... from e``, or any raise in an
        ``except`` block) is a consequence unless it is the test's own verdict (``self.fail`` in
        a handler): CustomTestCase's retry wrapper, say, turns every failure of a test body into
        ``Exception: retry() exceed maximum number of retries.``. Then the first exception of
        the chain is described, and ``raised_as`` keeps what pytest shows.
        """
        shown, raised_as = exc, None
        origin, module = self.origin(exc)
        while not _verdict(exc, origin) and _chained(exc) is not None:
            exc = _chained(exc)
            origin, module = self.origin(exc)
        if exc is not shown:
            raised_as = self.clean(f"{type(shown).__name__}: {shown}")
        frames = [(f.f_code.co_filename, line, f.f_code.co_name) for f, line in _frames(exc)]
        return {
            "type": type(exc).__name__,
            "message": self.clean(str(exc)) or type(exc).__name__,
            "origin": origin,
            "assertion": _verdict(exc, origin),
            "frame": self.spot(*frames[-1]) if frames else None,
            "module": module,
            "raised_as": raised_as,
            "wanted": self.wanted(exc),
            "frames": [self.place(f.f_code.co_filename) | {"line": line, "function": f.f_code.co_name}
                       for f, line in _frames(exc)[-FRAME_LIMIT:]],
            "call": self.crossing_call(exc),
            "unset": self.unset(exc),
            "mock_call": self.mock_call(exc),
            "unpacked": self.unpacked(exc),
        }

    def place(self, filename: str) -> dict[str, Any]:
        """``{owner, path}``: whose file (``test``, ``sglang``, ``mock``, ``other``) and its path under
        that owner's root (the test directory, the tree's root), so the host can read it there."""
        path = os.path.abspath(filename)
        if path == MOCK_FILE:
            return {"owner": "mock", "path": None}
        if self.in_tree(path):
            return {"owner": "sglang", "path": os.path.relpath(path, self.places.sglang_root).replace(os.sep, "/")}
        if _inside(path, self.test_dir):
            return {"owner": "test", "path": os.path.relpath(path, self.test_dir).replace(os.sep, "/")}
        return {"owner": "other", "path": None}

    def crossing_call(self, exc: BaseException) -> dict[str, Any] | None:
        """A ``TypeError`` raised by the call instruction of the innermost frame, when that call went
        from the test's files into the tree or back: the call's positions and the callee's place."""
        tb = exc.__traceback__
        if not isinstance(exc, TypeError) or tb is None:
            return None
        while tb.tb_next is not None:
            tb = tb.tb_next
        code = tb.tb_frame.f_code
        if tb.tb_lasti < 0:
            return None
        positions = list(code.co_positions())[tb.tb_lasti // 2]
        if None in positions:
            return None
        line, end_line, col, end_col = positions
        call = _call_expression(code.co_filename, line, end_line, col, end_col)
        callee = _callee(call.func, tb.tb_frame) if call is not None else None
        if callee is None:
            return None
        function, bound = callee
        caller, target = self.place(code.co_filename), self.place(function.__code__.co_filename)
        if {caller["owner"], target["owner"]} != {"test", "sglang"}:
            return None  # a call within one side: a mismatch there is that side's own business
        return {"caller": caller | {"line": line, "end_line": end_line, "col": col, "end_col": end_col},
                "callee": target | {"line": function.__code__.co_firstlineno, "qualname": function.__qualname__,
                                    "bound": bound}}

    def mock_call(self, exc: BaseException) -> dict[str, Any] | None:
        """A mock's ``assert_called_with`` (also through ``assert_called_once_with``) that failed on
        the last call's arguments: both shapes, where the test asserted and where the call was made."""
        frames = _frames(exc)
        if not isinstance(exc, AssertionError) or not frames:
            return None
        inner = frames[-1][0]
        if os.path.abspath(inner.f_code.co_filename) != MOCK_FILE or inner.f_code.co_name != "assert_called_with":
            return None
        mock, args, kwargs = (inner.f_locals.get(k) for k in ("self", "args", "kwargs"))
        if not isinstance(mock, unittest.mock.NonCallableMock) or not isinstance(args, tuple) or not isinstance(kwargs, dict):
            return None
        own = _own_attributes(mock)
        actual = own.get("_mock_call_args")
        if not isinstance(actual, tuple) or len(actual) != 2:
            return None  # never called: nothing to compare shapes with
        called_args, called_kwargs = actual
        caller = own.get(CALLER)
        tests = [(f, line) for f, line in frames if self.is_test_file(f.f_code.co_filename)]
        return {
            "expected": _shape(args, kwargs), "actual": _shape(called_args, called_kwargs),
            "spec": own.get("_spec_signature") is not None,
            "at": self.site(tests[-1][0].f_code, tests[-1][0].f_lasti) if tests else None,
            "site": self.site(*caller) if isinstance(caller, tuple) else None,
        }

    def site(self, code: types.CodeType, offset: int) -> dict[str, Any] | None:
        """The place and positions of the instruction at ``offset`` of ``code``."""
        found = _positions(code, offset)
        if found is None:
            return None
        line, end_line, col, end_col = found
        return self.place(code.co_filename) | {"line": line, "end_line": end_line, "col": col, "end_col": end_col}

    def unpacked(self, exc: BaseException) -> dict[str, Any] | None:
        """A tuple unpacked (``ValueError``) or indexed (``IndexError``) for another length, by the
        test's own frame or the tree's (the tree unpacking, in an assignment, a ``for`` or a
        comprehension, what it iterates): what was wanted of it, its length, and where it was read
        from (module docstring)."""
        tb = exc.__traceback__
        if not isinstance(exc, (ValueError, IndexError)) or tb is None:
            return None
        while tb.tb_next is not None:
            tb = tb.tb_next
        frame, code = tb.tb_frame, tb.tb_frame.f_code
        path = os.path.abspath(code.co_filename)
        if not (self.is_test_file(path) or self.in_tree(path)) or tb.tb_lasti < 0:
            return None
        op = dis.opname[code.co_code[tb.tb_lasti]]
        positions = _positions(code, tb.tb_lasti)
        if positions is None:
            return None
        node = _node_at(code.co_filename, positions)
        each = False
        if isinstance(exc, ValueError) and op in ("UNPACK_SEQUENCE", "UNPACK_EX") and isinstance(node, tuple):
            target, value_expr, how_read = node
            how, wanted = "unpack", len(target.elts)
            starred = any(isinstance(e, ast.Starred) for e in target.elts)
            wanted -= starred
            if how_read == "first generator":  # evaluated by the comprehension's caller
                if not code.co_name.endswith("comp>") or frame.f_back is None:
                    return None
                frame = frame.f_back
            each = how_read != "assign"
        elif isinstance(exc, IndexError) and op == "BINARY_SUBSCR" and isinstance(node, ast.Subscript):
            index = _literal(node.slice)
            if type(index) is not int:
                return None
            how, wanted, starred, value_expr = "index", index + 1 if index >= 0 else -index, True, node.value
        else:
            return None
        found = _static_value(value_expr, frame, self)
        if found is None:
            return None
        value, holder, attribute, depth = found
        if each:  # the item that failed: the first tuple of another length, in order
            if type(value) not in (list, tuple):
                return None
            fits = (lambda n: n >= wanted) if starred else (lambda n: n == wanted)
            value = next((item for item in value if isinstance(item, tuple) and not fits(len(item))), None)
            depth += 1
        if not isinstance(value, tuple):
            return None
        value_cls = self.tree_name(type(value)) if type(value) is not tuple else None
        return {"how": how, "at": self.site(code, tb.tb_lasti), "wanted": wanted, "starred": starred,
                "length": len(value), "value_cls": value_cls, "holder": holder, "attribute": attribute, "depth": depth}

    def unset(self, exc: BaseException) -> dict[str, str] | None:
        """An ``AttributeError`` on an instance of one of the tree's classes: ``{cls, name}``."""
        obj = getattr(exc, "obj", None) if isinstance(exc, AttributeError) else None
        name = getattr(exc, "name", None)
        if obj is None or isinstance(obj, (type, types.ModuleType)) or not isinstance(name, str):
            return None
        owner = self.tree_name(obj, instances=True)
        try:
            has = sorted(k for k in vars(obj) if isinstance(k, str))[:ATTRIBUTE_LIMIT]
        except TypeError:  # no __dict__ (slots): nothing to tell it by
            has = None
        return {"cls": owner, "name": name, "has": has} if owner else None

    def wanted(self, exc: BaseException) -> dict[str, str] | None:
        """What of the tree the test asked for and could not get: ``{name, how, at}`` (docstring)."""
        if not isinstance(exc, (ImportError, AttributeError)):
            return None
        frames = [(f, line) for f, line in _frames(exc) if not f.f_code.co_filename.startswith("<frozen")]
        tests = [i for i, (f, _) in enumerate(frames) if self.is_test_file(f.f_code.co_filename)]
        last = tests[-1] if tests else -1
        at = self.spot(frames[last][0].f_code.co_filename, frames[last][1], frames[last][0].f_code.co_name) if tests else None
        deeper = frames[last + 1:]
        patchers = [i for i, (f, _) in enumerate(deeper) if os.path.abspath(f.f_code.co_filename) == MOCK_FILE
                    and isinstance(f.f_locals.get("self"), unittest.mock._patch)]
        if patchers:  # raised while mock.patch (a call, a context or a decorator) looked its target up
            if any(self.in_tree(os.path.abspath(f.f_code.co_filename)) for f, _ in deeper[patchers[-1]:]):
                return None  # the target's module failed in its own code: the tree's failure, not a missing name
            name = self.patch_target(deeper[patchers[-1]][0].f_locals["self"])
            return {"name": name, "how": "mock.patch", "at": at} if name else None
        if not tests or deeper:
            return None  # raised deeper, in code the test called: not the test's own lookup
        if isinstance(exc, ImportError):
            name = _import_target(exc)
        else:
            owner = self.tree_name(getattr(exc, "obj", None), instances=True)
            name = f"{owner}.{exc.name}" if owner and isinstance(getattr(exc, "name", None), str) else None
        return {"name": name, "how": "import" if isinstance(exc, ImportError) else "attribute", "at": at} if name else None

    def patch_target(self, patcher: Any) -> str | None:
        """``module.Class.attr`` of a ``mock.patch``: the dotted string it was given, or for
        ``patch.object`` the tree module or class it was given."""
        getter, attribute = getattr(patcher, "getter", None), getattr(patcher, "attribute", None)
        if not isinstance(attribute, str):
            return None
        if isinstance(getter, functools.partial) and getter.args and isinstance(getter.args[0], str):
            owner = getter.args[0]
        else:
            try:
                owner = self.tree_name(getter())
            except Exception:  # a getter that fails names nothing
                return None
        return f"{owner}.{attribute}" if owner and owner.split(".")[0] == "sglang" else None

    def tree_name(self, obj: Any, instances: bool = False) -> str | None:
        """The dotted name of one of the tree's modules or classes (or, with ``instances``, of an
        instance's class); None for anything else, stand-ins included."""
        if isinstance(obj, types.ModuleType):
            path = getattr(obj, "__file__", None)
            return obj.__name__ if isinstance(path, str) and self.in_tree(os.path.abspath(path)) else None
        if not isinstance(obj, type):
            if not instances or obj is None or self.is_stub(obj):
                return None
            obj = type(obj)
        module = sys.modules.get(getattr(obj, "__module__", None) or "")
        path = getattr(module, "__file__", None)
        qualname = getattr(obj, "__qualname__", "")
        if not isinstance(path, str) or not self.in_tree(os.path.abspath(path)) or "<" in qualname:
            return None
        return f"{obj.__module__}.{qualname}"

    def is_test_file(self, path: str) -> bool:
        return _inside(os.path.abspath(path), self.test_dir)

    def origin(self, exc: BaseException) -> tuple[str, str | None]:
        """``(origin, missing module)``: see the module docstring."""
        if isinstance(exc, AttributeError) and self.is_stub(getattr(exc, "obj", None)):
            return "stub", None
        missing = self.missing_module(exc)
        if missing:
            return "environment", missing
        for frame, _ in reversed(_frames(exc)):
            path = os.path.abspath(frame.f_code.co_filename)
            if path == MOCK_FILE:
                return "stub", None
            if self.in_tree(path):
                return "sglang", None
            if _inside(path, self.test_dir):
                return "test", None
        return "other", None

    def in_tree(self, path: str) -> bool:
        return bool(self.places.sglang_root) and _inside(path, os.path.abspath(self.places.sglang_root))

    def missing_module(self, exc: BaseException) -> str | None:
        """The module an ``ImportError`` could not find when it is neither the tree's (a tree
        lacking a module of its own is the tree's business) nor one of the test directory's."""
        name = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
        if not isinstance(name, str) or not name:
            return None
        top = name.split(".", 1)[0]
        if top == "sglang" or top in sys.builtin_module_names:
            return None
        places = {self.test_dir, os.path.dirname(self.test_file)}
        if any(os.path.exists(os.path.join(d, top + ".py")) or os.path.isdir(os.path.join(d, top)) for d in places):
            return None
        if isinstance(exc, ModuleNotFoundError) or top not in sys.modules:
            return name
        return None  # "cannot import name X from Y": Y imported, it lacks X (its version, not its absence)

    def is_stub(self, obj: Any) -> bool:
        if isinstance(obj, (types.SimpleNamespace, unittest.mock.NonCallableMock)):
            return True
        cls = obj if isinstance(obj, type) else type(obj)
        module = sys.modules.get(cls.__module__)
        path = getattr(module, "__file__", None)
        return isinstance(path, str) and _inside(os.path.abspath(path), self.test_dir)

    def spot(self, path: str, line: int, func: str) -> str:
        if _inside(os.path.abspath(path), self.test_dir):
            return f"{os.path.relpath(os.path.abspath(path), self.test_dir)}:{line} in {func}"
        return self.places.spot(path, line, func)

    def clean(self, text: str) -> str:
        """First line, without what differs between runs (addresses, mock ids, where files live)."""
        line = text.strip().splitlines()[0] if text.strip() else ""
        for root in (self.test_dir, self.places.sglang_root):
            line = line.replace(root + os.sep, "") if root else line
        line = re.sub(r"0x[0-9a-fA-F]+", "0x…", line)
        line = re.sub(r"id='\d+'", "id='…'", line)
        return line[:MESSAGE_LIMIT]

    def save(self) -> None:
        harness.write_atomically(self.out, self.doc)


def _record(nodeid: str, parent: str | None) -> dict[str, Any]:
    return {"id": nodeid, "parent": parent, "outcome": None, "phase": None, "exception": None, "reason": None,
            "failed_subtests": 0, "duration_ms": 0}


def _test_record(nodeid: str) -> dict[str, Any]:
    """A test's record, with its subtests held back until the test ends (they follow it)."""
    return {**_record(nodeid, None), "subtests": []}


def _verdict(exc: BaseException, origin: str) -> bool:
    """The test's own assertion: raised by the test's files or a mock's ``assert_*``."""
    return isinstance(exc, (AssertionError, pytest.fail.Exception)) and origin in ("test", "stub")


def _import_target(exc: ImportError) -> str | None:
    """The tree module or name an import could not get: ``No module named 'sglang.x'`` or
    ``cannot import name 'y' from 'sglang.x'``."""
    found = re.match(r"cannot import name '([^']+)' from '([^']+)'", str(exc))
    name = f"{found.group(2)}.{found.group(1)}" if found else exc.name if isinstance(exc, ModuleNotFoundError) else None
    return name if isinstance(name, str) and name.split(".")[0] == "sglang" else None


def remember_mock_callers() -> None:
    """Every mock call remembers its caller's code and instruction offset (in the mock's own
    ``__dict__``, under a private name ``dir()`` hides): the call expression is read only when an
    assertion on that call fails. Nothing of the call changes."""
    mixin = unittest.mock.CallableMixin
    original = getattr(mixin, "_increment_mock_call", None)
    if original is None or getattr(original, "_diffprobe", False):
        return  # a mock module without that step (before Python 3.8): no caller is known, no call is told

    def increment(self, /, *args, **kwargs):
        caller = sys._getframe(2)  # increment <- CallableMixin.__call__ <- the caller
        self.__dict__[CALLER] = (caller.f_code, caller.f_lasti)
        return original(self, *args, **kwargs)

    increment._diffprobe = True
    mixin._increment_mock_call = increment


def _shape(args: Any, kwargs: Any) -> dict[str, Any]:
    return {"args": len(args), "keywords": sorted(k for k in kwargs if isinstance(k, str))}


def _positions(code: types.CodeType, offset: int) -> tuple[int, int, int, int] | None:
    if offset < 0:
        return None
    found = next(itertools.islice(code.co_positions(), offset // 2, None), None)
    return None if found is None or None in found else found


_PARSED: dict[str, ast.Module | None] = {}


def _node_at(filename: str, positions: tuple[int, int, int, int]) -> tuple[ast.Tuple | ast.List, ast.expr, str] | ast.Subscript | None:
    """At those positions of a source file: a tuple target with what it is unpacked from and how
    ("assign": the value assigned; "for": each item of what a ``for`` iterates; "first generator" or
    "generator": of what a comprehension's first or a later generator iterates), or a subscript."""
    if filename not in _PARSED:
        try:
            _PARSED[filename] = ast.parse("".join(linecache.getlines(filename)))
        except (SyntaxError, ValueError):
            _PARSED[filename] = None
    module = _PARSED[filename]
    for node in ast.walk(module) if module else ():
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, (ast.Tuple, ast.List)) and _at(target) == positions:
                    return target, node.value, "assign"
        elif isinstance(node, (ast.For, ast.AsyncFor)) and isinstance(node.target, (ast.Tuple, ast.List)) and \
                _at(node.target) == positions:
            return node.target, node.iter, "for"
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            for i, generator in enumerate(node.generators):
                if isinstance(generator.target, (ast.Tuple, ast.List)) and _at(generator.target) == positions:
                    return generator.target, generator.iter, "generator" if i else "first generator"
        elif isinstance(node, ast.Subscript) and _at(node) == positions:
            return node
    return None


def _at(node: ast.AST) -> tuple[int, int, int, int]:
    return node.lineno, node.end_lineno, node.col_offset, node.end_col_offset


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _static_value(expr: ast.expr, frame: types.FrameType, recorder: Recorder) -> tuple[Any, str | None, str | None, int] | None:
    """``(value, tree class, attribute, depth)`` of a name, dotted attribute or subscript by a literal or
    a name's plain key, read without running a descriptor, ``__getattr__`` or ``__getitem__`` of
    anything but a plain dict, list or tuple; the tree class whose instance's attribute holds the
    value ``depth`` subscripts deep (None when none does)."""
    if isinstance(expr, ast.Subscript):
        inner = _static_value(expr.value, frame, recorder)
        if inner is None or type(inner[0]) not in (dict, list, tuple):
            return None
        key = _literal(expr.slice)
        if key is None and isinstance(expr.slice, ast.Name):
            found = _static(expr.slice, frame)
            key = found[0] if found else None
        if type(key) not in KEYS:
            return None
        try:
            value = inner[0][key]
        except (KeyError, IndexError, TypeError):
            return None
        return value, inner[1], inner[2], inner[3] + 1
    found = _static(expr, frame)
    if found is None:
        return None
    value, owner = found
    instance = owner is not None and not isinstance(owner, (type, types.ModuleType))
    holder = recorder.tree_name(owner, instances=True) if isinstance(expr, ast.Attribute) and instance else None
    return value, holder, expr.attr if holder else None, 0


def _call_expression(filename: str, line: int, end_line: int, col: int, end_col: int) -> ast.Call | None:
    """The call expression at those positions of a source file (columns are UTF-8 byte offsets)."""
    lines = [text.encode() for text in linecache.getlines(filename)[line - 1:end_line]]
    if len(lines) != end_line - line + 1:
        return None
    lines[-1] = lines[-1][:end_col]
    lines[0] = lines[0][col:]
    try:
        node = ast.parse(b"".join(lines).decode(), mode="eval").body
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return None
    return node if isinstance(node, ast.Call) else None


def _callee(expr: ast.expr, frame: types.FrameType) -> tuple[types.FunctionType, bool] | None:
    """The Python function a call's callee expression names, and whether a first argument is bound
    to it (a method through an instance, a classmethod, a class's ``__init__``). Looked up without
    running a descriptor or ``__getattr__``: names and dotted attributes only, else None."""
    found = _static(expr, frame)
    if found is None:
        return None
    value, owner = found
    bound = False
    if isinstance(value, staticmethod):
        value = value.__func__
    elif isinstance(value, classmethod):
        value, bound = value.__func__, True
    elif isinstance(value, types.MethodType):
        value, bound = value.__func__, True
    elif isinstance(value, type):
        value, bound = inspect.getattr_static(value, "__init__", None), True
    elif isinstance(value, types.FunctionType) and owner is not None and not isinstance(owner, (type, types.ModuleType)):
        bound = value is not _own_attributes(owner).get(expr.attr)  # read from the class, not set on the instance
    return (value, bound) if isinstance(value, types.FunctionType) else None


def _own_attributes(obj: Any) -> dict[str, Any]:
    try:
        return vars(obj)
    except TypeError:  # no __dict__ (slots)
        return {}


def _static(expr: ast.expr, frame: types.FrameType) -> tuple[Any, Any] | None:
    """``(value, the object it was read from)`` of a name or dotted attribute, statically."""
    if isinstance(expr, ast.Name):
        for scope in (frame.f_locals, frame.f_globals, vars(builtins)):
            if expr.id in scope:
                return scope[expr.id], None
        return None
    if isinstance(expr, ast.Attribute):
        inner = _static(expr.value, frame)
        if inner is None:
            return None
        try:
            return inspect.getattr_static(inner[0], expr.attr), inner[0]
        except AttributeError:
            return None
    return None


def _chained(exc: BaseException) -> BaseException | None:
    """The exception ``exc`` was raised while handling, unless the raise said ``from None``."""
    return exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)


def _inside(path: str, root: str) -> bool:
    return path.startswith(root + os.sep)


def _frames(exc: BaseException) -> list[tuple[types.FrameType, int]]:
    return list(traceback.walk_tb(exc.__traceback__))


def _subtest_description(context: Any) -> str:
    """As pytest prints it: ``[msg] (key=value, ...)``."""
    parts = [f"[{context.msg}]"] if context.msg is not None else []
    if context.kwargs:
        parts.append("(" + ", ".join(f"{k}={v}" for k, v in context.kwargs.items()) + ")")
    return " ".join(parts) or "(<subtest>)"


def _skipped(report: pytest.TestReport) -> dict[str, str]:
    """A skip, or an expected failure (pytest reports both as skipped), with its reason."""
    if hasattr(report, "wasxfail"):
        return {"outcome": "xfailed", "reason": report.wasxfail}
    longrepr = report.longrepr
    reason = str(longrepr[2] if isinstance(longrepr, tuple) else longrepr)
    return {"outcome": "skipped", "reason": reason.removeprefix("Skipped: ")}


def _doc_line(item: pytest.Item) -> str | None:
    doc = getattr(getattr(item, "obj", None), "__doc__", None)
    return doc.strip().splitlines()[0] if doc and doc.strip() else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Run one pytest file and record every outcome.")
    parser.add_argument("--out", required=True)
    parser.add_argument("--root", help="pytest's rootdir, holding the test's conftest.py files (default: its directory)")
    parser.add_argument("test_file")
    args = parser.parse_args(argv)
    recorder = Recorder(args.out, args.test_file, args.root)
    rootdir = recorder.test_dir
    # as a plain ``pytest TEST_FILE`` run there (no -q: verbosity decides what pytest counts)
    pytest.main([args.test_file, "-p", "no:cacheprovider", "--rootdir", rootdir], plugins=[recorder])
    return 0 if recorder.doc["complete"] else 1


if __name__ == "__main__":
    exit_code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)  # the file is written; interpreter teardown costs seconds with torch and SGLang loaded
