"""Keep the store within a size budget: evict the least recently used entries, and remove what
killed processes left behind (``.building-*`` and ``.scratch-*`` directories, probe run directories).

Eviction is always safe: every entry is rebuilt on demand (a tree from its source, an environment
from its tree and layer, byte-code from its source at the next environment build, while built
environments keep their own copies), and an environment whose tree or layer was evicted fails its health
check and is rebuilt (``envs.env``). An entry whose build lock is held is never touched.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from runner.errors import BadInput
from runner.files import owner_alive
from runner.store.cache import KINDS, USED, Store

# A probe run's private directory outlives its process only if diffprobe was SIGKILLed; past the
# longest deadline a run can have (sandbox.execute: import allowance + every case timing out) and
# some margin, nobody uses it any more.
RUN_PREFIXES = ("xrun-", "diffprobe-run-", "diffprobe-tests-")  # sandbox.execute.RUN_PREFIX, and the older name
RUN_MAX_AGE = 6 * 3600
# An entry used this recently may be under a probe run right now (an environment is not locked
# while it runs): it is kept, like an entry whose build lock is held.
IN_USE = 3600
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class Entry:
    path: Path
    kind: str
    size: int
    last_used: float


def parse_size(text: str, option: str = "--max-size") -> int:
    """``500M``, ``20G``, ``1.5T`` or a number of bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise BadInput(f"{option} {text!r}: expected a size such as 500M, 20G or 1.5T")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def size_of(path: Path) -> int:
    """Bytes on disk under ``path``, links not followed (an environment's overlay is links)."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in filenames + dirnames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass
    return total


def entries(store: Store, sized: bool = True) -> list[Entry]:
    """Every evictable entry, least recently used first (sizes only if ``sized``: walking a store
    of many trees and a layer of 1.4 GiB takes a while)."""
    out = []
    for kind in KINDS:
        folder = store.root / kind
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            if path.name.startswith(".") or not path.is_dir():
                continue
            marker = path / USED
            used = (marker if marker.exists() else path).stat().st_mtime
            out.append(Entry(path, kind, size_of(path) if sized else 0, used))
    return sorted(out, key=lambda e: (e.last_used, KINDS.index(e.kind)))


def orphans(store: Store, now: float | None = None) -> list[Path]:
    """Scratch directories of processes that are gone, and stale probe run directories."""
    now = time.time() if now is None else now
    found = []
    if store.root.is_dir():
        for folder in [store.root, *(p for p in store.root.iterdir() if p.is_dir())]:
            found += [p for p in folder.glob(".building-*-*") if not owner_alive(p)]
            found += [p for p in folder.glob(".scratch-*-*") if not owner_alive(p)]
    tmp = Path(tempfile.gettempdir())
    for prefix in RUN_PREFIXES:
        found += [p for p in tmp.glob(f"{prefix}*") if p.is_dir() and now - p.stat().st_mtime > RUN_MAX_AGE]
    return sorted(found)


@dataclass(frozen=True)
class Collected:
    removed: list[Entry]
    orphans: list[Path]
    kept: int  # bytes of entries kept (0 when no budget was given: nothing was measured)
    busy: list[Path]  # entries over the budget left alone: being built, or used within the hour


def collect(store: Store, max_size: int | None, *, dry_run: bool = False) -> Collected:
    """Remove orphans, then least recently used entries until what is kept fits ``max_size``."""
    stale = orphans(store)
    if not dry_run:
        for path in stale:
            shutil.rmtree(path, ignore_errors=True)
    found = entries(store, sized=max_size is not None)
    total = sum(e.size for e in found)
    removed, busy = [], []
    now = time.time()
    for entry in found:
        if max_size is None or total <= max_size:
            break
        if store.busy(entry.path) or now - entry.last_used < IN_USE:
            busy.append(entry.path)
            continue
        if not dry_run:
            shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry)
        total -= entry.size
    return Collected(removed, stale, total, busy)
