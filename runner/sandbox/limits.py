"""Resource limits on every process of a probed tree: it may not take the machine down with it.

Two mechanisms, each used where it works, and the receipt records only what was in force:

- rlimits, set by ``prlimit`` on the process that starts the sandbox and inherited by everything
  inside it: address space per process (``RLIMIT_AS``), bytes per file written (``RLIMIT_FSIZE``),
  open files per process (``RLIMIT_NOFILE``), no core dumps. Always available.
- a cgroup of its own per run, made under the one diffprobe runs in where that is writable (cgroup
  v1 or v2): at most ``processes`` processes and threads together (a fork bomb fails its forks:
  ``RLIMIT_NPROC`` cannot, it is never enforced for root, which the sandbox's user is outside its
  namespace) and ``memory`` bytes of memory together, tmpfs pages included (a balloon is killed
  by the kernel, not the machine's other work). The cgroup is removed after the run, stale ones of
  a killed diffprobe are swept.

The defaults leave a real SGLang import (about 1.1 GiB of address space, 0.5 GiB resident) far
inside; ``DIFFPROBE_LIMITS`` changes them (``memory=4G,processes=128,address-space=4G,
file-size=512M,open-files=1024``). The wall clock is bounded elsewhere: per-case timeouts, and the
run's deadline (runner/sandbox/execute.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from runner.errors import BadInput
from runner.evidence.receipts import Limits

VARIABLE = "DIFFPROBE_LIMITS"
GiB = 1 << 30
DEFAULTS = Limits(memory=8 * GiB, processes=512, address_space=8 * GiB, file_size=GiB, open_files=4096)
KEYS = {"memory": "memory", "processes": "processes", "address-space": "address_space", "file-size": "file_size",
        "open-files": "open_files"}
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": GiB}
CGROUP_ROOT = Path("/sys/fs/cgroup")
PREFIX = "diffprobe-"


def configured(environ: dict[str, str] | None = None) -> Limits:
    """The limits asked for: the defaults, changed by ``DIFFPROBE_LIMITS`` (bad text: exit 2)."""
    text = (os.environ if environ is None else environ).get(VARIABLE, "").strip()
    values = DEFAULTS.model_dump()
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, value = item.partition("=")
        m = re.fullmatch(r"(\d+)([KMG]?)", value.strip().upper())
        if key.strip() not in KEYS or not m or int(m.group(1)) <= 0:
            raise BadInput(f"{VARIABLE}: {item!r} is not one of {', '.join(f'{k}=N[K|M|G]' for k in KEYS)}")
        values[KEYS[key.strip()]] = int(m.group(1)) * UNITS[m.group(2)]
    return Limits(**values)


def rlimits(asked: Limits) -> tuple[list[str], Limits]:
    """The command prefix that sets the per-process rlimits, and those it sets."""
    exe = shutil.which("prlimit")
    if not exe:
        return [], Limits()
    prefix = [exe, f"--as={asked.address_space}", f"--fsize={asked.file_size}", f"--nofile={asked.open_files}",
              "--core=0", "--"]
    return prefix, Limits(address_space=asked.address_space, file_size=asked.file_size, open_files=asked.open_files)


@dataclass(frozen=True)
class Group:
    """One run's cgroup: a directory per hierarchy (v1: one per controller; v2: one)."""
    dirs: tuple[Path, ...]
    limits: Limits

    def join(self) -> list[str]:
        """The command prefix that moves the process (and so everything it starts) into the group."""
        if not self.dirs:
            return []
        script = "".join(f'echo $$ > "${i + 1}/cgroup.procs" && ' for i in range(len(self.dirs)))
        return ["/bin/sh", "-c", f'{script}shift {len(self.dirs)} && exec "$@"', "sh", *map(str, self.dirs)]


def _ours() -> dict[str, Path]:
    """For each controller we can limit (pids, memory): the cgroup directory diffprobe runs in."""
    found: dict[str, Path] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in ("pids", "memory"):
            if controller in controllers.split(","):  # v1: its own hierarchy
                found[controller] = CGROUP_ROOT / controller / path.lstrip("/")
            elif controllers == "" and (CGROUP_ROOT / "cgroup.controllers").exists():  # v2, the unified mount
                here = CGROUP_ROOT / path.lstrip("/")
                with contextlib.suppress(OSError):
                    if controller in (here / "cgroup.subtree_control").read_text().split():
                        found.setdefault(controller, here)
    return found


def _owner() -> str:
    """Who makes a group: our PID namespace and pid (a hierarchy may be shared with other PID
    namespaces, whose pids we cannot see and whose groups are not ours to sweep)."""
    return f"{PREFIX}{os.stat('/proc/self/ns/pid').st_ino}-{os.getpid()}-"


def _sweep(parent: Path) -> None:
    """Groups left by a diffprobe of our PID namespace that was killed: its pid is gone."""
    namespace = _owner().split("-")[1]
    for stale in parent.glob(f"{PREFIX}{namespace}-*-*"):
        m = re.match(rf"{PREFIX}{namespace}-(\d+)-", stale.name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            _remove(stale)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        for pid in (path / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + 5
    while True:  # the kernel lets go of a group once its last process is gone
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return  # the next run sweeps it
            time.sleep(0.01)


def _make(base: Path, name: str, controller: str, asked: Limits) -> Path | None:
    """``base/name`` with ``controller``'s limit written (v2: one directory for both controllers),
    or None where this machine does not let us."""
    v2 = (base / "cgroup.controllers").exists()
    files = {"pids": [("pids.max", asked.processes)],
             "memory": [("memory.max", asked.memory), ("memory.swap.max", 0)] if v2 else
             [("memory.limit_in_bytes", asked.memory), ("memory.memsw.limit_in_bytes", asked.memory)]}[controller]
    path = base / name
    made = not path.exists()
    try:
        if made:
            _sweep(base)
            path.mkdir()
        for index, (file, value) in enumerate(files):
            try:
                (path / file).write_text(str(value))
            except OSError:
                if index == 0:  # the limit itself; the swap companion is optional
                    raise
        _try_join(path)
        return path
    except OSError:
        if made:
            _remove(path)
        return None


def _try_join(path: Path) -> None:
    """Move a throwaway process into the group (OSError where we may make a group but not move
    into it, as cgroup v2 delegation can allow): a run must never start claiming a limit it
    could not join, nor fail because of it."""
    probe = subprocess.Popen(["/bin/sh", "-c", "read line"], stdin=subprocess.PIPE)
    try:
        (path / "cgroup.procs").write_text(str(probe.pid))
    finally:
        probe.kill()
        probe.wait()


@contextlib.contextmanager
def group(asked: Limits) -> Iterator[Group]:
    """A cgroup for one run, with the pids and memory limits this machine lets us set; removed at
    the end, with anything still in it."""
    name = f"{_owner()}{uuid.uuid4().hex[:8]}"
    made = {controller: path for controller, base in _ours().items() if (path := _make(base, name, controller, asked))}
    try:
        yield Group(tuple(dict.fromkeys(made.values())), Limits(processes=asked.processes if "pids" in made else None,
                                                                  memory=asked.memory if "memory" in made else None))
    finally:
        for path in dict.fromkeys(made.values()):
            _remove(path)


def merged(*parts: Limits) -> Limits:
    """The limits in force from every mechanism together."""
    return Limits(**{k: v for part in parts for k, v in part.model_dump().items() if v is not None})
