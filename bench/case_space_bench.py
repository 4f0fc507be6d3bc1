"""What the generated case space costs, measured side by side in one run.

    .venv/bin/python bench/case_space_bench.py [--source pypi:sglang==0.5.21] [--rounds 3]

Each round, in alternating order, runs both probes' harness on the tree (one SGLang import, one fork per
case, per-case lines recorded, as an audit does) twice: with only the cases the hand-written lists had
(``duties.KEPT_IDS``, ``--case`` each) and with every case of the spaces. Outside the sandbox (SOURCE must
be pinned), so the CPU time of every process the run started counts (in bubblewrap's PID namespace the
cases are reaped by its own init and their CPU time never reaches us). Then ``diffprobe audit SOURCE
--no-reuse`` once per round, for what the rest of an audit costs. Printed: each run's figures, the
medians, the ratio of the two harness runs, and the whole audit's ratio (the audit with every case
against the same audit with the harness's share replaced by the kept cases' run). Everything else is
the same code, so the ratios are the space's cost alone; on a shared machine quote the CPU figures.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

from probes import duties
from runner import cli
from runner.sandbox import execute
from runner.store import envs, sources, specs
from runner.store.cache import Store

PROBES = ["admission", "prefill-cleanup"]


def timed(fn) -> tuple[float, float]:
    """(wall, CPU of this process and every child it reaped) seconds of ``fn()``."""
    before = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    start = time.monotonic()
    fn()
    wall = time.monotonic() - start
    after = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in zip(after, before))
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="pypi:sglang==0.5.21")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache-dir")
    args = parser.parse_args()
    cache = Store.at(args.cache_dir)
    tree = sources.resolve(specs.parse(args.source), cache)
    environment = envs.env(tree, cache, envs.interpreter(None), [])
    kept = [c for p in PROBES for c in duties.KEPT_IDS[p]]
    every = sum(len(duties.CASES[p]) for p in PROBES)
    runs: dict[str, list[tuple[float, float]]] = {"kept": [], "every": [], "audit": []}
    for r in range(args.rounds):
        arms = [("kept", kept), ("every", None)]
        for name, cases in arms if r % 2 == 0 else arms[::-1]:
            runs[name].append(timed(lambda: execute.run_probes(environment, PROBES, sandboxed=False, cases=cases)))
            print(f"round {r + 1}: harness, {name} ({len(cases) if cases else every} cases): "
                  f"{runs[name][-1][0]:.1f} s wall, {runs[name][-1][1]:.1f} s CPU", flush=True)
        with tempfile.TemporaryDirectory() as out:
            runs["audit"].append(timed(lambda: cli.main(["audit", args.source, "--no-reuse", "--unsandboxed", "--out",
                                                          str(Path(out) / "a"), "--cache-dir", str(cache.root)])))
        print(f"round {r + 1}: audit: {runs['audit'][-1][0]:.1f} s wall, {runs['audit'][-1][1]:.1f} s CPU", flush=True)
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()}
    print(f"\n{args.source}: {len(kept)} kept cases against {every} generated ({args.rounds} rounds, medians)")
    for i, what in enumerate(("wall", "CPU")):
        kept_t, every_t, audit_t = med["kept"][i], med["every"][i], med["audit"][i]
        today = audit_t - every_t + kept_t
        print(f"  {what}: harness {kept_t:.1f} s -> {every_t:.1f} s ({every_t / kept_t:.2f}x); "
              f"whole audit {today:.1f} s -> {audit_t:.1f} s ({audit_t / today:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
