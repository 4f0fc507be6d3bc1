"""The atomic conditions of the fix's code: which they are, read from a function's ``ast``.

Line coverage cannot tell a condition that went both ways from one that went one way only: its line runs
either way. So the fix's code is read for its *atomic* conditions (the parts of a boolean expression, a
comparison, ``x is None``, ``k in d``, a call used as a test, the test of a ternary, of a ``while``, an
``assert`` or a comprehension's ``if``), and each is recorded, case by case, as seen true and/or false.

Standard library only, so that both sides read a function the same way: the host lists them from the
stored tree's bytes (``runner/judge/conditions.py``: the list is the host's, never the tree's), and the
tree's process finds the same nodes again to record them (``probes/recording.py``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

TRUTH, TESTED, VALUE = "truth", "tested", "value"
# ``truth``: only its truth is used (a test, an operand of ``not``, any operand of a boolean expression that is
# itself only tested): it is replaced by its truth. ``tested``: a boolean expression tests it and may return it
# (``x = a or b``: ``a``). ``value``: its value is used and nobody tests it here (the last operand of such an
# expression, a comparison assigned or returned): recorded only when its type's truth is plain (probes/recording.py).


def classify(root: ast.AST) -> Iterator[tuple[ast.expr, str]]:
    """Every atomic condition of an expression, or of a statement's own part (not its blocks': each
    statement is read on its own), with its kind, in a fixed order."""
    yield from _visit(root, None)


def _visit(node: ast.AST, ctx: str | None) -> Iterator[tuple[ast.expr, str]]:
    if isinstance(node, ast.BoolOp):
        last = len(node.values) - 1
        for i, value in enumerate(node.values):
            if ctx == TRUTH:
                yield from _visit(value, TRUTH)
            else:  # its value is used: earlier operands are tested and may be returned, the last only returned
                yield from _visit(value, TESTED if i < last else VALUE)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield from _visit(node.operand, TRUTH)
        return
    if isinstance(node, ast.IfExp):
        yield from _visit(node.test, TRUTH)
        yield from _visit(node.body, ctx if ctx == TRUTH else None)
        yield from _visit(node.orelse, ctx if ctx == TRUTH else None)
        return
    if ctx is not None and isinstance(node, ast.expr):
        yield node, ctx
    elif isinstance(node, ast.Compare):
        yield node, VALUE
    tests = {"test"} if isinstance(node, (ast.If, ast.While, ast.Assert)) else set()
    for field, value in ast.iter_fields(node):
        if isinstance(node, (ast.stmt, ast.excepthandler)) and field in ("body", "orelse", "finalbody", "handlers"):
            continue  # statements are visited one by one (a statement's own part: fixcode.own)
        if isinstance(node, ast.comprehension) and field == "ifs":
            for test in value:
                yield from _visit(test, TRUTH)
            continue
        if isinstance(node, ast.match_case) and field == "guard" and value is not None:
            yield from _visit(value, TRUTH)
            continue
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, ast.AST):
                yield from _visit(child, TRUTH if field in tests else None)


def position(node: ast.AST) -> tuple[int, int, int, int]:
    return node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0


def key(path: str, node: ast.AST) -> str:
    """A condition's name in a receipt: ``file:line:col`` of its first character."""
    return f"{path}:{node.lineno}:{node.col_offset}"


def atoms(statements: list[ast.stmt]) -> list[tuple[ast.expr, str]]:
    """The atomic conditions of some statements' own parts (not their blocks': each statement of the fix's
    code is given), in source order, each once."""
    found: dict[tuple[int, int, int, int], tuple[ast.expr, str]] = {}
    for stmt in statements:
        for node, kind in classify(stmt):
            found.setdefault(position(node), (node, kind))
    return [found[p] for p in sorted(found)]
