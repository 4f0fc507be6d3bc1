"""A sweep as a line of trees: one lane per fix, one cell per swept source coloured by its status, the
bug window and the first fixed tree marked. As inline SVG for the HTML report (no script, no external
asset: each cell is a plain link to its receipt) and as a compact strip for the terminal.

Rendering only: statuses, windows and phases come from runner/judge/judging.py via the record.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Callable, Iterable

from rich.markup import escape

from runner import fixids
from runner.evidence import receipts
from runner.judge import duty_windows, judging
from runner.judge.observations import Case
from runner.evidence.records import SweepRecord
from runner.views import styles


@dataclass(frozen=True)
class Cell:
    source: str
    label: str
    word: str  # judging.line_status of the fix's status there
    phase: judging.Phase
    recurred: bool  # shows the bug after the first fixed tree
    receipt: str | None  # bundle path of the receipt behind the cell
    detail: str  # each site's status


@dataclass(frozen=True)
class Lane:
    window: judging.Window
    cells: list[Cell]

    def index(self, source: str | None) -> int | None:
        return next((i for i, c in enumerate(self.cells) if c.source == source), None) if source else None


def lanes(record: SweepRecord, receipt_of: Callable[[str, int], str | None]) -> list[Lane]:
    """One lane per fix of the record's windows; ``receipt_of(tree_digest, fix)`` names the receipt
    of that fix's probe on a tree (a source sharing an earlier one's tree links that tree's)."""
    order = [r.source for r in record.rows]
    out = []
    for w in record.windows:
        cells = []
        for row in record.rows:
            fs = next((f for f in row.fixes if f.fix == w.fix), None)
            if w.site is not None:  # a configuration's own lane: that site's status alone
                fs = judging.at_site(fs, w.site)
            where = judging.phase(w, order, row.source)
            word = judging.line_status(fs.status, where) if fs else "not probed"
            detail = ", ".join(f"{s.site} {s.status}" for s in fs.sites) if fs else ""
            cells.append(Cell(row.source, row.label, word, where, row.source in w.recurred,
                              receipt_of(row.tree_digest, w.fix), detail))
        out.append(Lane(w, cells))
    return out


def of_bundle(kind: str, extra: dict | None) -> SweepRecord | None:
    """A sweep bundle's record, when it names bug windows (a line to draw)."""
    if kind != "sweep" or not extra:
        return None
    record = SweepRecord.model_validate(extra)
    return record if record.windows and record.rows else None


def receipt_finder(named: dict[str, receipts.Receipt]) -> Callable[[str, int], str | None]:
    """``receipt_of`` over a bundle's receipts (bundle path -> receipt): by tree and fix."""
    index = {(receipts.source_key(r.source), r.probe.fix): name for name, r in named.items()}
    return lambda digest, fix: index.get((digest, fix))


def cases_finder(named: Iterable[receipts.Receipt]) -> Callable[[str, int], list[Case]]:
    """``cases_of(tree_digest, fix)``: the cases of every receipt of that fix's probes on that tree."""
    index: dict[tuple[str, int | None], list[Case]] = {}
    for r in named:
        index.setdefault((receipts.source_key(r.source), r.probe.fix), []).extend(r.cases)
    return lambda digest, fix: index.get((digest, fix), [])


CASES_SHOWN = 3  # case names shown per window; the rest counted


def duty_text(record: SweepRecord, fix: int, cases_of: Callable[[str, int], list[Case]]) -> list[str]:
    """Per duty of ``fix``, beside its window: the tree where it first holds in which cases, and
    where it stopped holding (runner/judge/duty_windows.py). A tree sharing an earlier one's tree
    is read there (its own cases are that tree's)."""
    by = {r.source: short(r.label) for r in record.rows}
    line = [(r.source, cases_of(r.tree_digest, fix) or None) for r in record.rows]
    found = duty_windows.windows(fix, line)
    out = []
    for duty in dict.fromkeys(w.duty for w in found):
        said: dict[str, list[str]] = {}  # the window in words -> its cases (windows that read alike, merged)
        for w in (w for w in found if w.duty == duty):
            held = f"first holds {by[w.first_held]}" if w.first_held else "does not hold by the last tree"
            if w.held_before:
                held = f"held from {by[w.held_before]}, stops holding at {by[w.first_failed]}, " + \
                       held.replace("first holds", "holds again")
            said.setdefault(held + (f", fails again at {_runs(w.recurred, record)}" if w.recurred else ""), []).extend(w.cases)
        out.append(f"{duty}: " + "; ".join(f"{words} in {_named(cases)}" for words, cases in said.items()))
    return out


def _runs(sources: list[str], record: SweepRecord) -> str:
    """Trees along the line as runs: ``0.5.5.post1 .. 0.5.9 (10 trees), 0.5.16``."""
    at = {r.source: i for i, r in enumerate(record.rows)}
    runs: list[list[str]] = []
    for source in sources:
        if runs and at[source] == at[runs[-1][-1]] + 1:
            runs[-1].append(source)
        else:
            runs.append([source])
    label = {r.source: short(r.label) for r in record.rows}
    return ", ".join(label[r[0]] if len(r) == 1 else f"{label[r[0]]} .. {label[r[-1]]} ({len(r)} trees)" for r in runs)


def _named(cases: list[str]) -> str:
    shown = ", ".join(cases[:CASES_SHOWN]) + (f" +{len(cases) - CASES_SHOWN}" if len(cases) > CASES_SHOWN else "")
    return f"{len(cases)} case{'s' * (len(cases) != 1)} ({shown})"


def lane_name(w: judging.Window) -> str:
    """What follows the fix's number in a lane's name: its configuration, when the lane is one."""
    return f" {w.site}" if w.site else ""


def short(label: str) -> str:
    return label.removeprefix("sglang-")


def window_text(lane: Lane) -> str:
    """The window in words, as both views print it."""
    w, by = lane.window, {c.source: short(c.label) for c in lane.cells}
    if w.first_bug is None:
        seen = f"first fixed {by[w.first_fixed]}" if w.first_fixed else "never fixed"
        return f"no tree of this line shows the bug; {seen}"
    n = lane.index(w.first_fixed) if w.first_fixed else len(lane.cells)
    span = f"bug window {by[w.first_bug]} .. {by[w.last_bug]} ({n - lane.index(w.first_bug)} trees)"
    fixed = f"first fixed {by[w.first_fixed]}" if w.first_fixed else "not fixed by the last tree"
    after = (f"shows the bug again: {', '.join(by[s] for s in w.recurred)}" if w.recurred
             else "no tree after it shows the bug" if w.first_fixed else "")
    return "; ".join(x for x in (span, fixed, after) if x)


# --- terminal ----------------------------------------------------------------------------------------

GLYPH = {"not fixed": "█", "regression": "R", "fixed": "█", "no bug observed": "░", "clean": "░",
         "inconclusive": "?", "not applicable": "·", "not probed": " "}


def strip(record: SweepRecord, titles: dict[int, str] | None = None,
          cases_of: Callable[[str, int], list[Case]] | None = None) -> list[str]:
    """Rich markup lines: per fix one mark per tree, oldest first, the window bracketed by its
    first tree showing the bug and its first fixed tree (``^`` under each); with ``cases_of``, under
    each fix's first lane its per-duty windows (``duty_text``)."""
    out, ls, shown = [], lanes(record, lambda _digest, _fix: None), set()
    for lane in ls:
        w = lane.window
        marks = "".join(f"[{styles.STATUS.get(c.word, 'red')}{' reverse' if c.recurred else ''}]{GLYPH.get(c.word, '!')}[/]"
                        for c in lane.cells)
        under = [" "] * len(lane.cells)
        for i in (lane.index(w.first_bug), lane.index(w.first_fixed)):
            if i is not None:
                under[i] = "^"
        title = escape((titles or {}).get(w.fix, ""))
        out += [f"[bold]{fixids.label(w.fix)}[/]{escape(lane_name(w))} {title}".rstrip(), f"  {marks}", f"  {''.join(under)}  {escape(window_text(lane))}"]
        if cases_of is not None and w.fix not in shown:
            shown.add(w.fix)
            duties = duty_text(record, w.fix, cases_of)
            out += ["  [dim]per duty, case by case:[/]"] * bool(duties) + [f"    {escape(text)}" for text in duties]
    if ls:
        first, last = short(ls[0].cells[0].label), short(ls[0].cells[-1].label)
        out.append(f"  [dim]{escape(first)} → {escape(last)}: █ red not fixed, █ green fixed, ░ no bug observed "
                   f"(before the window), R regression, ? inconclusive, · not applicable[/]")
    return out


# --- SVG ---------------------------------------------------------------------------------------------

CELL, GAP, LANE, LEFT, TOP = 16, 2, 58, 150, 24


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def svg(record: SweepRecord, receipt_of: Callable[[str, int], str | None], href: Callable[[str], str],
        titles: dict[int, str] | None = None) -> str:
    """The line as one ``<svg>`` element; ``href(receipt)`` is the link to a receipt file."""
    ls = lanes(record, receipt_of)
    if not ls:
        return ""
    n = len(ls[0].cells)
    step = CELL + GAP
    labels_h = 8 + 6.2 * max(len(short(c.label)) for c in ls[0].cells)
    said = max(len(window_text(lane)) for lane in ls) * 5.6  # the longest window, in 10px text
    fixed = max((6 * len("first fixed " + short(c.label)) + (lane.index(c.source) or 0) * step
                 for lane in ls for c in lane.cells if c.source == lane.window.first_fixed), default=0)
    width, height = LEFT + max(n * step + 20, said, fixed + 10), TOP + len(ls) * LANE + labels_h
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" role="img" viewBox="0 0 {width:.0f} {height:.0f}" '
             f'width="{width:.0f}" height="{height:.0f}" font-family="system-ui, DejaVu Sans, sans-serif" font-size="11">',
             f'<title>{_e("release line: status of each fix per tree, oldest first")}</title>']
    for k, lane in enumerate(ls):
        w, y = lane.window, TOP + k * LANE
        parts.append(f'<text x="4" y="{y + 22}" font-weight="600" font-size="12">{fixids.label(w.fix)}</text>')
        under_name = w.site if w.site else (titles or {}).get(w.fix, "")  # a configuration's lane names it
        parts.append(f'<text x="4" y="{y + 36}" fill="#57606a" font-size="9">{_e(_clip(under_name, 26))}</text>')
        lo, hi = lane.index(w.first_bug), lane.index(w.first_fixed)
        if lo is not None:  # the bug window: a band behind its cells and a bracket above
            end = (hi if hi is not None else n) * step + LEFT - GAP
            x0 = LEFT + lo * step
            parts.append(f'<rect class="window" x="{x0 - 2}" y="{y + 6}" width="{end - x0 + 4}" height="{CELL + 8}" '
                         f'fill="#ffebe9" stroke="#cf222e" stroke-dasharray="3 2"></rect>')
            said = window_text(lane)
            tx = max(4, min(x0, width - 4 - 5.6 * len(said)))  # kept inside the picture
            parts.append(f'<text x="{tx:.0f}" y="{y + 2}" fill="#82071e" font-size="10">{_e(said)}</text>')
        for i, c in enumerate(lane.cells):
            x = LEFT + i * step
            tip = f"{short(c.label)} · {fixids.label(w.fix)}{lane_name(w)}: {c.word}" + (f" ({c.detail})" if c.detail else "") + (
                " · after the first fixed tree: shows the bug again" if c.recurred else "")
            rect = (f'<rect class="cell {_cls(c.word)}" x="{x}" y="{y + 10}" width="{CELL}" height="{CELL}" rx="2" '
                    f'fill="{styles.FILL.get(c.word, styles.FILL["not fixed"])}" stroke="{"#1f2328" if c.recurred else "#8c959f"}" '
                    f'stroke-width="{2 if c.recurred else 0.5}"><title>{_e(tip)}</title></rect>')
            parts.append(f'<a href="{_e(href(c.receipt))}">{rect}</a>' if c.receipt else rect)
        if hi is not None:  # the first fixed tree: a bar through the lane and its name below
            x = LEFT + hi * step - GAP / 2
            parts.append(f'<line class="first-fixed" x1="{x}" y1="{y + 4}" x2="{x}" y2="{y + CELL + 16}" stroke="#1a7f37" stroke-width="3"></line>')
            parts.append(f'<text x="{x + 3}" y="{y + CELL + 26}" fill="#1a7f37" font-size="10" font-weight="600">'
                         f'{_e("first fixed " + short(lane.cells[hi].label))}</text>')
    base = TOP + len(ls) * LANE
    for i, c in enumerate(ls[0].cells):
        x = LEFT + i * step + CELL / 2 + 3
        parts.append(f'<text x="{x}" y="{base}" transform="rotate(-90 {x} {base})" text-anchor="end" font-size="10">{_e(short(c.label))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def legend() -> str:
    """The colours, as HTML beside the SVG."""
    items = [f'<span class="key"><svg width="12" height="12"><rect width="12" height="12" rx="2" fill="{fill}" '
             f'stroke="#8c959f" stroke-width="0.5"></rect></svg> {_e(word)}</span>' for word, fill in styles.FILL.items() if word != "clean"]
    return " ".join(items)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _cls(word: str) -> str:
    return "-".join(word.split())

