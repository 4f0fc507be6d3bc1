"""bubblewrap: the sandbox every probed tree's code runs in (README, "Threat model").

The process gets every namespace bubblewrap makes (user, mount, PID, network, IPC, UTS, cgroup),
also when diffprobe runs as root, and holds no capability; it sees its own /proc (no process of
the host), a private tmpfs /tmp and HOME, read-only binds of what it runs (the system's /usr, the
interpreter, the tree's environment, the shared layer, the stored tree, the probes) and exactly
one writable directory: that run's results. It starts from an empty environment (--clearenv),
cannot reach our terminal (--new-session), dies with diffprobe (--die-with-parent), and
everything it starts ends with it (the PID namespace dies with its first process). Each tmpfs is
bounded by its size; processes, memory, files and their sizes by runner/sandbox/limits.py.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from runner.evidence.receipts import Isolation, Limits

NAMESPACES = ("user", "mount", "pid", "net", "ipc", "uts", "cgroup")
HOME = "/home/user"  # names nothing of ours
TMPFS_BYTES = 1 << 30
RESULTS_BYTES = 128 << 20  # the result directory's tmpfs: all a run can hand back
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache")


@dataclass(frozen=True)
class Mounts:
    read_only: tuple[Path, ...]  # bound read-only at the same path
    results: Path | None  # the one writable directory
    hidden: tuple[Path, ...] = ()  # directories inside a read-only bind, replaced by an empty one


@functools.cache
def version() -> str | None:
    """bubblewrap's version where it can build the whole sandbox on this machine, else None."""
    exe = shutil.which("bwrap")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout.split()
        trial = subprocess.run([*_command(exe, Mounts((), None), {}, None, info_fd=None), "/bin/true"],
                               capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return out[-1] if trial.returncode == 0 and out else None


def _system() -> list[str]:
    """The host system the interpreter needs: /usr, the top-level links or directories into it,
    the dynamic loader's cache. Nothing else of /etc, /home, /root, /var, /run or /srv."""
    args = []
    for path in SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


def _command(exe: str, mounts: Mounts, env: dict[str, str], cwd: str | None, info_fd: int | None) -> list[str]:
    args = [exe, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--clearenv", "--as-pid-1",
            "--cap-drop", "ALL", "--proc", "/proc", "--dev", "/dev",
            "--size", str(TMPFS_BYTES), "--tmpfs", "/tmp", "--size", str(TMPFS_BYTES), "--tmpfs", HOME, *_system()]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    for path in mounts.read_only:
        args += ["--ro-bind", str(path), str(path)]
    for path in mounts.hidden:
        args += ["--size", "4096", "--tmpfs", str(path), "--remount-ro", str(path)]
    if mounts.results is not None:
        args += ["--size", str(RESULTS_BYTES), "--tmpfs", str(mounts.results)]
    for key, value in env.items():
        args += ["--setenv", key, value]
    return [*args, "--chdir", cwd or HOME, "--"]


def command(argv: list[str], mounts: Mounts, env: dict[str, str], cwd: str | None, info_fd: int,
            results_fd: int, deadline: int) -> list[str]:
    """``argv`` inside the sandbox; ``info_fd`` receives bubblewrap's account of the namespaces
    it made (read it with :func:`isolation`), ``results_fd`` a tar of the result directory once
    ``argv`` has ended or was stopped at ``deadline`` seconds (``timeout``: SIGTERM, SIGKILL 5 s
    later, exit 124), so that what it wrote until then still comes back. That directory is a
    tmpfs of ``RESULTS_BYTES``: what a run writes there never reaches the host's disk unbounded,
    and only its regular files are taken (``execute.unpack``)."""
    exe = shutil.which("bwrap")
    assert exe and version() and mounts.results, "bubblewrap is not usable here: callers check version() first"
    hand_back = (f'timeout -k 5 {deadline} "$@" {results_fd}>&-; status=$?; tar -C "$0" -cf - . >&{results_fd}; '
                 'exit $status')
    return [*_command(exe, mounts, {**env, "HOME": HOME, "TMPDIR": "/tmp"}, cwd, info_fd),
            "/bin/bash", "-c", hand_back, str(mounts.results), *argv]


def isolation(mounts: Mounts, info: bytes, limits: Limits) -> Isolation:
    """What was in force: each namespace bubblewrap reports that differs from ours (the user
    namespace is required by --unshare-user: without it bubblewrap does not start)."""
    try:
        reported = json.loads(info)
    except ValueError:
        reported = {}
    found = ["user"] if reported else []
    for kind in NAMESPACES[1:]:
        key = f"{'mnt' if kind == 'mount' else kind}-namespace"
        if key in reported and reported[key] != os.stat(f"/proc/self/ns/{'mnt' if kind == 'mount' else kind}").st_ino:
            found.append(kind)
    return Isolation(
        sandbox="bubblewrap", version=version(), namespaces=found,
        read_only=[p for p in SYSTEM if os.path.lexists(p)] + [str(p) for p in mounts.read_only],
        writable=[str(mounts.results)] if mounts.results else [], private=["/tmp", HOME], limits=limits,
    )
