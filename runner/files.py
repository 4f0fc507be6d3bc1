"""Atomic writes and digests: the two things every cache and bundle entry relies on."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

_CHUNK = 1 << 20
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes: opened without
    following a link at its last component and without blocking on a FIFO, checked with ``fstat``
    after the open, read no further than ``limit + 1``. Raises OSError (``ELOOP``: a link) or
    ValueError (not a regular file, or larger than ``limit``)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {limit} bytes")
    return data


def write_atomic(path: Path, data: bytes) -> None:
    """Readers see the old file or the new one, never a prefix: temp name, fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; the result should read like any file
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def building_dir(final: Path) -> Iterator[Path]:
    """Yield a scratch directory that becomes ``final`` only if the block completes.

    An interrupted build leaves a ``.building-*`` directory that no lookup treats as an entry
    (pre-commit's "valid only after fully built"); the next build sweeps it away.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f".building-{final.name}-*"):
        if not owner_alive(stale):
            shutil.rmtree(stale, ignore_errors=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".building-{final.name}-{os.getpid()}-", dir=final.parent))
    try:
        yield scratch
        if final.exists():  # another process finished the same entry first; theirs is as good
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            os.replace(scratch, final)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


@contextmanager
def scratch_dir(parent: Path, prefix: str = ".scratch-") -> Iterator[Path]:
    """A private directory ``<prefix><pid>-<random>`` under ``parent`` (same filesystem, so it can be
    renamed into place); whatever is left of it when the block ends is removed, and so are those a
    killed process left. The sandbox's run directories are these too (``execute.run_dir``)."""
    parent.mkdir(parents=True, exist_ok=True)
    for stale in parent.glob(f"{prefix}*-*"):
        if not owner_alive(stale):
            shutil.rmtree(stale, ignore_errors=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def owner_alive(scratch: Path) -> bool:
    """Whether the process named in ``<prefix>-<pid>-<random>`` still runs."""
    try:
        pid = int(scratch.name.split("-")[-2])
        os.kill(pid, 0)
    except (ValueError, IndexError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def digest_name(digest: str) -> str:
    """The one file name a tree digest (``h1:`` + base64, which may hold ``/``) is stored under: hex."""
    return base64.b64decode(digest.removeprefix("h1:")).hex()


def is_bytecode(rel: str) -> bool:
    return rel.endswith((".pyc", ".pyo")) or "/__pycache__/" in f"/{rel}"


def tree_files(root: Path, *, bytecode: bool = False) -> list[str]:
    """Relative paths (``/``-separated, sorted) of the regular files and links under ``root``.

    Byte-code caches are left out unless asked for: they are written by whoever imports the tree
    and say nothing about its source.
    """
    out = []
    start = len(str(root)) + 1  # string slicing: pathlib per file costs more than hashing it
    for dirpath, dirnames, filenames in os.walk(root):
        if not bytecode:
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        prefix = dirpath[start:].replace(os.sep, "/")
        out += [f"{prefix}/{n}" if prefix else n for n in filenames]
    return sorted(out if bytecode else [p for p in out if not is_bytecode(p)])


def dirhash1(files: Iterable[tuple[str, str]]) -> str:
    """in-toto / Go modules ``h1:`` directory hash over ``(relative path, sha256 hex)`` pairs.

    sha256 over the lines ``"<sha256 hex>  <relative path>\\n"`` sorted by path, base64-encoded and
    prefixed ``h1:``. As Go's ``dirhash.Hash1``, a name holding a newline is refused: it would let
    two different lists of lines read the same (runner/store/intake.py refuses such names, and
    every other that is not plain and printable, before anything is hashed). Recompute without
    diffprobe in the directory holding ``sglang/``: ``find sglang -type f ! -path '*/__pycache__/*'
    ! -name '*.py[co]' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
    | xxd -r -p | base64`` (a tree with links: docs/sources-and-intake.md, whose lines for links come
    from ``trees.link_line``).
    """
    lines = []
    for rel, digest in sorted(files):
        if "\n" in rel:
            raise ValueError(f"dirhash: file name with newline: {rel!r}")
        lines.append(f"{digest}  {rel}\n")
    summary = hashlib.sha256("".join(lines).encode()).digest()
    return "h1:" + base64.b64encode(summary).decode()
