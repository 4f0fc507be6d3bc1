"""Mutants of the code a fix changed, patched into the already-imported tree (mutation schemata).

``diffprobe mutate`` measures how strong the evidence is: change one statement of the functions a
fix changed (its duty table's ``FIX_CODE``), on the lines the fix's cases actually execute, and run the
cases again. A mutant the cases do not notice is a change of the fix that the evidence would
still call "fixed". The operators are the classic statement-level ones of mutmut and cosmic-ray,
written here on the standard ``ast`` (both tools are whole-file, one-process-per-mutant runners
that would re-import SGLang, ~10 s, for every mutant):

- ``delete``: a statement becomes ``pass`` (a call, an assignment, a whole ``if``);
- ``true`` / ``false``: a condition (of ``if``, ``while``, a conditional expression, an operand of
  a boolean expression in a condition or a ``return``) becomes a constant (for an operand: it is dropped);
- ``negate``: such a condition ``c`` becomes ``not c``;
- ``insert``: the first ``if`` or ``while`` test of the fix's code in each function gains ``and not <input>``,
  for each attribute of an argument the fix's code reads (``req.return_logprob``...): a fix whose duty now
  depends on an input the cases never vary survives, and the host names the input (one site per function:
  every input at every test would multiply the run by the number of tests);
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
from collections.abc import Callable
from dataclasses import dataclass, field
from types import CodeType, FunctionType
from typing import Any

from . import tree
from . import fixcode
from .fixcode import mutant_key
from .coverage import expand

TELEMETRY = ("logger.", "logging.", "time_stats", "trace_ctx", "metrics_reporter", "metrics_collector")
OPERATORS = ("delete", "true", "false", "negate", "insert", "flip", "unguard", "return")


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
    spans: tuple[tuple[int, int], ...]  # the statements it changes: only a case that ran a line of one can tell it
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
            "spans": [list(span) for span in self.spans],
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
        node = fixcode.function_node(module, function.__qualname__)
        # the function that runs must be the definition read: another one bound under its name (a later
        # assignment, a definition made at run time) is not that code, and rewriting it would replace it
        if node is None or function.__code__.co_firstlineno != min([node.lineno, *(d.lineno for d in node.decorator_list)]):
            missing.append(name)
            continue
        owner = function.__qualname__.rpartition(".")[0] or None
        futures = tuple(n for n in module.body if isinstance(n, ast.ImportFrom) and n.module == "__future__")
        found.append(Target(name, names, function, owner, path, node, futures))
    return found, missing


# --- generation ------------------------------------------------------------------------------------


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

    for node, *_ in fixcode.walk(fn):
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            operands(node.test)
        elif isinstance(node, ast.Return) and isinstance(node.value, (ast.BoolOp, ast.UnaryOp)):
            for value in getattr(node.value, "values", [node.value]):
                operands(value)
    return found


def points(fn: ast.FunctionDef, names: tuple[str, ...] = ()) -> list[tuple[int, str]]:
    """(walk index, operator) of every mutation the function admits (within its slice when ``names`` are
    given): every statement of the fix's code is a site, whether a case runs it or not."""
    found = []
    conditions = _conditions(fn)
    sliced = fixcode.sliced(fn, names) if names else None
    inserted = False
    for index, (node, parent, name, position) in enumerate(fixcode.walk(fn)):
        if node is fn or getattr(node, "lineno", None) is None or (sliced is not None and id(node) not in sliced):
            continue
        if isinstance(node, ast.stmt) and isinstance(getattr(parent, name or "", None), list):
            if _telemetry(node) or isinstance(node, (ast.Pass, ast.FunctionDef)) or fixcode.docstring(node, parent, position):
                continue
            found.append((index, "delete"))
            if position == 0 and not isinstance(node, ast.Return):
                found.append((index, "return"))
            if isinstance(node, ast.Try) and node.handlers:
                found.append((index, "unguard"))
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, bool):
                found.append((index, "flip"))
        if id(node) in conditions and not (isinstance(node, ast.Constant) and isinstance(node.value, bool)):
            found += [(index, "true"), (index, "false"), (index, "negate")]
        if isinstance(node, (ast.If, ast.While)) and not inserted:  # the first test of the fix's code in the function
            found += [(index, f"insert:{attribute}") for attribute in inputs(fn, names)]
            inserted = True
        if isinstance(node, ast.keyword) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, bool):
            found.append((index, "flip"))
    return found


def inputs(fn: ast.FunctionDef, names: tuple[str, ...] = ()) -> list[str]:
    """The attributes of its arguments and loop variables (``self`` aside) the fix's code in the function (its slice
    when ``names`` are given, and the statements enclosing it) reads as values (not methods it calls), each once, in
    source order: the inputs a condition inserted by ``insert`` depends on."""
    params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    params |= {n.id for loop in ast.walk(fn) if isinstance(loop, ast.For) for n in ast.walk(loop.target)
               if isinstance(n, ast.Name)}
    called = {id(n.func) for n in ast.walk(fn) if isinstance(n, ast.Call)}
    read = [n for stmt in fixcode.deciding(fn, names) for n in fixcode.own(stmt)] if names else list(ast.walk(fn))
    found = [ast.unparse(n) for n in read if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)
             and isinstance(n.value, ast.Name) and n.value.id in params - {"self", "cls"} and id(n) not in called]
    return sorted(set(found), key=found.index)


def mutate(fn: ast.FunctionDef, index: int, operator: str) -> tuple[ast.FunctionDef, str, str, tuple[int, int]]:
    """A mutated copy of ``fn``; the source before and after, and the lines the changed node spans."""
    fn = copy.deepcopy(fn)
    node, parent, name, position = list(fixcode.walk(fn))[index]
    lines = fixcode.span(node)
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
    elif operator == "negate":
        new = ast.copy_location(ast.UnaryOp(op=ast.Not(), operand=node), node)
        _replace(parent, name, position, new)
        after = _one_line(new)
    elif operator.startswith("insert:"):
        extra = ast.UnaryOp(op=ast.Not(), operand=ast.parse(operator.split(":", 1)[1], mode="eval").body)
        before = _one_line(node.test)
        both = node.test.values if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And) else [node.test]
        node.test = ast.copy_location(ast.BoolOp(op=ast.And(), values=[*both, extra]), node.test)
        after = _one_line(node.test)
    else:  # flip
        constant = node.value if isinstance(node, (ast.keyword, ast.Return)) else node
        constant.value = not constant.value
        after = _one_line(node)
    return ast.fix_missing_locations(fn), before, after, lines


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


def generate(targets: list[Target]) -> list[tuple[Target, Mutant]]:
    """Every mutant of every statement of the targets' fix code, compiled."""
    mutants = []
    for target in targets:
        original = compile_function(target, target.node)
        for index, operator in points(target.node, target.slice):
            fn, before, after, lines = mutate(target.node, index, operator)
            changed = fixcode.enclosing(target.node, list(fixcode.walk(target.node))[index][0])
            mutant = Mutant(
                id=f"{target.name.rsplit('.', 1)[-1]}:{lines[0]}:{operator}:{index}",
                target=target.name,
                line=lines[0],
                spans=(fixcode.span(changed),),
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


def hunk_mutants(targets: list[Target], hunks: list[dict[str, str]]) -> list[tuple[Target | None, Mutant]]:
    """Mutants made of changes a vendor's backport might make (``{"id", "function", "old", "new"}``): in the
    function of the fix's code named ``function``, its source text ``old`` (exactly once) becomes ``new``.
    Only a case that ran a statement the text touches can tell it, unless the change reaches further: it
    touches the function's header, or changes which names are the function's own (a name assigned
    anywhere is local everywhere); then every case that ran the function."""
    by_name = {t.name: t for t in targets}
    mutants = []
    for hunk in hunks:
        target = by_name.get(hunk["function"])
        mutant = Mutant(id=hunk["id"], target=hunk["function"], line=0, spans=(), operator="hunk",
                        before=_first(hunk["old"]), after=_first(hunk["new"]))
        if target is None:
            mutant.unappliable = "the tree has no such function of the fix's code"
            mutants.append((None, mutant))
            continue
        node = target.node
        with open(target.path, encoding="utf-8") as handle:
            text = handle.read()
        lines = text.splitlines(keepends=True)
        segment = "".join(lines[node.lineno - 1 : node.end_lineno])
        if segment.count(hunk["old"]) != 1:
            mutant.unappliable = f"its text occurs {segment.count(hunk['old'])} times in the function, not once"
            mutants.append((target, mutant))
            continue
        start = node.lineno + segment[: segment.index(hunk["old"])].count("\n")
        end = start + hunk["old"].rstrip("\n").count("\n")
        whole = fixcode.span(node)
        touched = fixcode.touching(node, start, end)
        mutant.line = start
        mutant.spans = tuple(fixcode.span(s) for s in touched) if touched and start >= node.body[0].lineno else (whole,)
        try:
            fn = fixcode.changed(text, node, hunk["old"], hunk["new"])
            if hunk.get("conditions"):  # the host's list of the changed function's conditions: recorded, case by case
                from . import recording

                fn = recording.recording(fn, hunk["conditions"])
            mutant.code = compile_function(target, fn)  # type: ignore[arg-type]
        except (SyntaxError, LookupError, ValueError, IndexError) as exc:
            mutant.unappliable = f"does not compile: {exc}"
        else:
            original = target.function.__code__
            if any(set(getattr(mutant.code, k)) != set(getattr(original, k)) for k in ("co_varnames", "co_cellvars")):
                mutant.spans = (whole,)
            if mutant.code.co_freevars != original.co_freevars:
                mutant.unappliable = "changes the function's closure"
        mutants.append((target, mutant))
    return mutants


def _first(text: str) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= 100 else line[:97] + "..."


def apply(target: Target, mutant: Mutant) -> None:
    """Patch the mutant into the imported tree (in a forked child only)."""
    assert mutant.code is not None
    target.function.__code__ = mutant.code


# --- running ---------------------------------------------------------------------------------------

SCHEMA = "diffprobe.mutation/1"


def run(probe: Any, cases: list[Any], run_forked: Callable[[Any], dict[str, Any]], display: Callable[[str], str],
        hunks: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """Run the probe's cases on the tree as it is, then every mutant of the fix's code against the cases
    that held and ran the statement it changes (each result's ``lines``), until one tells it from the tree.
    A mutant no case reaches is run against none: its site is *not covered*, and it counts against the
    score on the host. Given ``hunks``, those changes are the mutants instead, each run against the cases
    that held and reached it until what the tree with it reads is settled. Results are raw case results:
    the host judges."""
    targets, missing = find(probe.table.FIX_CODE)
    baseline = [run_forked(case) for case in cases]
    # case id -> absolute path of a function of the fix's code -> the lines of it the case ran
    ran = {case.id: {t.path: expand((result.get("lines") or {}).get(display(t.path), ())) for t in targets}
           for case, result in zip(cases, baseline)}
    # A case the tree already fails cannot tell a mutant from it (the host ignores it all the same).
    held = [case for case, result in zip(cases, baseline)
            if result.get("outcome") == "observed" and result.get("classification") == "clean"]
    mutants = []
    kills: dict[str, int] = {}  # case id -> mutants it told from the tree so far: tried first on the next one
    for target, mutant in hunk_mutants(targets, hunks) if hunks is not None else generate(targets):
        path = target.path if target is not None else ""
        reaching = [c for c in cases if any(fixcode.reached(span, ran[c.id].get(path, set())) for span in mutant.spans)]
        entry: dict[str, Any] = {**mutant.header(display if path else str, path), "equivalent": mutant.equivalent,
                                 "unappliable": mutant.unappliable, "reached_by": [c.id for c in reaching], "cases": []}
        declared = mutant_key(mutant.target, mutant.operator, mutant.before) in probe.table.EQUIVALENT  # the host says so too
        if mutant.equivalent is None and mutant.unappliable is None and not declared:
            # A mutant: the cases that told most mutants so far first, until one tells it. A hunk: what the tree
            # with it reads, settled by the first guard it breaks (regression, nothing reads worse), else by the
            # first bug case it breaks once every guard held (not fixed), else by every case holding (fixed).
            order = sorted((c for c in held if c in reaching),
                           key=lambda c: (hunks is not None and c.role != "guard", -kills.get(c.id, 0)))
            for case in order:
                patched = dataclasses.replace(
                    case, build=lambda journal, case=case, target=target, mutant=mutant: (apply(target, mutant), case.build(journal))[1]
                )
                result = run_forked(patched)
                # the host judges a mutant's cases by their effects (and a change's by the conditions it wrote): their
                # lines, and an operator's conditions, are dropped so that hundreds of mutants stay within a result file
                entry["cases"].append({**result, "lines": None, "renamed": None,
                                       **({} if hunks is not None else {"conditions": None})})
                if _tells(result):
                    kills[case.id] = kills.get(case.id, 0) + 1
                    break
        mutants.append(entry)
    return {
        "schema": SCHEMA,
        "probe": probe.id,
        "fix": probe.fix,
        "targets": [_target_record(t, ran, display) for t in targets],
        "missing": missing,
        "operators": list(OPERATORS),
        "baseline": baseline,
        "mutants": mutants,
    }


def _tells(result: dict[str, Any]) -> bool:
    """Whether a case's result on a mutant tells it from the tree (as the host will judge it again): a duty
    failed, or the tree's own code raised or hung. A gap of our doubles tells nothing: the next case is tried."""
    error = result.get("error") or {}
    return result.get("classification") == "bug" or result.get("outcome") == "timeout" or error.get("where") == "sglang"


def _target_record(target: Target, ran: dict[str, dict[str, set[int]]], display: Callable[[str], str]) -> dict[str, Any]:
    """One function of the fix's code: where it is, its statements, and those no case ran."""
    lines = set().union(*(by_file.get(target.path, set()) for by_file in ran.values()))
    statements = [fixcode.span(s) for s in fixcode.statements(target.node, target.slice)]
    return {"function": target.name, "file": display(target.path), "lines": [target.node.lineno, target.node.end_lineno],
            "slice": list(target.slice), "statements": [s[0] for s in statements],
            "not_covered": [s[0] for s in statements if not fixcode.reached(s, lines)]}
