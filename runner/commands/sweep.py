"""Which fixes does each tree carry? ``audit`` (one tree, in detail), ``sweep`` (many trees, a
matrix, the first tree with each fix, optionally bisected), ``merge`` (shards of one sweep).

Statuses come from observed behaviour (runner/evidence/judging.py); code or options of later defences are
reported beside them as static findings (runner/evidence/static.py), labelled as such.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from pydantic import BaseModel
from rich.markup import escape
from rich.table import Table

from runner import errors, ui
from runner.commands import pipeline
from runner.evidence import bundle, catalog, pins, static, judging
from runner.sandbox import execute
from runner.store import sources, specs
from runner.store.cache import Cache
from runner.store.procs import run_logged
from runner.evidence.receipts import Receipt

_STYLE = {"fixed": "green", "not fixed": "red", "regression": "bold red", "inconclusive": "yellow", "not applicable": "dim"}


class Row(BaseModel):
    source: str
    label: str
    tree_digest: str
    fixes: list[judging.FixStatus]
    static: list[static.Finding]


class SweepRecord(BaseModel):
    """What a sweep bundle adds in ``bundle.json`` ``extra``; a merge rebuilds it from shards."""

    order: list[str]  # every source of the whole sweep, in sweep order
    shard: str | None
    rows: list[Row]
    first_fixed: dict[int, str | None]
    bisect: dict[int, list[str]] | None = None  # fix -> sources probed while bisecting


# --- building blocks --------------------------------------------------------------------------


def _opts(args) -> pipeline.Options:
    return pipeline.options(args, pins.load(Path(args.pins) if args.pins else None))


class Probed(BaseModel):
    row: Row
    receipts: list[Receipt]


def _probe(texts: list[str], opts: pipeline.Options) -> list[Probed]:
    probes = list(catalog.PROBES)
    findings: dict[str, list[static.Finding]] = {}
    trees, got = pipeline.probe_sources({t: probes for t in texts}, opts,
                                        on_tree=lambda text, tree: findings.__setitem__(text, static.scan(tree.root)))
    out = []
    for t in texts:
        receipts = [got[(t, p)] for p in probes]
        row = Row(source=t, label=bundle.label(trees[t].identity), tree_digest=trees[t].identity.tree_digest,
                  fixes=judging.fixes(receipts), static=findings[t])
        out.append(Probed(row=row, receipts=receipts))
    return out


def first_fixed(rows: list[Row]) -> dict[int, str | None]:
    fixes = sorted({f.fix for r in rows for f in r.fixes})
    return {fix: next((r.source for r in rows if _status(r, fix) == "fixed"), None) for fix in fixes}


def _status(row: Row, fix: int) -> str:
    return next((f.status for f in row.fixes if f.fix == fix), "not applicable")


def version_key(version: str) -> tuple:
    """Release order without a packaging dependency: numbers, then .postN after the release."""
    parts = re.findall(r"\d+|[a-z]+", version.lower())
    return tuple((0, int(p)) if p.isdigit() else (1 if p == "post" else -1, p) for p in parts)


def releases_between(first: str, last: str, cache: Cache) -> list[str]:
    out = run_logged([sys.executable, "-m", "pip", "index", "versions", specs.PACKAGE, "--disable-pip-version-check"],
                     step="list releases on the package index", log=cache.dir("logs", "pip-index.log"))
    listed = re.search(r"Available versions:\s*(.+)", out)
    if not listed:
        raise errors.Infrastructure("the package index did not list any sglang release")
    versions = [v.strip() for v in listed.group(1).split(",")]
    for bound in (first, last):
        if bound not in versions:
            raise errors.BadInput(f"--releases: {bound} is not a release of {specs.PACKAGE} on the package index")
    lo, hi = version_key(first), version_key(last)
    return sorted((v for v in versions if lo <= version_key(v) <= hi), key=version_key)


def commits_between(repo: str, base: str, head: str, opts: pipeline.Options) -> list[str]:
    """BASE and every first-parent commit up to HEAD, oldest first, as full SHAs."""
    mirror, base_sha = sources.resolve_commit(repo, base, opts.cache)
    _, head_sha = sources.resolve_commit(repo, head, opts.cache)
    listed = sources.git_lines(mirror, "rev-list", "--first-parent", "--reverse", f"{base_sha}..{head_sha}")
    if base_sha != head_sha and not listed:
        raise errors.BadInput(f"--commits {base}..{head}: {head} does not descend from {base}")
    return [base_sha, *listed]


def bisect(texts: list[str], opts: pipeline.Options) -> tuple[list[Probed], dict[int, list[str]]]:
    """First source where each fix is observed, in O(log n) probe runs per fix.

    Assumes the sources are ordered and a fix, once in, stays in (what a commit range of one
    branch gives). Every tree actually probed is kept, so the matrix shows the evidence.
    """
    probed: dict[int, Probed] = {}

    def row(i: int) -> Row:
        if i not in probed:
            probed[i] = _probe([texts[i]], opts)[0]
        return probed[i].row

    path: dict[int, list[str]] = {}
    for fix in sorted(judging.SITE_FIX.values()):
        if fix in path:
            continue
        before = set(probed)
        lo, hi = 0, len(texts) - 1
        if _status(row(hi), fix) == "fixed" and _status(row(lo), fix) != "fixed":
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _status(row(mid), fix) == "fixed":
                    hi = mid
                else:
                    lo = mid
        path[fix] = [texts[i] for i in sorted(set(probed) - before | {lo, hi})]
    return [probed[i] for i in sorted(probed)], path


def _write(target: Path, kind: str, started: str, probed: list[Probed], record: SweepRecord) -> Path:
    receipts = [r for p in probed for r in p.receipts]
    return bundle.write(target, kind=kind, created_at=started, receipts=receipts, differentials=[],
                        pins_sha256=None, extra=record.model_dump(mode="json"))


# --- printing ------------------------------------------------------------------------------------


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


# --- commands ------------------------------------------------------------------------------------


def cmd_audit(args) -> int:
    opts = _opts(args)
    target = bundle.out_path(args.out, "audit")
    started = execute.now()
    probed = _probe([args.source], opts)
    rows = [p.row for p in probed]
    record = SweepRecord(order=[args.source], shard=None, rows=rows, first_fixed=first_fixed(rows))
    out = _write(target, "audit", started, probed, record)
    print_audit(rows[0])
    ui.out.print(f"bundle: {out}")
    return errors.OK if all(f.status == "fixed" for f in rows[0].fixes) else errors.DIFFERS


def _sweep_sources(args, opts: pipeline.Options) -> list[str]:
    given = [specs.parse(t) and t for t in args.sources]
    if sum(bool(x) for x in (given, args.releases, args.commits)) != 1:
        raise errors.BadInput("sweep: give SOURCE..., or --releases A..B, or --commits BASE..HEAD (exactly one)")
    if args.releases:
        first, sep, last = args.releases.partition("..")
        if not sep:
            raise errors.BadInput(f"--releases {args.releases!r}: expected A..B, e.g. 0.5.19..0.5.23")
        return [f"pypi:{specs.PACKAGE}=={v}" for v in releases_between(first, last, opts.cache)]
    if args.commits:
        base, sep, head = args.commits.partition("..")
        if not sep or not args.repo:
            raise errors.BadInput("--commits needs BASE..HEAD and --repo URL|PATH")
        repo = specs.check_git_url(args.repo)
        return [f"git+{repo}@{sha}" for sha in commits_between(repo, specs.check_rev(base), specs.check_rev(head), opts)]
    return given


def _shard(order: list[str], text: str | None) -> list[str]:
    if not text:
        return order
    m = re.fullmatch(r"(\d+)/(\d+)", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise errors.BadInput(f"--shard {text!r}: expected I/N with 1 <= I <= N")
    i, n = int(m.group(1)), int(m.group(2))
    return order[i - 1 :: n]


def cmd_sweep(args) -> int:
    opts = _opts(args)
    target = bundle.out_path(args.out, "sweep")
    started = execute.now()
    order = _sweep_sources(args, opts)
    mine = _shard(order, args.shard)
    if args.bisect:
        if args.shard:
            raise errors.BadInput("--bisect and --shard do not combine: bisection is sequential")
        probed, path = bisect(mine, opts)
    else:
        probed, path = _probe(mine, opts), None
    rows = [p.row for p in probed]
    record = SweepRecord(order=order, shard=args.shard, rows=rows, first_fixed=first_fixed(rows), bisect=path)
    out = _write(target, "sweep", started, probed, record)
    print_matrix(record)
    ui.out.print(f"bundle: {out}")
    return errors.DIFFERS if any(f.status == "inconclusive" for r in rows for f in r.fixes) else errors.OK


def cmd_merge(args) -> int:
    """Join shard bundles of one sweep into one bundle, rows in the sweep's order."""
    target = bundle.out_path(args.out, "sweep")
    records, probed = [], {}
    for path in args.bundles:
        index, receipts, _ = bundle.load(Path(path))
        if index.kind != "sweep":
            raise errors.BadInput(f"{path}: not a sweep bundle (kind {index.kind})")
        record = SweepRecord.model_validate(index.extra)
        records.append(record)
        by_source: dict[str, list[Receipt]] = {}
        for r in receipts.values():
            by_source.setdefault(r.source.source, []).append(r)
        for row in record.rows:
            if row.source in probed:
                raise errors.BadInput(f"{path}: {row.source} was already probed by another shard")
            probed[row.source] = Probed(row=row, receipts=by_source.get(row.source, []))
    order = records[0].order
    if any(r.order != order for r in records):
        raise errors.BadInput("these bundles are shards of different sweeps (their source lists differ)")
    missing = [s for s in order if s not in probed]
    if missing:
        ui.warn(f"{len(missing)} source(s) of the sweep are in none of these shards, e.g. {missing[0]}")
    rows_in_order = [probed[s] for s in order if s in probed]
    rows = [p.row for p in rows_in_order]
    record = SweepRecord(order=order, shard=None, rows=rows, first_fixed=first_fixed(rows))
    out = _write(target, "sweep", execute.now(), rows_in_order, record)
    print_matrix(record)
    ui.out.print(f"bundle: {out}")
    return errors.OK


def register(sub: argparse._SubParsersAction, add_common) -> None:
    def probe_opts(p: argparse.ArgumentParser) -> None:
        p.add_argument("--out", metavar="DIR", help="bundle directory to create")
        p.add_argument("--python", metavar="EXE", help="interpreter for the probe environments")
        p.add_argument("--case-timeout", type=errors.positive_int, default=execute.DEFAULT_CASE_TIMEOUT, metavar="S")
        p.add_argument("--repeat", type=errors.positive_int, default=1, metavar="N", help="run probes N times; exit 1 on any difference")
        add_common(p)

    p = sub.add_parser("audit", help="every probe against one tree: fixed / not fixed / inconclusive per fix and door")
    p.add_argument("source")
    probe_opts(p)
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser("sweep", help="the probes across many trees: a matrix and the first tree with each fix")
    p.add_argument("sources", nargs="*", metavar="SOURCE")
    p.add_argument("--releases", metavar="A..B", help="every release of sglang from A to B on the package index")
    p.add_argument("--commits", metavar="BASE..HEAD", help="BASE and every first-parent commit up to HEAD (needs --repo)")
    p.add_argument("--repo", metavar="URL|PATH")
    p.add_argument("--bisect", action="store_true", help="find the first tree with each fix in log(n) probe runs")
    p.add_argument("-j", "--jobs", type=errors.positive_int, default=1, metavar="N", help="trees probed in parallel (memory-bounded)")
    p.add_argument("--shard", metavar="I/N", help="probe only slice I of N (join the shards with `diffprobe merge`)")
    probe_opts(p)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("merge", help="join the shard bundles of one sweep")
    p.add_argument("bundles", nargs="+", metavar="BUNDLE")
    p.add_argument("--out", metavar="DIR")
    p.set_defaults(func=cmd_merge)
