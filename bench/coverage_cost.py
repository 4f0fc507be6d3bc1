"""What per-case line coverage costs on a whole audit, measured side by side in one run.

    .venv/bin/python bench/coverage_cost.py [--source pypi:sglang==0.5.21] [--rounds 3]

Each round runs ``diffprobe audit SOURCE --no-reuse`` four times, in alternating order: with the
harness recording every case's lines (the default) and with ``--no-lines``; each both in the
sandbox (wall time: what a user waits) and ``--unsandboxed`` (CPU time of diffprobe and every
process it started: in bubblewrap's PID namespace the cases are reaped by its own init and their
CPU time never reaches us, so only this arm counts it whole; SOURCE must be pinned). Printed: each
run's figures, then the median of each, the ratio with/without, and the cases' own time (sum of
``duration_ms`` over the receipts: the part coverage can slow down). On a shared machine wall
times carry the other processes' noise; the unsandboxed CPU time is the figure to quote.
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path

from runner import cli
from runner.sandbox import execute


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def audit(source: str, lines: bool, sandboxed: bool, work: Path) -> dict[str, float]:
    """One whole audit: wall and CPU seconds, and the seconds its cases took."""
    original = execute.run_probes
    execute.run_probes = functools.partial(original, lines=lines)
    out = Path(tempfile.mkdtemp(dir=work)) / "bundle"
    try:
        wall, cpu = time.monotonic(), _cpu()
        code = cli.main(["audit", source, "--no-reuse", "--out", str(out), *(() if sandboxed else ("--unsandboxed",))])
        wall, cpu = time.monotonic() - wall, _cpu() - cpu
    finally:
        execute.run_probes = original
    assert code in (0, 1), f"audit exited {code}"
    cases = [c for path in (out / "receipts").glob("*.json") for c in json.loads(path.read_text())["cases"]]
    assert cases and all((c["lines"] is not None) == lines for c in cases if c["outcome"] == "observed")
    return {"wall": wall, "cpu": cpu, "cases": sum(c["duration_ms"] for c in cases) / 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="pypi:sglang==0.5.21")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    arms = [(lines, sandboxed) for sandboxed in (True, False) for lines in (True, False)]
    got: dict[tuple[bool, bool], list[dict[str, float]]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory() as work:
        audit(args.source, True, True, Path(work))  # warm: environment built, caches read once
        for round_ in range(args.rounds):
            for arm in (arms if round_ % 2 == 0 else arms[::-1]):
                got[arm].append(audit(args.source, *arm, Path(work)))
                figures = ", ".join(f"{k} {v:.2f}" for k, v in got[arm][-1].items())
                print(f"round {round_ + 1} {'sandboxed' if arm[1] else 'unsandboxed'} "
                      f"{'with' if arm[0] else 'without'} lines: {figures}", flush=True)
    med = {arm: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for arm, runs in got.items()}
    print(f"{args.source}, {args.rounds} rounds, medians (seconds)")
    for sandboxed, figure in ((True, "wall"), (True, "cases"), (False, "cpu"), (False, "wall"), (False, "cases")):
        on, off = med[(True, sandboxed)][figure], med[(False, sandboxed)][figure]
        where = "sandboxed" if sandboxed else "unsandboxed"
        print(f"  {where:11} {figure:5}: with lines {on:7.2f}, without {off:7.2f}, ratio {on / off:.3f} (+{on - off:.2f} s)")


if __name__ == "__main__":
    main()
