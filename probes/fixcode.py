"""The fix's code, read from source with ``ast`` alone: where each function of ``duties.FIX_CODE`` is, which
of its statements are the fix's (a whole function, or the slice of a long one), and the lines each
statement spans.

Pure standard library, so both sides read the fix's code the same way: the harness from the imported
tree (mutation sites, ``probes/mutation.py``), the host from the stored tree's files (which lines of the
fix's code the cases ran, ``runner/judge/fixcode.py``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

# The blocks of a compound statement (its own part is everything else).
BLOCKS = ("body", "orelse", "finalbody", "handlers")


def candidates(qualified: str) -> Iterator[tuple[str, str]]:
    """(file relative to the directory holding ``sglang/``, qualified name inside it) for each way to split
    ``pkg.mod.Class.function`` into a module and a name, longest module first."""
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module, name = parts[:cut], ".".join(parts[cut:])
        yield "/".join(module) + ".py", name
        yield "/".join(module) + "/__init__.py", name


def locate(read: Callable[[str], str | None], qualified: str) -> tuple[str, ast.FunctionDef] | None:
    """Where ``pkg.mod.Class.function`` is defined: (its file, its definition), reading each candidate file
    with ``read`` (None: no such file); None when no file defines it."""
    for rel, qualname in candidates(qualified):
        text = read(rel)
        node = function_node(ast.parse(text), qualname) if text is not None else None
        if node is not None:
            return rel, node
    return None


def function_node(module: ast.Module, qualname: str) -> ast.FunctionDef | None:
    """The definition of ``Class.function`` (or ``function``) in a parsed module, or None: at each level the
    last one of that name, the one bound once the body has run (a tree that defines a function twice runs
    the second; reading the first would judge code that never runs)."""
    scope: list[ast.stmt] = module.body
    node = None
    for part in qualname.split("."):
        named = [n for n in scope if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == part]
        if not named:
            return None
        node = named[-1]
        scope = node.body
    return node if isinstance(node, ast.FunctionDef) else None


def walk(node: ast.AST) -> Iterator[tuple[ast.AST, ast.AST | None, str | None, int | None]]:
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


def own(stmt: ast.stmt) -> list[ast.AST]:
    """The nodes of a statement's own part: everything but the statements of its blocks."""
    return [n for key, value in ast.iter_fields(stmt) if key not in BLOCKS
            for root in (value if isinstance(value, list) else [value]) if isinstance(root, ast.AST)
            for n in ast.walk(root)]


def sliced(fn: ast.FunctionDef, names: tuple[str, ...]) -> set[int]:
    """ids of the nodes in the slice: each statement whose own part (an ``if``'s test, a simple
    statement whole) names one of ``names``, with its expressions; and the ``return``,
    ``continue`` and ``break`` beside such a statement, which decide where its effect ends."""
    inside: set[int] = set()

    def names_one(stmt: ast.stmt) -> bool:
        return any((isinstance(n, ast.Name) and n.id in names) or (isinstance(n, ast.Attribute) and n.attr in names)
                   for n in own(stmt))

    for node, *_ in walk(fn):
        for block in (getattr(node, key, None) for key in BLOCKS):
            if not isinstance(block, list):
                continue
            chosen = [stmt for stmt in block if isinstance(stmt, ast.stmt) and names_one(stmt)]
            if chosen:
                chosen += [stmt for stmt in block if isinstance(stmt, (ast.Return, ast.Continue, ast.Break))]
            for stmt in chosen:
                inside.add(id(stmt))
                inside.update(id(n) for n in own(stmt))
    return inside


def docstring(node: ast.AST, parent: ast.AST | None, position: int | None) -> bool:
    return (
        position == 0
        and isinstance(parent, ast.FunctionDef)
        and isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def statements(fn: ast.FunctionDef, names: tuple[str, ...] = ()) -> list[ast.stmt]:
    """The statements of the fix's code in ``fn``: all of them (docstrings aside), or only its slice when
    ``names`` are given, in source order."""
    inside = sliced(fn, names) if names else None
    found = [node for node, parent, _, position in walk(fn)
             if isinstance(node, ast.stmt) and node is not fn and not docstring(node, parent, position)
             and (inside is None or id(node) in inside)]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def span(node: ast.AST) -> tuple[int, int]:
    """The lines a node spans (a compound statement with its blocks): a case reached the node when it ran
    any of them, since a line inside it runs only after the node itself was reached."""
    return node.lineno, node.end_lineno or node.lineno


def reached(node_span: tuple[int, int], lines: set[int]) -> bool:
    start, end = node_span
    return any(line in lines for line in range(start, end + 1))


def decisions(fn: ast.FunctionDef, names: tuple[str, ...] = ()) -> set[str]:
    """The names the fix's code decides on: every name and attribute read in a condition (an ``if`` or
    ``while`` test, a boolean or conditional expression) of a statement of the fix's code or of a statement
    enclosing one. Each is an input the cases must vary (a dimension of the probe's case space) or a name
    that needs none (``Space.incidental``)."""
    found: set[str] = set()
    for stmt in deciding(fn, names):
        tests = [stmt.test] if isinstance(stmt, (ast.If, ast.While)) else []
        tests += [n for n in own(stmt) if isinstance(n, (ast.BoolOp, ast.IfExp))]
        for test in tests:
            found.update(n.attr if isinstance(n, ast.Attribute) else n.id
                         for n in ast.walk(test) if isinstance(n, (ast.Attribute, ast.Name)))
    return found


def deciding(fn: ast.FunctionDef, names: tuple[str, ...] = ()) -> list[ast.stmt]:
    """The statements whose conditions decide the fix's code: each of its statements and every statement
    enclosing one, in source order."""
    parents = {id(node): parent for node, parent, *_ in walk(fn) if parent is not None}
    found: dict[int, ast.stmt] = {}
    for stmt in statements(fn, names):
        node: ast.AST | None = stmt
        while node is not None and node is not fn:
            if isinstance(node, ast.stmt):
                found[id(node)] = node
            node = parents.get(id(node))
    return sorted(found.values(), key=lambda n: (n.lineno, n.col_offset))


def changed(text: str, node: ast.FunctionDef, old: str, new: str) -> ast.FunctionDef | None:
    """``node`` (defined in the file ``text``) with its source text ``old``, found exactly once in it, made ``new``,
    parsed at the function's own lines (columns as its dedented source has them); None when ``old`` is not there
    exactly once. Raises SyntaxError, IndexError for a change that does not parse into a function."""
    import textwrap

    segment = "".join(text.splitlines(keepends=True)[node.lineno - 1 : node.end_lineno])
    if segment.count(old) != 1:
        return None
    fn = ast.parse(textwrap.dedent(segment.replace(old, new))).body[0]
    ast.increment_lineno(fn, node.lineno - 1)
    return fn  # type: ignore[return-value]


def enclosing(fn: ast.FunctionDef, target: ast.AST) -> ast.stmt:
    """The innermost statement of ``fn`` that holds ``target`` (itself, when it is one): a case that ran
    none of its lines never evaluated anything of it."""
    parents = {id(node): parent for node, parent, *_ in walk(fn) if parent is not None}
    node: ast.AST = target
    while not isinstance(node, ast.stmt) and id(node) in parents:
        node = parents[id(node)]
    return node if isinstance(node, ast.stmt) and node is not fn else fn


def own_lines(stmt: ast.stmt) -> set[int]:
    """The lines of a statement that none of its blocks' statements span: a simple statement's every line,
    a compound one's header (and its ``else:``, ``except ...:``, ``finally:`` lines)."""
    start, end = span(stmt)
    inner = set()
    for key in BLOCKS:
        for child in getattr(stmt, key, None) or ():
            for node in ([child] if isinstance(child, ast.stmt) else getattr(child, "body", [])):
                inner.update(range(span(node)[0], span(node)[1] + 1))
    return set(range(start, end + 1)) - inner


def touching(fn: ast.FunctionDef, start: int, end: int) -> list[ast.stmt]:
    """The statements of ``fn`` whose own lines meet lines ``start``..``end``: what a change of that text
    changes (a compound statement whose header it touches, whole)."""
    wanted = set(range(start, end + 1))
    return [node for node, *_ in walk(fn) if isinstance(node, ast.stmt) and node is not fn and own_lines(node) & wanted]


def mutant_key(function: str, operator: str, before: str) -> tuple[str, str, str]:
    """The key of a mutant in a duty table's EQUIVALENT and EXPLAINED: class and function, operator, statement."""
    return (".".join(function.split(".")[-2:]), operator, before)
