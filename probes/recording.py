"""Recording, in the tree's process, which atomic conditions of the fix's code a case evaluated, and to what.

Given the host's list of conditions (``probes/conditions.py`` reads them; the host sends them as data, each
by its exact place in the file), :func:`install` rewrites just those functions and swaps each one's
``__code__`` (every reference to it, ``from x import f`` included, records); a case's child then reads
:func:`seen`. The rewrite keeps behaviour: every operand is evaluated as often, in the same order, with
the same short-circuits, walrus bindings and exceptions, and its truth is asked once (a ``__bool__`` with
side effects runs as often as before); a boolean expression whose value is used is rebuilt as
conditional expressions over a per-thread stack of operand values, so its value is the operand itself.

A condition not found where the host said (other bytes, a function the tree lacks) is never seen: it
reads "never true or false", never as evidence.
"""

from __future__ import annotations

import ast
import copy
import os
import threading
from types import FunctionType
from typing import Any

from . import mutation
from .conditions import TESTED, TRUTH, classify, position

# Types whose truth has no side effects: a value-kind condition (its value used, nobody tests it) is recorded only
# with one of these, or an object whose type has neither ``__bool__`` nor ``__len__`` (always true).
PURE = frozenset({bool, int, type(None), str, bytes, list, tuple, dict, set, frozenset})

NAME = "__cond__"  # the global the rewritten code calls (a dunder: never mangled inside a class)
_SEEN: dict[int, int] = {}  # condition index -> 1: seen true, 2: seen false (or both)
NAMES: dict[int, str] = {}  # index -> name of every condition this process's rewritten code records
_NEXT = [0]  # the next index to hand out
_STACK = threading.local()


class _Record:
    """What the rewritten code calls: ``t`` records a condition tested for its truth, ``v`` one whose value is
    used, ``p`` an operand a boolean expression tests and may return (kept on the stack: ``take`` returns it,
    ``drop`` forgets it)."""

    @staticmethod
    def t(index: int, value: Any) -> bool:
        truth = True if value else False
        _SEEN[index] = _SEEN.get(index, 0) | (1 if truth else 2)
        return truth

    @staticmethod
    def v(index: int, value: Any) -> Any:
        kind = type(value)
        if kind in PURE or (getattr(kind, "__bool__", None) is None and getattr(kind, "__len__", None) is None):
            _SEEN[index] = _SEEN.get(index, 0) | (1 if value else 2)
        return value

    @staticmethod
    def p(index: int, value: Any) -> bool:
        truth = True if value else False
        if index >= 0:
            _SEEN[index] = _SEEN.get(index, 0) | (1 if truth else 2)
        stack = getattr(_STACK, "values", None)
        if stack is None:
            stack = _STACK.values = []
        stack.append(value)
        return truth

    @staticmethod
    def take() -> Any:
        return _STACK.values.pop()

    @staticmethod
    def drop() -> None:
        _STACK.values.pop()


def _call(method: str, *args: ast.expr, at: ast.AST) -> ast.Call:
    call = ast.Call(func=ast.Attribute(value=ast.Name(id=NAME, ctx=ast.Load()), attr=method, ctx=ast.Load()),
                    args=list(args), keywords=[])
    return ast.copy_location(call, at)


class _Rewrite(ast.NodeTransformer):
    def __init__(self, kinds: dict[int, str], indices: dict[int, int]) -> None:
        self.kinds, self.indices = kinds, indices  # id(node) -> kind; id(node) -> index, for the wanted ones

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        values = [(self.indices.get(id(v), -1), self.kinds.get(id(v))) for v in node.values]
        node = self.generic_visit(node)  # type: ignore[assignment]
        if not any(i >= 0 and kind == TESTED for i, kind in values):
            return node
        # a and rest -> (drop() or rest) if p(a) else take();  a or rest -> take() if p(a) else (drop() or rest)
        folded = node.values[-1]
        for (index, _), value in zip(reversed(values[:-1]), reversed(node.values[:-1])):
            on = ast.BoolOp(op=ast.Or(), values=[_call("drop", at=value), folded])
            back = _call("take", at=value)
            body, orelse = (on, back) if isinstance(node.op, ast.And) else (back, on)
            test = _call("p", ast.Constant(index), value, at=value)
            folded = ast.copy_location(ast.IfExp(test=test, body=body, orelse=orelse), value)
        return folded

    def visit(self, node: ast.AST) -> ast.AST:
        index, kind = self.indices.get(id(node), -1), self.kinds.get(id(node))
        new = super().visit(node)
        if index < 0 or kind == TESTED:
            return new
        return _call("t" if kind == TRUTH else "v", ast.Constant(index), new, at=node)


def rewrite(fn: ast.FunctionDef, wanted: dict[tuple[int, int, int, int], tuple[str, int]]) -> tuple[ast.FunctionDef, set[int]]:
    """A copy of ``fn`` recording the conditions ``wanted`` (position -> (kind, index)), and the indices it
    found where and as the list said."""
    fn = copy.deepcopy(fn)
    kinds, indices = {}, {}
    statements = [node for node in ast.walk(fn) if isinstance(node, ast.stmt) and node is not fn]
    for node, kind in (pair for stmt in statements for pair in classify(stmt)):
        kinds[id(node)] = kind
        entry = wanted.get(position(node))
        if entry is not None and entry[0] == kind:
            indices[id(node)] = entry[1]
    body = [_Rewrite(kinds, indices).visit(stmt) for stmt in fn.body]
    fn.body = body
    return ast.fix_missing_locations(fn), set(indices.values())


def instrument(function: FunctionType, rewritten_code: Any) -> None:
    """Swap the function's code for the recording one (the recorder is a global of its module)."""
    function.__globals__[NAME] = _Record
    function.__code__ = rewritten_code


def reset() -> None:
    _SEEN.clear()


def seen(names: dict[int, str]) -> dict[str, list[bool]]:
    """What this process evaluated: condition name -> the values it took (``[false, true]``, one, or absent)."""
    return {names[i]: [v for v, bit in ((False, 2), (True, 1)) if _SEEN[i] & bit] for i in sorted(_SEEN) if i in names}


def install(listed: list[dict[str, Any]], sglang_root: str) -> dict[int, str]:
    """Rewrite, in this (the tree's) process, each function the host listed so that it records its conditions:
    ``[{"function": qualified name, "file": relative to sglang_root, "conditions": [{"at": name, "position":
    [line, col, end line, end col], "kind": kind}]}]``. Returns index -> condition name for the conditions
    found where the list said; a function the tree lacks, defines in another file or whose rewritten code
    would close over other names is left as it is (its conditions are never seen)."""
    targets, _ = mutation.find({entry["function"]: () for entry in listed})
    by_name = {t.name: t for t in targets}
    for entry in listed:
        target = by_name.get(entry["function"])
        if target is None or os.path.relpath(target.path, sglang_root).replace(os.sep, "/") != entry["file"]:
            continue
        wanted, at = allocate(entry["conditions"])
        fn, found = rewrite(target.node, wanted)
        try:
            code = mutation.compile_function(target, fn)
        except (SyntaxError, LookupError, ValueError):
            continue
        if code.co_freevars != target.function.__code__.co_freevars:
            continue
        instrument(target.function, code)
        NAMES.update({index: at[index] for index in found})
    return NAMES


def allocate(listed: list[dict[str, Any]]) -> tuple[dict[tuple[int, ...], tuple[str, int]], dict[int, str]]:
    """Indices for conditions ``[{"at", "position", "kind"}]``: (position -> (kind, index), index -> name)."""
    wanted, at = {}, {}
    for condition in listed:
        wanted[tuple(condition["position"])] = (condition["kind"], _NEXT[0])
        at[_NEXT[0]] = condition["at"]
        _NEXT[0] += 1
    return wanted, at


def recording(fn: ast.FunctionDef, listed: list[dict[str, Any]]) -> ast.FunctionDef:
    """``fn`` (a mutant's function) recording the conditions the host listed for it, found where it said."""
    wanted, at = allocate(listed)
    fn, found = rewrite(fn, wanted)
    NAMES.update({index: at[index] for index in found})
    return fn
