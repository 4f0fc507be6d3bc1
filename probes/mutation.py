"""Mutants of the code a fix changed, patched into the already-imported tree (mutation schemata).

``diffprobe mutate`` measures how strong the evidence is: change one statement of the functions a
fix changed (``duties.FIX_CODE``), on the lines the fix's cases actually execute, and run the
cases again. A mutant the cases do not notice is a change of the fix that the evidence would
still call "fixed". The operators are the classic statement-level ones of mutmut and cosmic-ray,
written here on the standard ``ast`` (both tools are whole-file, one-process-per-mutant runners
that would re-import SGLang, ~10 s, for every mutant):

- ``delete``: a statement becomes ``pass`` (a call, an assignment, a whole ``if``);
- ``true`` / ``false``: a condition (of ``if``, ``while``, a conditional expression, an operand of
  a boolean expression in a condition or a ``return``) becomes a constant;
- ``flip``: a boolean keyword argument or a returned boolean constant is negated;
- ``unguard``: a ``try`` loses its ``except`` clauses (the failure escapes);
- ``return``: the block returns before its first statement.

Statements that only log, time or count (``logger.*``, ``*.time_stats.*``, ``*.trace_ctx.*``,
metrics) are left alone: no duty is about them, and cosmic-ray's filters exist for the same reason.

Mutants are compiled in the harness's parent, once; a forked child swaps the function's
``__code__`` (every reference to the function, ``from x import f`` included, sees the mutant) and
runs a case. A mutant whose byte-code equals the original's is equivalent by construction.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import CodeType, FunctionType
from typing import Any

from . import tree
from .coverage import expand
from .duties import FIX_CODE

TELEMETRY = ("logger.", "logging.", "time_stats", "trace_ctx", "metrics_reporter", "metrics_collector")
OPERATORS = ("delete", "true", "false", "flip", "unguard", "return")


@dataclass(frozen=True)
class Target:
    """One function a fix changed, found in the tree."""

    name: str  # qualified: module.Class.function
    slice: tuple[str, ...]  # empty: the whole function; else only the statements naming one of these
    function: FunctionType
    owner: str | None  # the class it is defined in, or None for a module-level function
    path: str
    node: ast.FunctionDef
    futures: tuple[ast.stmt, ...]  # the module's ``from __future__`` imports (they shape the byte-code)

    @property
    def lines(self) -> range:
        return range(self.node.lineno, (self.node.end_lineno or self.node.lineno) + 1)


@dataclass
class Mutant:
    id: str
    target: str
    line: int
    operator: str
    before: str
    after: str
    code: CodeType | None = field(default=None, repr=False)
    equivalent: str | None = None  # why, when it is equivalent by construction
    unappliable: str | None = None  # why it cannot be patched in (it is then an error)

    def header(self, display: Callable[[str], str], path: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "function": self.target,
            "file": display(path),
            "line": self.line,
            "operator": self.operator,
            "before": self.before,
            "after": self.after,
        }


def find(code: dict[str, tuple[str, ...]]) -> tuple[list[Target], list[str]]:
    """The targets the tree has, and the names it lacks."""
    found, missing = [], []
    for name, names in code.items():
        try:
            obj = tree.resolve(name)
        except tree.Missing:
            missing.append(name)
            continue
        function = inspect.unwrap(obj)
        if not isinstance(function, FunctionType):
            missing.append(name)
            continue
        path = inspect.getsourcefile(function) or ""
        with open(path, encoding="utf-8") as handle:
            module = ast.parse(handle.read(), path)
        node = _function_node(module, function)
        if node is None:
            missing.append(name)
            continue
        owner = function.__qualname__.rpartition(".")[0] or None
        futures = tuple(n for n in module.body if isinstance(n, ast.ImportFrom) and n.module == "__future__")
        found.append(Target(name, names, function, owner, path, node, futures))
    return found, missing


def _function_node(module: ast.Module, function: FunctionType) -> ast.FunctionDef | None:
    parts = function.__qualname__.split(".")
    scope: list[ast.stmt] = module.body
    node = None
    for part in parts:
        node = next((n for n in scope if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == part), None)
        if node is None:
            return None
        scope = node.body
    return node if isinstance(node, ast.FunctionDef) else None


# --- generation ------------------------------------------------------------------------------------


def _walk(node: ast.AST) -> Iterator[tuple[ast.AST, ast.AST | None, str | None, int | None]]:
    """Every node below ``node`` with its parent, field and index, in a fixed order."""
    stack: list[tuple[ast.AST, ast.AST | None, str | None, int | None]] = [(node, None, None, None)]
    while stack:
        current, parent, name, index = stack.pop()
        yield current, parent, name, index
        children = []
        for child_field, value in ast.iter_fields(current):
            if isinstance(value, list):
                children += [(v, current, child_field, i) for i, v in enumerate(value) if isinstance(v, ast.AST)]
            elif isinstance(value, ast.AST):
                children.append((value, current, child_field, None))
        stack.extend(reversed(children))


def _telemetry(stmt: ast.stmt) -> bool:
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    called = ast.unparse(stmt.value.func)
    return any(marker in called or called.startswith(marker) for marker in TELEMETRY)


def _conditions(fn: ast.FunctionDef) -> set[int]:
    """ids of the expressions that act as conditions: tests, and operands of boolean expressions
    in tests or in returned values."""
    found: set[int] = set()

    def operands(expr: ast.expr) -> None:
        found.add(id(expr))
        inner = expr.operand if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not) else expr
        if isinstance(inner, ast.BoolOp):
            for value in inner.values:
                operands(value)

    for node, *_ in _walk(fn):
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            operands(node.test)
        elif isinstance(node, ast.Return) and isinstance(node.value, (ast.BoolOp, ast.UnaryOp)):
            for value in getattr(node.value, "values", [node.value]):
                operands(value)
    return found


_BLOCKS = ("body", "orelse", "finalbody", "handlers")


def _sliced(fn: ast.FunctionDef, names: tuple[str, ...]) -> set[int]:
    """ids of the nodes in the slice: each statement whose own part (an ``if``'s test, a simple
    statement whole) names one of ``names``, with its expressions; and the ``return``,
    ``continue`` and ``break`` beside such a statement, which decide where its effect ends."""
    inside: set[int] = set()

    def own(stmt: ast.stmt) -> list[ast.AST]:
        return [n for key, value in ast.iter_fields(stmt) if key not in _BLOCKS
                for root in (value if isinstance(value, list) else [value]) if isinstance(root, ast.AST)
                for n in ast.walk(root)]

    def names_one(stmt: ast.stmt) -> bool:
        return any((isinstance(n, ast.Name) and n.id in names) or (isinstance(n, ast.Attribute) and n.attr in names)
                   for n in own(stmt))

    for node, *_ in _walk(fn):
        for block in (getattr(node, key, None) for key in _BLOCKS):
            if not isinstance(block, list):
                continue
            chosen = [stmt for stmt in block if isinstance(stmt, ast.stmt) and names_one(stmt)]
            if chosen:
                chosen += [stmt for stmt in block if isinstance(stmt, (ast.Return, ast.Continue, ast.Break))]
            for stmt in chosen:
                inside.add(id(stmt))
                inside.update(id(n) for n in own(stmt))
    return inside


def points(fn: ast.FunctionDef, executed: set[int], names: tuple[str, ...] = ()) -> list[tuple[int, str]]:
    """(walk index, operator) of every mutation the function admits on executed lines (within its
    slice when ``names`` are given)."""
    found = []
    conditions = _conditions(fn)
    sliced = _sliced(fn, names) if names else None
    for index, (node, parent, name, position) in enumerate(_walk(fn)):
        line = getattr(node, "lineno", None)
        if line not in executed or node is fn or (sliced is not None and id(node) not in sliced):
            continue
        if isinstance(node, ast.stmt) and isinstance(getattr(parent, name or "", None), list):
            if _telemetry(node) or isinstance(node, (ast.Pass, ast.FunctionDef)) or _docstring(node, parent, position):
                continue
            found.append((index, "delete"))
            if position == 0 and not isinstance(node, ast.Return):
                found.append((index, "return"))
            if isinstance(node, ast.Try) and node.handlers:
                found.append((index, "unguard"))
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, bool):
                found.append((index, "flip"))
        if id(node) in conditions and not (isinstance(node, ast.Constant) and isinstance(node.value, bool)):
            found += [(index, "true"), (index, "false")]
        if isinstance(node, ast.keyword) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, bool):
            found.append((index, "flip"))
    return found


def _docstring(node: ast.AST, parent: ast.AST | None, position: int | None) -> bool:
    return (
        position == 0
        and isinstance(parent, ast.FunctionDef)
        and isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def mutate(fn: ast.FunctionDef, index: int, operator: str) -> tuple[ast.FunctionDef, str, str, int]:
    """A mutated copy of ``fn``; the source before and after, and the line."""
    fn = copy.deepcopy(fn)
    node, parent, name, position = list(_walk(fn))[index]
    line = node.lineno
    before = _one_line(node)
    if operator in ("delete", "return", "unguard"):
        body = getattr(parent, name)
        if operator == "delete":
            replacement: list[ast.stmt] = [ast.Pass()]
        elif operator == "return":
            replacement = [ast.Return(value=None), node]
        else:
            replacement = [*node.body, *node.finalbody]
        body[position : position + 1] = [ast.copy_location(r, node) if r is not node else r for r in replacement]
        after = "; ".join(_one_line(r) for r in replacement[:2])
    elif operator in ("true", "false"):
        new = ast.copy_location(ast.Constant(value=operator == "true"), node)
        _replace(parent, name, position, new)
        after = str(operator == "true")
    else:  # flip
        constant = node.value if isinstance(node, (ast.keyword, ast.Return)) else node
        constant.value = not constant.value
        after = _one_line(node)
    return ast.fix_missing_locations(fn), before, after, line


def _replace(parent: ast.AST | None, name: str | None, position: int | None, new: ast.AST) -> None:
    if position is None:
        setattr(parent, name or "", new)
    else:
        getattr(parent, name or "")[position] = new


def _one_line(node: ast.AST) -> str:
    text = ast.unparse(node).split("\n")[0]
    return text if len(text) <= 100 else text[:97] + "..."


# --- compiling and patching ------------------------------------------------------------------------


def compile_function(target: Target, fn: ast.FunctionDef) -> CodeType:
    """The code object of ``fn`` as the tree's module would compile it (same file name, lines,
    future flags, and a class around it so ``super()`` closes over ``__class__`` as before)."""
    fn = copy.copy(fn)
    fn.decorator_list = []
    body: ast.stmt = fn
    if target.owner is not None:
        body = ast.ClassDef(name=target.owner.split(".")[-1], bases=[], keywords=[], body=[fn], decorator_list=[])
        ast.copy_location(body, fn)
    module = ast.fix_missing_locations(ast.Module(body=[*target.futures, body], type_ignores=[]))
    return _find_code(compile(module, target.path, "exec", dont_inherit=True), fn.name, fn.lineno)


def _find_code(code: CodeType, name: str, line: int) -> CodeType:
    for const in code.co_consts:
        if isinstance(const, CodeType):
            if const.co_name == name and const.co_firstlineno == line:
                return const
            try:
                return _find_code(const, name, line)
            except LookupError:
                continue
    raise LookupError(name)


def _same(a: CodeType, b: CodeType) -> bool:
    """Same byte-code, constants (nested functions compared alike) and names."""
    if a.co_code != b.co_code or a.co_names != b.co_names or len(a.co_consts) != len(b.co_consts):
        return False
    return all(
        _same(x, y) if isinstance(x, CodeType) and isinstance(y, CodeType) else type(x) is type(y) and x == y
        for x, y in zip(a.co_consts, b.co_consts)
    )


def generate(targets: list[Target], executed: dict[str, set[int]]) -> list[tuple[Target, Mutant]]:
    """Every mutant of the targets on the lines executed (by file), compiled."""
    mutants = []
    for target in targets:
        lines = executed.get(target.path, set()) & set(target.lines)
        original = compile_function(target, target.node)
        for index, operator in points(target.node, lines, target.slice):
            fn, before, after, line = mutate(target.node, index, operator)
            mutant = Mutant(
                id=f"{target.name.rsplit('.', 1)[-1]}:{line}:{operator}:{index}",
                target=target.name,
                line=line,
                operator=operator,
                before=before,
                after=after,
            )
            try:
                mutant.code = compile_function(target, fn)
            except (SyntaxError, LookupError, ValueError) as exc:
                mutant.unappliable = f"does not compile: {exc}"
            else:
                if mutant.code.co_freevars != target.function.__code__.co_freevars:
                    mutant.unappliable = "changes the function's closure"
                elif _same(mutant.code, original):
                    mutant.equivalent = "compiles to the same byte-code as the original"
            mutants.append((target, mutant))
    return mutants


def apply(target: Target, mutant: Mutant) -> None:
    """Patch the mutant into the imported tree (in a forked child only)."""
    assert mutant.code is not None
    target.function.__code__ = mutant.code


# --- running ---------------------------------------------------------------------------------------

SCHEMA = "diffprobe.mutation/1"


def run(probe: Any, cases: list[Any], run_forked: Callable[[Any], dict[str, Any]], display: Callable[[str], str]) -> dict[str, Any]:
    """Run the probe's cases on the tree as it is, then against every mutant of the fix's code on
    the lines they executed (each result's ``lines``). Results are raw case results: the host judges."""
    targets, missing = find(FIX_CODE[probe.fix])
    executed: dict[str, set[int]] = {}  # by absolute path, from each case's recorded lines (probes/coverage.py)
    baseline = [run_forked(case) for case in cases]
    for target in targets:
        for result in baseline:
            executed.setdefault(target.path, set()).update(expand((result.get("lines") or {}).get(display(target.path), ())))
    # A case the tree already fails cannot tell a mutant from it (the host ignores it all the same).
    held = [case for case, result in zip(cases, baseline)
            if result.get("outcome") == "observed" and result.get("classification") == "clean"]
    mutants = []
    for target, mutant in generate(targets, executed):
        entry: dict[str, Any] = {**mutant.header(display, target.path), "equivalent": mutant.equivalent,
                                 "unappliable": mutant.unappliable, "cases": []}
        if mutant.equivalent is None and mutant.unappliable is None:
            for case in held:  # until one case tells the mutant from the tree
                patched = dataclasses.replace(
                    case, build=lambda journal, case=case, target=target, mutant=mutant: (apply(target, mutant), case.build(journal))[1]
                )
                entry["cases"].append(run_forked(patched))
                if entry["cases"][-1]["classification"] != "clean":
                    break
        mutants.append(entry)
    return {
        "schema": SCHEMA,
        "probe": probe.id,
        "fix": probe.fix,
        "targets": [{"function": t.name, "file": display(t.path), "lines": [t.node.lineno, t.node.end_lineno], "slice": list(t.slice),
                     "executed": sorted(executed.get(t.path, set()) & set(t.lines))} for t in targets],
        "missing": missing,
        "operators": list(OPERATORS),
        "baseline": baseline,
        "mutants": mutants,
    }
