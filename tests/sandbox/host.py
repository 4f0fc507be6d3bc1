"""What the host exposes to a hostile tree that escapes its sandbox, and how a test sees whether it
did: a process holding a secret in its environment, a loopback listener, Unix sockets (a path and
an abstract name), and decoy directories (a HOME, a /tmp, another run's results, a cache with
another tree's environment, a virtualenv) that nothing may write into."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import uuid
from pathlib import Path
from typing import Iterator

from tests.sandbox import payloads

SECRET_NAME = "DIFFPROBE_TEST_SECRET"


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@contextlib.contextmanager
def exposed(tmp_path: Path) -> Iterator[dict]:
    """What the host exposes to a payload that escapes: a secret in our environment, a loopback
    listener, Unix sockets, a HOME, a /tmp, another run's result directory, a cache and a venv."""
    secret = uuid.uuid4().hex
    # /proc/<pid>/environ shows what a process was started with: a process of ours holding a secret
    holder = subprocess.Popen(["sleep", "600"], env={"PATH": "/usr/bin:/bin", SECRET_NAME: secret})
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    unix = socket.socket(socket.AF_UNIX)
    unix_path = tmp_path / "host.sock"
    unix.bind(str(unix_path))
    unix.listen(8)
    unix.setblocking(False)
    abstract = socket.socket(socket.AF_UNIX)
    abstract_name = f"diffprobe-test-{secret[:8]}"
    abstract.bind("\0" + abstract_name)
    abstract.listen(8)
    abstract.setblocking(False)
    decoys = tmp_path / "host"
    dirs = {name: decoys / name for name in ("home", "tmp", "other-run/out", "venv/lib/python3.11/site-packages")}
    env = decoys / "cache" / "envs" / "other" / "tree" / "sglang"
    for path in [*dirs.values(), env]:
        path.mkdir(parents=True)
    (env / "__init__.py").write_text("")
    marker = f"diffprobe-daemon-{secret[:12]}"
    config = {
        "secret": secret, "port": listener.getsockname()[1], "unix_path": str(unix_path), "unix_abstract": abstract_name,
        "write_to": [str(dirs["home"]), str(dirs["tmp"]), str(dirs["other-run/out"]), str(decoys / "cache")],
        "site_packages": [str(dirs["venv/lib/python3.11/site-packages"])], "envs": [str(decoys / "cache" / "envs" / "other")],
        "marker": marker,
    }
    yield {"config": config, "listeners": (listener, unix, abstract), "decoys": decoys, "marker": marker, "secret": secret}
    for pid in processes_with(marker):  # the control run's daemon: ours, ended by its id
        os.kill(pid, signal.SIGKILL)
    holder.kill()
    holder.wait()
    for sock in (listener, unix, abstract):
        sock.close()


def accepted(listeners) -> int:
    count = 0
    for sock in listeners:
        try:
            while True:
                sock.accept()[0].close()
                count += 1
        except BlockingIOError:
            pass
    return count


def planted(decoys: Path) -> list[Path]:
    return [p for p in decoys.rglob("*") if payloads.CANARY in p.name or p.name.endswith(".pyc")]
