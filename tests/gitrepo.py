"""Build git histories laid out like upstream (package at python/sglang/) in one `git fast-import`.

Package contents come from real release trees at run time (never committed here); everything
else (other directories, vendor branches, hundreds of unrelated commits) is generated, so a test
can shape a history larger than one tree in a second. The repository is served the way upstream
is: `uploadpack.allowFilter` (partial clones) and fetching any commit by id.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

PACKAGE_DIR = "python/sglang"


@dataclass
class Step:
    """One commit. ``package`` (a directory holding ``sglang/``) replaces python/sglang wholesale;
    ``files`` sets paths (bytes, or (mode, bytes) for a link: ("120000", target), or ("160000",
    commit id) for a submodule) or deletes them (None), package paths included."""

    label: str
    package: Path | None = None
    files: dict[str, bytes | tuple[str, bytes | str] | None] = field(default_factory=dict)
    branch: str = "main"  # commits on refs/heads/<branch>, or a full ref such as refs/vendor/side
    parent: str | None = None  # label of the parent; default: the branch's previous commit
    tag: str | None = None


def _package_files(root: Path) -> list[tuple[str, str, Path]]:
    out = []
    base = root / "sglang"
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo", ".so")):
                continue  # byte-code and compiled modules are not in a source checkout
            path = Path(dirpath) / name
            mode = "100755" if os.access(path, os.X_OK) else "100644"
            out.append((f"{PACKAGE_DIR}/{path.relative_to(base).as_posix()}", mode, path))
    return out


def _data(payload: bytes) -> bytes:
    return b"data %d\n" % len(payload) + payload + b"\n"


def build(dest: Path, steps: list[Step]) -> dict[str, str]:
    """Create the repository at ``dest``, or add ``steps`` to it (an upstream branch moving after a
    first clone); returns label -> full commit SHA."""
    def run(*args: str, **kw) -> str:
        return subprocess.run(["git", "-C", str(dest), *args], check=True, capture_output=True, **kw).stdout

    if not (dest / ".git").exists():
        dest.mkdir(parents=True, exist_ok=True)
        run("init", "-q", "-b", "main")
        for key, value in [("uploadpack.allowFilter", "true"), ("uploadpack.allowAnySHA1InWant", "true"), ("gc.auto", "0")]:
            run("config", key, value)
    existing = dict(line.split() for line in run("for-each-ref", "--format=%(refname) %(objectname)", text=True).splitlines())
    stream = bytearray()
    tips: dict[str, str] = {}
    labels: dict[str, str] = {}
    for mark, step in enumerate(steps, start=1):
        ref = step.branch if step.branch.startswith("refs/") else f"refs/heads/{step.branch}"
        stream += f"commit {ref}\nmark :{mark}\n".encode()
        stream += f"committer fixture <fixture@diffprobe.invalid> {1_700_000_000 + mark * 60} +0000\n".encode()
        stream += _data(step.label.encode())
        parent = labels[step.parent] if step.parent else tips.get(ref, existing.get(ref))
        if parent:
            stream += f"from {parent}\n".encode()
        if step.package is not None:
            stream += f"D {PACKAGE_DIR}\n".encode()
            for path, mode, src in _package_files(step.package):
                stream += f"M {mode} inline {path}\n".encode() + _data(src.read_bytes())
        for path, payload in step.files.items():
            mode, payload = payload if isinstance(payload, tuple) else ("100644", payload)
            if payload is None:
                stream += f"D {path}\n".encode()
            elif mode == "160000":
                stream += f"M 160000 {payload} {path}\n".encode()
            else:
                stream += f"M {mode} inline {path}\n".encode() + _data(payload)
        stream += b"\n"
        if step.tag:
            stream += f"reset refs/tags/{step.tag}\nfrom :{mark}\n\n".encode()
        tips[ref] = labels[step.label] = f":{mark}"
    marks = dest / ".git" / "fixture-marks"
    run("fast-import", "--quiet", f"--export-marks={marks}", input=bytes(stream))
    by_mark = dict(line.split() for line in marks.read_text().splitlines())
    marks.unlink()
    if not existing and "refs/heads/main" in tips:
        run("symbolic-ref", "HEAD", "refs/heads/main")
    return {label: by_mark[mark] for label, mark in labels.items()}


def noise(seed: str, size: int) -> bytes:
    """Incompressible, reproducible bytes (a stand-in for assets that are not the package)."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"{seed}/{counter}".encode()).digest()
        counter += 1
    return bytes(out[:size])


def git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    """``git --git-dir repo`` (a work tree's .git is found): check=True, stdout as bytes."""
    git_dir = repo / ".git" if (repo / ".git").exists() else repo
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], input=stdin, check=True, capture_output=True).stdout


def blobs_under(repo: Path, commits: list[str], path: str = PACKAGE_DIR) -> set[str]:
    """The blob ids under ``path`` in each of ``commits``."""
    out = b""
    for sha in commits:
        out += git(repo, "ls-tree", "-r", "-z", sha, "--", path)
    return {entry.split()[2].decode() for entry in out.split(b"\0") if entry and entry.split()[1] == b"blob"}


def snapshot(src: Path, dest: Path, keep_blobs: set[str]) -> None:
    """A bare copy of ``src`` (every ref, commit and tree) holding only the blobs in ``keep_blobs``,
    and no promisor: a fork exported with part of its history's blobs, as users hand them over.
    Written with `git pack-objects` of the chosen set (git 2.39 cannot repack with a filter)."""
    listed = git(src, "rev-list", "--objects", "--all").decode().split("\n")
    oids = [line.split()[0] for line in listed if line]
    kinds = git(src, "cat-file", "--batch-check=%(objecttype)", stdin="".join(f"{o}\n" for o in oids).encode()).decode().split()
    chosen = [o for o, kind in zip(oids, kinds) if kind != "blob" or o in keep_blobs]
    subprocess.run(["git", "init", "-q", "--bare", str(dest)], check=True, capture_output=True)
    pack = git(src, "pack-objects", "--stdout", "--window=0", stdin="".join(f"{o}\n" for o in chosen).encode())
    git(dest, "index-pack", "--stdin", stdin=pack)
    refs = git(src, "for-each-ref", "--format=create %(refname) %(objectname)", "refs/heads", "refs/tags")
    git(dest, "update-ref", "--stdin", stdin=refs)
    git(dest, "symbolic-ref", "HEAD", "refs/heads/main")


@contextmanager
def served(base: Path) -> Iterator[str]:
    """``git daemon`` serving the repositories under ``base`` on the loopback (their own
    uploadpack settings apply): the URL prefix ``git://127.0.0.1:PORT``. A repository reached
    this way is remote to diffprobe (a mirror clone), as upstream is; a path is read in place."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    daemon = subprocess.Popen(["git", "daemon", "--reuseaddr", "--listen=127.0.0.1", f"--port={port}", "--export-all",
                               f"--base-path={base}", "--informative-errors", str(base)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"git://127.0.0.1:{port}"
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)
