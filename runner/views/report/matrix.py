"""Status by source, for any bundle kind: one row per observed source (or per swept source), one
column per (fix, probe), each cell a status from ``judging`` with the sites and counts behind it."""

from __future__ import annotations

from dataclasses import dataclass

from runner import fixids
from runner.evidence import pins, receipts
from runner.judge import judging
from runner.judge.observations import Case
from runner.evidence.receipts import Source
from runner.evidence.records import SweepRecord
from runner.store import specs
from runner.views.report import gates
from runner.views.report.sources import TREE_KINDS, describe
from runner.views import verdict
from runner.views.report.verified import Evidence


@dataclass(frozen=True)
class Column:
    fix: int | None
    probe: str

    @property
    def label(self) -> str:
        return f"{fixids.label(self.fix)} {self.probe}" if self.fix is not None else self.probe


@dataclass(frozen=True)
class Cell:
    """One source's status for one probe, in judging's words, with what is behind it."""

    word: str  # a judging.Status, as it reads for the source (judging.source_status)
    detail: str  # where a problem shows (sites) and the case counts behind the word


def judged(cases: list[Case]) -> Cell:
    """One source's status for one probe (judging.status), with the sites (doors, paths) each
    problem shows at (a dropped guard is named even when the bug is fixed) and the case counts."""
    word = judging.status(cases)
    if word == "not probed":
        return Cell(word, "")
    counts = _counts(cases)
    found = judging.problems(cases)
    if found:
        where = [f"{'' if i == 0 else w + ' '}at {', '.join(sites)}" for i, (w, sites) in enumerate(found)]
        return Cell(word, "; ".join(where) + f" ({counts})")
    return Cell(word, counts)


def _counts(cases: list[Case]) -> str:
    n: dict[str, int] = {}
    for c in cases:
        key = judging.state(c).replace("_", " ")
        n[key] = n.get(key, 0) + 1
    return ", ".join(f"{v} {k}" for k, v in n.items())


@dataclass(frozen=True)
class MatrixRow:
    source: Source  # whose receipts fill the row's cells
    name: str
    note: str = ""


def matrix(ev: Evidence) -> tuple[list[MatrixRow], list[Column], dict[tuple[str, Column], str]]:
    """Rows are the observed sources (trees in the bundle's order, then models and servers), or for
    a sweep one row per swept source in sweep order (a commit that shares an earlier one's tree
    says so and shows that tree's receipts); columns (fix, probe); each cell names the receipt
    behind it."""
    order = {receipts.source_key(t): i for i, t in enumerate(ev.index.trees)}
    sources: dict[str, Source] = {}
    cells: dict[tuple[str, Column], str] = {}
    for name, r in sorted(ev.receipts.items()):
        key = receipts.source_key(r.source)
        sources.setdefault(key, r.source)
        cells[(key, Column(r.probe.fix, r.probe.id))] = name
    columns = sorted(dict.fromkeys(col for _, col in cells), key=lambda c: (c.fix is None, c.fix or 0, c.probe))
    swept = ev.index.extra.get("rows") if ev.index.kind in ("sweep", "audit") and ev.index.extra else None
    if swept:
        record = SweepRecord.model_validate(ev.index.extra)
        labels = {row.source: row.label for row in record.rows}
        out = []
        for row in record.rows:
            observed = sources.get(row.tree_digest)
            if observed is None:
                continue
            note = (f"same tree as {labels[row.same_tree_as]}" if row.same_tree_as else
                    "" if observed.source == row.source else f"receipts observed via {observed.source}")
            out.append(MatrixRow(observed, describe(observed) if observed.source == row.source else _named(row.source), note))
        return out, columns, cells
    rows = sorted(sources.items(), key=lambda kv: (kv[1].kind not in TREE_KINDS, order.get(kv[0], len(order))))
    return [MatrixRow(s, describe(s)) for _, s in rows], columns, cells


def _named(text: str) -> str:
    """A swept source without a receipt of its own, as ``describe`` would name it."""
    spec = specs.parse(text)
    return f"{spec.url} @ {spec.rev[:12]}" if isinstance(spec, specs.GitSpec) else text


def import_failure(ev: Evidence, name: str | None) -> str | None:
    """Why receipt ``name``'s tree did not import (every case then errored for that one reason), in the tree's terms."""
    failed = ev.receipts[name].import_result.error if name else None
    if failed is None:
        return None
    return f"the tree did not import: {failed.type}: {failed.message}" + (f" ({failed.frame})" if failed.frame else "")


def pinned_sites(ev: Evidence, fix: int) -> list[str]:
    """The configurations a fix is judged in: those its differential in the bundle compared, else its pin's."""
    recorded = next((f.judged.sites for f in ev.fixes if f.judged.fix == fix and f.judged.sites), None)
    if recorded is not None:
        return recorded
    pinned = pins.load().fixes
    return pinned[fix].sites if fix in pinned else []


def cell_at(ev: Evidence, cells: dict[tuple[str, Column], str], source: Source, col: Column) -> tuple[str | None, Cell]:
    name = cells.get((receipts.source_key(source), col))
    cases = ev.receipts[name].cases if name else []
    skip = gates.unused(ev, name) if name else set()  # an acceptance gate's alternative it did not use
    st = judged([c for c in cases if c.id not in skip])
    if unused := sum(c.id in skip for c in cases):
        st = Cell(st.word, f"{st.detail}, {unused} not used")
    missed = ev.receipts[name].fix_code.not_covered() if name and ev.receipts[name].fix_code else []
    if missed and st.word == "fixed":  # a fixed that rests on fewer than all statements of the fix's code
        st = Cell(judging.covered(st.word, missed), f"{st.detail}; not covered: {', '.join(missed)}")
    if name and col.fix is not None and source.kind in TREE_KINDS and st.word != "fixed":  # one rule with the verdict lines
        [fs] = judging.fixes([ev.receipts[name]]) or [None]
        if fs is not None and verdict.of_fix(fs, {}, pinned_sites(ev, col.fix)).word == verdict.OFF_BY_DEFAULT:
            st = Cell(verdict.OFF_BY_DEFAULT, st.detail)
    row = ev.rows.get(source.tree_digest) if col.fix is not None and source.kind in TREE_KINDS else None
    if row is not None and col.fix in row.on_unreviewed and verdict.carried(st.word):  # one rule with the verdict lines
        st = Cell(verdict.UNREVIEWED, f"{row.unreviewed_reason()}; {st.detail}")
    if why := import_failure(ev, name):  # every case errored for one reason: say it, not only how many
        st = Cell(st.word, f"{why}; {st.detail}")
    return name, Cell(judging.source_status(st.word, source.kind in TREE_KINDS), st.detail)
