"""This checkout against a reference commit, side by side on one tree: the probe harness and the whole audit.

    python bench/reference.py [--reference 653a737] [--source pypi:sglang==0.5.21] [--cache-dir DIR]
                              [--this COMMIT] [--rounds 2] [--one-core] [--keep DIR]

The reference is checked out in a temporary git worktree and both checkouts run with this interpreter, on the
same cache (a warm tree and environment: run ``diffprobe env SOURCE`` first; a reference whose environment
recipe differs builds its own once, before the rounds). Each round runs, for each checkout in turn (the order
alternating from round to round, so that a machine's load drifting favours neither):

- the harness alone: ``execute.run_probes`` of every probe the checkout has, wall and CPU of that call
  (its own process and every process it waited for: bubblewrap, the harness and each case's process);
- ``diffprobe audit SOURCE --no-reuse``: wall and CPU of the whole command (``wait4``: the command and every
  process it waited for).

The fastest round of each (by wall, with its CPU) is kept, and each is also divided by the checkout's number of
cases (its probes differ: the reference may have fewer cases), since a probe added since the reference is work,
not cost. Ratios are this checkout's over the reference's. On a machine shared with other work compare CPU;
wall only on an idle one (the load average is printed at the start and the end). The default reference is the
last commit before issue 36's work (2026-12-04 20:40, one case at a time, 187 cases).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_REFERENCE = "653a737"

# Runs in a fresh interpreter with the checkout first on sys.path: its harness, its probes.
HARNESS = r"""
import inspect, json, os, sys, time
root, source, cache_dir, one_core = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
sys.path.insert(0, root)
from runner.evidence import catalog
from runner.sandbox import execute
from runner.store import envs, sources, specs
from runner.store.cache import Store
cache = Store.at(cache_dir)
tree = sources.resolve(specs.parse(source), cache)
environment = envs.env(tree, cache, envs.interpreter(None))
options = {"jobs": 1} if one_core and "jobs" in inspect.signature(execute.run_probes).parameters else {}
before, start = os.times(), time.monotonic()
runs = execute.run_probes(environment, list(catalog.PROBES), **options)
wall, after = time.monotonic() - start, os.times()
cases = [c for run in runs.values() for c in run.observations.cases]
cpu = sum(getattr(after, k) - getattr(before, k) for k in ("user", "system", "children_user", "children_system"))
print(json.dumps({"wall": wall, "cpu": cpu, "cases": len(cases), "forked": sum(c.outcome != "not_applicable" for c in cases)}))
"""

# The diffprobe command of the checkout; one core: one case at a time, as before issue 36 item 7.
AUDIT = r"""
import sys
root, one_core = sys.argv.pop(1), sys.argv.pop(1) == "1"
sys.path.insert(0, root)
if one_core:
    from runner.sandbox import share
    share.cores = lambda: 1
from runner import cli
sys.exit(cli.main(sys.argv[1:]))
"""


@contextlib.contextmanager
def worktree(commit: str):
    """The reference checked out (detached) in a temporary worktree of this repository, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="bench-ref-") as tmp:
        path = Path(tmp) / "ref"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(path), commit], check=True)
        try:
            yield path
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=False)


def harness(checkout: Path, source: str, cache: str, one_core: bool) -> dict:
    run = subprocess.run([sys.executable, "-c", HARNESS, str(checkout), source, cache, "1" if one_core else "0"],
                         cwd=checkout, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"the harness of {checkout} failed: {run.stderr[-800:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def audit(checkout: Path, source: str, cache: str, out: Path, one_core: bool) -> dict:
    """Wall and CPU of one ``audit --no-reuse`` (exit 1 is a verdict, not a failure), and its cases."""
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", AUDIT, str(checkout), "1" if one_core else "0", "audit", source,
                             "--no-reuse", "--out", str(out), "--cache-dir", cache],
                            cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"audit by {checkout} failed ({proc.returncode}): {err.decode(errors='replace')[-800:]}")
    cases = [c for f in sorted((out / "receipts").glob("*.json")) for c in json.loads(f.read_text())["cases"]]
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "cases": len(cases),
            "forked": sum(c["outcome"] != "not_applicable" for c in cases)}


def head(checkout: Path) -> str:
    return subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", default=DEFAULT_REFERENCE, help="the commit to compare with")
    parser.add_argument("--this", metavar="COMMIT", help="a commit to run instead of this checkout (in a worktree too)")
    parser.add_argument("--source", default="pypi:sglang==0.5.21")
    parser.add_argument("--cache-dir", default=os.environ.get("DIFFPROBE_CACHE") or str(Path.home() / ".cache" / "diffprobe"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--one-core", action="store_true", help="both run one case at a time")
    parser.add_argument("--keep", metavar="DIR", help="keep each checkout's last audit bundle here (reference/, this/): "
                                                       "`diffprobe compare DIR/reference DIR/this` says whether they observed alike")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        ref = stack.enter_context(worktree(args.reference))
        this = stack.enter_context(worktree(args.this)) if args.this else ROOT
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-ref-out-"))
        arms = {"reference": ref, "this": this}
        names = {name: head(path) for name, path in arms.items()}
        print(f"{args.source}, cache {args.cache_dir}, {os.cpu_count()} CPUs; reference {names['reference']}, "
              f"this {names['this']}{' (uncommitted changes)' if not args.this and subprocess.run(['git', '-C', str(ROOT), 'diff', '--quiet', 'HEAD']).returncode else ''}"
              f"{'; one case at a time' if args.one_core else ''}", flush=True)
        for name, path in arms.items():  # warm: each checkout's environment and byte-code, a receipt's first run
            audit(path, args.source, args.cache_dir, Path(tmp) / f"warm-{name}", args.one_core)
        load = [os.getloadavg()[0]]
        got: dict[tuple[str, str], list[dict]] = {}
        for i in range(args.rounds):
            order = list(arms) if i % 2 == 0 else list(arms)[::-1]
            for name in order:
                got.setdefault((name, "harness"), []).append(harness(arms[name], args.source, args.cache_dir, args.one_core))
                got.setdefault((name, "audit"), []).append(
                    audit(arms[name], args.source, args.cache_dir, Path(tmp) / f"{name}-{i}", args.one_core))
                print(f"  round {i + 1}, {name}: harness {got[name, 'harness'][-1]['wall']:.1f} s wall "
                      f"{got[name, 'harness'][-1]['cpu']:.1f} s CPU, audit {got[name, 'audit'][-1]['wall']:.1f} s wall "
                      f"{got[name, 'audit'][-1]['cpu']:.1f} s CPU", flush=True)
        load.append(os.getloadavg()[0])
        if args.keep:
            for name in arms:
                shutil.copytree(Path(tmp) / f"{name}-{args.rounds - 1}", Path(args.keep) / name)
    best = {key: min(runs, key=lambda r: r["wall"]) for key, runs in got.items()}
    print(f"\nfastest of {args.rounds} round(s); load average {load[0]:.1f} at the start, {load[1]:.1f} at the end")
    print(f"{'':22} {'reference ' + names['reference']:>28} {'this ' + names['this']:>28} {'ratio (this/reference)':>26}")
    for what in ("harness", "audit"):
        r, t = best["reference", what], best["this", what]
        print(f"{what:22} {r['wall']:7.1f} s wall {r['cpu']:6.1f} s CPU {t['wall']:7.1f} s wall {t['cpu']:6.1f} s CPU"
              f"   wall {t['wall'] / r['wall']:.2f}  CPU {t['cpu'] / r['cpu']:.2f}")
        rc, tc = r["cases"], t["cases"]
        print(f"{'  per case (' + str(rc) + ' / ' + str(tc) + ')':22} {1000 * r['wall'] / rc:6.1f} ms wall {1000 * r['cpu'] / rc:5.1f} ms CPU"
              f" {1000 * t['wall'] / tc:6.1f} ms wall {1000 * t['cpu'] / tc:5.1f} ms CPU"
              f"   wall {(t['wall'] / tc) / (r['wall'] / rc):.2f}  CPU {(t['cpu'] / tc) / (r['cpu'] / rc):.2f}")


if __name__ == "__main__":
    main()
