"""Catalog drift: the functions of the isolation-relevant modules that changed between two trees and
that neither a pinned fix's code nor a probe case reaches, so that a release's new defence, or a
fork's new code on these paths, is seen at once rather than when someone thinks to write a probe.

What counts as isolation-relevant is data (``runner/data/isolation.toml``: module globs and, where a
module is mostly plumbing, the function names that touch the boundaries), and so is each entry
deliberately left unprobed: a one-line reason and, per function, the sha256 of its source as reviewed, so
that a declaration holds only while the function's bytes are the ones a person read (a changed function
is listed again, its old reason beside it). Everything is read from the stored trees' bytes
with ``ast``; nothing of either tree runs. A function changed when its body (docstring aside), its
arguments or its decorators parse differently: comments, blank lines and moves do not count. It is
reached when recorded cases ran every statement of it that changed: a case that runs the function
past its new defence has not probed the defence (a pinned fix's code is named beside it).
"""

from __future__ import annotations

import ast
import difflib
import fnmatch
import hashlib
import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from runner import fixids
from runner.errors import BadInput
from runner.evidence import departures
from runner.judge import coverage
from runner.judge.observations import Case

DEFAULT = Path(__file__).resolve().parents[1] / "data" / "isolation.toml"
REASON_CHARS = 200


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Modules(_Model):
    """One group of the module set: where, which functions, and why it is on an isolation boundary."""

    group: str
    why: str
    paths: list[str] = Field(min_length=1, description="globs relative to the directory holding sglang/")
    functions: list[str] = Field(["*"], min_length=1, description="globs over qualified names (Class.method)")


def _place(v: str) -> str:
    file, sep, name = v.partition(":")
    if not sep or not file.endswith(".py") or not name or not file.startswith("sglang/") or not v.isprintable():
        raise ValueError("must read sglang/FILE.py:Class.function")
    return v


class Reviewed(_Model):
    """One function as a reviewer read it: where, and the sha256 of its source lines then (``source_digest``)."""

    place: str = Field(description="sglang/FILE.py:Class.method, relative to the directory holding sglang/")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 (hex) of the function's source lines as reviewed, "
                                                               "its decorators to its last line, bytes as stored")

    @field_validator("place")
    @classmethod
    def _check_place(cls, v: str) -> str:
        return _place(v)


class Unprobed(_Model):
    """Changed functions deliberately not probed, for one reason: each function pinned to the bytes reviewed. The
    declaration holds for a function only while its source in the newer tree hashes to ``sha256``."""

    reason: str = Field(description="one printable line: what changed and why it is outside the isolation boundaries")
    reviewed_in: str = Field(min_length=1, max_length=REASON_CHARS, description="the source of the tree reviewed (pypi:sglang==X)")
    tree_digest: str = Field(pattern=r"^h1:[A-Za-z0-9+/]{43}=$", description="that tree's digest (h1:, as receipts name it)")
    functions: list[Reviewed] = Field(min_length=1)

    @field_validator("reason")
    @classmethod
    def _one_line(cls, v: str) -> str:
        if not v.strip() or "\n" in v or "\r" in v or len(v) > REASON_CHARS or not v.isprintable():
            raise ValueError(f"must be one printable line of at most {REASON_CHARS} characters")
        return v

    @field_validator("reviewed_in")
    @classmethod
    def _printable(cls, v: str) -> str:
        if not v.isprintable():
            raise ValueError("must be printable")
        return v


class Catalog(_Model):
    modules: list[Modules] = Field(min_length=1)
    unprobed: list[Unprobed] = []

    def names(self, rel: str) -> bool:
        """Whether some group's paths take the file ``rel``."""
        return any(fnmatch.fnmatchcase(rel, p) for m in self.modules for p in m.paths)

    def reviewed(self) -> dict[str, tuple[Reviewed, Unprobed]]:
        """place -> the function as reviewed and its declaration."""
        return {f.place: (f, u) for u in self.unprobed for f in u.functions}

    def group_of(self, rel: str, qualname: str) -> str | None:
        """The first group whose paths and function names take ``rel``'s ``qualname``."""
        for m in self.modules:
            if any(fnmatch.fnmatchcase(rel, p) for p in m.paths) and any(fnmatch.fnmatchcase(qualname, f) for f in m.functions):
                return m.group
        return None


def load(path: Path | None) -> Catalog:
    """The catalog at ``path`` (default: the shipped one); anything malformed is one line (exit 2)."""
    path = path or DEFAULT
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        catalog = Catalog.model_validate(data)
    except OSError as e:
        raise BadInput(f"isolation catalog {path}: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"isolation catalog {path}: not TOML ({str(e).splitlines()[0][:120]})") from None
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise BadInput(f"isolation catalog {path}: {where}: {err['msg']}") from None
    places = [f.place for u in catalog.unprobed for f in u.functions]
    if twice := next((p for p in places if places.count(p) > 1), None):
        raise BadInput(f"isolation catalog {path}: unprobed place {_shown(twice)} is listed twice")
    for place in places:
        file, _, name = place.partition(":")
        if catalog.group_of(file, name) is None:
            raise BadInput(f"isolation catalog {path}: unprobed place {_shown(place)} is in no group of the module set")
    return catalog


def _shown(text: str) -> str:
    return json.dumps(text)[1:-1][:REASON_CHARS]


@dataclass(frozen=True)
class Function:
    qualname: str
    lines: tuple[int, int]  # first line (decorators included) and last
    shape: str  # what decides "changed": its arguments, decorators and body (docstring aside), parsed
    docstring: tuple[int, int] | None  # its lines: a statement, but not code that decides anything


def source_digest(source: bytes, lines: tuple[int, int]) -> str:
    """sha256 (hex) of a function's source lines (``lines``: first and last, 1-based) as stored: what a review pins.
    Any byte of them, a comment or a blank line included, makes another digest; lines around it do not."""
    return hashlib.sha256(b"".join(source.splitlines(keepends=True)[lines[0] - 1:lines[1]])).hexdigest()


def functions(source: bytes) -> dict[str, Function]:
    """The functions of a module (top level and methods, at any class depth; a function nested in a
    function belongs to the one holding it); none when it does not parse."""
    try:
        module = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    out: dict[str, Function] = {}

    def visit(body: list[ast.stmt], scope: str) -> None:
        for node in body:
            name = f"{scope}.{node.name}" if scope and hasattr(node, "name") else getattr(node, "name", "")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner, doc = node.body, None
                if inner and isinstance(inner[0], ast.Expr) and isinstance(inner[0].value, ast.Constant) \
                        and isinstance(inner[0].value.value, str):
                    inner, doc = inner[1:], (inner[0].lineno, inner[0].end_lineno or inner[0].lineno)
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                shape = ast.dump(node.args) + ast.dump(ast.Module(body=inner, type_ignores=[])) + \
                    "".join(ast.dump(d) for d in node.decorator_list)
                out[name] = Function(name, (first, node.end_lineno or node.lineno), shape, doc)
            elif isinstance(node, ast.ClassDef):
                visit(node.body, name)

    visit(module.body, "")
    return out


class Entry(_Model):
    """One changed function of the module set in the newer tree."""

    file: str
    function: str
    lines: tuple[int, int] = Field(description="its first line (decorators included) and last, in the newer tree")
    change: str  # "changed" or "added"
    group: str
    sha256: str = Field(description="sha256 of its source lines in the newer tree (source_digest), as [[unprobed]] pins it")
    statements: list[tuple[int, int]] = Field(description="the statements that changed (each one's own lines); for lines "
                                                          "only removed, the statements around where they were")
    not_run: list[int] = Field([], description="the first line of each changed statement no recorded case ran")
    reached_by: list[str] = Field([], description="'fix #N' (its code), 'probe P' (a case ran a changed statement of it)")
    unprobed: str | None = Field(None, description="the catalog's reason it is deliberately not probed, its bytes the ones reviewed")
    reviewed_other: Unprobed | None = Field(None, description="a declaration of it whose reviewed bytes differ from these: "
                                                                "not a decision about this version (its reason shown)")

    @property
    def place(self) -> str:
        return f"{self.file}:{self.function}"

    @property
    def reached(self) -> bool:
        """Every changed statement run by a case. Being a pinned fix's code is not enough: its cases were
        written for that fix's statements, and a later change in the same function is a new defence."""
        return bool(self.statements) and not self.not_run


def _changed_statements(old: list[str], new: list[str], first: int, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The statements of a function (``spans``, its own lines) that its changed lines touch: ``old`` and
    ``new`` are its lines in each tree, ``first`` the newer one's first line."""
    touched: list[tuple[int, int]] = []
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        lo, hi = first + j1, first + max(j2, j1 + 1) - 1  # lines only removed: the line where they were
        touched += [s for s in spans if s[0] <= hi and s[1] >= lo - (j2 == j1)]
    return sorted(set(touched))


def changed(old: Mapping[str, bytes | None], new: Mapping[str, bytes], catalog: Catalog) -> list[Entry]:
    """Every function of the module set in ``new`` (path -> bytes, paths relative to the directory holding
    sglang/) added or changed against ``old`` (path -> bytes, None: absent), in file and line order."""
    out = []
    for rel in sorted(new):
        if not catalog.names(rel):
            continue
        before_text = old.get(rel) or b""
        before, after = functions(before_text), functions(new[rel])
        old_lines, new_lines = _lines(before_text), _lines(new[rel])
        spans = departures.Source.read(new[rel]).spans
        for f in sorted(after.values(), key=lambda f: f.lines):
            group = catalog.group_of(rel, f.qualname)
            if group is None or (f.qualname in before and before[f.qualname].shape == f.shape):
                continue
            # its body's statements: the def line runs at import, never in a case (a change there
            # counts as its first statement's: a case that called it ran the new signature)
            mine = [s for s in spans if f.lines[0] < s[0] and s[1] <= f.lines[1] and s != f.docstring]
            if f.qualname in before:
                a, b = before[f.qualname].lines
                touched = _changed_statements(old_lines[a - 1:b], new_lines[f.lines[0] - 1:f.lines[1]], f.lines[0],
                                              [s for s in spans if s[0] == f.lines[0]] + mine)
                touched = sorted({mine[0] if s[0] == f.lines[0] and mine else s for s in touched})
            else:
                touched = mine
            out.append(Entry(file=rel, function=f.qualname, lines=f.lines, group=group, statements=touched,
                             sha256=source_digest(new[rel], f.lines),
                             change="changed" if f.qualname in before else "added"))
    return out


def _lines(data: bytes) -> list[str]:
    return data.decode("utf-8", errors="replace").splitlines()


def fix_places(fix_code: Mapping[int, Iterable[str]]) -> dict[tuple[str, str], list[int]]:
    """(file, Class.method) -> the fixes whose code (``duties.FIX_CODE``: ``pkg.mod.Class.method``) it may be:
    every way to split the dotted name into a module file and a name."""
    out: dict[tuple[str, str], list[int]] = {}
    for fix, qualified in fix_code.items():
        for name in qualified:
            parts = name.split(".")
            for cut in range(len(parts) - 1, 0, -1):
                module, inner = "/".join(parts[:cut]), ".".join(parts[cut:])
                for rel in (f"{module}.py", f"{module}/__init__.py"):
                    out.setdefault((rel, inner), []).append(fix)
    return out


def reached(entries: list[Entry], fixes: dict[tuple[str, str], list[int]], cases: Mapping[str, Iterable[Case]],
            catalog: Catalog) -> list[Entry]:
    """``entries`` with what reaches each (``cases``: probe -> the newer tree's cases, whose recorded
    lines count) and the catalog's reason for each deliberately not probed."""
    lines = {probe: coverage.lines_run(cs) for probe, cs in cases.items()}
    every = coverage.union(lines.values())
    reviewed = catalog.reviewed()
    out = []
    for e in entries:
        by = [f"fix {fixids.label(n)}" for n in sorted(set(fixes.get((e.file, e.function), [])))]
        by += [f"probe {p}" for p, ran in sorted(lines.items()) if e.file in ran and coverage.overlaps(ran[e.file], e.statements)]
        missed = [s[0] for s in e.statements if not (e.file in every and coverage.overlaps(every[e.file], [s]))]
        f, u = reviewed.get(e.place, (None, None))
        same = f is not None and f.sha256 == e.sha256
        out.append(e.model_copy(update={"reached_by": by, "not_run": missed, "unprobed": u.reason if same else None,
                                        "reviewed_other": u if f is not None and not same else None}))
    return out


def _toml(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text)


def stub(entries: list[Entry], reviewed_in: str, tree_digest: str) -> str:
    """The ``[[unprobed]]`` entry to paste for ``entries`` (functions of the tree ``reviewed_in``): every field but
    the reason filled in, each function's digest that of its bytes there; a function declared before for other
    bytes carries its old reason as a comment."""
    rows = []
    for e in entries:
        was = f"  # reviewed before for other bytes: {_shown(e.reviewed_other.reason)}" if e.reviewed_other else ""
        rows.append(f"  {{ place = {_toml(e.place)}, sha256 = {_toml(e.sha256)} }},{was}\n")
    return (f"[[unprobed]]\nreason = \"\"\nreviewed_in = {_toml(reviewed_in)}\ntree_digest = {_toml(tree_digest)}\n"
            f"functions = [\n{''.join(rows)}]\n")
