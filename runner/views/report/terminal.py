"""The report in the terminal: rich tables, every piece of a bundle's text escaped (a tree's words
among it may hold markup or control characters)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape as rich_escape
from rich.table import Table
from rich.text import Text

from runner import errors, fixids, ui
from runner.judge import judging
from runner.store.sources import TreeIdentity
from runner.views import grading, styles, timeline, verdict
from runner.views.report import departures, gates
from runner.views.report.effects import effect_rows, failed_duties
from runner.views.report.incident import STEPS, Level, arrow, assess
from runner.views.report.matrix import cell_at, import_failure, matrix
from runner.views.report.sources import TREE_KINDS, describe, sandbox, standins, what_it_is
from runner.views.report.verified import Evidence, Fix, fix_titles

VERIFY_HINT = "cd BUNDLE && sha256sum -c SHA256SUMS   and   diffprobe verify BUNDLE"


def _t(text: object) -> str:
    """Text from a bundle (a tree's words among it) for the terminal: no markup, no control character."""
    return rich_escape(errors.printable(str(text)))


@dataclass(frozen=True)
class Focus:
    """What of a bundle to show: the summary (nothing set), some fixes, some cases, or everything."""

    fixes: tuple[int, ...] = ()
    cases: tuple[str, ...] = ()
    all: bool = False


def show(ev: Evidence, diffs: bool = False, focus: Focus = Focus()) -> None:
    """The report: a summary first (every fix's verdict line, the incident's steps and the matrix in a
    few lines each); ``focus`` opens one fix's cases, some cases, or everything. ``diffs``: with each
    changed place's lines (departures are folded to places otherwise)."""
    o = ui.out
    o.print(f"[bold]{_t(ev.index.kind)} bundle[/] {_t(ev.root)}  created {_t(ev.index.created_at)}  "
            f"[green]✓ verified[/] ({len(ev.receipts)} receipts, {len(ev.fixes)} differentials)")
    about = {f.judged.fix for f in ev.fixes} | {r.probe.fix for r in ev.receipts.values() if r.probe.fix is not None}
    unknown = [n for n in focus.fixes if n not in about]
    if unknown:
        raise errors.BadInput(f"--fix {unknown[0]}: no receipt of this bundle is about it "
                              f"(it has {fixids.labels(sorted(about))})")
    if focus.fixes or focus.cases:
        for fix in ev.fixes:
            if fix.judged.fix in focus.fixes or (focus.cases and any(t.case in focus.cases for t in fix.judged.cases)):
                _show_fix(ev, fix, focus.cases)
        for n in (n for n in focus.fixes if n not in {f.judged.fix for f in ev.fixes}):  # an audit's, a sweep's
            _show_cases(ev, tuple(c.id for r in ev.receipts.values() if r.probe.fix == n for c in r.cases))
        _show_cases(ev, focus.cases)
        o.print(f"re-verify: {_t(VERIFY_HINT.replace('BUNDLE', str(ev.root)))}")
        return
    if focus.all:
        _show_all(ev, diffs)
        return
    _show_summary(ev)


def _show_summary(ev: Evidence) -> None:
    """At most a screen: each fix's verdict line, the steps and the sources in a line each, where the rest is."""
    o = ui.out
    if newest := verdict.of_record(ev.index.kind, ev.index.extra, ev.receipts.values()):
        o.print(Text.assemble(("the newest tree, ", "bold"), newest[0], (" (every fix, why):", "bold")))
    against_head = verdict.of_backport_bundle(ev.index.kind, ev.index.extra, ev.receipts.values())
    lines = [verdict.of_differential(f.judged, ev.receipts, what="before vs after the patch:" if against_head else "")
             for f in ev.fixes]
    verdict.show([*filter(None, [against_head]), *lines] or (newest[1] if newest else []), ev.receipts.values())
    for score in ev.index.extra.get("scores", []) or []:
        judged = judging.MutationScore.model_validate({k: v for k, v in score.items() if k != "source"})
        o.print(f"{fixids.label(judged.fix)} evidence strength at {_t(score.get('source', '?'))}: {_t(judged.strength())}")
    if ev.graded:
        grading.show_bundle(ev.index.extra)
    elif ev.fixes:
        found = [assess(s, ev.fixes) for s in STEPS]
        levels = {lv: [str(f.step.number) for f in found if f.level == lv] for lv in dict.fromkeys(f.level for f in found)}
        o.print("incident steps: " + "; ".join(f"[{_level_style(lv)}]{lv}[/]: {', '.join(n)}" for lv, n in levels.items()))
    if acceptance := gates.of(ev):
        _show_gates(acceptance)
    if record := timeline.of_bundle(ev.index.kind, ev.index.extra):  # a line of trees: the strip is its matrix
        _show_line(ev, record)
    else:
        _show_sources(ev)
    if trees := departures.of(ev.departures):
        o.print(f"{len(trees)} tree(s) depart from their baselines: " + _t("; ".join(t.line for t in trees[:2]))
                + (f" and {len(trees) - 2} more" if len(trees) > 2 else ""))
    o.print(f"not tested: {_t('; '.join(ev.index.limits))}" if ev.index.limits else "not tested: (no limits recorded)")
    o.print(_t(f"more: --fix N (one fix's cases, duties, side effects), --case ID, --all (everything), --html FILE; "
               f"re-verify: diffprobe verify {ev.root}"), style="dim")


def _show_sources(ev: Evidence) -> None:
    """The matrix in one line per source: each fix's word there (every detail is in --all and the HTML page)."""
    rows, columns, cells = matrix(ev)
    if not rows:
        return
    ui.out.print("[bold]status by source[/] " + _t(f"({', '.join(c.label for c in columns)})"))
    for mrow in rows:
        words = [f"{_t(col.label.split(' ')[0])} [{styles.status(st.word)}]{_t(st.word)}[/]"
                 for col in columns for _, st in [cell_at(ev, cells, mrow.source, col)] if st.word != "not probed"]
        ui.out.print(f"  {_t(mrow.name)}: " + (" · ".join(words) or "[dim]not probed[/]"))


def _show_line(ev: Evidence, record) -> None:
    ui.out.print("[bold]the line, oldest first[/] (one mark per tree)")
    for text in timeline.strip(record, fix_titles(ev), timeline.cases_finder(ev.receipts.values())):
        ui.out.print(text)


def _show_cases(ev: Evidence, wanted: tuple[str, ...]) -> None:
    """Cases of no differential (an audit's, a sweep's): each receipt's case by that id, with its duties."""
    if not wanted:
        return
    shown = {t.case for f in ev.fixes for t in f.judged.cases}
    found = [(name, c) for name, r in sorted(ev.receipts.items()) for c in r.cases if c.id in wanted and c.id not in shown]
    for name, c in found:
        failed = ", ".join(judging.failed_duties(c)) or "-"
        why = f"; {c.error.type}: {c.error.message}" if c.error else ""
        ui.out.print(f"  {_t(name)} {_t(c.id)} ({_t(c.site)}, {c.role} case): {_t(judging.state(c))}; failed duties: "
                     f"{_t(failed)}{_t(why)}")
    missing = [w for w in wanted if w not in shown and not any(c.id == w for _, c in found)]
    if missing:
        raise errors.BadInput(f"--case {missing[0]}: no case of this bundle has that id")


def _show_all(ev: Evidence, diffs: bool) -> None:
    o = ui.out
    if newest := verdict.of_record(ev.index.kind, ev.index.extra, ev.receipts.values()):
        o.print(Text.assemble(("the newest tree, ", "bold"), newest[0], (" (every fix, why):", "bold")))
    verdict.show(newest[1] if newest else [], ev.receipts.values())
    for fix in ev.fixes:
        _show_fix(ev, fix)
    for score in ev.index.extra.get("scores", []) if ev.index.kind == "mutation" else []:
        judged = judging.MutationScore.model_validate({k: v for k, v in score.items() if k != "source"})
        o.print(f"{fixids.label(judged.fix)} in {_t(score.get('source', '?'))}: evidence strength: {_t(judged.strength())}; "
                f"{judged.survived} survived, {judged.equivalent} equivalent, {judged.error} error "
                f"(baseline {_t(judged.baseline)}; every mutant in mutation/)")
    if ev.graded:
        grading.show_bundle(ev.index.extra)
    else:
        steps = Table("step", "evidence", "backed by / found", title="The incident's seven steps", title_justify="left")
        for f in (assess(s, ev.fixes) for s in STEPS):
            refs = [f"{fixids.label(b.fix.judged.fix)} {b.transition.probe}/{b.transition.case}: bug → clean" for b in f.backing]
            steps.add_row(f"{f.step.number}. {_t(f.step.text)}", f"[{_level_style(f.level)}]{f.level}[/]",
                          _t("; ".join(refs + f.found) or f.step.beyond))
        o.print(steps)
    if acceptance := gates.of(ev):
        _show_gates(acceptance)
    _show_matrix(ev)
    _show_departures(ev, diffs)
    if record := timeline.of_bundle(ev.index.kind, ev.index.extra):
        _show_line(ev, record)
    o.print("[bold]not tested[/] (this bundle's limits):")
    for limit in ev.index.limits:
        o.print(f"  - {_t(limit)}")
    o.print(f"re-verify: {_t(VERIFY_HINT.replace('BUNDLE', str(ev.root)))}")


def wrote(page: Path) -> None:
    ui.out.print(f"html: {_t(page)}")


def _level_style(level: Level) -> str:
    return {"CPU differential": "green", "vendor disclosure": "cyan", "not covered": "yellow"}[level]


def _show_fix(ev: Evidence, fix: Fix, cases: tuple[str, ...] = ()) -> None:
    """One fix: its two sides and how they ran, then each case (only ``cases`` when given)."""
    d = fix.judged
    o = ui.out
    o.print(f"\n[bold]{fixids.label(d.fix)} {_t(d.title)}[/]")
    for label, sides in (("base", d.base), ("head", d.head)):
        for s in sides:
            tree = f"  tree {_t(s.source.tree_digest)}" if isinstance(s.source, TreeIdentity) else ""
            o.print(f"  {label}: {_t(describe(s.source))}  [dim]{_t(s.source.kind)}{tree}  {_t(s.receipt)}[/]")
            o.print(f"        stand-ins used: {_t(', '.join(standins(ev.receipts[s.receipt])) or 'none')}")
            said, sandboxed = sandbox(ev.receipts[s.receipt])
            o.print(f"        sandbox: {_t(said)}" if sandboxed else f"        sandbox: [bold red]{_t(said)}[/]")
    table = Table("case", "role", "base", "head", "transition", "failed duties (base → head)", "side effects that changed")
    for row in effect_rows(ev, fix):
        t = row.transition
        if cases and t.case not in cases:
            continue
        table.add_row(_t(t.case), t.role, _t(t.base), _t(t.head),
                      f"[{styles.TRANSITION.get(t.transition, 'yellow')}]{arrow(t.transition)}[/]",
                      _t(failed_duties(ev, fix, t)), _t("; ".join(row.changed())))
    o.print(table)
    expected = "" if d.expected is None else (" (as pinned)" if d.as_expected else f" [red](pinned: {d.expected})[/]")
    kind = "CPU differential" if fix.cpu else "[yellow]not a CPU differential (model or gate receipts)[/]"
    o.print(f"  verdict: [{styles.VERDICT[d.verdict]}]{d.verdict}[/]{expected}  — {kind}")
    for score in ev.index.extra.get("scores", []):
        if score.get("fix") == d.fix:
            judged = judging.MutationScore.model_validate({k: v for k, v in score.items() if k != "source"})
            o.print(f"  evidence strength: {_t(judged.strength())} at {_t(score.get('source', '?'))}"
                    f" ({judged.survived} survived, {judged.equivalent} equivalent)")
    if not fix.consistent:
        o.print(f"  [red]the stored differential says {_t(fix.stored.verdict)}; its receipts say {d.verdict}[/]")


def _show_departures(ev: Evidence, diffs: bool) -> None:
    """Each tree against its baseline: one line, then the places to read first (folded: no diffs
    unless asked for), the rest counted."""
    trees = departures.of(ev.departures)
    if not trees:
        return
    o = ui.out
    o.print("[bold]where the trees depart from their baselines[/]" + ("" if diffs else " [dim](report --departures for the lines)[/]"))
    for tree in trees:
        o.print(f"  {_t(tree.line)}  [dim]{_t(tree.name)}[/]")
        for place in tree.first + (tree.others if diffs else []):
            aware = f"  [bold red]{_t(place.aware)}[/]" if place.aware else ""
            if errors.bidirectional("\n".join(place.hunk.diff)):
                aware += f"  [bold red]{_t(errors.BIDI_WARNING)}[/]"
            style = "yellow" if place.hunk.ran else "dim"
            o.print(f"    {_t(place.hunk.place)} [dim]{_t(place.changed)}[/]  [{style}]{_t(place.ran_in(3))}[/]{aware}")
            if diffs:
                for text in place.hunk.diff:
                    o.print(f"      {_t(text)}", style="red" if text.startswith("-") else "green")
                if place.hunk.diff_more:
                    o.print(f"      … {place.hunk.diff_more} more line(s) in {_t(tree.name)}", style="dim")
        hidden = len(tree.others) + tree.more if not diffs else tree.more
        if hidden or tree.unimported:
            o.print(f"    [dim]{hidden} other changed place(s) neither run nor able to tell; {tree.unimported} changed file(s) "
                    f"no probe run imported ({_t(tree.name)} lists them)[/]")


def _show_gates(a: gates.Gates) -> None:
    """Each gate's word beside the receipts behind it: whose (worker, tree, tree digest) and every case and check."""
    table = Table(title="The four acceptance gates", title_justify="left")
    table.add_column("gate", max_width=32)
    table.add_column("status")
    table.add_column("backed by (worker or tree audit, the tree it runs and its digest, receipt)")
    for g in a.gates:
        cell: list[str] = []
        for b in g.backing:
            tree = f"  tree {b.tree} {b.tree_digest or '(digest not recorded)'}" if b.tree else ""
            cell.append(f"{_t(b.who)}{_t(tree)}  [dim]{_t(b.receipt)}[/]")
            cell += [f"{'      ' if line.depth else '  '}[{_backing_style(line.word)}]{_t(line.word)}[/] {_t(line.text)}"
                     for line in b.lines]
        cell += [f"[red]{_t(problem)}[/]" for problem in g.problems]
        table.add_row(f"{g.number}. {_t(g.title)}", f"[{styles.GATE[g.status]}]{g.status}[/]", "\n".join(cell) or "-")
    ui.out.print(table)
    ui.out.print(f"acceptance: {_acceptance_words(a)}")


def _acceptance_words(a: gates.Gates) -> str:
    if a.accepted:
        verdict = "[bold green]accepted[/] (all four gates passed)"
    else:
        verdict = "[bold red]not accepted[/] (" + ", ".join(f"gate {g.number} {g.status}" for g in a.gates if g.status != "passed") + ")"
    if a.claimed is not None and a.claimed != a.accepted:
        verdict += f"  [red]the record says {'accepted' if a.claimed else 'not accepted'}[/]"
    return verdict


def _backing_style(word: str) -> str:
    return styles.BACKING.get(word) or styles.STATUS.get(word, "yellow")


def _show_matrix(ev: Evidence) -> None:
    rows, columns, cells = matrix(ev)
    if not rows:
        return
    table = Table("source", "what", *[_t(c.label) for c in columns], title="Status by source", title_justify="left")
    unimported: dict[str, None] = {}  # said once below the table, whole: a cell of a wide matrix would cut its path
    for mrow in rows:
        source, row = mrow.source, []
        for col in columns:
            name, st = cell_at(ev, cells, source, col)
            detail = st.detail
            if why := import_failure(ev, name):
                unimported[f"{mrow.name}: {why}"] = None
                detail = "the tree did not import (below)" + detail.removeprefix(why)
            row.append(f"[{styles.status(st.word)}]{_t(st.word)}[/] [dim]{_t(detail)}[/]")
        kind = what_it_is(source, short=True)
        name = _t(mrow.name) + (f" [dim]({_t(mrow.note)})[/]" if mrow.note else "")
        table.add_row(name, kind if source.kind in TREE_KINDS else f"[yellow]{_t(kind)}[/]", *row)
    ui.out.print(table)
    for line in unimported:
        ui.out.print(f"  {_t(line)}")
