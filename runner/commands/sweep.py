"""``diffprobe sweep``: the probes across many trees (releases, a commit range or given sources), a
matrix of fix status, the first tree with each fix, optionally bisected, optionally one shard."""

from __future__ import annotations

import re
import sys

from runner import errors, ui
from runner.commands import options, pipeline, survey
from runner.evidence import bundle, pins
from runner.evidence.records import Row, SweepRecord
from runner.sandbox import execute
from runner.store import mirrors, specs
from runner.store.cache import Cache
from runner.store.procs import run_logged
from runner.views import status


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
    """BASE and every first-parent commit up to HEAD, oldest first, as full SHAs. BASE must be an
    ancestor of HEAD: across diverged branches "the first commit with the fix" means nothing."""
    mirror, base_sha, _ = mirrors.resolve(repo, base, opts.cache)
    _, head_sha, _ = mirrors.resolve(repo, head, opts.cache)
    if not mirrors.is_ancestor(mirror, base_sha, head_sha):
        raise errors.BadInput(f"--commits {base}..{head}: {base} ({base_sha[:12]}) is not an ancestor of {head} "
                              f"({head_sha[:12]}); give a range along one branch")
    return [base_sha, *mirror.lines("rev-list", "--first-parent", "--reverse", f"{base_sha}..{head_sha}")]


def bisect(texts: list[str], opts: pipeline.Options) -> tuple[list[survey.Probed], dict[int, list[str]]]:
    """First source where each fix is observed, in O(log n) probe runs per fix.

    Assumes the sources are ordered and a fix, once in, stays in (what a commit range of one
    branch gives). Every tree actually probed is kept, so the matrix shows the evidence.
    """
    probed: dict[int, survey.Probed] = {}

    def row(i: int) -> Row:
        if i not in probed:
            probed[i] = survey.probe([texts[i]], opts)[0]
        return probed[i].row

    path: dict[int, list[str]] = {}
    for fix in sorted(f.fix for f in row(len(texts) - 1).fixes):  # the fixes the probes observe
        before = set(probed)
        lo, hi = 0, len(texts) - 1
        if survey.status_of(row(hi), fix) == "fixed" and survey.status_of(row(lo), fix) != "fixed":
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if survey.status_of(row(mid), fix) == "fixed":
                    hi = mid
                else:
                    lo = mid
        path[fix] = [texts[i] for i in sorted(set(probed) - before | {lo, hi})]
    return [probed[i] for i in sorted(probed)], path


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
    opts = pipeline.options(args, pins.load(options.path(args.pins)), options.probe(args))
    target = bundle.out_path(args.out, "sweep")
    started = execute.now()
    order = _sweep_sources(args, opts)
    mine = _shard(order, args.shard)
    if args.bisect:
        if args.shard:
            raise errors.BadInput("--bisect and --shard do not combine: bisection is sequential")
        probed, path = bisect(mine, opts)
    else:
        probed, path = survey.probe(mine, opts), None
    rows = [p.row for p in probed]
    record = SweepRecord(order=order, shard=args.shard, rows=rows, first_fixed=survey.first_fixed(rows), bisect=path)
    out = survey.write(target, "sweep", started, probed, record)
    status.print_matrix(record)
    ui.out.print(f"bundle: {out}")
    return errors.DIFFERS if any(f.status == "inconclusive" for r in rows for f in r.fixes) else errors.OK


def register(sub) -> None:
    p = sub.add_parser("sweep", help="the probes across many trees: a matrix and the first tree with each fix")
    p.add_argument("sources", nargs="*", metavar="SOURCE")
    p.add_argument("--releases", metavar="A..B", help="every release of sglang from A to B on the package index")
    p.add_argument("--commits", metavar="BASE..HEAD", help="BASE and every first-parent commit up to HEAD (needs --repo)")
    p.add_argument("--repo", metavar="URL|PATH")
    p.add_argument("--bisect", action="store_true", help="find the first tree with each fix in log(n) probe runs")
    p.add_argument("--shard", metavar="I/N", help="probe only slice I of N (join the shards with `diffprobe merge`)")
    p.add_argument("--out", metavar="DIR", help="bundle directory to create")
    options.probe_options(p, parallel="trees probed in parallel (memory-bounded)")
    options.common(p)
    p.set_defaults(func=cmd_sweep)
