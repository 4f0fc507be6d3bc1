"""What diffprobe costs, measured side by side on one tree in one run.

    python bench/bench.py [--source pypi:sglang==0.5.21] [--cache-dir DIR] [--repeats 3]
                          [--sweep 0.5.19,0.5.20,0.5.21,0.5.22] [--cold-layer] [--only-a]

(a) the bare cost: the tree's environment's interpreter imports the probed modules from the tree
    and runs the same cases in one process, no fork, no isolation, no receipts; against diffprobe
    running them (``execute.run_probes``: harness, one fork per case, isolation) and the whole
    ``diffprobe audit --no-reuse`` command (host start-up, tree re-verification, receipts, bundle),
    each both with one case at a time (as before issue 36 item 7) and with the cases on every usable
    core (runner/sandbox/share.py); and, on its own line, ``audit`` reusing the stored receipts (what
    a repeated audit costs: no probing). Wall and CPU (this process's and every child's it reaped)
    are both shown, with the load average at the start and end: on a shared machine compare CPU;
(b) a cold per-tree environment (fresh cache, shared layer reused) against a warm one, and with
    ``--cold-layer`` the shared layer's own build;
(c) the marginal cost of one more tree in a sweep; (d) the -j 2 speed-up on a sweep (both --no-reuse);
(e) disk per additional tree (its tree entry and its environment).

Bare and diffprobe runs alternate and the fastest of ``--repeats`` counts: on a shared machine
noise only ever adds time. Needs a warm cache for the trees named (run ``diffprobe env`` first).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.evidence import catalog  # noqa: E402
from runner.sandbox import execute, share  # noqa: E402
from runner.store import envs, sources, specs  # noqa: E402
from runner.store.cache import Store  # noqa: E402

# Runs inside the tree's environment: the probes' own cases, called directly in one process.
BARE = r"""
import importlib, importlib.util, os, sys
here = sys.argv[1]
spec = importlib.util.spec_from_file_location("probes", os.path.join(here, "__init__.py"), submodule_search_locations=[here])
package = importlib.util.module_from_spec(spec)
sys.modules["probes"] = package
spec.loader.exec_module(package)
from probes.case import Places, run_case
probes = [importlib.import_module("probes." + m).PROBE for m in sys.argv[2:]]
for probe in probes:
    for name in probe.imports:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            pass
import sglang
places = Places(sglang_root=os.path.dirname(os.path.dirname(os.path.abspath(sglang.__file__))), probes_dir=here)
outcomes = [run_case(case, places)["outcome"] for probe in probes for case in probe.cases]
print(len(outcomes), outcomes.count("observed"))
sys.stdout.flush()
os._exit(0)
"""


def timed(fn) -> tuple[float, object]:
    start = time.monotonic()
    value = fn()
    return time.monotonic() - start, value


def cpu() -> float:
    """CPU seconds of this process and of every child it reaped."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


# diffprobe as it ran before cases ran at once: one usable core, so each tree gets one case at a time.
ONE_CORE = "import sys; from runner.sandbox import share; share.cores = lambda: 1; from runner import cli; sys.exit(cli.main())"


def cli(*argv: str, one_core: bool = False) -> None:
    """A diffprobe command; exit 1 is a verdict (0.5.21 lacks the later defences), not a failure."""
    run = subprocess.run([sys.executable, *(("-c", ONE_CORE) if one_core else ("-m", "runner.cli")), *argv], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if run.returncode not in (0, 1):
        raise SystemExit(f"diffprobe {' '.join(argv)} failed ({run.returncode}): {run.stderr.decode(errors='replace')[-500:]}")


def bare(environment: envs.Env, work: Path) -> str:
    modules = [name.removesuffix(".py") for name in catalog.PROBES.values()]  # every probe audit runs
    out = subprocess.run([str(environment.python), "-I", "-c", BARE, str(catalog.probes_dir()), *modules],
                         capture_output=True, text=True, check=True, env=envs.scrubbed_env(work), cwd=work)
    return out.stdout.strip()


def du(path: Path) -> int:
    return int(subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="pypi:sglang==0.5.21")
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sweep", default="0.5.19,0.5.20,0.5.21,0.5.22", help="releases for (c) and (d)")
    parser.add_argument("--cold-layer", action="store_true", help="also time a build of the shared layer")
    parser.add_argument("--only-a", action="store_true", help="only (a): bare, harness and audit side by side")
    args = parser.parse_args()
    cache = Store.at(args.cache_dir)
    interp = envs.interpreter(None)
    tree = sources.resolve(specs.parse(args.source), cache)
    environment = envs.env(tree, cache, interp)
    probes = list(catalog.PROBES)
    print(f"tree {args.source}  {tree.identity.tree_digest}  cache {cache.root}  {os.cpu_count()} CPUs")
    print(f"network namespace: {'yes' if execute.network_wrapper() else 'no'}")

    # (a) bare against diffprobe, alternating; diffprobe with one case at a time and with the cases at once
    at_once = share.of(1).cases
    arms = {
        "bare": ("bare, plain python -I, warm byte-code", lambda i: bare(environment, work)),
        "run_probes-1": ("execute.run_probes, one case at a time", lambda i: execute.run_probes(environment, probes, jobs=1)),
        "run_probes": (f"execute.run_probes, {at_once} cases at once", lambda i: execute.run_probes(environment, probes)),
        "audit-1": ("audit --no-reuse, one case at a time", lambda i: cli(
            "audit", args.source, "--no-reuse", "--out", str(work / f"audit-1-{i}"), "--cache-dir", str(cache.root), one_core=True)),
        "audit": (f"audit --no-reuse, {at_once} cases at once", lambda i: cli(
            "audit", args.source, "--no-reuse", "--out", str(work / f"audit{i}"), "--cache-dir", str(cache.root))),
        "reused": ("audit, receipts reused (no probing)", lambda i: cli(
            "audit", args.source, "--out", str(work / f"reused{i}"), "--cache-dir", str(cache.root))),
    }
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in arms}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        work = Path(tmp)
        out = bare(environment, work)  # a warm tree: byte-code cached, as a plain interpreter leaves it
        cli("audit", args.source, "--out", str(work / "audit-first"), "--cache-dir", str(cache.root))  # a receipt to reuse
        for i in range(args.repeats):
            for name, (_, run) in arms.items():
                before = cpu()
                wall, _ = timed(lambda: run(i))
                times[name].append((wall, cpu() - before))
    load.append(os.getloadavg()[0])
    best = {k: min(v) for k, v in times.items()}  # the fastest run by wall, with its CPU
    print(f"\n(a) bare cost against diffprobe, {out.split()[0]} cases, fastest of {args.repeats}; "
          f"load average {load[0]:.1f} at the start, {load[1]:.1f} at the end ({os.cpu_count()} CPUs)")
    for name, (label, _) in arms.items():
        wall, used = best[name]
        print(f"    {label:<46} {wall:6.1f} s wall ({wall / best['bare'][0]:4.2f} of bare), {used:6.1f} s CPU   "
              f"(walls: {', '.join(f'{t:.1f}' for t, _ in times[name])})")
    print(f"    cases at once against one at a time: run_probes {best['run_probes'][0] / best['run_probes-1'][0]:.2f}, "
          f"audit {best['audit'][0] / best['audit-1'][0]:.2f} of the wall")
    print("    (CPU: this process and every child it reaped, the sandbox's included: the harness, bubblewrap's PID 1, waits for each case)")
    if args.only_a:
        return

    # (b) cold and warm environment
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        cold = Store.at(tmp)
        os.symlink(cache.root / "layers", cold.root / "layers")  # the shared layer is reused
        wheel = cache.root / "downloads" / f"sglang-{tree.identity.version}"
        if wheel.is_dir():  # a release's downloaded wheel too: cold means unpacking, not the network
            shutil.copytree(wheel, cold.root / "downloads" / wheel.name)
        t_tree, cold_tree = timed(lambda: sources.resolve(specs.parse(args.source), cold))
        t_env, cold_env = timed(lambda: envs.env(cold_tree, cold, interp))
        t_run, _ = timed(lambda: execute.run_probes(cold_env, probes))
        tree_kb, env_kb = du(cold_tree.root), du(cold_env.root)
    t_warm_tree, _ = timed(lambda: sources.resolve(specs.parse(args.source), cache))
    t_warm_env, _ = timed(lambda: envs.env(tree, cache, interp))
    print("\n(b) environment, cold (fresh cache; shared layer and downloaded wheel reused) against warm")
    print(f"    cold: tree unpacked and hashed {t_tree:5.1f} s, env built {t_env:5.1f} s, first probe run {t_run:5.1f} s")
    print(f"    warm: tree re-verified {t_warm_tree:5.1f} s, env found {t_warm_env:5.2f} s, probe run as in (a) {best['run_probes'][0]:5.1f} s")
    if args.cold_layer:
        with tempfile.TemporaryDirectory(prefix="bench-layer-") as tmp:
            t_layer, _ = timed(lambda: envs.layer(Store.at(tmp), interp))
            layer_mb = du(Path(tmp) / "layers") >> 10
        print(f"    shared layer build (once per lock and interpreter): {t_layer:5.1f} s, {layer_mb} MiB")

    # (c) one more tree, (d) -j 2
    releases = [f"pypi:sglang=={v}" for v in args.sweep.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        def sweep(trees: list[str], jobs: int, name: str) -> float:
            return timed(lambda: cli("sweep", *trees, "-j", str(jobs), "--no-reuse", "--out", f"{tmp}/{name}",
                                     "--cache-dir", str(cache.root)))[0]

        for r in releases:  # warm every tree first, so that only probing is measured
            envs.env(sources.resolve(specs.parse(r), cache), cache, interp)
        one, two = sweep(releases[:1], 1, "one"), sweep(releases[:2], 1, "two")
        j1, j2 = sweep(releases, 1, "j1"), sweep(releases, 2, "j2")
    print("\n(c) marginal cost of one more tree in a sweep (-j 1)")
    print(f"    sweep of 1 tree {one:5.1f} s, of 2 trees {two:5.1f} s: +{two - one:5.1f} s for the second")
    print(f"\n(d) sweep of {len(releases)} releases: -j 1 {j1:5.1f} s, -j 2 {j2:5.1f} s: ratio {j2 / j1:.2f} (target <= 0.70)")

    # (e) disk
    print("\n(e) disk per additional tree")
    print(f"    tree entry {tree_kb >> 10} MiB ({tree_kb} KiB), environment {env_kb} KiB; the shared layer is counted once")


if __name__ == "__main__":
    main()
