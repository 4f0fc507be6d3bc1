"""What condition evidence costs on top of line coverage, side by side in one run: whole audits of one release.

    .venv/bin/python bench/conditions_cost.py [--source pypi:sglang==0.5.21] [--rounds 3] [--fix N ...]

Each round runs ``diffprobe audit SOURCE --no-reuse --unsandboxed`` twice, in alternating order: as audits run
(every case records its lines and the atomic conditions of the fix's code: the host lists them, the harness
rewrites those functions) and with lines only (``run_probes(record_conditions=False)``, today's evidence before
issue 38). Unsandboxed, so the CPU time of diffprobe and of every process it started reaches us (in bubblewrap's
PID namespace the cases are reaped by its own init); SOURCE must be pinned. Printed: each run's CPU and wall
seconds, then the medians and the ratio (issue 38's goal: at most 1.3). CPU time is the figure to quote on a
shared machine.
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


def audit(source: str, conditions: bool, fixes: list[int], work: Path) -> dict[str, float]:
    """One whole audit, unsandboxed: its CPU and wall seconds."""
    original = execute.run_probes
    execute.run_probes = functools.partial(original, record_conditions=conditions)
    out = Path(tempfile.mkdtemp(dir=work)) / "bundle"
    try:
        wall, cpu = time.monotonic(), _cpu()
        code = cli.main(["audit", source, "--no-reuse", "--unsandboxed", "--out", str(out),
                         *(a for n in fixes for a in ("--fix", str(n)))])
        wall, cpu = time.monotonic() - wall, _cpu() - cpu
    finally:
        execute.run_probes = original
    assert code in (0, 1), f"audit exited {code}"
    cases = [c for path in (out / "receipts").glob("*.json") for c in json.loads(path.read_text())["cases"]]
    assert cases and all((c.get("conditions") is not None) == conditions for c in cases if c["outcome"] == "observed")
    return {"cpu": cpu, "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="pypi:sglang==0.5.21")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fix", type=int, action="append", default=[], help="only these fixes (default: every pinned one)")
    args = parser.parse_args()
    got: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as work:
        audit(args.source, True, args.fix, Path(work))  # warm: environment built, caches read once
        for round_ in range(args.rounds):
            for conditions in ((True, False) if round_ % 2 == 0 else (False, True)):
                got[conditions].append(audit(args.source, conditions, args.fix, Path(work)))
                print(f"round {round_ + 1} {'lines and conditions' if conditions else 'lines only':20}: "
                      + ", ".join(f"{k} {v:.2f} s" for k, v in got[conditions][-1].items()), flush=True)
    print(f"{args.source}, {args.rounds} rounds, medians")
    for figure in ("cpu", "wall"):
        on, off = (statistics.median(r[figure] for r in got[arm]) for arm in (True, False))
        print(f"  {figure:4}: lines and conditions {on:7.2f} s, lines only {off:7.2f} s, ratio {on / off:.3f}")


if __name__ == "__main__":
    main()
