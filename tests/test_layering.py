"""The layering that docs/architecture.md declares, checked on the imports themselves.

Every import of every module is read with ``ast`` (``import``, ``from ... import``, relative
imports, and module names given as string literals to ``importlib.import_module``, ``__import__``
or ``importlib.util.find_spec``), so an import hidden in a function or loaded by name counts too.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Lowest first: a module may import its own layer and the ones before it, never one after it.
LAYERS = ["bottom", "judge", "store", "evidence", "sandbox", "model", "views", "app", "commands", "cli"]
PACKAGES = {"judge", "store", "evidence", "sandbox", "model", "views", "app", "commands"}
LOADERS = {"import_module", "__import__", "find_spec"}


def layer(module: str) -> str | None:
    """The layer of a ``runner`` module; None outside runner. ``runner.standins`` is its own
    island: it is copied into every probe environment and imports nothing of runner. ``runner.judge``
    sits above the bottom but imports nothing of it either: its import closure is the judge's identity."""
    parts = module.split(".")
    if parts[0] != "runner":
        return None
    if module == "runner.cli":
        return "cli"
    if len(parts) > 1 and parts[1] == "standins":
        return "standins"
    return parts[1] if len(parts) > 1 and parts[1] in PACKAGES else "bottom"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in ``path``; ``from a import b`` yields ``a.b`` (b may be a
    submodule), relative imports are resolved against the module's package."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out += [(node.lineno, f"{base}.{a.name}" if a.name != "*" else base) for a in node.names]
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in LOADERS and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                out.append((node.lineno, node.args[0].value))
    return out


def sources(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def violations() -> list[str]:
    found = []
    for path in sources("runner"):
        mine = layer(module_name(path))
        for line, target in imported(path):
            where = f"{path.relative_to(ROOT)}:{line} imports {target}"
            if target.split(".")[0] == "sglang":
                found.append(f"{where}: runner never imports SGLang")
            theirs = layer(target)
            if theirs is None or theirs == mine:
                continue
            if mine == "judge":
                found.append(f"{where}: runner.judge is pure; it imports nothing of runner outside itself")
            elif mine == "standins" or (theirs == "standins" and mine not in ("store",)):
                found.append(f"{where}: runner.standins is copied into probe environments; only the store reads it")
            elif theirs != "standins" and LAYERS.index(theirs) > LAYERS.index(mine):
                found.append(f"{where}: {mine} sits below {theirs}")
    for path in sources("probes"):
        for line, target in imported(path):
            if target.split(".")[0] == "runner":
                found.append(f"{path.relative_to(ROOT)}:{line} imports {target}: probes never import the host")
    return found


def test_imports_follow_the_declared_layers():
    assert violations() == []


@pytest.mark.parametrize("source, expected", [
    ("from runner.commands import run\n", "runner.commands.run"),
    ("import importlib\nimportlib.import_module('runner.commands.run')\n", "runner.commands.run"),
    ("from ..commands import run\n", "runner.commands.run"),
    ("def f():\n    from runner import cli\n", "runner.cli"),
])
def test_every_form_of_import_is_seen(tmp_path, monkeypatch, source, expected):
    """The checker itself: an import the layering forbids is found whatever its form."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    path = tmp_path / "runner" / "store" / "x.py"
    path.parent.mkdir(parents=True)
    path.write_text(source)
    assert expected in [m for _, m in imported(path)]


def test_the_judge_importing_the_bottom_is_refused(tmp_path, monkeypatch):
    """``runner.judge`` is pure: even a bottom module (files, errors) would enter the judge's identity."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    path = tmp_path / "runner" / "judge" / "x.py"
    path.parent.mkdir(parents=True)
    path.write_text("from runner.files import sha256_file\nfrom runner.judge import y\nfrom probes import duties\n")
    assert violations() == ["runner/judge/x.py:1 imports runner.files.sha256_file: runner.judge is pure; "
                            "it imports nothing of runner outside itself"]


def circles() -> list[list[str]]:
    """Every set of runner modules that import each other, directly or round about (an import in a function
    counts: it runs)."""
    modules = {module_name(p): p for p in sources("runner")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for _, target in imported(path):
            while target and target not in modules:  # ``from a import f``: module a
                target = target.rpartition(".")[0]
            if target and target != name:
                targets.add(target)
        graph[name] = targets
    found: list[list[str]] = []
    for start in sorted(graph):  # a module that reaches back to itself is in a circle; name each circle once
        reached = _reach(graph, start)
        if start in reached and not any(start in c for c in found):
            found.append(sorted(m for m in reached if start in _reach(graph, m)))
    return found


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), list(graph[start])
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += graph[m]
    return seen


def test_no_import_circle():
    assert circles() == []


def test_an_import_circle_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "runner" / "evidence").mkdir(parents=True)
    (tmp_path / "runner" / "evidence" / "a.py").write_text("from runner.evidence.b import x\n")
    (tmp_path / "runner" / "evidence" / "b.py").write_text("def x():\n    from runner.evidence import a\n")
    assert circles() == [["runner.evidence.a", "runner.evidence.b"]]
