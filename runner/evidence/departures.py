"""Where a tree departs from its upstream baseline, whether the probes' processes can reach it, and
whether the cases ran there.

A verdict is only as good as the code it was observed on. For a tree and its baseline (by default
the release its own ``sglang/version.py`` declares), this lists the files added, removed and
changed; for every changed (or added) Python module of the package, whatever any process reported,
the changed hunks, split by the function that encloses them, each with how it can be reached
(runner/evidence/reach.py: the static import closure of the probes' modules, which the receipts'
materials may add to, never subtract from), the cases whose recorded lines (runner/judge/coverage.py)
touch its statements, a content address a reviewer's decision is recorded under
(runner/evidence/reviews.py), and, as a hint for the reader, what in it reads the interpreter's or
the process's state (runner/evidence/awareness.py). Everything is read from the stored trees'
bytes; nothing of either tree runs here.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from runner.evidence import awareness, reach
from runner.errors import Redacted
from runner.judge import coverage, judging
from runner.evidence.receipts import Receipt
from runner.files import sha256_file, tree_files

SCHEMA = "diffprobe.departures/1"
DIR = "departures/"
MAX_DIFF_LINES = 60  # of one hunk, kept in the record; the rest is counted
COMPILED = (".so", ".pyd", ".dylib")
_NEWLINE = re.compile(r"\r\n|\r|\n")  # what Python's tokenizer counts as a line end (str.splitlines counts more)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Aware(_Model):
    line: int
    what: str


Reached = Literal["ran", "at import", "imported", "data", "unreachable"]
REACHED: dict[str, str] = {
    "ran": "a case ran it (recorded lines, or its module's code ran renamed)",
    "at import": "module- or class-level code of a module the probes' processes import: it runs before every case",
    "imported": "in a function of a module the probes' processes import: any code of the process may call it",
    "data": "a file of the package that is not Python (changed or added): code of the process may read it",
    "unreachable": "nothing the probes import reaches it (or it is only comments and blank lines)",
}


class Hunk(_Model):
    """One changed place in one function: the tree's lines (None when lines were only removed;
    ``at`` is then the tree line after which they were), the baseline's, and what ran there."""

    file: str
    function: str = Field(description="qualified name of the enclosing function or class; <module> at top level")
    at: int
    lines: tuple[int, int] | None
    baseline_lines: tuple[int, int] | None
    added: int
    removed: int
    code: bool = Field(description="touches a statement (not only comments or blank lines)")
    ran_in: dict[str, list[str]] = Field(description="probe -> the cases whose recorded lines touch its statements")
    at_import: bool = Field(False, description="module- or class-level code of a module the probes' processes import (or a def or "
                                               "class statement's decorators, defaults, bases): it runs when the module "
                                               "is imported, before any case (not traced per case)")
    renamed_in: dict[str, list[str]] = Field(
        {}, description="probe -> the cases in which code of this module ran under another file's name (renamed code "
                        "objects): where in the module they ran cannot be told, so this place may have run there")
    aware: list[Aware] = Field(description="what in its lines reads the interpreter's or process's state: it can tell it is being probed")
    diff: list[str] = Field(description="the hunk's removed (-) and added (+) lines, at most MAX_DIFF_LINES")
    diff_more: int = 0
    reach: Reached | None = Field(None, description="how the probes' processes can reach it, read from the tree's bytes "
                                                    "(runner/evidence/reach.py); null in records made before 2026-12-04")
    key: str | None = Field(None, description="sha256 of its file, function and every removed and added line (no line "
                                              "numbers): what a review is recorded under (runner/evidence/reviews.py)")

    @property
    def reachable(self) -> bool:
        """Code the probes' processes can run: a verdict that rests on it rests on code upstream never had."""
        return self.reach is not None and self.reach != "unreachable"

    @property
    def ran(self) -> bool:
        return self.at_import or any(self.ran_in.values())

    def touched_by(self, probes: set[str]) -> bool:
        """Whether a case of ``probes`` was recorded running it, or ran its module's renamed code."""
        return any(cases for p, cases in (*self.ran_in.items(), *self.renamed_in.items()) if p in probes)

    @property
    def place(self) -> str:
        return f"{self.file}:{self.at} in {self.function}"


class FileChange(_Model):
    path: str
    change: Literal["added", "removed", "changed"]
    imported: bool = Field(description="a probe run imported it (a material of a receipt: the tree's own word)")
    reachable: bool = Field(False, description="in the static import closure of the probes' modules (runner/evidence/reach.py)")
    hunks: list[Hunk] = []
    note: str | None = None


class Departures(_Model):
    """The departure record of one tree (``departures/<label>.json`` in a bundle)."""

    schema_version: Literal["diffprobe.departures/1"] = SCHEMA
    source: Redacted
    tree_digest: str
    baseline: Redacted | None = Field(description="the baseline's source; None: no baseline (see unavailable)")
    baseline_digest: str | None
    chosen: Literal["declared", "against", "ancestry", "shared"] = Field(
        description="declared: the release the tree's own sglang/version.py names; against: given with --against; ancestry: "
                    "the nearest release tag of its git history whose tree agrees with the release; shared: the release "
                    "sharing the most identical files with it (runner/app/baseline.py)")
    how: str | None = Field(None, description="how the baseline was chosen, in words (null in records made before 2026-12-04)")
    declared: str | None = Field(description="the version the tree's sglang/version.py declares, if any")
    unavailable: str | None = None
    identical: bool
    files: list[FileChange] = []
    unrecorded: dict[str, list[str]] = Field(
        {}, description="probe -> cases whose lines were not recorded: no hunk is 'not run' on their account")

    def hunks(self) -> list[Hunk]:
        return [h for f in self.files for h in f.hunks]

    def ran(self, probes: Iterable[str] | None = None) -> list[Hunk]:
        """The hunks a case was recorded running (a case of ``probes``, when given)."""
        wanted = None if probes is None else set(probes)
        return [h for h in self.hunks() if any(cases for p, cases in h.ran_in.items() if wanted is None or p in wanted)]

    def at_import(self) -> list[Hunk]:
        """The hunks of module- or class-level code no case was recorded running: they ran when their
        module was imported, before the cases."""
        return [h for h in self.hunks() if h.at_import and not any(h.ran_in.values())]

    def counts(self) -> dict[str, int]:
        return {kind: sum(f.change == kind for f in self.files) for kind in ("added", "removed", "changed")}

    def reachable(self) -> list[Hunk]:
        """The changed places the probes' processes can run (runner/evidence/reach.py)."""
        return [h for h in self.hunks() if h.reachable]

    def aware(self) -> list[Hunk]:
        return [h for h in self.hunks() if h.aware]

    def renamed(self) -> list[Hunk]:
        """The hunks in modules whose code ran under another file's name, no case recorded running them."""
        return [h for h in self.hunks() if any(h.renamed_in.values()) and not any(h.ran_in.values())]

    def line(self) -> str:
        """The record in one line: identical, no baseline, or how far the tree departs."""
        if self.baseline is None or self.unavailable:
            return f"{self.source}: no baseline: {self.unavailable}"
        how = self.how or ("by the version it declares" if self.chosen == "declared" else "given with --against")
        if self.identical:
            return f"{self.source}: identical to {self.baseline} ({how})"
        counts = self.counts()
        return (f"{self.source}: departs from {self.baseline} ({how}): {counts['changed']} changed, {counts['added']} added, "
                f"{counts['removed']} removed file(s); {len(self.ran())} changed place(s) the cases ran, "
                f"{len(self.at_import())} more run at import, {len(self.reachable())} reachable in all, "
                f"{len(self.aware())} that can tell they are being probed"
                + (f", {len(self.renamed())} in modules whose code ran under another file's name" if self.renamed() else ""))


# --- reading a tree's source ------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One module's text as lines (1-based through ``line``), its functions and its statements."""

    lines: list[str]
    functions: list[tuple[int, int, str, bool]]  # (start, end, qualified name, a function: not a class), by start
    spans: list[tuple[int, int]]  # each statement's own lines (a compound one's header), sorted
    parsed: bool
    at_import_spans: list[tuple[int, int]]  # statements outside every function, def and class statements aside
    module: ast.Module | None

    @classmethod
    def read(cls, data: bytes) -> "Source":
        text = data.decode("utf-8", errors="replace")
        lines = _NEWLINE.split(text)
        if lines and lines[-1] == "":
            lines.pop()
        try:
            module = ast.parse(data)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return cls(lines, [], [(1, max(1, len(lines)))], False, [(1, max(1, len(lines)))], None)
        functions: list[tuple[int, int, str, bool]] = []
        spans: list[tuple[int, int]] = []
        at_import: list[tuple[int, int]] = []

        def visit(node: ast.AST, scope: str, in_function: bool) -> None:
            for child in (c for block in awareness.BLOCKS for c in getattr(node, block, None) or ()):
                if isinstance(child, ast.match_case):
                    visit(child, scope, in_function)
                    continue
                inner, inside = scope, in_function
                definition = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                if definition:
                    inner = f"{scope}.{child.name}" if scope else child.name
                    start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    functions.append((start, child.end_lineno or child.lineno, inner, not isinstance(child, ast.ClassDef)))
                    inside = in_function or not isinstance(child, ast.ClassDef)
                if isinstance(child, (ast.stmt, ast.excepthandler)):
                    spans.append(_own_lines(child))
                    if not in_function and (not definition or _evaluates(child)):
                        at_import.append(_own_lines(child))
                visit(child, inner, inside)

        visit(module, "", False)
        return cls(lines, sorted(functions), sorted(spans), True, sorted(at_import), module)

    def function_at(self, line: int) -> str:
        """The innermost function or class holding ``line``."""
        found = "<module>"
        for start, end, name, _ in self.functions:
            if start > line:
                break
            if line <= end:
                found = name  # later starts are nested deeper
        return found

    def at_import(self, first: int, last: int) -> bool:
        """Whether lines ``first``..``last`` touch a statement that runs when the module is imported:
        at module or class level, not a ``def`` or ``class`` statement itself (a new function is
        bound then, but what it does runs only when called)."""
        return any(s[0] <= last and s[1] >= first for s in self.at_import_spans)

    def statements(self, first: int, last: int) -> list[tuple[int, int]]:
        """The statement spans that touch lines ``first``..``last``."""
        return [s for s in self.spans if s[0] <= last and s[1] >= first]


def _evaluates(node: ast.AST) -> bool:
    """Whether a ``def`` or ``class`` statement runs code of its own when it is executed: decorators,
    default values, a call in its bases or annotations (a plain ``def f(x):`` only binds a name)."""
    if getattr(node, "decorator_list", None):
        return True
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if node.args.defaults or any(d is not None for d in node.args.kw_defaults):
            return True
        header = [node.args, node.returns]
    else:
        header = [*node.bases, *node.keywords]
    return any(isinstance(n, (ast.Call, ast.Lambda, ast.NamedExpr)) for root in header if root is not None for n in ast.walk(root))


def _own_lines(node: ast.AST) -> tuple[int, int]:
    """A statement's own lines: all of a simple one; a compound one's header (decorators, ``def``
    and its arguments, an ``if`` test, ``with`` items...), not the comments before its body."""
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    if not any(isinstance(getattr(node, block, None), list) and getattr(node, block) for block in awareness.BLOCKS):
        return start, node.end_lineno or node.lineno
    end = node.lineno
    for name, value in ast.iter_fields(node):
        if name in awareness.BLOCKS:
            continue
        for root in value if isinstance(value, list) else [value]:
            if isinstance(root, ast.AST):
                end = max([end, *(n.end_lineno for n in ast.walk(root) if getattr(n, "end_lineno", None))])
    return start, end


# --- comparing two trees ----------------------------------------------------------------------------


def _files(root: Path) -> dict[str, Path]:
    """The package's regular files (a stored tree holds nothing else; anything else is left out)."""
    out = {}
    for rel in tree_files(root):
        if rel.startswith("sglang/") and stat.S_ISREG(os.lstat(root / rel).st_mode):
            out[rel] = root / rel
    return out


def compare(source: str, tree_digest: str, tree_root: Path, baseline: str, baseline_digest: str, baseline_root: Path,
            chosen: str, declared: str | None, receipts: list[Receipt], how: str | None = None,
            unvouched: frozenset[str] = frozenset()) -> Departures:
    """The departure record of the tree at ``tree_root`` from the baseline at ``baseline_root``,
    hunks marked from ``receipts`` (the tree's own); the baseline's files in ``unvouched`` (nothing
    vouches for them as upstream's) are read as absent from it."""
    head = dict(source=source, tree_digest=tree_digest, baseline=baseline, baseline_digest=baseline_digest,
                chosen=chosen, declared=declared, how=how)
    unrecorded = {r.probe.id: ids for r in receipts if (ids := coverage.unrecorded(r.cases))}
    if tree_digest == baseline_digest and not unvouched:
        return Departures(**head, identical=True, unrecorded=unrecorded)
    mine = _files(tree_root)
    theirs = {rel: path for rel, path in _files(baseline_root).items() if rel not in unvouched}
    imported = {name for r in receipts for name in r.materials}
    reached = reach.closure(mine, lambda rel: mine[rel].read_bytes() if rel in mine else None, imported)
    changes: list[FileChange] = []
    for rel in sorted(mine.keys() | theirs.keys()):
        if rel not in theirs:
            change = "added"
        elif rel not in mine:
            change = "removed"
        elif sha256_file(mine[rel]) != sha256_file(theirs[rel]):
            change = "changed"
        else:
            continue
        hunks: list[Hunk] = []
        note = None
        if change != "removed" and rel.endswith(".py"):
            before = theirs[rel].read_bytes() if rel in theirs else b""
            hunks = hunks_of(rel, before, mine[rel].read_bytes(), receipts, rel in reached)
        elif change != "removed" and rel.endswith(COMPILED):
            note = "compiled module: its code can be neither read nor traced"
            hunks = [_whole(rel, "<compiled module>", mine[rel], "at import" if rel in reached else "unreachable",
                            _imported_by(rel, receipts), [Aware(line=1, what="compiled code: what it reads cannot be told")])]
        elif change != "removed":  # a data file: the process may read it
            note = "not Python: the process may read it"
            hunks = [_whole(rel, f"<{change} file>", mine[rel], "data")]
        changes.append(FileChange(path=rel, change=change, imported=rel in imported, reachable=rel in reached, hunks=hunks,
                                  note=note))
    return Departures(**head, identical=False, files=changes, unrecorded=unrecorded)


def _whole(rel: str, function: str, path: Path, reached: str, ran_in: dict[str, list[str]] | None = None,
           aware: list[Aware] = ()) -> Hunk:
    """A file that is not cut into hunks (compiled, data, removed) as one changed place, addressed by its bytes."""
    digest = sha256_file(path)
    return Hunk(file=rel, function=function, at=1, lines=None, baseline_lines=None, added=0, removed=0, code=True,
                ran_in=ran_in or {}, aware=list(aware), diff=[f"{function[1:-1]}, sha256 {digest}"], reach=reached,
                key=_key(rel, function, [digest]))


def _imported_by(rel: str, receipts: list[Receipt]) -> dict[str, list[str]]:
    return {r.probe.id: [c.id for c in r.cases if c.outcome == "observed"] for r in receipts if rel in r.materials}


def _key(rel: str, function: str, lines: list[str]) -> str:
    """A hunk's content address: its file, its function and its lines (line ends normalised, no line numbers)."""
    return hashlib.sha256("\0".join([rel, function, *lines]).encode("utf-8", errors="surrogatepass")).hexdigest()


def _reached(code: bool, ran: bool, at_import: bool, in_closure: bool) -> str:
    if not code:
        return "unreachable"
    if ran:
        return "ran"
    if not in_closure:
        return "unreachable"
    return "at import" if at_import else "imported"


def hunks_of(rel: str, before: bytes, after: bytes, receipts: list[Receipt], in_closure: bool = True) -> list[Hunk]:
    """The changed places of one module, one per enclosing function, marked from ``receipts``;
    ``in_closure``: the module is in the static import closure of the probes' modules."""
    old, new = Source.read(before), Source.read(after)
    opcodes = [op for op in SequenceMatcher(None, old.lines, new.lines, autojunk=False).get_opcodes() if op[0] != "equal"]
    changed = [(j1 + 1, j2) for _, _, _, j1, j2 in opcodes if j2 > j1]
    hits = awareness.scan(new.module if new.parsed else after.decode("utf-8", errors="replace"), rel, changed) if changed else []
    out: list[Hunk] = []
    for tag, i1, i2, j1, j2 in opcodes:
        removed = old.lines[i1:i2]
        for piece, (first, last) in enumerate(_pieces(new, j1 + 1, j2) if j2 > j1 else [(None, None)]):
            if first is None:  # only removed: placed after tree line j1
                at, statements = j1, new.statements(j1, j1 + 1)
                function = new.function_at(j1 + 1 if j1 < len(new.lines) else max(j1, 1))
                code = bool(removed) and (not old.parsed or bool(old.statements(i1 + 1, i2)))
                added_lines: list[str] = []
            else:
                at, statements = first, new.statements(first, last)
                function = new.function_at(max(first, statements[0][0]) if statements else first)
                code = bool(statements) or (piece == 0 and bool(old.statements(i1 + 1, i2)))
                added_lines = new.lines[first - 1:last]
            gone = removed if piece == 0 else []
            text = [f"-{line}" for line in gone] + [f"+{line}" for line in added_lines]
            ran_in = {r.probe.id: cases for r in receipts
                      if statements and (cases := coverage.cases_running(r.cases, rel, coverage.merge(statements)))}
            renamed_in = {r.probe.id: cases for r in receipts
                          if code and (cases := [c.id for c in r.cases if rel in (c.renamed or ())])}
            at_import = in_closure and first is not None and new.at_import(first, last)
            aware = [] if first is None else sorted({Aware(line=h.line, what=h.what) for h in hits
                                                     if h.line <= last and h.end >= first},
                                                    key=lambda a: (a.line, a.what))
            out.append(Hunk(
                file=rel, function=function, at=at, lines=None if first is None else (first, last),
                baseline_lines=(i1 + 1, i2) if gone else None, added=len(added_lines), removed=len(gone), code=code,
                ran_in=ran_in, renamed_in=renamed_in, at_import=at_import, aware=aware, diff=text[:MAX_DIFF_LINES],
                diff_more=max(0, len(text) - MAX_DIFF_LINES), key=_key(rel, function, text),
                reach=_reached(code, any(ran_in.values()) or any(renamed_in.values()), at_import, in_closure),
            ))
    return out


def _pieces(source: Source, first: int, last: int) -> list[tuple[int, int]]:
    """Lines ``first``..``last`` cut where the enclosing function changes; a piece holding no
    statement (blank lines, comments between two functions) joins the piece before it, or the
    one after when it comes first, so nothing is left out and no hunk is only a blank line."""
    pieces: list[list] = []
    for line in range(first, last + 1):
        name = source.function_at(line)
        if pieces and pieces[-1][2] == name:
            pieces[-1][1] = line
        else:
            pieces.append([line, line, name])
    kept: list[list[int]] = []
    pending: int | None = None  # the start of leading pieces without a statement
    for start, end, _ in pieces:
        if source.statements(start, end):
            kept.append([pending if pending is not None else start, end])
            pending = None
        elif kept:
            kept[-1][1] = end
        elif pending is None:
            pending = start
    return [(a, b) for a, b in kept] or [(first, last)]


def judged(fixes: list[judging.FixStatus], record: Departures, receipts: list[Receipt]) -> list[judging.FixStatus]:
    """Each fix's status with what it rests on, in the modules its own probe runs imported: the changed
    places its cases were recorded running; the changed module-level code (and def headers that
    evaluate something), which ran when those modules were imported, before every case; the changed
    places of modules whose code ran in its cases under another file's name (the recorder cannot
    tell where in the module that was); and the changed places that can tell they are being probed,
    run by one of its cases or by no case at all (a tree's code can keep its own lines from the
    recorder). Every one is a place where the tree is not its baseline and the verdict may rest on it."""
    out = []
    for fs in fixes:
        probes = {r.probe.id for r in receipts if r.probe.fix == fs.fix}
        imported = {name for r in receipts if r.probe.fix == fs.fix for name in r.materials}
        ran = record.ran(probes)
        places = [h.place for h in ran]
        aware = [h.place for h in record.hunks()
                 if h.aware and (h in ran or (not any(h.ran_in.values()) and h.file in imported))]
        at_import = [h.place for h in record.hunks()
                     if h.at_import and h.code and h.file in imported and h not in ran and h.place not in aware]
        renamed = [h.place for h in record.renamed() if h.touched_by(probes) and h.place not in aware and h.place not in at_import]
        out.append(judging.departed(fs, record.baseline or "", places, aware, at_import=at_import, renamed=renamed))
    return out


def in_bundle(root: Path) -> dict[str, Departures]:
    """The departure records of a bundle (verified by the caller), by file name."""
    folder = root / DIR
    return {f"{DIR}{p.name}": Departures.model_validate_json(p.read_bytes())
            for p in sorted(folder.glob("*.json"))} if folder.is_dir() else {}


def file_name(label: str) -> str:
    return f"{DIR}{label}.json"
