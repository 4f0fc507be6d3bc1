"""Which modules of a tree the probes' processes can import, read from its bytes on the host, never from
what the tree's process said: the import closure of the modules the probes name and of the files the
fixes' code is in (each package's ``__init__.py`` on the way included). The tree's own word (the
receipts' materials) may add modules, never remove one.

Over-approximate on purpose, and cheap (a text scan, no parse: SGLang's closure is some 2,600 of its
4,000 modules): a departure called reachable is shown for review; one called unreachable while the
process ran it would let a verdict rest on code nobody read. So every import anywhere in a module
counts (in a function, under ``if TYPE_CHECKING`` or in a comment too), and so does any text naming a
module of the tree (``LazyImport("sglang.srt.x", ...)``, ``importlib.import_module("sglang.x")``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path

from probes.duties import FIX_CODE

PROBES = Path(__file__).resolve().parents[2] / "probes"
_NAMED = re.compile(rb"\bsglang(?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)+")  # sglang.a.b anywhere (a from-import's base too)
_FROM = re.compile(rb"\bfrom\s+(\.+[A-Za-z0-9_.]*|sglang[A-Za-z0-9_.]*)\s+import\s*(\([^)]*\)|[^\n;]*)")
_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
COMPILED = (".so", ".pyd", ".dylib")


def module_of(rel: str) -> str | None:
    """``sglang/a/b.py`` -> ``sglang.a.b``; ``sglang/a/__init__.py`` -> ``sglang.a``; a compiled module by its stem."""
    if rel.endswith(".py"):
        parts = rel[:-3].split("/")
    elif rel.endswith(COMPILED):
        parts = rel.split("/")
        parts[-1] = parts[-1].split(".", 1)[0]
    else:
        return None
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) if all(p.isidentifier() for p in parts) else None


def roots() -> set[str]:
    """The modules the probes name (every ``sglang.x`` in probes/*.py: what the harness imports by name)
    and those the fixes' code is in (duties.FIX_CODE)."""
    out = {name.decode() for path in sorted(PROBES.glob("*.py")) for name in _NAMED.findall(path.read_bytes())}
    return out | {q for functions in FIX_CODE.values() for q in functions}


def _named(data: bytes, name: str, is_package: bool) -> set[str]:
    """Every module name ``data`` (the text of module ``name``) imports or spells out (a prefix of one too)."""
    out = {re.sub(rb"\s", b"", m).decode() for m in _NAMED.findall(data)}
    package = name if is_package else name.rpartition(".")[0]
    for base, names in _FROM.findall(data):
        base = base.decode()
        if base.startswith("."):
            level = len(base) - len(base.lstrip("."))
            anchor = package.split(".")[: max(0, len(package.split(".")) - level + 1)]
            base = ".".join(anchor + ([base.lstrip(".")] if base.lstrip(".") else []))
        out.add(base)
        out |= {f"{base}.{w.decode()}" for w in _WORD.findall(names)}
    return out


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def closure(files: Iterable[str], read: Callable[[str], bytes | None], seeds: Iterable[str] = ()) -> frozenset[str]:
    """The files (``sglang/...``) of the modules imported, as far as the tree's text tells, when the probes
    import theirs; ``seeds``: files the tree's process said it imported (they add, never remove)."""
    by_name: dict[str, str] = {}
    for rel in sorted(files):
        name = module_of(rel)
        if name and (name not in by_name or rel.endswith(".py")):
            by_name[name] = rel
    todo = [by_name[m] for name in roots() for m in _with_parents(name) if m in by_name]
    todo += [rel for rel in seeds if rel in set(by_name.values())]
    reached: set[str] = set()
    while todo:
        rel = todo.pop()
        if rel in reached:
            continue
        reached.add(rel)
        name = module_of(rel) or ""
        todo += [by_name[p] for p in _with_parents(name) if p in by_name]
        data = read(rel) if rel.endswith(".py") else None
        if data:
            todo += [by_name[m] for n in _named(data, name, rel.endswith("/__init__.py")) for m in _with_parents(n)
                     if m in by_name]
    return frozenset(reached)
