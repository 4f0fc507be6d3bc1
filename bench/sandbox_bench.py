"""What the sandbox costs per tree, measured side by side in one run.

    .venv/bin/python bench/sandbox_bench.py [--source pypi:sglang==0.5.21] [--rounds 3]

Each round runs one tree's probe harness (both probes, one process, as ``execute.run_probes`` runs
it) twice, in alternating order: inside bubblewrap (runner/sandbox/bwrap.py) and without it (its
own process group, scrubbed environment, no network: the isolation diffprobe had before). Printed:
the median CPU time and wall time of each arm, and their ratio, plus the one check the sandbox adds
on the host (the environment's seal per tree, the shared layer's per command).

CPU time is the figure that counts on a shared machine. Processes in bubblewrap's PID namespace are
reaped by its own init, so their CPU time never reaches our RUSAGE_CHILDREN: both arms therefore
start the harness under the same small launcher that reports its children's CPU time, and the
sandboxed arm adds bubblewrap's own (ours) to it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time

from runner.evidence import catalog
from runner.sandbox import bwrap, execute
from runner.store import envs, seal, sources, specs
from runner.store.cache import Store

LAUNCHER = (
    "import json, os, resource, sys\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execv(sys.argv[2], sys.argv[2:])\n"
    "os.waitpid(pid, 0)\n"
    "me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "json.dump(me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, open(sys.argv[1], 'w'))\n"
)


def _our_children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(environment: envs.Env, probes: list[str], sandboxed: bool) -> tuple[float, float]:
    """(wall, CPU) seconds of one harness run of ``probes``."""
    with execute.run_dir() as work:
        code = execute.probes_copy(work)
        out = work / "out"
        harness = [str(environment.python), "-I", "-B", str(code / catalog.HARNESS), "--out", str(out),
                   *[a for p in probes for a in ("--probe", p)]]
        argv = [str(environment.python), "-I", "-S", "-c", LAUNCHER, str(out / "cpu.json"), *harness]
        wall, ours = time.perf_counter(), _our_children_cpu()
        run = execute.run_isolated(argv, work_dir=work, timeout=1800, read_only=[*environment.read_only, code],
                                   hidden=environment.hidden, sandboxed=sandboxed)
        wall, ours = time.perf_counter() - wall, _our_children_cpu() - ours
        assert run.code == 0 and all((out / f"{p}.json").exists() for p in probes), run.log_tail
        inside = json.loads((out / "cpu.json").read_text())
    return wall, ours + inside if sandboxed else ours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="pypi:sglang==0.5.21")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache-dir", default=os.environ.get("DIFFPROBE_CACHE"))
    args = parser.parse_args()
    store = Store.at(args.cache_dir)
    tree = sources.resolve(specs.parse(args.source), store)
    environment = envs.env(tree, store, envs.interpreter(None))
    probes = ["admission", "prefill-cleanup"]
    print(f"tree {args.source}; bubblewrap {bwrap.version() or 'unavailable'}; {args.rounds} rounds, alternating; "
          f"load average {os.getloadavg()[0]:.1f}")
    arms: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for round_ in range(args.rounds):
        for sandboxed in ((True, False) if round_ % 2 == 0 else (False, True)):
            wall, cpu = one_run(environment, probes, sandboxed)
            arms[sandboxed].append((wall, cpu))
            print(f"  round {round_ + 1} {'sandboxed  ' if sandboxed else 'unsandboxed'} {cpu:6.2f} s CPU {wall:6.2f} s wall")
    start = time.process_time()
    seal.seal(environment.root, exclude=envs.STAMPS)
    sealing = time.process_time() - start  # once per tree per command, when its environment is looked up
    start = time.process_time()
    seal.seal(environment.layer, exclude=envs.LAYER_STAMPS)
    layer = time.process_time() - start  # once per command (and after an unsandboxed run)
    print(f"  checked on the host: the environment's seal {sealing:.3f} s CPU per tree, the shared layer's "
          f"{layer:.3f} s CPU per command")
    cpu = {arm: statistics.median(c for _, c in runs) for arm, runs in arms.items()}
    wall = {arm: statistics.median(w for w, _ in runs) for arm, runs in arms.items()}
    print(f"median CPU: sandboxed {cpu[True]:.2f} s, unsandboxed {cpu[False]:.2f} s, ratio {cpu[True] / cpu[False]:.3f}; "
          f"with the seal {(cpu[True] + sealing) / cpu[False]:.3f}; one tree's command, with the layer's too "
          f"{(cpu[True] + sealing + layer) / cpu[False]:.3f}")
    print(f"median wall: sandboxed {wall[True]:.2f} s, unsandboxed {wall[False]:.2f} s, ratio {wall[True] / wall[False]:.3f}")


if __name__ == "__main__":
    main()
