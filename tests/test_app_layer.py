"""runner/commands/ holds commands only, and below them nothing reads the parsed arguments or takes an option from
the environment as a default: each command resolves its options once, at its entry (``options.resolved``), and hands
the application layer (runner/app/) that one object. Checked on the code itself, with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

from runner import cli

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ROOT / "runner" / "commands"
SHARED = {"__init__.py", "options.py"}  # the package, and the options every command shares (declared once)


def below_commands() -> list[Path]:
    return sorted(p for p in (ROOT / "runner").rglob("*.py")
                  if "__pycache__" not in p.parts and COMMANDS not in p.parents and p != ROOT / "runner" / "cli.py")


def _reads_environment(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "os"
               and n.attr in ("environ", "environb", "getenv") for n in ast.walk(node))


def test_every_module_of_commands_is_a_command_the_cli_registers():
    modules = {p.stem for p in COMMANDS.glob("*.py") if p.name not in SHARED}
    for name in modules:
        tree = ast.parse((COMMANDS / f"{name}.py").read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == "register" for n in tree.body), f"{name}: not a command"
    assert {m.__name__.rpartition(".")[2] for m in cli.COMMANDS} == modules


def test_nothing_below_the_commands_reads_the_parsed_arguments():
    """No argparse below the commands, no ``getattr(args, ...)``, and a parameter named ``args`` is a typed list of
    arguments (a process's), never the parsed namespace handed down."""
    found = []
    for path in below_commands():
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                found += [f"{rel}:{node.lineno} imports argparse" for n in names if n.split(".")[0] == "argparse"]
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and node.args \
                    and isinstance(node.args[0], ast.Name) and node.args[0].id == "args":
                found.append(f"{rel}:{node.lineno} getattr(args, ...)")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += [f"{rel}:{node.lineno} {node.name}(args) untyped" for a in node.args.args + node.args.kwonlyargs
                          if a.arg == "args" and (a.annotation is None or "Namespace" in ast.unparse(a.annotation))]
    assert found == []


def test_no_option_below_the_commands_is_read_from_the_environment_as_a_default():
    """Neither a default argument nor a module-level statement reads ``os.environ``: an option from the environment
    is resolved where the command starts (a function's body may still pass the process environment to a child)."""
    found = {}
    for path in below_commands():
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text())
        defaults = [d for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                    for d in [*n.args.defaults, *n.args.kw_defaults] if d is not None]
        module_level = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        lines = sorted({n.lineno for n in defaults + module_level if _reads_environment(n)})
        if lines:
            found[rel] = lines
    assert found == {}


def test_the_store_never_prints():
    """No module of the store imports runner.ui (or rich): it hands its notices to the ``Notices`` its Store
    carries, and the command that made the store shows them (runner/app/notices.py)."""
    found = []
    for path in sorted((ROOT / "runner" / "store").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found += [f"{path.relative_to(ROOT).as_posix()}:{node.lineno} {n}" for n in names
                      if n == "runner.ui" or n.split(".")[0] == "rich"]
    assert found == []
