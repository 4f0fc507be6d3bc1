"""What in a tree's source could tell that it is being probed: reads of the interpreter's or the
process's state, found in the syntax tree (never by running it).

A fork can behave well only when watched: look at ``sys.modules`` for a harness, walk the stack
for a probe's frame, read ``/proc/1/cmdline`` or the environment, time itself. None of that is
proof of intent (honest code reads the environment too), and none of it can be ruled out by
reading alone; so it is said where a fork departs from upstream, beside whether the cases ran
it (runner/evidence/departures.py), as a hint for the reader: it decides nothing (what decides is
departed code the probes can reach, and whether a review accepted it: docs/review.md). Names are followed through aliases (``import sys as s``,
``from sys import modules as m``, ``x = sys``), ``__import__`` and ``importlib.import_module``
with constant names, ``getattr``/``vars()[...]``/``__dict__[...]`` with constant strings (string
constants folded through ``+``, f-strings and ``"".join``); what hides its name from this reading
(a computed attribute or module name, code built at run time) is flagged as such. Cheap, not a
guarantee: it narrows where a reader looks.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

# Qualified names (module.attribute...) and what reading them tells; a prefix matches its members.
STATE: dict[str, str] = {
    "sys.modules": "reads sys.modules (the modules loaded)",
    "sys._getframe": "walks the stack", "sys._current_frames": "walks the stack",
    "sys.exc_info": "reads a traceback (frames)", "sys.exception": "reads a traceback (frames)",
    "inspect": "inspects frames or objects", "traceback.extract_stack": "walks the stack",
    "traceback.walk_stack": "walks the stack", "traceback.format_stack": "walks the stack",
    "traceback.print_stack": "walks the stack", "traceback.StackSummary": "walks the stack",
    "gc": "reads the garbage collector (every live object)",
    "os.environ": "reads the environment", "os.environb": "reads the environment", "os.getenv": "reads the environment",
    "os.getenvb": "reads the environment", "posix.environ": "reads the environment",
    "sys.argv": "reads the command line", "sys.orig_argv": "reads the command line",
    "sys.executable": "reads the interpreter's path", "sys._base_executable": "reads the interpreter's path",
    "sys.flags": "reads the interpreter's flags", "sys.path": "reads the import path", "sys.prefix": "reads the interpreter's path",
    "sys.meta_path": "reads the import hooks", "sys.path_hooks": "reads the import hooks",
    "sys.path_importer_cache": "reads the import hooks", "importlib": "finds or imports modules by name",
    "pkgutil": "lists modules", "sys.settrace": "touches the tracer", "sys.gettrace": "touches the tracer",
    "sys.setprofile": "touches the profiler", "sys.getprofile": "touches the profiler",
    "sys.monitoring": "touches the monitoring hooks", "threading.settrace": "touches the tracer",
    "threading.gettrace": "touches the tracer", "threading.setprofile": "touches the profiler",
    "threading.enumerate": "lists the threads", "sys.addaudithook": "hooks the interpreter's audit events",
    "sys.audit": "raises audit events",
    **{f"time.{f}": "reads a clock (timing)" for f in (
        "time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "process_time",
        "process_time_ns", "thread_time", "thread_time_ns", "clock_gettime", "clock_gettime_ns", "get_clock_info")},
    "datetime.datetime.now": "reads a clock (timing)",
    "datetime.datetime.utcnow": "reads a clock (timing)", "datetime.datetime.today": "reads a clock (timing)",
    "resource.getrusage": "reads the process's resource use (timing)", "os.times": "reads the process's times (timing)",
    "os.getpid": "reads process ids", "os.getppid": "reads process ids", "os.getpgid": "reads process ids",
    "os.getpgrp": "reads process ids", "os.getsid": "reads process ids", "os.uname": "reads the host's name",
    "socket.gethostname": "reads the host's name", "platform.node": "reads the host's name",
    "platform.uname": "reads the host's name", "os.getcwd": "reads the working directory",
    "os.getuid": "reads user ids", "os.geteuid": "reads user ids", "os.getlogin": "reads the user's name",
    "getpass.getuser": "reads the user's name", "os.getloadavg": "reads the machine's load",
    "os.readlink": "reads links (/proc)", "os.listdir": "lists a directory", "os.scandir": "lists a directory",
    "multiprocessing.parent_process": "reads the parent process", "signal.getsignal": "reads signal handlers",
    "builtins.__import__": "imports by name", "builtins.eval": "runs code built at run time",
    "builtins.exec": "runs code built at run time", "builtins.compile": "compiles code built at run time",
    "builtins.vars": "reads an object's namespace",
    "builtins.breakpoint": "calls the debugger hook",
    "ctypes": "reaches memory and C functions", "_thread": "reads low-level thread state",
    "os.sys": "reaches sys through os", "posix": "reads the process's state (posix)",
}
# Attributes that reach frames, other modules' globals or every class, whatever object they are read on.
ATTRIBUTES: dict[str, str] = {
    **{a: "walks frames" for a in ("f_back", "f_locals", "f_globals", "f_code", "f_builtins", "f_lineno", "tb_frame",
                                   "gi_frame", "cr_frame", "ag_frame", "__traceback__", "tb_next")},
    "__globals__": "reads a function's module globals", "__subclasses__": "lists every subclass (reflection)",
    "__closure__": "reads a function's closure", "__code__": "reads or swaps code objects",
    "__builtins__": "reads the builtins", "__loader__": "reads a module's loader", "__spec__": "reads a module's import spec",
    "__file__": "reads a module's file path",
}
# Path fragments that name the process's or the machine's state.
PATHS: dict[str, str] = {"/proc": "reads /proc (processes, command lines)", "/sys/": "reads /sys",
                         "/.dockerenv": "looks for a container", "cgroup": "reads cgroups",
                         "bwrap": "names a sandbox", "bubblewrap": "names a sandbox", "diffprobe": "names diffprobe"}


@dataclass(frozen=True)
class Hit:
    line: int
    end: int
    what: str


def _const_str(node: ast.AST | None) -> str | None:
    """A string the expression always evaluates to, folded through ``+``, f-strings and ``"".join``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _const_str(node.left), _const_str(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = [_const_str(v.value if isinstance(v, ast.FormattedValue) else v) for v in node.values]
        return "".join(parts) if all(p is not None for p in parts) else None  # type: ignore[arg-type]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"
            and len(node.args) == 1 and isinstance(node.args[0], (ast.List, ast.Tuple))):
        sep = _const_str(node.func.value)
        parts = [_const_str(e) for e in node.args[0].elts]
        return sep.join(parts) if sep is not None and all(p is not None for p in parts) else None  # type: ignore[arg-type]
    return None


BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")  # the fields of a node that hold statements


def statements(node: ast.AST):
    """Every statement under ``node`` (and each ``except`` clause), outer first; expressions are
    not entered, which is what keeps this cheap on a long module."""
    for block in BLOCKS:
        for child in getattr(node, block, None) or ():
            if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
                if not isinstance(child, ast.match_case):
                    yield child
                yield from statements(child)


class _Names:
    """Which qualified name each local name stands for, from imports and plain assignments."""

    def __init__(self, module: ast.Module) -> None:
        self.alias: dict[str, str] = {}
        assignments = []
        for node in statements(module):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                assignments.append(node)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.alias[a.asname] = a.name
                    else:
                        self.alias.setdefault(a.name.split(".")[0], a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name != "*":
                        self.alias[a.asname or a.name] = f"{node.module}.{a.name}"
        for _ in range(3):  # x = sys; y = x.modules: a few rounds reach chains of plain assignments
            for node in assignments:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                value = node.value
                if value is None:
                    continue
                qualified = self.qualify(value)
                for target in targets:
                    if isinstance(target, ast.Name) and qualified and _relevant(qualified):
                        self.alias[target.id] = qualified

    def qualify(self, node: ast.AST) -> str | None:
        """The qualified name an expression reads, when it can be told without running it."""
        if isinstance(node, ast.Name):
            if node.id in self.alias:
                return self.alias[node.id]
            return f"builtins.{node.id}" if node.id in _BUILTINS else None
        if isinstance(node, ast.Attribute):
            base = self.qualify(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call):
            func = self.qualify(node.func)
            name = _const_str(node.args[0]) if node.args else None
            if func == "importlib.import_module" and name:
                return name
            if func == "builtins.__import__" and name:  # the top package, unless a fromlist is given
                return name if node.args[3:4] or any(k.arg == "fromlist" for k in node.keywords) else name.split(".")[0]
            if func == "builtins.getattr" and len(node.args) >= 2:
                base, attr = self.qualify(node.args[0]), _const_str(node.args[1])
                return f"{base}.{attr}" if base and attr else None
            if func == "builtins.vars" and node.args:
                return self.qualify(node.args[0])
            return None
        if isinstance(node, ast.Subscript):  # vars(sys)["modules"], sys.__dict__["modules"]
            key = _const_str(node.slice)
            value = node.value
            if isinstance(value, ast.Attribute) and value.attr == "__dict__":
                value = value.value
            elif not (isinstance(value, ast.Call) and self.qualify(value.func) == "builtins.vars"):
                return None
            base = self.qualify(value.args[0] if isinstance(value, ast.Call) and value.args else value)
            return f"{base}.{key}" if base and key else None
        return None


_BUILTINS = {"__import__", "getattr", "vars", "eval", "exec", "compile", "globals", "breakpoint", "open"}


def _relevant(qualified: str) -> bool:
    """Whether a name is sensitive or leads to one (``sys`` leads to ``sys.modules``)."""
    return bool(_sensitive(qualified)) or any(key.startswith(qualified + ".") for key in STATE)


def _sensitive(qualified: str) -> str | None:
    parts = qualified.split(".")
    for n in range(len(parts), 0, -1):
        what = STATE.get(".".join(parts[:n]))
        if what:
            return what
    return None


def scan(source: str | ast.Module, filename: str = "<tree>", spans: list[tuple[int, int]] | None = None) -> list[Hit]:
    """Every place in ``source`` (text, or already parsed) that reads the interpreter's or the
    process's state, with why; with ``spans``, only within those lines (names are still followed
    through the whole module). Source that does not parse is one hit at line 1 (what it does cannot
    be read)."""
    if isinstance(source, ast.Module):
        module = source
    else:
        try:
            module = ast.parse(source, filename)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return [Hit(1, max(1, source.count("\n") + 1), "does not parse: what it does cannot be read")]
    names = _Names(module)
    hits: list[Hit] = []
    prose = {id(n.value) for n in statements(module) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}

    def hit(node: ast.AST, what: str) -> None:
        line = getattr(node, "lineno", 1)
        hits.append(Hit(line, getattr(node, "end_lineno", None) or line, what))

    for node in _within(module, spans):
        if isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
            qualified = names.qualify(node)
            what = _sensitive(qualified) if qualified else None
            if what and not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)):
                hit(node, what)
        if isinstance(node, ast.Attribute) and node.attr in ATTRIBUTES:
            hit(node, ATTRIBUTES[node.attr])
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                full = f"{node.module}.{a.name}" if isinstance(node, ast.ImportFrom) and node.module else a.name
                what = _sensitive(full)
                if what:
                    hit(node, what)
        if isinstance(node, ast.Call):
            func = names.qualify(node.func)
            first = node.args[0] if node.args else None
            if func in ("builtins.__import__", "importlib.import_module") and first is not None and _const_str(first) is None:
                hit(node, "imports a module whose name is computed")
            elif func == "builtins.getattr" and len(node.args) >= 2 and _const_str(node.args[1]) is None:
                base = names.qualify(node.args[0])
                if base is not None and _relevant(base):
                    hit(node, f"reads an attribute of {base} whose name is computed")
        text = _const_str(node) if isinstance(node, (ast.Constant, ast.BinOp, ast.JoinedStr)) and id(node) not in prose else None
        if text:
            lowered = text.lower()
            for fragment, what in PATHS.items():
                if fragment in lowered:
                    hit(node, what)
    return sorted(set(hits), key=lambda h: (h.line, h.end, h.what))


def _within(module: ast.Module, spans: list[tuple[int, int]] | None):
    """Every node of ``module``, or with ``spans`` only those whose lines meet one (a subtree wholly
    outside is not entered)."""
    if spans is None:
        yield from ast.walk(module)
        return
    todo: list[ast.AST] = [module]
    while todo:
        node = todo.pop()
        start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if start is not None and end is not None and not any(a <= end and b >= start for a, b in spans):
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))
