"""Mutation schemata against one process per mutant, measured side by side on one tree in one run.

    python bench/mutation_bench.py --python ENV/bin/python [--probe admission --probe prefill-cleanup] [--repeats 2]

``ENV/bin/python`` is the interpreter of the tree's diffprobe environment (``diffprobe env SOURCE``
builds it; it is under ``$DIFFPROBE_CACHE/envs/``). Measured:

(a) schemata: ``harness.py --mutate``: SGLang imported once, each mutant's code object compiled
    once in the parent and swapped into the imported function in a forked child per case, cases
    run until one detects the mutant;
(b) what one process per mutant costs at least (mutmut and cosmic-ray run the test command once
    per mutant): a fresh interpreter importing SGLang and running the fix's cases once, the
    fastest of ``--repeats``; times the number of mutants of (a).

The target of issue #11 is printed beside: 50 mutants in 180 s or less on a 2-core machine.
Runs outside the sandbox (the bench measures the mechanism, not bubblewrap's start-up).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "probes" / "harness.py"


def harness(python: str, probes: list[str], out: Path, *extra: str) -> float:
    argv = [python, "-I", "-B", str(HARNESS), "--out", str(out), *[a for p in probes for a in ("--probe", p)], *extra]
    start = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the tree environment's interpreter")
    parser.add_argument("--probe", action="append", dest="probes", choices=["admission", "prefill-cleanup"])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    probes = args.probes or ["admission", "prefill-cleanup"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        t_schemata = harness(args.python, probes, out, "--mutate", "--case-timeout", "20")
        mutants = runs = 0
        for probe in probes:
            document = json.loads((out / f"mutation-{probe}.json").read_text())
            mutants += len(document["mutants"])
            runs += sum(len(m["cases"]) for m in document["mutants"])
        t_plain = min(harness(args.python, probes, out) for _ in range(args.repeats))
    naive = t_plain * mutants
    print(f"mutants: {mutants} (case runs: {runs}) of {', '.join(probes)}")
    print(f"schemata (one import, patched in forked children): {t_schemata:7.1f} s  ({t_schemata / mutants:.2f} s a mutant)")
    print(f"one process per mutant (import + cases, fastest of {args.repeats}): {t_plain:.1f} s a mutant, "
          f"{naive:7.1f} s for all")
    print(f"ratio schemata / per-process: {t_schemata / naive:.3f}")
    per_50 = 50 * t_schemata / mutants
    print(f"50 mutants: {per_50:.0f} s by schemata (target <= 180 s: {'met' if per_50 <= 180 else 'NOT met'})")


if __name__ == "__main__":
    sys.exit(main())
