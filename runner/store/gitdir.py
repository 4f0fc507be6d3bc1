"""A local repository's git directory, checked before any git process reads it.

A repository handed over is its author's bytes, and git acts on them before it reads an object:
its configuration can include any file (``include.path=/dev/stdin`` waits on the terminal; the
configuration of another repository on this machine brings that one's remote URL, token and all),
and git opens ``packed-refs``, ``objects/info/alternates`` or a ref without asking what they are (a
FIFO blocks it for good). So the directory is walked first, nothing followed, nothing read but a
few small files (``.git`` as a file, ``commondir``, the configuration): only directories and
regular files, small where git reads them whole, no configuration ``include``/``includeIf``, no
borrowed object directory. What passes is what git then reads, with every configuration source
but the repository's own switched off (mirrors.GIT_ENV).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from runner.errors import BadInput

# What git reads whole, and the most it may be: a repository's own files are far smaller (upstream's
# packed-refs, with every tag, is ~100 KiB).
SMALL = {"config": 1 << 20, "config.worktree": 1 << 20, "HEAD": 4096, "commondir": 4096, "gitdir": 4096,
         "packed-refs": 64 << 20, "shallow": 64 << 20, "FETCH_HEAD": 64 << 20, "ORIG_HEAD": 4096}
REF_BYTES = 4096  # a loose ref: a SHA or "ref: <name>" (git reads it whole)
# Any other file outside objects/ (reflogs, info/grafts, info/exclude...): git reads them line by
# line, whole; objects/ holds packs of any size, which git maps and checks as it reads them.
OTHER_BYTES = 64 << 20
ENTRIES = 2_000_000  # files and directories of one git directory (a pack holds millions of objects in one file)
DEPTH = 32
# A section header naming include or includeIf, whatever its case and spacing: git would read the
# file it names. Conservative: a header-like line inside a continued value is refused too.
_INCLUDE = re.compile(rb"^[ \t]*\[[ \t]*include", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class GitDir:
    git_dir: Path  # what git calls $GIT_DIR: a work tree's .git, a linked work tree's, or a bare repository
    common_dir: Path  # where its objects, refs and configuration live (== git_dir unless a linked work tree)


def _refuse(where: str, what: Path | str, why: str) -> BadInput:
    return BadInput(f"git source {where}: {str(what)!r}: refused before git reads it: {why}")


def _small(path: Path, where: str, limit: int) -> bytes:
    """A small regular file's bytes, opened without following a link or blocking on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as err:
        raise _refuse(where, path, f"it cannot be opened without following a link ({err.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(where, path, "it is not a regular file")
        if st.st_size > limit:
            raise _refuse(where, path, f"{st.st_size} bytes, over the {limit} git reads whole here")
        return os.read(fd, limit + 1)[:limit]
    finally:
        os.close(fd)


def _walk(top: Path, where: str, skip: Path | None = None) -> None:
    """Every entry under ``top``: a directory or a regular file, no link, FIFO, device or socket,
    bounded in number and depth; what git reads whole bounded (``SMALL``, refs, every other file
    outside objects/); configurations without includes. ``skip``: a directory already walked (a linked work tree's own, inside the common one)."""
    count = 0
    refs, objects = top / "refs", top / "objects"
    stack = [(top, 0)]
    while stack:
        here, depth = stack.pop()
        if depth > DEPTH:
            raise _refuse(where, here, f"more than {DEPTH} levels deep")
        try:
            listing = list(os.scandir(here))
        except FileNotFoundError:
            if here == top:
                raise _refuse(where, here, "it cannot be listed (No such file or directory)") from None
            continue  # removed while walked: git's own gc packs loose objects and drops their directories
        except OSError as err:
            raise _refuse(where, here, f"it cannot be listed ({err.strerror})") from None
        for entry in listing:
            count += 1
            if count > ENTRIES:
                raise _refuse(where, top, f"more than {ENTRIES} entries")
            path = Path(entry.path)
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # gone since it was listed: nothing there for git to read
            if stat.S_ISDIR(st.st_mode):
                if path != skip:
                    stack.append((path, depth + 1))
                continue
            if not stat.S_ISREG(st.st_mode):
                kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) \
                    else "a device or a socket"
                raise _refuse(where, path, f"it is {kind}; git would read through it")
            limit = SMALL.get(entry.name, OTHER_BYTES) if depth == 0 else REF_BYTES if path.is_relative_to(refs) else \
                None if path.is_relative_to(objects) else OTHER_BYTES
            if limit is not None and st.st_size > limit:
                raise _refuse(where, path, f"{st.st_size} bytes, over the {limit} git reads whole here")
            if depth == 0 and entry.name.startswith("config"):
                data = _small(path, where, SMALL.get(entry.name, SMALL["config"]))
                if _INCLUDE.search(data):
                    raise _refuse(where, path, "it includes other configuration files (include/includeIf): git would "
                                               "read files outside the repository")
    alternates = top / "objects" / "info" / "alternates"
    if alternates.exists() and _small(alternates, where, 1 << 20).strip():
        raise _refuse(where, alternates, "the repository borrows objects from another (objects/info/alternates); "
                                         "diffprobe reads one repository: `git repack -a -d` and remove that file")


def check(path: Path, where: str) -> GitDir | None:
    """The repository at ``path`` (a work tree, a linked work tree or a bare repository) checked
    before any git process reads it, or None if ``path`` holds none. Never searched above ``path``;
    a ``.git`` file is followed only to a linked work tree's git directory that names it back."""
    dotgit = path / ".git"
    try:
        mode = os.lstat(dotgit).st_mode
    except OSError:
        mode = None
    if mode is not None and stat.S_ISREG(mode):  # a linked work tree or a submodule: "gitdir: <path>"
        text = _small(dotgit, where, SMALL["gitdir"]).decode(errors="replace").strip()
        if not text.startswith("gitdir: "):
            raise _refuse(where, dotgit, "it is a file but not 'gitdir: <path>'")
        git_dir = (path / text.removeprefix("gitdir: ")).resolve()
        back = git_dir / "gitdir"  # a linked work tree's git directory names its .git file back
        named = _small(back, where, SMALL["gitdir"]).decode(errors="replace").strip() if back.is_file() else ""
        if not named or Path(named).resolve() != dotgit.resolve():
            raise _refuse(where, dotgit, f"it names {str(git_dir)!r}, which does not name this work tree back (a "
                                         "linked work tree's git directory does): another repository is not read")
    elif mode is not None and stat.S_ISDIR(mode):
        git_dir = dotgit
    elif mode is not None:
        raise _refuse(where, dotgit, "it is neither a directory nor a 'gitdir:' file")
    elif os.path.isfile(path / "HEAD") and os.path.isdir(path / "objects"):
        git_dir = path
    else:
        return None
    if not git_dir.is_dir() or git_dir.is_symlink():
        raise _refuse(where, git_dir, "the git directory is not a directory")
    common = git_dir
    if (git_dir / "commondir").exists():
        common = (git_dir / _small(git_dir / "commondir", where, SMALL["commondir"]).decode(errors="replace").strip()).resolve()
        if not common.is_dir():
            raise _refuse(where, git_dir / "commondir", "it names no directory")
        _walk(common, where, skip=git_dir)
    _walk(git_dir, where)
    return GitDir(git_dir, common)
