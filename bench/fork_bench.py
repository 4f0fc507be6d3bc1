"""What a case's process costs the kernel: the imported harness's fork and exit, and real cases, by memory layout.

    python bench/fork_bench.py [--source pypi:sglang==0.5.21] [--cache-dir DIR] [--every 2] [--jobs 2]
                               [--rounds 2] [--modes plain,hugetlb,collapse]

In the tree's environment (warm: run ``diffprobe env SOURCE`` first), outside the sandbox, one interpreter per mode
and round (the modes alternating) imports what every probe imports, as the harness does, then measures 30 forks
of an empty child (parent and child CPU each) and every ``--every``-th case the tree can run, ``--jobs`` at once
(``harness.run_cases``: CPU of the parent, which forks and reads, and of the cases' processes). Modes:

- ``plain``: the C heap on small pages (no ``GLIBC_TUNABLES``);
- ``hugetlb``: ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``, as a tree's processes run since 2026-12-05
  (runner/store/envs.scrubbed_env);
- ``collapse``: plain, then ``madvise(MADV_COLLAPSE)`` of every 2 MiB span of the anonymous mappings before the
  first fork (its own CPU printed apart).

Each line ends with a digest of the cases' outcomes, classifications, effects and lines: equal digests, the same
observations.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

INNER = r"""
import ctypes, gc, hashlib, importlib, json, os, sys, time
root, mode, every, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, root)
from probes import harness as h
probes = [importlib.import_module(h.PROBE_MODULES[p]).PROBE for p in h.PROBE_MODULES]
places = h.Places(sglang_root=h.find_sglang_root(), probes_dir=h.HERE)
start = time.monotonic()
h.import_sglang(tuple(dict.fromkeys(m for p in probes for m in p.imports)), places)
h.warm_up(probes)
lacking = {c.id: h.unmet(c) for p in probes for c in p.cases}
log = h.ImportLog(frozenset(sys.modules))
sys.meta_path.insert(0, log)
gc.freeze()

def memory():
    with open("/proc/self/smaps_rollup") as f:
        rows = dict(line.split(":", 1) for line in f if ":" in line)
    return {k: int(rows[k].split()[0]) >> 10 for k in ("Anonymous", "AnonHugePages")}

def cpu(a, b):
    return b.user + b.system - a.user - a.system, b.children_user + b.children_system - a.children_user - a.children_system

out = {"mode": mode, "import_s": round(time.monotonic() - start, 1), "MiB": memory()}
if mode == "collapse":
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes, madvise.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    huge, before = 2 << 20, os.times()
    for fields in [line.split() for line in open("/proc/self/maps")]:
        if fields[1][1] == "w" and fields[1][3] == "p" and fields[5:] in ([], ["[heap]"]):
            low, high = (int(n, 16) for n in fields[0].split("-"))
            for at in range(-(-low // huge) * huge, high // huge * huge, huge):
                madvise(at, huge, 25)
    out["collapse_cpu_s"] = round(sum(cpu(before, os.times())), 2)
    out["MiB_collapsed"] = memory()
before = os.times()
for _ in range(30):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
parent, child = cpu(before, os.times())
out["fork_exit_ms"] = {"parent": round(1000 * parent / 30, 1), "child": round(1000 * child / 30, 1)}
cases = [c for p in probes for c in p.cases if lacking.get(c.id) is None][::every]
before = os.times()
ran = h.run_cases(cases, places, 60, log, jobs)
h.reap()
parent, child = cpu(before, os.times())
out["cases"] = len(cases)
out["case_ms"] = {"parent": round(1000 * parent / len(cases), 1), "cases": round(1000 * child / len(cases), 1),
                  "total": round(1000 * (parent + child) / len(cases), 1)}
seen = [[r["id"], r["outcome"], r["classification"], r["effects"], r.get("lines")] for r, _ in ran]
out["observed"] = hashlib.sha256(json.dumps(seen, sort_keys=True).encode()).hexdigest()[:12]
print(json.dumps(out), flush=True)
os._exit(0)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="pypi:sglang==0.5.21")
    parser.add_argument("--cache-dir", default=os.environ.get("DIFFPROBE_CACHE") or str(Path.home() / ".cache" / "diffprobe"))
    parser.add_argument("--every", type=int, default=2, help="run every N-th case the tree can run")
    parser.add_argument("--jobs", type=int, default=2, help="cases at once")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--modes", default="plain,hugetlb,collapse")
    args = parser.parse_args()
    from runner.store import envs, sources, specs
    from runner.store.cache import Store
    cache = Store.at(args.cache_dir)
    environment = envs.env(sources.resolve(specs.parse(args.source), cache), cache, envs.interpreter(None))
    fixed = envs.scrubbed_env()  # a tree's own environment; ``plain`` leaves out its heap tunable
    tunable = {"GLIBC_TUNABLES": fixed.pop("GLIBC_TUNABLES")}
    base = fixed
    print(f"{args.source}, every {args.every}. case, {args.jobs} at once; load average {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="fork-bench-") as tmp:
        inner = Path(tmp) / "inner.py"
        inner.write_text(INNER)
        base["HOME"] = tmp
        for _ in range(args.rounds):
            for mode in args.modes.split(","):
                env = {**base, **(tunable if mode == "hugetlb" else {})}
                run = subprocess.run([str(environment.python), "-I", "-B", str(inner), str(ROOT), mode, str(args.every),
                                      str(args.jobs)], env=env, capture_output=True, text=True)
                lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
                print(lines[-1] if lines else f"{mode}: failed ({run.returncode}): {run.stderr[-400:]}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
