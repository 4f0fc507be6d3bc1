"""The byte-code store: each module's byte-code compiled once per interpreter, whatever tree holds it.

A release line's trees, and a fork and its release, share most of their files; compiling every
module of every tree (about 13 s of CPU for SGLang) was most of an environment's cost. An entry is
keyed by the interpreter (``Interpreter.bytecode_key``) and the sha256 of the module's source, and
compiled with ``checked-hash`` invalidation (PEP 552): the byte-code names its source by a hash of
its bytes, not by a path or a modification time, so one entry serves every path with those bytes
(the import system re-points the code's file name to the path it imports from), and a source
changed under it is compiled again at import instead of running stale byte-code.

Each entry holds its own digest over its key and its byte-code (as a receipt holds its own), and is
checked on every use: a damaged or misfiled entry is never copied, but compiled again and replaced,
with one warning line. Entries are written under a scratch name and renamed into place, so a reader
sees a whole entry or none, and two builders filing the same entry both file a valid one. An
environment gets copies, never links: environments are sealed one by one and share no inode.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel

from runner.files import scratch_dir, sha256_bytes
from runner.store.cache import Store


class BytecodeRecord(BaseModel):
    """What an environment's build did for its modules' byte-code (recorded in its stamp)."""

    modules: int  # modules of the tree and the stand-ins
    compiled: int  # distinct sources compiled by this build (identical bytes are compiled once)
    copied: int  # modules whose byte-code came from the store


def _digest(key: str, source_sha256: str, pyc: bytes) -> bytes:
    return sha256_bytes(f"{key}\n{source_sha256}\n".encode() + pyc).encode()


def _stored(cache: Store, key: str, shas: list[str]) -> dict[str, bytes]:
    """The store's byte-code for these sources where its entry is intact for its key (its own digest
    over key and byte-code); a damaged or misfiled entry is removed, and said in one line."""
    found, damaged = {}, []
    for sha in shas:
        entry = cache.pyc(key, sha)
        try:
            data = entry.read_bytes()
        except FileNotFoundError:
            continue
        head, pyc = data[:65], data[65:]
        if head == _digest(key, sha, pyc) + b"\n":
            found[sha] = pyc
        else:
            damaged.append(entry)
            entry.unlink(missing_ok=True)
    if damaged:
        cache.notices.warn(f"{len(damaged)} byte-code store entr{'y' if len(damaged) == 1 else 'ies'} damaged or misfiled "
                f"(first {damaged[0]}); compiled again")
    return found


def _compiled(cache: Store, key: str, cache_tag: str, python: Path, sources: dict[str, Path], log: Path) -> dict[str, bytes]:
    """Byte-code for ``sources`` (sha256 -> a module with those bytes), compiled under their sha256
    in a scratch directory of the store and renamed into place there, each with its digest. A
    source that does not compile has none: it is left to the import, which reports it."""
    done = {}
    with scratch_dir(cache.bytecode(key).parent) as scratch:
        for sha, path in sources.items():
            (scratch / f"{sha}.py").symlink_to(path)
        _compile(python, scratch, log)
        for sha in sources:
            compiled = scratch / "__pycache__" / f"{sha}.{cache_tag}.pyc"
            if compiled.exists():  # a new file: compileall gives byte-code its source's mode, maybe read-only
                pyc = compiled.read_bytes()
                (scratch / sha).write_bytes(_digest(key, sha, pyc) + b"\n" + pyc)
                os.replace(scratch / sha, cache.pyc(key, sha))
                done[sha] = pyc
    return done


def fill(cache: Store, key: str, cache_tag: str, python: Path, modules: list[Path], log: Path) -> BytecodeRecord:
    """Put byte-code beside each of ``modules`` (``__pycache__/<name>.<cache_tag>.pyc``): copied from
    the store where it holds the module's bytes, else compiled by ``python`` and filed there."""
    by_source: dict[str, list[Path]] = defaultdict(list)
    for path in modules:
        by_source[sha256_bytes(path.read_bytes())].append(path)
    cache.used(cache.bytecode(key))  # before any lookup: gc keeps a store used within the hour
    found = _stored(cache, key, list(by_source))
    copied = sum(len(by_source[sha]) for sha in found)
    missing = {sha: paths[0] for sha, paths in by_source.items() if sha not in found}
    compiled = _compiled(cache, key, cache_tag, python, missing, log) if missing else {}
    made: set[Path] = set()
    for sha, pyc in (found | compiled).items():
        for path in by_source[sha]:
            cached = path.parent / "__pycache__"
            if cached not in made:
                cached.mkdir(exist_ok=True)
                made.add(cached)
            (cached / f"{path.name[:-3]}.{cache_tag}.pyc").write_bytes(pyc)
    return BytecodeRecord(modules=len(modules), compiled=len(compiled), copied=copied)


def _compile(python: Path, folder: Path, log: Path) -> None:
    """Compile the sources in ``folder``, named by their sha256, by the environment's interpreter
    before any run: runs see the environment read-only, so nothing a tree runs can write byte-code
    that a later run would load. ``-S``: compiling runs no ``.pth`` and no code of the tree. A
    directory, not a list of files (``-i``): compileall spreads only a directory over its workers."""
    argv = [str(python), "-I", "-S", "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "checked-hash", str(folder)]
    with open(log, "wb") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait()
        finally:  # interrupted: its pool of workers goes too, not only the process we started
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
