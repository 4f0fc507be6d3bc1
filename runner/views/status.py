"""Terminal tables of fix status: one tree in detail (audit), many trees as a matrix (sweep, merge)."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from runner import ui
from runner.evidence import judging
from runner.evidence.records import Row, SweepRecord, inconclusive_sites
from runner.views import styles, timeline


def _cell(fs) -> str:
    """A fix's status and, unless fixed, each site's own: "not fixed" at one door and
    "inconclusive" at the other are two different facts."""
    if fs is None:
        return "[dim]not probed[/]"
    sites = "" if fs.status == "fixed" else ", ".join(
        f"{escape(s.site)} [{styles.STATUS.get(s.status, 'red')}]{s.status}[/]" for s in fs.sites)
    if fs.departed:  # the same behaviour, on code upstream never had
        d = fs.departed
        more = "".join(f", {len(v)} {k}" for k, v in (("at import", d.at_import), ("renamed", d.renamed)) if v)
        return f"[yellow]fixed, on differing code ({len(d.places)} ran, {len(d.aware)} can tell{more})[/]"
    word = judging.shown(fs)
    return f"[{styles.status(word)}]{word}[/]" + (f" ({sites})" if sites else "")


def print_matrix(record: SweepRecord) -> None:
    fixes = sorted({f.fix for r in record.rows for f in r.fixes})
    table = Table(title="fix status by source (observed behaviour)", title_justify="left")
    table.add_column("source")
    for fix in fixes:
        table.add_column(f"#{fix}")
    table.add_column("static findings (not observed)")
    labels = {r.source: r.label for r in record.rows}
    for row in record.rows:
        cells = [_cell(next((f for f in row.fixes if f.fix == fix), None)) for fix in fixes]
        found = ", ".join(f"{f.id}={f.default}" if f.default else f.id for f in row.static if f.present)
        name = escape(row.label) + (f" [dim](same tree as {escape(labels[row.same_tree_as])})[/]" if row.same_tree_as else "")
        table.add_row(name, *cells, escape(found or "none"))
    ui.out.print(table)
    if len(record.rows) > 1:  # a line of trees: where each bug entered and left it
        for text in timeline.strip(record):
            ui.out.print(text)
    for fix, source in record.first_fixed.items():
        ui.out.print(f"#{fix}: first fixed in {escape(source) if source else '[red]none of these trees[/]'}")
    for fix, read in (record.bisect or {}).items():
        ui.out.print(f"#{fix}: bisection read {len(read)} of {len(record.order)} sources")
    distinct = len({r.tree_digest for r in record.rows})
    reused = sum(r.reused and not r.same_tree_as for r in record.rows)
    ui.out.print(f"{len(record.rows)} source(s), {distinct} distinct tree(s): {record.probe_runs} probe run(s); "
                 f"receipts of {reused} tree(s) reused from the receipts store")
    gaps = inconclusive_sites(record.rows)
    if gaps:
        ui.out.print(f"[yellow]inconclusive ({len(gaps)}): {escape(', '.join(gaps))}[/]")


def print_audit(row: Row, pinned: dict[int, tuple[str, str]] | None = None) -> None:
    """``pinned``: fix -> (the configuration its pin names, its status there), for a defence whose
    verdict is read in one configuration (an option off by default, on)."""
    ui.out.print(f"[bold]audit[/] {escape(row.source)}  {row.tree_digest}")
    if row.departures:
        ui.out.print(f"baseline: {escape(row.departures)}")
    for fs in row.fixes:
        word = judging.shown(fs)
        config = (pinned or {}).get(fs.fix)
        said = f"  (pinned configuration {escape(config[0])}: [{styles.status(config[1])}]{config[1]}[/])" if config else ""
        ui.out.print(f"#{fs.fix}: [{styles.status(word)}]{escape(word)}[/]{said}")
        for place in fs.departed.places if fs.departed else ():
            ui.out.print(f"  ran on changed code: {escape(place)}")
        for place in fs.departed.aware if fs.departed else ():
            ui.out.print(f"  [bold red]can tell it is being probed:[/] {escape(place)}")
        for place in fs.departed.renamed if fs.departed else ():
            ui.out.print(f"  [bold red]its module ran code under another file's name:[/] {escape(place)}")
        for place in fs.departed.at_import if fs.departed else ():
            ui.out.print(f"  ran at import (module-level code): {escape(place)}")
        if fs.not_covered:
            ui.out.print(f"  not covered (statements of the fix's code no case ran): {escape(', '.join(fs.not_covered))}")
        for site in fs.sites:
            cases = ", ".join(f"{k}={v}" for k, v in site.cases.items())
            ui.out.print(f"  {site.site}: [{styles.status(site.status)}]{site.status}[/]  ({escape(cases)})")
    ui.out.print("static findings (code or option present; not behaviour observed):")
    for f in row.static:
        state = ("present" + (f", default {f.default}" if f.default else "")) if f.present else "absent"
        prs = ", ".join(f"#{n}" for n in f.prs)
        ui.out.print(f"  {f.id} ({prs}): {state}. {escape(f.what)}")
        for line in f.evidence[:2]:
            ui.out.print(f"      {escape(line)}", style="dim")
        seen = [fs for fs in row.fixes if fs.fix in f.prs]
        if seen:  # the cross-check: what the behaviour of the same defences showed
            said = "; ".join(f"#{fs.fix} {fs.status} (" + ", ".join(f"{s.site} {s.status}" for s in fs.sites) + ")"
                             for fs in seen)
            ui.out.print(f"      behaviour: {escape(said)}", style="dim")
        if f.present and f.caveat:
            ui.out.print(f"      caveat: {escape(f.caveat)}", style="dim")
