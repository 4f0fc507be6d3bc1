"""Terminal tables of fix status: one tree in detail (audit), many trees as a matrix (sweep, merge)."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from runner import ui
from runner.evidence.records import Row, SweepRecord

_STYLE = {"fixed": "green", "clean": "green", "not fixed": "red", "regression": "bold red", "inconclusive": "yellow",
          "not applicable": "dim", "not probed": "dim"}


def print_matrix(record: SweepRecord) -> None:
    fixes = sorted({f.fix for r in record.rows for f in r.fixes})
    table = Table(title="fix status by tree (observed behaviour)", title_justify="left")
    table.add_column("tree")
    for fix in fixes:
        table.add_column(f"#{fix}")
    table.add_column("static findings (not observed)")
    for row in record.rows:
        cells = []
        for fix in fixes:
            fs = next((f for f in row.fixes if f.fix == fix), None)
            if fs is None:
                cells.append("[dim]not probed[/]")
                continue
            open_sites = [s.site for s in fs.sites if s.status != "fixed"]
            detail = f" ({', '.join(open_sites)})" if fs.status != "fixed" and open_sites else ""
            cells.append(f"[{_STYLE[fs.status]}]{fs.status}[/]{escape(detail)}")
        found = ", ".join(f"{f.id}={f.default}" if f.default else f.id for f in row.static if f.present)
        table.add_row(escape(row.label), *cells, escape(found or "none"))
    ui.out.print(table)
    for fix, source in record.first_fixed.items():
        ui.out.print(f"#{fix}: first observed in {escape(source) if source else '[red]none of these trees[/]'}")
    for fix, probed in (record.bisect or {}).items():
        ui.out.print(f"#{fix}: bisected with {len(probed)} probe run(s) over {len(record.order)} trees")


def print_audit(row: Row) -> None:
    ui.out.print(f"[bold]audit[/] {escape(row.source)}  {row.tree_digest}")
    for fs in row.fixes:
        ui.out.print(f"#{fs.fix}: [{_STYLE[fs.status]}]{fs.status}[/]")
        for site in fs.sites:
            cases = ", ".join(f"{k}={v}" for k, v in site.cases.items())
            ui.out.print(f"  {site.site}: [{_STYLE[site.status]}]{site.status}[/]  ({escape(cases)})")
    ui.out.print("static findings (code or option present; not behaviour observed):")
    for f in row.static:
        state = ("present" + (f", default {f.default}" if f.default else "")) if f.present else "absent"
        prs = ", ".join(f"#{n}" for n in f.prs)
        ui.out.print(f"  {f.id} ({prs}): {state}. {escape(f.what)}")
        for line in f.evidence[:2]:
            ui.out.print(f"      {escape(line)}", style="dim")
        if f.present and f.caveat:
            ui.out.print(f"      caveat: {escape(f.caveat)}", style="dim")
