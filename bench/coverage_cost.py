"""What per-case line coverage costs, measured side by side in one run: per case, and on a whole audit.

    .venv/bin/python bench/coverage_cost.py [--source pypi:sglang==0.5.21] [--rounds 5] [--case-rounds 3]
        [--reference-recorder REV]

Per case: the tree's environment imports SGLang once (as the harness does) and forks each case of
both probes ``--case-rounds`` times with the recorder and without, in alternating order; each
child reports its own CPU time (``time.process_time``), so the figure is free of the machine's
load; with ``--reference-recorder REV`` (a git revision) the recorder of ``probes/coverage.py`` at REV
runs as a third arm, so a change to the recorder is priced against the one before it. Whole audits: each round runs ``diffprobe audit SOURCE --no-reuse`` four times, in alternating order: with the
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
import subprocess
import tempfile
import time
from pathlib import Path

from runner import cli
from runner.evidence import catalog
from runner.sandbox import execute
from runner.store import envs, sources, specs
from runner.store.cache import Store

# Runs in the tree's environment: the harness's own import, then each case in a forked child.
PER_CASE = r"""
import gc, importlib, importlib.util, os, sys, time
probes_dir, rounds, reference = sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None
spec = importlib.util.spec_from_file_location("probes.harness", os.path.join(probes_dir, "harness.py"))
h = importlib.util.module_from_spec(spec)
sys.modules["probes.harness"] = h
spec.loader.exec_module(h)
probes = [importlib.import_module(f"probes.{m}").PROBE for m in ("admission", "prefill_cleanup")]
root = h.find_sglang_root()
places = h.Places(sglang_root=root, probes_dir=h.HERE)
h.import_sglang(tuple(dict.fromkeys(m for p in probes for m in p.imports)), places)
h.warm_up()
recorders = {"on": h.Recorder}
if reference:
    spec = importlib.util.spec_from_file_location("reference_coverage", reference)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    recorders["reference"] = ref.Recorder
gc.freeze()
cases = [c for p in probes for c in p.cases]


def child_cpu(case, lines):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        start = time.process_time()
        recorder = recorders[lines](root).start() if lines else None
        h.run_case(case, places)
        if recorder:
            recorder.stop()
        os.write(write, repr(time.process_time() - start).encode())
        os._exit(0)
    os.close(write)
    spent = float(os.read(read, 100))
    os.close(read)
    os.waitpid(pid, 0)
    return spent


arms = [None, *recorders]
total = {arm: 0.0 for arm in arms}
for round_ in range(rounds):
    for case in cases:
        for lines in (arms[::-1] if round_ % 2 else arms):
            total[lines] += child_cpu(case, lines)
print(len(cases) * rounds, total["on"], total[None], total.get("reference", -1.0))
"""


def per_case(source: str, rounds: int, reference: str | None = None) -> tuple[int, float, float, float | None]:
    """(cases run, CPU seconds with lines, without, with the reference recorder) over ``rounds`` of every
    case, unsandboxed; ``reference``: a git revision whose probes/coverage.py is the reference."""
    cache = Store.at(None)  # $DIFFPROBE_CACHE, as the audits'
    tree = sources.resolve(specs.parse(source), cache)
    environment = envs.env(tree, cache, envs.interpreter(None))
    with tempfile.TemporaryDirectory() as work:
        extra = []
        if reference:
            extra = [str(Path(work) / "coverage.py")]
            Path(extra[0]).write_bytes(subprocess.run(["git", "show", f"{reference}:probes/coverage.py"], check=True,
                                                      capture_output=True, cwd=catalog.probes_dir().parent).stdout)
        done = subprocess.run([str(environment.python), "-I", "-B", "-c", PER_CASE, str(catalog.probes_dir()), str(rounds),
                               *extra], capture_output=True, text=True, check=True)
    n, on, off, ref = done.stdout.split()[-4:]
    return int(n), float(on), float(off), float(ref) if reference else None


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
    parser.add_argument("--case-rounds", type=int, default=3)
    parser.add_argument("--reference-recorder", metavar="REV", help="also time probes/coverage.py's recorder at this git revision")
    args = parser.parse_args()
    n, case_on, case_off, case_ref = per_case(args.source, args.case_rounds, args.reference_recorder)
    print(f"per case ({n} case runs, CPU of each case's process): with lines {1000 * case_on / n:.1f} ms, without "
          f"{1000 * case_off / n:.1f} ms, +{1000 * (case_on - case_off) / n:.1f} ms a case (ratio {case_on / case_off:.2f})",
          flush=True)
    if case_ref is not None:
        print(f"  the recorder at {args.reference_recorder}: {1000 * case_ref / n:.1f} ms a case; this one "
              f"{1000 * (case_on - case_ref) / n:+.1f} ms a case (ratio {case_on / case_ref:.3f})", flush=True)
    if args.rounds == 0:
        return
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
    cpu = med[(False, False)]["cpu"]
    extra = (case_on - case_off) / args.case_rounds
    print(f"per-case cost times the audit's {n // args.case_rounds} cases: {extra:.2f} s, "
          f"{100 * extra / cpu:.1f}% of an audit's CPU ({cpu:.2f} s without lines)")


if __name__ == "__main__":
    main()
