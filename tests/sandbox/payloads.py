"""What a hostile tree does to the machine that probes it: one function per attack, standard library
only, so that the same code runs as a script (``python payloads.py CONFIG_JSON``) and from inside
an SGLang tree (tests/sandbox/hostile.py copies this file into one).

Each attack reports what it achieved; the tests never believe that report alone: they check on the
host that nothing arrived (listeners, canary files, processes, hashes of the caches).
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import socket
import sys
import time

CLONE_NEWNET = 0x40000000
CANARY = "planted-by-a-hostile-tree"


def environ(config: dict) -> list[str]:
    """Processes whose environment shows the host's secret (``/proc/<pid>/environ``, parent first)."""
    found = []
    for path in [f"/proc/{os.getppid()}/environ", *glob.glob("/proc/[0-9]*/environ")]:
        try:
            with open(path, "rb") as handle:
                if config["secret"].encode() in handle.read():
                    found.append(path)
        except OSError:
            continue
    return sorted(set(found))


def _send(address, family=socket.AF_INET) -> bool:
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(2)
            sock.connect(address)
            sock.sendall(CANARY.encode())
        return True
    except OSError:
        return False


def network(config: dict) -> list[str]:
    """Reach the host's loopback listener: directly, then from every network namespace that
    ``/proc/<pid>/ns/net`` lets this process enter."""
    reached = ["direct"] if _send(("127.0.0.1", config["port"])) else []
    libc = ctypes.CDLL(None, use_errno=True)
    seen = set()
    for path in glob.glob("/proc/[0-9]*/ns/net"):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        if os.fstat(fd).st_ino in seen:
            os.close(fd)
            continue
        seen.add(os.fstat(fd).st_ino)
        try:
            if libc.setns(fd, CLONE_NEWNET) == 0 and _send(("127.0.0.1", config["port"])):
                reached.append(path)
        finally:
            os.close(fd)
    return reached


def unix_socket(config: dict) -> list[str]:
    """Connect to a Unix socket of the host (a path) and to an abstract one (network namespace)."""
    reached = []
    if _send(config["unix_path"], socket.AF_UNIX):
        reached.append("path")
    if _send("\0" + config["unix_abstract"], socket.AF_UNIX):
        reached.append("abstract")
    return reached


def _parent_site_packages() -> list[str]:
    """diffprobe's own environment, found the way a payload would: its parents' command lines."""
    found = []
    for pid in {os.getppid(), *(int(p.split("/")[2]) for p in glob.glob("/proc/[0-9]*/cmdline"))}:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                exe = handle.read().split(b"\0")[0].decode()
        except (OSError, UnicodeDecodeError, IndexError):
            continue
        found += glob.glob(os.path.join(os.path.dirname(os.path.dirname(exe)), "lib", "python3*", "site-packages"))
    return sorted(set(found))


def _plant(directory: str, name: str, data: bytes) -> str | None:
    try:
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, name), "wb") as handle:
            handle.write(data)
        return os.path.join(directory, name)
    except OSError:
        return None


def writes(config: dict) -> list[str]:
    """Files written outside the run's result directory: the real HOME, the host's /tmp, other
    runs, the cache (another tree's environment, the shared layer, the stored trees), and a ``.pth``
    in diffprobe's own virtualenv."""
    name = f"{CANARY}-{os.getpid()}"
    done = []
    for directory in config["write_to"]:
        done.append(_plant(directory, name, CANARY.encode()))
    found = _parent_site_packages() if config.get("discover_parents") else []
    for site in [*config.get("site_packages", []), *found]:  # a comment: harmless should the plant succeed
        done.append(_plant(site, f"zz-{CANARY}.pth", b"# the next run of diffprobe would execute this file\n"))
    for env in config.get("envs", []):  # byte-code that would run instead of another tree's source
        for init in glob.glob(os.path.join(env, "tree", "sglang", "__init__.py")):
            done.append(_plant(os.path.join(os.path.dirname(init), "__pycache__"), "__init__.cpython-311.pyc", b"\0" * 32))
    return [p for p in done if p]


def daemon(config: dict) -> int:
    """A detached process (new session, double fork) that outlives its parent and keeps writing
    into other runs' directories; returns the pid of the first fork."""
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return pid
    os.setsid()
    if os.fork():
        os._exit(0)
    code = (
        "import glob, os, sys, time\n"
        "while True:\n"
        "    for d in sys.argv[2:]:\n"
        "        for target in glob.glob(d):\n"
        "            try:\n"
        f"                open(os.path.join(target, {CANARY!r}), 'w').write('x')\n"
        "            except OSError:\n"
        "                pass\n"
        "    time.sleep(0.2)\n"
    )
    try:
        os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", code, config["marker"], *config["write_to"]])
    finally:
        os._exit(1)


ATTACKS = {"environ": environ, "network": network, "unix_socket": unix_socket, "writes": writes}


def run(config: dict, with_daemon: bool = True) -> dict:
    report = {name: attack(config) for name, attack in ATTACKS.items()}
    if with_daemon:
        report["daemon"] = daemon(config)
    return report


if __name__ == "__main__":
    config = json.loads(sys.argv[1])
    report = run(config)
    with open(os.path.join(config["out"], "report.json"), "w") as handle:
        json.dump(report, handle)
    time.sleep(0.5)  # the daemon is running, detached, when this process ends
