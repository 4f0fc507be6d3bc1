"""Catalog drift: the functions of the isolation-relevant modules that changed between two trees and
that neither a pinned fix's code nor a probe case reaches, so that a release's new defence, or a
fork's new code on these paths, is seen at once rather than when someone thinks to write a probe.

What counts as isolation-relevant is data (``runner/data/isolation.toml``: module globs and, where a
module is mostly plumbing, the function names that touch the boundaries), and so is each entry
deliberately left unprobed, with a one-line reason. Everything is read from the stored trees' bytes
with ``ast``; nothing of either tree runs. A function changed when its body (docstring aside), its
arguments or its decorators parse differently: comments, blank lines and moves do not count. It is
reached when recorded cases ran every statement of it that changed: a case that runs the function
past its new defence has not probed the defence (a pinned fix's code is named beside it).
"""

from __future__ import annotations

import ast
import difflib
import fnmatch
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

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


class Unprobed(_Model):
    """A changed function deliberately not probed: ``file:Class.method`` and why, in one line."""

    place: str
    reason: str

    @field_validator("place")
    @classmethod
    def _place(cls, v: str) -> str:
        file, sep, name = v.partition(":")
        if not sep or not file.endswith(".py") or not name or not file.startswith("sglang/"):
            raise ValueError("must read sglang/FILE.py:Class.function")
        return v

    @field_validator("reason")
    @classmethod
    def _one_line(cls, v: str) -> str:
        if not v.strip() or "\n" in v or "\r" in v or len(v) > REASON_CHARS or not v.isprintable():
            raise ValueError(f"must be one printable line of at most {REASON_CHARS} characters")
        return v


class Catalog(_Model):
    modules: list[Modules] = Field(min_length=1)
    unprobed: list[Unprobed] = []

    def names(self, rel: str) -> bool:
        """Whether some group's paths take the file ``rel``."""
        return any(fnmatch.fnmatchcase(rel, p) for m in self.modules for p in m.paths)

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
    places = [u.place for u in catalog.unprobed]
    if twice := next((p for p in places if places.count(p) > 1), None):
        raise BadInput(f"isolation catalog {path}: unprobed place {twice} is listed twice")
    return catalog


@dataclass(frozen=True)
class Function:
    qualname: str
    lines: tuple[int, int]  # first line (decorators included) and last
    shape: str  # what decides "changed": its arguments, decorators and body (docstring aside), parsed
    docstring: tuple[int, int] | None  # its lines: a statement, but not code that decides anything


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
    statements: list[tuple[int, int]] = Field(description="the statements that changed (each one's own lines); for lines "
                                                          "only removed, the statements around where they were")
    not_run: list[int] = Field([], description="the first line of each changed statement no recorded case ran")
    reached_by: list[str] = Field([], description="'fix #N' (its code), 'probe P' (a case ran a changed statement of it)")
    unprobed: str | None = Field(None, description="the catalog's reason it is deliberately not probed")

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
    reasons = {u.place: u.reason for u in catalog.unprobed}
    out = []
    for e in entries:
        by = [f"fix #{n}" for n in sorted(set(fixes.get((e.file, e.function), [])))]
        by += [f"probe {p}" for p, ran in sorted(lines.items()) if e.file in ran and coverage.overlaps(ran[e.file], e.statements)]
        missed = [s[0] for s in e.statements if not (e.file in every and coverage.overlaps(every[e.file], [s]))]
        out.append(e.model_copy(update={"reached_by": by, "not_run": missed, "unprobed": reasons.get(e.place)}))
    return out
