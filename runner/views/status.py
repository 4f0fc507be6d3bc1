"""Terminal tables of fix status: one tree in detail (audit), many trees as a matrix (sweep, merge)."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from runner import errors, fixids, ui
from runner.judge import judging
from runner.evidence.receipts import Receipt
from runner.evidence.records import Reviewed, Row, SweepRecord, inconclusive_sites
from runner.views import styles, timeline, verdict


SHOWN = 40  # changed places named on the screen; the bundle's row names every one


def _cell(fs, pinned: list[str], row: Row) -> str:
    """A fix's headline as audit reads it (verdict.of_fix: in the configuration its pin names) and, unless
    carried, each site's own: "not fixed" at one door and "inconclusive" at the other are two different facts."""
    if fs is None:
        return "[dim]not probed[/]"
    [line] = verdict.of_tree([fs], [], {fs.fix: pinned}, row)
    if line.word == verdict.UNREVIEWED:
        return f"[bold red]{verdict.UNREVIEWED} ({len(row.rejected) + len(row.unreviewed) or 'no baseline'})[/]"
    sites = "" if line.carried or len(fs.sites) < 2 else ", ".join(
        f"{escape(s.site)} [{styles.STATUS.get(s.status, 'red')}]{s.status}[/]" for s in fs.sites)
    if fs.departed:  # the same behaviour, on code upstream never had
        d = fs.departed
        more = "".join(f", {len(v)} {k}" for k, v in (("at import", d.at_import), ("renamed", d.renamed)) if v)
        return f"[yellow]fixed, on differing code ({len(d.places)} ran, {len(d.aware)} can tell{more})[/]"
    word = f"fixed ({len(fs.not_covered)} lines unreached)" if line.word.startswith("fixed, with") else line.word
    return f"[{verdict.style(line.word)}]{escape(word)}[/]" + (f" ({sites})" if sites else "")


def print_matrix(record: SweepRecord, probed: list, pinned: dict[int, list[str]], bundle: Path, ledger: str | None = None) -> None:
    """The matrix of every tree, then the verdict screen of the newest one (``probed``: survey.Probed rows,
    with their receipts) and how the trees' code ran when it was not the sandbox."""
    fixes = sorted({f.fix for r in record.rows for f in r.fixes})
    table = Table(title="fix status by source (observed behaviour)", title_justify="left")
    table.add_column("source")
    for fix in fixes:
        table.add_column(fixids.label(fix))
    table.add_column("static findings (not observed)")
    labels = {r.source: r.label for r in record.rows}
    for row in record.rows:
        cells = [_cell(next((f for f in row.fixes if f.fix == fix), None), pinned.get(fix, []), row) for fix in fixes]
        found = ", ".join(f"{f.id}={f.default}" if f.default else f.id for f in row.static if f.present)
        name = escape(row.label) + (f" [dim](same tree as {escape(labels[row.same_tree_as])})[/]" if row.same_tree_as else "")
        table.add_row(name, *cells, escape(found or "none"))
    ui.out.print(table)
    for row in record.rows:
        if row.on_unreviewed:
            print_unreviewed(f"{row.label}: {fixids.labels(row.on_unreviewed)}", row, bundle, ledger)
    if len(record.rows) > 1:  # a line of trees: where each bug entered and left it
        for text in timeline.strip(record, cases_of=timeline.cases_finder(r for p in probed for r in p.receipts)):
            ui.out.print(text)
    for fix, source in sorted(record.first_fixed.items(), key=lambda item: fixids.order(item[0])):
        sites = pinned.get(fix, [])
        at = next((w for w in record.windows if w.fix == fix and sites == [w.site]), None)
        where = f" (configuration {escape(at.site)}, as pinned)" if at and at.site != verdict.DEFAULT else ""
        source = at.first_fixed if at else source
        ui.out.print(f"{fixids.label(fix)}: first fixed in {escape(source) if source else '[red]none of these trees[/]'}{where}")
    for fix, read in (record.bisect or {}).items():
        ui.out.print(f"{fixids.label(fix)}: bisection read {len(read)} of {len(record.order)} sources")
    distinct = len({r.tree_digest for r in record.rows})
    reused = sum(r.reused and not r.same_tree_as for r in record.rows)
    ui.out.print(f"{len(record.rows)} source(s), {distinct} distinct tree(s): {record.probe_runs} probe run(s); "
                 f"receipts of {reused} tree(s) reused from the receipts store")
    gaps = inconclusive_sites(record.rows)
    if gaps:
        ui.out.print(f"[yellow]inconclusive ({len(gaps)}): {escape(', '.join(gaps))}[/]")
    newest = record.rows[-1] if record.rows else None
    if newest is not None:
        mine = next((p.receipts for p in probed if p.row.tree_digest == newest.tree_digest and p.receipts), [])
        ui.out.print(Text.assemble(("the newest tree, ", "bold"), newest.label, (" (every fix, why):", "bold")))
        verdict.show(verdict.of_tree(newest.fixes, mine, pinned, newest), [r for p in probed for r in p.receipts],
                     verdict.read_more(bundle))


def print_audit(row: Row, lines: list[verdict.Line], receipts: list[Receipt], bundle: Path) -> None:
    """One tree: the verdict screen (runner/views/verdict.py), then the static findings, one line each."""
    ui.out.print(Text.assemble(("audit ", "bold"), row.source, (f"  {row.tree_digest}", "dim")))
    image = next((r.source.image for r in receipts if getattr(r.source, "image", None)), None)
    if image is not None:  # the image by the digests a stranger checks (skopeo inspect), and where the package is
        ui.out.print(Text(errors.printable(f"image {image.manifest_digest or 'config ' + image.config_digest} "
                                           f"(package /{image.package}, Python {image.python or 'unknown'})")))
    if row.departures:
        ui.out.print(Text(f"baseline: {errors.printable(row.departures)}"))
    verdict.show(lines, receipts)
    ui.out.print("static findings (code or option present; not behaviour observed):")
    for f in row.static:
        state = ("present" + (f", default {f.default}" if f.default else "")) if f.present else "absent"
        caveat = f" Caveat: {f.caveat}" if f.present and f.caveat else ""
        prs = f" ({fixids.labels(f.prs)})" if f.prs else ""
        ui.out.print(Text(f"  {f.id}{prs}: {state}. {f.what}{caveat}"))
    ui.out.print(Text(verdict.read_more(bundle), style="dim"))


def print_unreviewed(what: str, row: Reviewed, bundle: Path, ledger: str | None) -> None:
    """``what`` (a tree's fixes, a backport) reads "on unreviewed code": why, and every place (the
    first ``SHOWN``; the bundle's record names each), then how to review them."""
    ui.out.print(Text(errors.printable(f"on unreviewed code: {what}: {row.unreviewed_reason()}"
                                       + (":" if row.unreviewed or row.rejected else "")), style="bold red"))
    places = row.rejected + row.unreviewed
    for place in row.rejected:
        ui.out.print(Text(f"  rejected: {errors.printable(place)}"))
    for place in row.unreviewed[:max(0, SHOWN - len(row.rejected))]:
        ui.out.print(Text(f"  {errors.printable(place)}"))
    if len(places) > SHOWN:
        ui.out.print(Text(f"  ... and {len(places) - SHOWN} more (diffprobe review lists them all)"))
    if places:
        ledger_arg = errors.printable(ledger or "reviews.json")
        ui.out.print(Text(f"read and record them: diffprobe review {errors.printable(str(bundle))} --ledger {ledger_arg}, then "
                          f"--reviews {ledger_arg} (docs/review.md)", style="dim"))
