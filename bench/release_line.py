"""The whole release line, swept cold and warm: what ``diffprobe sweep --releases`` costs.

    python bench/release_line.py [--releases 0.4.5..0.5.23] [-j 2] [--keep DIR]

In one run, in a fresh store (a temporary directory unless ``--keep``), side by side:

(0) downloads, counted apart: every release wheel of the range fetched from the package index and
    unpacked into the store (``sources.resolve``; the network is here and only here, apart from
    the shared layer's packages, which pip takes from its own cache or index);
(1) cold: ``sweep --releases A..B -j N`` on that store: the one shared layer, every environment
    (a thin venv over the layer, byte-code compiled, sealed) and every probe run;
(2) warm, probes re-run: the same sweep with ``--no-reuse``: layer and environments reused, every
    probe run again (what a new probe version costs);
(3) warm: the same sweep again: every receipt reused from the receipts store.

Prints seconds, probe runs and the ratios cold/warm. Each sweep's bundle is verified. On a machine
shared with other work, the figures are wall-clock of that machine; run it alone for clean numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.commands.sweep import releases_between  # noqa: E402
from runner.store import sources, specs  # noqa: E402
from runner.store.cache import Store  # noqa: E402


# This checkout's diffprobe, whatever else is installed (a snapshot of a commit runs its own code).
DIFFPROBE = [sys.executable, "-m", "runner.cli"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def sweep(store: Path, releases: str, jobs: int, out: Path, *extra: str) -> dict:
    """One sweep as a user runs it; its seconds, exit code and what its bundle records."""
    argv = [*DIFFPROBE, "sweep", "--releases", releases, "-j", str(jobs), "--cache-dir", str(store), "--out", str(out), *extra]
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=ENV)
    seconds = time.monotonic() - t0
    if not (out / "bundle.json").is_file():
        sys.exit(f"sweep {' '.join(extra)} wrote no bundle (exit {proc.returncode}): {proc.stderr[-600:]}")
    verify = subprocess.run([*DIFFPROBE, "verify", str(out)], capture_output=True, text=True, env=ENV)
    record = json.loads((out / "bundle.json").read_text())["extra"]
    return {"seconds": seconds, "exit": proc.returncode, "verified": verify.returncode == 0,
            "probe_runs": record["probe_runs"], "rows": len(record["rows"]),
            "first_fixed": record["first_fixed"], "stdout": proc.stdout}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--releases", default="0.4.5..0.5.23")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--keep", metavar="DIR", help="use (and keep) this store directory; it must not exist yet")
    args = ap.parse_args()
    if args.keep and Path(args.keep).exists():
        sys.exit(f"--keep {args.keep}: exists; the cold figure needs a fresh store")
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="diffprobe-bench-line-"))
    root.mkdir(parents=True, exist_ok=True)
    store = Store.at(root / "store")
    first, _, last = args.releases.partition("..")
    try:
        t0 = time.monotonic()
        versions = releases_between(first, last, store)
        for v in versions:
            sources.resolve(specs.PypiSpec(version=v), store)
        fetched = time.monotonic() - t0
        wheels = size(store.root / "downloads")
        print(f"releases {args.releases}: {len(versions)} ({versions[0]} .. {versions[-1]}), -j {args.j}")
        print(f"(0) downloads, apart: {fetched:7.1f} s  {wheels / 2**20:.0f} MiB of wheels fetched and unpacked", flush=True)
        runs = []
        for name, out, extra in [("(1) cold", "cold", ()), ("(2) warm, probes re-run", "warm-rerun", ("--no-reuse",)),
                                 ("(3) warm, receipts reused", "warm", ())]:
            r = sweep(store.root, args.releases, args.j, root / out, *extra)
            runs.append((name, r))
            print(f"{name:27s} {r['seconds']:7.1f} s  {r['probe_runs']:3d} probe runs over {r['rows']} releases, "
                  f"exit {r['exit']}, bundle {'verifies' if r['verified'] else 'DOES NOT VERIFY'}", flush=True)
        cold, rerun, warm = (r["seconds"] for _, r in runs)
        print(f"cold / warm-rerun: {cold / rerun:.1f}x   cold / warm: {cold / warm:.0f}x   "
              f"per release: cold {cold / len(versions):.1f} s, re-run {rerun / len(versions):.1f} s, "
              f"reused {warm / len(versions):.2f} s")
        print(f"layer + environments built: {size(store.root / 'layers') / 2**30:.1f} GiB + "
              f"{size(store.root / 'envs') / 2**30:.1f} GiB")
        same = len({json.dumps(r["first_fixed"], sort_keys=True) for _, r in runs}) == 1
        print(f"first fixed (cold): {runs[0][1]['first_fixed']}; the same in every run: {same}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
