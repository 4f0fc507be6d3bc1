"""Regenerate the committed evidence with this checkout's judge, probes and pins: one command.

    .venv/bin/python evidence/regenerate.py [--cache-dir DIR] [-j N]

Each committed bundle is made again by the diffprobe command that made it, into a staging directory
beside it, verified, and swapped in under its own name (names stay: the README, the docs and the tests
refer to them; the bundle's ``created_at`` says when it was made). ``tests/test_evidence.py`` says when
this is needed: a bundle whose receipts name another judge, probe version, pins file or tree than this
checkout's is not current.

Observations are kept, verdicts derived: each committed bundle is verified, and its receipts whose probe
version is this checkout's are filed into the receipts store first, so a receipt whose tree, source, probe
closure and environment are unchanged is judged anew from its recorded effects instead of probed again (an edit
of the judge alone regenerates both bundles in minutes, even on a cold cache). Only the receipts of a changed
probe (or environment) are probed again: the release line probes every release from 0.4.5 (most of an hour of
CPU when every probe changed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from runner import cli  # noqa: E402  (after the checkout is on the path: run as a script)
from runner.evidence import bundle, catalog, receipts, results  # noqa: E402
from runner.store.cache import Store  # noqa: E402
from runner.store.trees import TreeIdentity  # noqa: E402

STAGING = ".regenerating-"  # a finished bundle waiting to be swapped in (``.partial-*`` is a bundle being written)
# bundle directory -> the command that makes it (``--out`` added)
BUNDLES = {
    "releases-20261201": ["run", "--via", "releases"],
    "release-line-20261201": ["sweep", "--releases", "0.4.5..0.5.23"],
}


def seed(root: Path, cache: Store) -> int:
    """File a committed bundle's receipts of this checkout's probe versions into the receipts store (where the
    command finds them, and judges them anew if another judge judged them); a bundle that does not verify gives
    none (its receipts are probed again). Returns how many were filed."""
    if not (root / bundle.MANIFEST).is_file():
        return 0
    try:
        _, held, _ = bundle.load(root)  # verified first
    except bundle.Tampered as e:
        print(f"{e}; none of its receipts is reused: probing again", file=sys.stderr)
        return 0
    filed = 0
    for receipt in {r.digest: r for r in held.values()}.values():
        if (isinstance(receipt.source, TreeIdentity) and receipt.probe.id in catalog.PROBES
                and receipt.probe.sha256 == catalog.probe_digest(receipt.probe.id)
                and receipts.seal(receipt.model_dump(mode="json")) == receipt.digest  # today's format: the store's
                and (key := results.receipt_key(receipt.environment)) is not None):
            filed += results.record(cache, receipt, key)
    return filed


def regenerate(name: str, argv: list[str], extra: list[str]) -> float:
    """Make one bundle again and swap it in; returns the seconds it took."""
    target = HERE / name
    staging = HERE / f"{STAGING}{name}"
    shutil.rmtree(staging, ignore_errors=True)
    start = time.monotonic()
    code = cli.main([*argv, *extra, "--out", str(staging)])
    # 1: a tree shows a bug (the old releases of a line do), not a failure; a bundle must have been written
    if code not in (0, 1) or not (staging / bundle.MANIFEST).is_file() or bundle.verify(staging):
        raise SystemExit(f"{name}: `diffprobe {' '.join(argv)}` exited {code} or its bundle does not verify; "
                         f"{target} left as it was, the attempt in {staging}")
    old = HERE / f"{STAGING}{name}-old"
    if target.exists():
        os.rename(target, old)
    os.rename(staging, target)
    shutil.rmtree(old, ignore_errors=True)
    return time.monotonic() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache-dir", help="cache root (default: diffprobe's)")
    p.add_argument("-j", type=int, default=2, help="trees probed at once by the sweep (default 2)")
    p.add_argument("--only", choices=sorted(BUNDLES), action="append", help="regenerate this bundle alone")
    args = p.parse_args()
    cache = ["--cache-dir", args.cache_dir] if args.cache_dir else []
    store = Store.at(args.cache_dir)
    for name in args.only or BUNDLES:
        print(f"{name}: {seed(HERE / name, store)} committed receipt(s) filed into the receipts store", flush=True)
        extra = cache + (["-j", str(args.j)] if BUNDLES[name][0] == "sweep" else [])
        seconds = regenerate(name, BUNDLES[name], extra)
        print(f"{name}: regenerated in {seconds:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
