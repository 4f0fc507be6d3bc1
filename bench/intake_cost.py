"""What intake costs: a real release taken in from a directory, before and after, side by side.

    python bench/intake_cost.py [--version 0.5.21] [--cache-dir DIR] [--repeats 5]
    python bench/intake_cost.py --one before|after --checkout DIR --store DIR   # one new entry, for
        farm-bench -n 10 -- python bench/intake_cost.py --one after ... --vs 'python bench/intake_cost.py --one before ...'

``before`` is how ``path:`` was taken in until intake (commit da5b008: ``shutil.copytree`` with
links kept, then ``dirhash1`` reading every file of the copy back, then ``load`` re-reading an
entry already stored); ``after`` is ``runner.store.path.resolve`` today (intake: a walk that
follows nothing, every entry checked, each file read once and hashed as written, an existing
entry read back through intake). Each is timed into a fresh store (``new entry``) and into a store
that already holds the tree (``entry exists``); runs alternate (in turn first), each after a
``sync``, and the fastest and the median of
``--repeats`` count (noise on a shared machine only ever adds time), in CPU time of this process
(user + system: what the work costs, even when other processes crowd the machine) and wall time.
The tree is the release's stored copy, laid out as a checkout (``python/sglang``) in a temporary
directory.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.files import is_bytecode, scratch_dir, sha256_file, tree_files  # noqa: E402
from runner.store import path, sources, specs  # noqa: E402
from runner.store.cache import Store  # noqa: E402


def _old_dirhash1(root: Path, files: list[str]) -> str:
    lines = []
    for rel in files:
        p = root / rel
        digest = hashlib.sha256(os.readlink(p).encode()).hexdigest() if p.is_symlink() else sha256_file(p)
        lines.append(f"{digest}  {rel}\n")
    return "h1:" + base64.b64encode(hashlib.sha256("".join(lines).encode()).digest()).decode()


def before(checkout: Path, cache: Store) -> str:
    """The path: intake of da5b008, inline (its functions are gone): copy, hash the copy, file it."""
    package = checkout / "python" / "sglang"
    with scratch_dir(cache.trees()) as scratch:
        shutil.copytree(package, scratch / "sglang", symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo"))
        files = [f"sglang/{p}" for p in tree_files(scratch / "sglang")]
        digest = _old_dirhash1(scratch, files)
        final = cache.tree(digest)
        if final.exists():  # load(): the entry re-hashed, kept if it matches
            everything = tree_files(final / "sglang", bytecode=True)
            kept = [f"sglang/{p}" for p in everything if not is_bytecode(p)]
            if _old_dirhash1(final, kept) == digest:
                return digest
            shutil.rmtree(final)
        os.replace(scratch, final)
    return digest


def after(checkout: Path, cache: Store) -> str:
    return path.resolve(specs.PathSpec(dir=str(checkout)), cache).identity.tree_digest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default="0.5.21")
    ap.add_argument("--cache-dir", help="where the release is (or is put); default $DIFFPROBE_CACHE")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--one", choices=["before", "after"], help="take --checkout in once into an emptied --store (a whole "
                    "process, for farm-bench: the previous run's writes are synced first, in its time)")
    ap.add_argument("--checkout", help="with --one: a directory holding python/sglang (made if absent)")
    ap.add_argument("--store", help="with --one: the store to empty and fill")
    args = ap.parse_args()
    tree = sources.resolve(specs.PypiSpec(version=args.version), Store.at(args.cache_dir))
    if args.one:
        checkout, store = Path(args.checkout), Store(Path(args.store))
        if not checkout.exists():
            shutil.copytree(tree.root / "sglang", checkout / "python" / "sglang")
        shutil.rmtree(store.root, ignore_errors=True)
        os.sync()
        assert {"before": before, "after": after}[args.one](checkout, store) == tree.identity.tree_digest
        return
    with tempfile.TemporaryDirectory(prefix="intake-bench-") as tmp:
        tmp = Path(tmp)
        checkout = tmp / "checkout"
        shutil.copytree(tree.root / "sglang", checkout / "python" / "sglang")
        times: dict[tuple[str, str, str], list[float]] = {}
        for i in range(args.repeats):
            for scenario in ("new entry", "entry exists"):
                pair = (("before", before), ("after", after))
                for name, fn in pair if i % 2 == 0 else pair[::-1]:  # neither always pays for the other's writes
                    cache = Store(tmp / f"store-{name}")
                    if scenario == "new entry":
                        shutil.rmtree(cache.root, ignore_errors=True)
                    elif not cache.root.exists():
                        fn(checkout, cache)
                    os.sync()  # dirty pages of the last run are written back now, not during this one
                    wall, cpu = time.perf_counter(), time.process_time()
                    digest = fn(checkout, cache)
                    times.setdefault((scenario, name, "cpu"), []).append(time.process_time() - cpu)
                    times.setdefault((scenario, name, "wall"), []).append(time.perf_counter() - wall)
                    assert digest == tree.identity.tree_digest, (name, digest)
    print(f"sglang {args.version} from a directory ({tree.identity.files} files), {args.repeats} runs each, alternating")
    print(f"{'':20}{'before min':>12}{'after min':>12}{'ratio':>8}{'before med':>12}{'after med':>12}{'ratio':>8}")
    for scenario in ("new entry", "entry exists"):
        for clock in ("cpu", "wall"):
            b, a = times[(scenario, "before", clock)], times[(scenario, "after", clock)]
            print(f"{scenario + ', ' + clock:20}{min(b):11.2f}s{min(a):11.2f}s{min(a) / min(b):8.2f}"
                  f"{statistics.median(b):11.2f}s{statistics.median(a):11.2f}s{statistics.median(a) / statistics.median(b):8.2f}")


if __name__ == "__main__":
    main()
