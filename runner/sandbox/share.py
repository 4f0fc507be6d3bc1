"""How much of the machine probing takes at once, decided here and nowhere else.

Probing runs trees at once (one harness process each: torch and SGLang imported, about 1 GiB) and,
inside each, cases at once (a forked child each: a copy-on-write copy of its harness, paying only
for the pages it writes). The rule: trees at once x cases at once per tree never exceeds the usable
cores (unless -j asks for more trees than cores: then one case at a time in each), and every harness
with its children fits in the memory available and in one run's memory limit
(runner/sandbox/limits.py, which counts a harness and its children together).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from runner.sandbox import limits

PROCESS_BYTES = 3 << 29  # 1.5 GiB: a harness process's peak with headroom
CASE_BYTES = 1 << 28  # 256 MiB: a case's process, the pages it writes of its harness's copy, with headroom


@dataclass(frozen=True)
class Share:
    trees: int  # harness processes at once
    cases: int  # case processes at once in each
    note: str | None = None  # why fewer trees run at once than -j asked


def of(trees: int, requested: int | None = None) -> Share:
    """The share for probing ``trees`` trees with -j ``requested`` (None: as the machine allows).
    Trees at once: -j as asked, else one per core, never more than there are trees, and only as many
    harnesses as memory holds (a -j cut short says so in ``note``). Cases at once: the cores left to
    each tree, as far as the memory left to each and the run's memory limit hold them."""
    usable, free = cores(), available()
    wanted = max(1, min(requested or usable, trees))
    at_once = min(wanted, max(1, free // PROCESS_BYTES)) if free is not None else wanted
    note = f"-j {requested} needs about {requested * PROCESS_BYTES >> 30} GiB; using {at_once} worker(s)" if (
        requested and wanted > at_once) else None
    per_tree = [usable // at_once, (limits.configured().memory - PROCESS_BYTES) // CASE_BYTES]
    if free is not None:
        per_tree.append((free // at_once - PROCESS_BYTES) // CASE_BYTES)
    return Share(at_once, max(1, min(per_tree)), note)


def cores() -> int:
    """Cores this process may run on: its CPU affinity, within its cgroup's CPU quota where one is set."""
    count = len(os.sched_getaffinity(0))
    quota = _quota()
    return max(1, min(count, int(quota))) if quota else count


def available() -> int | None:
    """Bytes of memory available (``MemAvailable``), or None where /proc does not say."""
    try:
        with open("/proc/meminfo") as handle:
            meminfo = dict(line.split(":", 1) for line in handle)
        return int(meminfo["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def _quota(membership: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """Cores' worth of CPU time the cgroup we run in may use (cgroup v2 ``cpu.max``, v1 CFS quota), or None."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        try:
            if controllers == "":
                quota, period = (root / path.lstrip("/") / "cpu.max").read_text().split()
            elif "cpu" in controllers.split(","):
                here = root / controllers / path.lstrip("/")
                quota, period = ((here / f"cpu.cfs_{n}_us").read_text().strip() for n in ("quota", "period"))
            else:
                continue
        except (OSError, ValueError):
            continue
        if quota not in ("max", "-1") and int(period) > 0:
            return int(quota) / int(period)
    return None
