"""The probes diffprobe knows, where their source lives, and the identities of the probes and the judge.

An identity is the digest of an import closure: the files of ``runner`` and ``probes`` that importing
some modules executes, read with ``ast`` (never imported: the host never imports a probe's SGLang-facing
code). So a file outside a closure (storage, formats, signing, views, another probe) never moves it, and a
receipt lists the files its identities cover, each with its sha256.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from collections.abc import Iterable
from pathlib import Path

from probes import registry
from runner.files import sha256_bytes, sha256_file

# probe id -> module file inside probes/, read from the one registry (probes/registry.py, which the harness reads too)
PROBES: dict[str, str] = {entry.id: f"{entry.module}.py" for entry in registry.PROBES}
HARNESS = "harness.py"
# ``diffprobe upstream-tests``' entry point: not a tree probe (no fix of its own), and not part of theirs.
UPSTREAM_TESTS = ("upstream-tests", "pytest_outcomes.py")
# ``diffprobe accept``'s reading of a live worker's configuration with the tree's own code: no probe's either.
SERVER_CONFIG = "server_config.py"
JUDGE = "runner/judge"  # the package whose closure is the judge
PROJECT = Path(__file__).resolve().parents[2]  # the directory that holds runner/ and probes/
ROOTS = ("runner", "probes")  # the packages a closure follows; every other import is a library's


def probes_dir() -> Path:
    spec = importlib.util.find_spec("probes")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the probes package is not installed beside runner")
    return Path(list(spec.submodule_search_locations)[0])


def _file(module: str, root: Path) -> Path | None:
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def _executed(tree: ast.AST) -> Iterable[ast.AST]:
    """Every node of a module but those under ``if TYPE_CHECKING:``, which never run."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *_executed(child)])
            continue
        yield node
        yield from _executed(node)


def _imports(path: Path, root: Path) -> frozenset[str]:
    name = _name(path, root)
    return _imported(path.read_bytes(), name if path.name == "__init__.py" else name.rpartition(".")[0])


@functools.lru_cache(maxsize=512)
def _imported(source: bytes, package: str) -> frozenset[str]:
    """The modules a module of ``package`` whose code is ``source`` imports: statements (at module level or
    in a function, relative ones resolved), and names given to ``importlib.import_module`` as a literal or
    as ``f"{PACKAGE}.name"`` (a sibling in the same package, as the harness loads its own). Kept by content:
    every probe's closure parses the same shared modules."""
    found: set[str] = set()
    for node in _executed(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names if a.name != "*"}
        elif isinstance(node, ast.Call) and node.args and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module":
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.add(arg.value)
            elif (isinstance(arg, ast.JoinedStr) and len(arg.values) == 2 and isinstance(arg.values[0], ast.FormattedValue)
                  and isinstance(arg.values[1], ast.Constant) and str(arg.values[1].value).startswith(".")):
                found.add(package + arg.values[1].value)
    return frozenset(found)


def closure(modules: Iterable[str], root: Path = PROJECT) -> dict[str, Path]:
    """Project-relative path -> file of every file of ``runner`` or ``probes`` that importing ``modules``
    executes: each module, the ``__init__`` of every package above it, and what their code imports, in turn."""
    seen: dict[str, Path] = {}
    todo = list(modules)
    while todo:
        module = todo.pop()
        parts = module.split(".")
        if parts[0] not in ROOTS:
            continue
        for depth in range(1, len(parts) + 1):  # a package's __init__ runs before its modules
            path = _file(".".join(parts[:depth]), root)
            if path is None:
                break
            rel = path.relative_to(root).as_posix()
            if rel not in seen:
                seen[rel] = path
                todo += _imports(path, root)
    return dict(sorted(seen.items()))


def files(modules: Iterable[str], root: Path = PROJECT) -> dict[str, str]:
    """A closure as a receipt lists it: project-relative path -> sha256."""
    return {rel: sha256_file(path) for rel, path in closure(modules, root).items()}


def digest(listed: dict[str, str]) -> str:
    """One identity over listed files: sha256 of their ``<sha256>  <path>`` lines (``sha256sum``'s form)."""
    return sha256_bytes("".join(f"{listed[rel]}  {rel}\n" for rel in sorted(listed)).encode())


def probe_modules(probe: str) -> list[str]:
    """What a probe run imports of diffprobe: the harness and the probe's own module (the harness names
    only the probe asked for; ``upstream-tests`` runs its pytest plugin alone)."""
    module = dict([*PROBES.items(), UPSTREAM_TESTS])[probe].removesuffix(".py")
    return [f"probes.{module}"] + ([f"probes.{HARNESS.removesuffix('.py')}"] if probe in PROBES else [])


def probe_files(probe: str, root: Path = PROJECT) -> dict[str, str]:
    """The files a probe's behaviour depends on (its import closure), each with its sha256."""
    return files(probe_modules(probe), root)


def probe_digest(probe: str, root: Path = PROJECT) -> str:
    """asv-style probe version: receipts whose probes differ in any byte they import are not comparable."""
    return digest(probe_files(probe, root))


def judge_modules(root: Path = PROJECT) -> list[str]:
    return sorted(_name(p, root) for p in (root / JUDGE).glob("*.py"))


def judge_files(root: Path = PROJECT) -> dict[str, str]:
    """The judge's files: the import closure of every module of ``runner/judge`` (with the probes' duty tables,
    case spaces, coverage and fix-code reading it imports), each with its sha256."""
    return files(judge_modules(root), root)


@functools.cache
def judge() -> tuple[str, dict[str, str]]:
    """(digest, files) of this diffprobe's judge: receipts name the exact code that derived their verdicts
    by it; code outside the closure (commands, store, formats, signing, views) is not the judge, so changing
    it keeps evidence comparable."""
    listed = judge_files()
    return digest(listed), listed


def judge_digest() -> str:
    return judge()[0]
