"""An upstream test file with what pytest loads beside it, read without running anything.

Why: upstream's tests lean on their directory. pytest loads every ``conftest.py`` from the rootdir
down to the test's directory, and a test imports helper modules that sit beside it by plain name;
without them a file fails for reasons that are not the tree's. From a git commit the file comes
with its ``conftest.py`` chain and the sibling modules it (or they) import, all at that commit,
laid out at their repository paths (so node ids are upstream's); a local file comes with what
``--with`` names. Every file must parse (a file that does not is bad input, found before anything
runs), and the test file's tests are listed from its source: a side where the file does not
collect still says which tests never ran there.
"""

from __future__ import annotations

import ast
import errno
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable

from runner.errors import BadInput
from runner.files import read_regular
from runner.store.intake import check_name

UNITTEST_BASES = {"TestCase", "IsolatedAsyncioTestCase", "CustomTestCase"}


@dataclass(frozen=True)
class UpstreamFile:
    path: str  # the test file's path under the rootdir pytest runs in; node ids start with it
    origin: str  # where it was read from
    data: bytes
    helpers: dict[str, bytes] = field(default_factory=dict)  # conftest.py files and helper modules, by path
    declared: tuple[str, ...] = ()  # test ids read from the source (one per parametrized test)

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name

    @property
    def key(self) -> str:
        return f"upstream/{self.path}"

    def files(self) -> dict[str, bytes]:
        return {self.path: self.data, **self.helpers}


def parsed(arg: str, path: str, data: bytes) -> ast.Module:
    """The syntax tree of one file; one that does not parse is bad input."""
    try:
        return ast.parse(data, filename=path)
    except (SyntaxError, ValueError) as e:
        where = f"line {e.lineno}: " if isinstance(e, SyntaxError) and e.lineno else ""
        raise BadInput(f"{arg}: {path} does not parse ({where}{getattr(e, 'msg', e)})") from None


def build(arg: str, path: str, origin: str, data: bytes, helpers: dict[str, bytes]) -> UpstreamFile:
    for name, content in helpers.items():
        parsed(arg, name, content)
    tests = declared_tests(parsed(arg, path, data), path)
    return UpstreamFile(path, origin, data, dict(sorted(helpers.items())), tuple(tests))


# An upstream test file or helper is a few hundred KiB at most; a larger one is not read.
MAX_FILE = 16 << 20


def read_local(p: Path, arg: str) -> bytes:
    """The bytes of a local test or helper file: a regular file, not a link (a test tree's link
    could name any file of the host), read no further than ``MAX_FILE``; else one line, exit 2."""
    try:
        return read_regular(p, MAX_FILE)
    except (OSError, ValueError) as e:
        why = "a symbolic link" if isinstance(e, OSError) and e.errno == errno.ELOOP else (
            e.strerror if isinstance(e, OSError) else f"not a regular file of at most {MAX_FILE >> 20} MiB")
        raise BadInput(f"{arg}: {p} refused: {why}") from None


def local_helpers(test: Path, with_paths: list[str]) -> dict[str, bytes]:
    """``--with PATH``: files placed beside the test file under their own names; a directory is
    brought whole (its ``.py`` files, for a helper package), walked without following links."""
    got: dict[str, bytes] = {}
    for arg in with_paths:
        p = Path(arg)
        if p.is_file():
            files = {p.name: p.resolve()}  # the path named is the user's own; what a directory holds is not
        elif p.is_dir():
            files = {}
            for dirpath, dirnames, filenames in os.walk(p):  # links to directories are listed, not followed
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                for name in sorted(filenames):
                    if name.endswith(".py"):
                        f = Path(dirpath) / name
                        files[f"{p.name}/{f.relative_to(p).as_posix()}"] = f
        else:
            raise BadInput(f"--with {arg}: no such file or directory")
        for name, f in files.items():
            check_name(name, f"--with {arg}")  # laid out beside the test under this name: a plain one
            if name == test.name or name in got:
                raise BadInput(f"--with {arg}: {name} is given twice")
            got[name] = read_local(f, f"--with {arg}")
    return got


def git_helpers(path: str, data: bytes, read: Callable[[str], bytes | None]) -> dict[str, bytes]:
    """The ``conftest.py`` chain of ``path`` and the sibling modules it and they import, from the
    same commit (``read`` answers a repository path with its bytes, or None if there is none)."""
    parts = PurePosixPath(path).parts[:-1]
    got: dict[str, bytes] = {}
    for depth in range(len(parts) + 1):
        conftest = "/".join([*parts[:depth], "conftest.py"])
        if (content := read(conftest)) is not None:
            got[conftest] = content
    directory = "/".join(parts)
    pending = [data, *got.values()]
    while pending:
        for name in _local_imports(pending.pop()):
            sibling = f"{directory}/{name}.py" if directory else f"{name}.py"
            if sibling not in got and sibling != path and (content := read(sibling)) is not None:
                got[sibling] = content
                pending.append(content)
    return got


def _local_imports(data: bytes) -> set[str]:
    """Top-level names a file imports that could be a module beside it (not SGLang, not stdlib)."""
    try:
        module = ast.parse(data)
    except (SyntaxError, ValueError):
        return set()  # reported by build()
    names = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n != "sglang" and n not in sys.stdlib_module_names and n.isidentifier()}


# --- tests declared by the source, as pytest's default rules collect them ----------------------


def declared_tests(module: ast.Module, path: str) -> list[str]:
    """Module functions ``test*``; classes ``Test*`` without ``__init__`` and ``unittest``
    test cases (``TestCase``, SGLang's ``CustomTestCase``, or a class of this file that is one), their
    methods ``test*`` with those inherited from classes of this file; ``__test__ = False`` opts out.
    A parametrized test is one id; pytest's ids for it are that id and a ``[...]``."""
    classes = {node.name: node for node in module.body if isinstance(node, ast.ClassDef)}
    found = []
    for node in module.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            found.append(f"{path}::{node.name}")
        elif isinstance(node, ast.ClassDef) and _collected(node, classes):
            found += [f"{path}::{node.name}::{m}" for m in _methods(node, classes)]
    return found


def _base_names(node: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))]


def _is_unittest(node: ast.ClassDef, classes: dict[str, ast.ClassDef], seen: frozenset[str] = frozenset()) -> bool:
    return any(base in UNITTEST_BASES or (base in classes and base not in seen
                                          and _is_unittest(classes[base], classes, seen | {node.name}))
               for base in _base_names(node))


def _opted_out(node: ast.ClassDef) -> bool:
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__test__" for t in stmt.targets):
            return isinstance(stmt.value, ast.Constant) and not stmt.value.value
    return False


def _collected(node: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> bool:
    if _opted_out(node):
        return False
    own = {s.name for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return _is_unittest(node, classes) or (node.name.startswith("Test") and "__init__" not in own)


def _methods(node: ast.ClassDef, classes: dict[str, ast.ClassDef], seen: frozenset[str] = frozenset()) -> list[str]:
    """Test methods in definition order, then those inherited from classes of this file."""
    names = [s.name for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name.startswith("test")]
    for base in _base_names(node):
        if base in classes and base not in seen:
            names += [m for m in _methods(classes[base], classes, seen | {node.name}) if m not in names]
    return names
