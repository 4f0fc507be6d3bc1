"""``diffprobe sweep``: the probes across many trees (releases, a commit range or given sources), a
matrix of fix status, the first tree with each fix, optionally bisected, optionally one shard."""

from __future__ import annotations

import os

from runner import errors, ui
from runner.app import baseline, pipeline, shards, survey
from runner.commands import options
from runner.evidence import bundle, pins, reviews
from runner.evidence.records import Row, SweepRecord, windows
from runner.sandbox import execute
from runner.store import mirrors, pypi, specs
from runner.store.cache import Store
from runner.store.pypi import version_key
from runner.views import status


def releases_between(first: str, last: str, cache: Store) -> list[str]:
    versions = pypi.listed(cache)
    for bound in (first, last):
        if bound not in versions:
            raise errors.BadInput(f"--releases: {bound} is not a release of {specs.PACKAGE} on the package index")
    lo, hi = version_key(first), version_key(last)
    return [v for v in versions if lo <= version_key(v) <= hi]


def commits_between(repo: str, base: str, head: str, opts: pipeline.Options) -> list[str]:
    """BASE and every first-parent commit up to HEAD, oldest first, as full SHAs. BASE must be an
    ancestor of HEAD: across diverged branches "the first commit with the fix" means nothing."""
    mirror, base_sha, _ = mirrors.resolve(repo, base, opts.cache)
    _, head_sha, _ = mirrors.resolve(repo, head, opts.cache)
    if not mirrors.is_ancestor(mirror, base_sha, head_sha):
        raise errors.BadInput(f"--commits {base}..{head}: {base} ({base_sha[:12]}) is not an ancestor of {head} "
                              f"({head_sha[:12]}); give a range along one branch")
    return [base_sha, *mirror.lines("rev-list", "--first-parent", "--reverse", f"{base_sha}..{head_sha}")]


def bisect(texts: list[str], keys: list[str], opts: pipeline.Options, against: str | None = None,
           ledger: reviews.Ledger | None = None) -> tuple[list[survey.Probed], dict[int, list[str]], int]:
    """First source where each fix is observed, in O(log n) probe runs per fix over distinct trees.

    ``keys`` name each source's tree where it is known before resolving (a commit's package tree
    id; else the source itself): consecutive sources with one key are one step of the bisection,
    and a key probed once is never probed again. Assumes a fix, once in, stays in (what a commit
    range of one branch gives). Rows: every source whose tree was probed, so the matrix shows the
    evidence. Returns rows, fix -> sources whose status the search read, and probe runs.
    """
    units = [i for i in range(len(texts)) if i == 0 or keys[i] != keys[i - 1]]  # first source of each step
    probed: dict[str, survey.Probed] = {}
    runs = 0

    def row(u: int) -> Row:
        nonlocal runs
        key = keys[units[u]]
        if key not in probed:
            [probed[key]], n = survey.counted([texts[units[u]]], opts, against=against, ledger=ledger)
            runs += n
        return probed[key].row

    path: dict[int, list[str]] = {}
    for fix in sorted(f.fix for f in row(len(units) - 1).fixes):  # the fixes the probes observe
        read = {0, len(units) - 1}
        lo, hi = 0, len(units) - 1
        if survey.status_of(row(hi), fix) == "fixed" and survey.status_of(row(lo), fix) != "fixed":
            while hi - lo > 1:
                mid = (lo + hi) // 2
                read.add(mid)
                if survey.status_of(row(mid), fix) == "fixed":
                    hi = mid
                else:
                    lo = mid
        path[fix] = [texts[units[u]] for u in sorted(read)]
    rows = [probed[k] if probed[k].row.source == t else survey.twin(probed[k], t)
            for t, k in zip(texts, keys) if k in probed]
    return survey.same_trees(rows), path, runs


def _tree_keys(order: list[str], opts: pipeline.Options) -> list[str]:
    """Each source's tree as far as it is known without resolving it: for commits of one repository,
    the package's git tree id (one git call for all of them); otherwise the source itself."""
    parsed = [specs.parse(t) for t in order]
    repos = {s.url for s in parsed if isinstance(s, specs.GitSpec)}
    if len(repos) != 1 or not all(isinstance(s, specs.GitSpec) and mirrors.FULL_SHA.fullmatch(s.rev) for s in parsed):
        return list(order)
    ids = mirrors.package_trees(mirrors.mirror(repos.pop(), opts.cache), [s.rev for s in parsed], opts.package_dir)
    return [f"git-tree:{i}" if i else t for t, i in zip(order, ids)]


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


def cmd_sweep(args) -> int:
    signers = options.signers(args)
    baseline.check_against(args.against)
    p = pins.load(options.path(args.pins))
    ledger = reviews.load(options.path(args.reviews))
    opts = options.resolved(args, p, options.probe(args))
    target = bundle.out_path(args.out, "sweep")
    started = execute.now()
    order = _sweep_sources(args, opts)
    shard = None
    if args.shard:
        index, count, engine = shards.parse(args.shard, os.environ)
        shard = f"{index}/{count}"
        if engine:
            ui.err.print(f"shard {shard} of the sweep, from the {engine}")
    mine = shards.select(order, index, count) if shard else order
    keys = _tree_keys(mine, opts)
    if args.bisect:
        if shard:
            raise errors.BadInput("--bisect and --shard do not combine: bisection is sequential")
        probed, path, runs = bisect(mine, keys, opts, args.against, ledger)
    else:
        first = {}
        twins = {t: first[k] for t, k in zip(mine, keys) if first.setdefault(k, t) != t}
        (probed, runs), path = survey.counted(mine, opts, twins, against=args.against, ledger=ledger), None
    rows = [pr.row for pr in probed]
    record = SweepRecord(order=order, shard=shard, rows=rows, first_fixed=survey.first_fixed(rows), windows=windows(rows),
                         bisect=path, probe_runs=runs)
    out = survey.write(target, "sweep", started, probed, record, survey.differentials(probed, p), signers=signers)
    status.print_matrix(record, probed, {n: f.sites for n, f in p.fixes.items()}, out, args.reviews)
    ui.out.print(f"bundle: {out}")
    return survey.exit_code(rows, strict=args.strict, accept_unreviewed=args.accept_unreviewed)


def register(sub) -> None:
    p = options.command(
        sub, "sweep", "where each fix entered a line of trees: a status matrix",
        about="Probes many trees (releases, a commit range or given sources): a matrix of fix status and the first tree with each fix.",
        example="diffprobe sweep --releases 0.5.19..0.5.23",
        ok="every site of every tree has a conclusive status", differs="a site is inconclusive somewhere (named), or --strict refused one",
        more={errors.UNREVIEWED: "a tree's fix reads 'fixed on unreviewed code' (each place named; --accept-unreviewed: exit 0)"})
    options.source(p, "sources", what="trees to sweep, in order (or --releases, or --commits)", nargs="*")
    p.add_argument("--releases", metavar="A..B", help="every release of sglang from A to B on the package index")
    p.add_argument("--commits", metavar="BASE..HEAD", help="BASE and every first-parent commit up to HEAD (needs --repo)")
    p.add_argument("--repo", metavar="URL|PATH", help="the git repository of --commits (a URL or a local clone)")
    p.add_argument("--bisect", action="store_true", help="find the first tree with each fix in log(n) probe runs")
    p.add_argument("--shard", metavar="I/N|auto", help="probe only slice I of N (join the shard bundles with diffprobe merge); "
                   "auto: from a Kubernetes Indexed Job, a Slurm array or a CI matrix (docs/deploy/)")
    options.out(p, "sweep")
    options.probe_options(p, parallel="trees probed in parallel (memory-bounded)")
    options.fixes(p)
    options.baseline(p, ledger=True)
    options.common(p)
    options.signing(p)
    p.set_defaults(func=cmd_sweep)
