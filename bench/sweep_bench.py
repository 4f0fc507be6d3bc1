"""What a sweep over a long history costs when most commits do not touch the package.

    python bench/sweep_bench.py [--cache-dir DIR] [--commits 200] [--keep DIR]

Builds a local repository of ``--commits`` commits (the package at python/sglang, from real release
trees 0.5.19, 0.5.20 and 0.5.21) in which only 10 commits change python/sglang: each release, and
variants of it that add one inert module. Then, in one run, side by side:

(a) ``diffprobe sweep --commits`` over the whole history with ``--no-reuse``: probe runs made
    (one per distinct tree) against the naive figure (one per commit);
(b) the same sweep again with the receipts store: probe runs (none; receipts are keyed by the
    judge's digest too, so an edit of diffprobe's code in between makes them stale) and time;
(c) ``--bisect`` with ``--no-reuse``: probe runs (bisection over distinct trees, per fix and in all)
    against naive bisection over commits (computed from the sweep's own statuses, as git bisect
    would walk).

Needs a warm cache for the three releases (run ``diffprobe env pypi:sglang==0.5.21`` first); trees
and environments of the variants are built on the way.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.store import sources, specs  # noqa: E402
from runner.store.cache import Store  # noqa: E402
from tests import gitrepo  # noqa: E402  (the fixture builder the tests use)

RELEASES = ["0.5.19", "0.5.20", "0.5.21"]


def history(repo: Path, cache: Store, n: int) -> dict[str, str]:
    """n commits; package changes at 10 evenly spread commits: 3 releases, each then varied."""
    roots = {v: sources.resolve(specs.PypiSpec(version=v), cache).root for v in RELEASES}
    changes = {round(i * n / 10): change for i, change in enumerate(
        [("0.5.19", None), ("0.5.19", 1), ("0.5.19", 2), ("0.5.20", None), ("0.5.20", 1), ("0.5.20", 2),
         ("0.5.21", None), ("0.5.21", 1), ("0.5.21", 2), ("0.5.21", 3)])}
    steps = []
    for i in range(n):
        label = f"c{i:03d}"
        version, variant = changes.get(i, (None, None))
        if version and variant is None:
            steps.append(gitrepo.Step(label, package=roots[version], files={"docs/notes.md": f"{label}\n".encode()}))
        elif version:  # an inert module: a new tree digest, the same behaviour
            steps.append(gitrepo.Step(label, files={"python/sglang/_bench_variant.py": f"VARIANT = {variant}\n".encode()}))
        else:
            steps.append(gitrepo.Step(label, files={"docs/notes.md": f"{label}\n".encode()}))
    return gitrepo.build(repo, steps)




def diffprobe(*argv: str) -> tuple[float, dict]:
    """Run the CLI; return its wall time and the written bundle's sweep record."""
    out = Path(argv[argv.index("--out") + 1])
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "runner.cli", *argv], cwd=ROOT, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"diffprobe {' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return took, json.loads((out / "bundle.json").read_text())["extra"]


def naive_bisection_runs(statuses: list[dict[int, str]]) -> int:
    """Probe runs of a bisection over commits (every commit a probe run), per fix, shared runs once."""
    probed: set[int] = set()
    for fix in sorted({f for s in statuses for f in s}):
        fixed = lambda i: statuses[i].get(fix) == "fixed"  # noqa: E731
        lo, hi = 0, len(statuses) - 1
        probed |= {lo, hi}
        if fixed(hi) and not fixed(lo):
            while hi - lo > 1:
                mid = (lo + hi) // 2
                probed.add(mid)
                lo, hi = (lo, mid) if fixed(mid) else (mid, hi)
    return len(probed)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache-dir", default=os.environ.get("DIFFPROBE_CACHE"))
    ap.add_argument("--commits", type=int, default=200)
    ap.add_argument("--keep", metavar="DIR", help="build the repository and bundles here (default: a temporary directory)")
    args = ap.parse_args()
    cache = Store.at(args.cache_dir)
    work = Path(args.keep or tempfile.mkdtemp(prefix="diffprobe-sweep-bench-"))
    repo = work / "repo"
    start = time.perf_counter()
    commits = history(repo, cache, args.commits)
    print(f"history: {len(commits)} commits, 10 change python/sglang ({time.perf_counter() - start:.1f} s to build)")
    first, last = commits["c000"], commits[f"c{args.commits - 1:03d}"]
    common = ["--commits", f"{first}..{last}", "--repo", str(repo), "--cache-dir", str(cache.root)]

    t_sweep, sweep = diffprobe("sweep", *common, "--no-reuse", "--out", str(work / "sweep"))
    t_again, again = diffprobe("sweep", *common, "--out", str(work / "again"))
    t_bisect, bisect = diffprobe("sweep", *common, "--bisect", "--no-reuse", "--out", str(work / "bisect"))

    statuses = [{f["fix"]: f["status"] for f in row["fixes"]} for row in sweep["rows"]]
    per_run = t_sweep / max(sweep["probe_runs"], 1)
    distinct = len({row["tree_digest"] for row in sweep["rows"]})
    naive_bisect = naive_bisection_runs(statuses)
    print(f"distinct trees: {distinct}; first fixed: " + ", ".join(f"#{k} {v}" for k, v in sweep["first_fixed"].items()))
    print(f"{'':34}{'diffprobe':>22}{'naive':>26}")
    print(f"{'sweep, probe runs':34}{sweep['probe_runs']:>22}{len(statuses):>26}")
    print(f"{'sweep, time':34}{t_sweep:>20.1f} s{f'~{per_run * len(statuses):.0f} s (estimated)':>26}")
    per_fix = ", ".join(f"#{k} {len(v)}" for k, v in bisect["bisect"].items())
    print(f"{'bisect, probe runs (all fixes)':34}{bisect['probe_runs']:>22}{naive_bisect:>26}")
    print(f"{'bisect, trees read per fix':34}{per_fix:>22}{f'bound ceil(log2 {distinct})+1 = {math.ceil(math.log2(distinct)) + 1}':>26}")
    print(f"{'bisect, time':34}{t_bisect:>20.1f} s")
    print(f"{'sweep again (receipts store), runs':34}{again['probe_runs']:>22}")
    print(f"{'sweep again, time':34}{t_again:>20.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
