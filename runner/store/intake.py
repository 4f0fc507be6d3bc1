"""Intake (interface I3): the one place a tree's bytes come in, whatever the source.

A source hands its package over as a stream of ``Entry`` (name, mode, size, content): a directory
walked without following anything (``directory``), a wheel's members (``wheel``), a git commit's
``ls-tree -r -l`` and ``cat-file`` (runner/store/mirrors.py). ``take`` admits regular files,
directories and links that stay inside the package (``_lead``), under plain printable names, within
``Bounds``: every entry is checked before one byte of any is read. Then it reads each file once, exactly the size declared, writes it into the
store's scratch and hashes the bytes it wrote. Nothing of the source is read twice, so the stored
tree and its digest name the same bytes whatever the source does meanwhile.

Why so strict: a fork's layout acts on the host before any of its code runs. A link followed
would make the host read (and store, and byte-compile) a host file, or block on a FIFO or
``/dev/stdin``; a sparse file would fill the disk; a newline in a name would let two trees share
one digest (Go's ``dirhash`` refuses those names for that reason). Release wheels hold none of
these; upstream's git tree holds one link, ``srt/mem_cache/cpp_radix_tree/.clang-format``: to
``../../../../../sgl-kernel/.clang-format`` in v0.5.10..v0.5.16, out of the package to a regular
file of the repository (left out and named, as the wheel leaves it out), and to
``../../../kernels/aot/.clang-format`` from v0.5.17 on, inside it (stored as a link).
No link is ever followed on the host: its target is text, resolved against the names the source
listed (``_lead``).
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import unicodedata
import zipfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Sequence

from runner.errors import BadInput
from runner.files import is_bytecode

MiB = 1 << 20
_CHUNK = MiB
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# A name's whole length below the package directory. Every later host step (the environment's
# overlay, byte-compilation, the static scan) and the tree's own Python reach a stored file by its
# full path, which Linux bounds at 4096 bytes with the store's own location in front; the longest
# name of any release is 182 bytes (0.5.23, under ``sglang/``).
NAME_BYTES = 1024


@dataclass(frozen=True)
class Bounds:
    """What one tree may hold, checked before anything is copied. The defaults are about four
    times the largest release (0.5.23: 5 771 files in 618 directories, 125 MB, its largest file
    24 MB, 12 levels below ``sglang/``); ``--max-files``, ``--max-file-size`` and
    ``--max-tree-size`` raise them (runner/commands/options.py)."""

    files: int = 25_000  # files and directories
    file_size: int = 128 * MiB  # apparent size: a sparse file counts what reading it yields
    total_size: int = 512 * MiB
    depth: int = 64  # path components below the package directory


@dataclass(frozen=True)
class Entry:
    """One entry of a package as its source declares it, before anything of it is read.

    ``name``: ``/``-separated path inside the package directory, raw bytes as the source spells
    them (a ``str`` is taken back to bytes with ``surrogateescape``, as ``os.fsdecode`` made it).
    ``mode``: ``st_mode`` type and permission bits (git: ``int(mode, 8)``; a wheel member:
    ``external_attr >> 16``). ``size``: the apparent size (``st_size``, ``ZipInfo.file_size``,
    ``git ls-tree -l``): what the bounds count, and exactly what is read. ``content``: regular files
    only, the bytes or a callable that opens a binary reader of them (called once, after every
    entry passed).
    """

    name: bytes | str
    mode: int
    size: int = 0
    content: bytes | Callable[[], BinaryIO] | None = None


@dataclass(frozen=True)
class Taken:
    files: tuple[tuple[str, str], ...]  # (name inside the package, sha256 of the bytes stored), by name
    size: int  # bytes stored
    bytecode: tuple[str, ...] = ()  # not stored: written by whoever imported the tree, and Python
    # would run it in place of the source
    empty: tuple[str, ...] = ()  # directories with no file below them: not stored (a git commit holds none)
    links: tuple[tuple[str, str], ...] = ()  # (name, target as the source spells it): links to a file of
    # the package, stored as links (``_lead``), by name
    out: tuple[tuple[str, str], ...] = ()  # (name, target): links out of the package to a file of its
    # repository; not stored (a wheel leaves them out too)


@dataclass(frozen=True)
class Around:
    """Where the package sits in its source (a git commit, the directory ``path:`` names), for a
    link that leaves the package: ``parts``, the package directory's path there; ``kind``, what a
    path there is without following anything: "file", "dir", "link", another word for anything
    else, None when absent. Only asked about paths whose parents were all "dir"."""

    parts: tuple[str, ...]
    kind: Callable[[tuple[str, ...]], str | None]


class Refused(BadInput):
    """An entry intake does not take in (exit 2): one line naming it and why."""


def _shown(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")  # printed through errors.one_line: controls escaped


def refuse(where: str, name: bytes | str, why: str) -> Refused:
    shown = _shown(name) if isinstance(name, bytes) else name
    if len(shown) > 160:  # the line must still say why, within what one line prints
        shown = f"{shown[:100]}…{shown[-40:]}"
    return Refused(f"{where}: {shown!r}: refused: {why}")


def check_name(raw: bytes | str, where: str, depth: int = Bounds.depth) -> str:
    """The entry's name if it is valid UTF-8, printable, without a backslash, and a plain relative
    path (no empty, ``.`` or ``..`` part): a name means one file, prints as itself, and its digest
    line (``<sha256>  <name>\\n``) can be read back one way only."""
    try:
        if isinstance(raw, str):
            raw = raw.encode("utf-8", "surrogateescape")
        name = raw.decode("utf-8")
    except UnicodeError:
        raise refuse(where, raw if isinstance(raw, bytes) else raw.encode("utf-8", "backslashreplace"),
                     "its name is not valid UTF-8") from None
    bad = None if name.isprintable() and "\\" not in name else next(c for c in name if not c.isprintable() or c == "\\")
    if bad is not None:
        what = {"\n": "a newline", "\r": "a carriage return", "\\": "a backslash"}.get(bad, f"the character U+{ord(bad):04X}")
        raise refuse(where, raw, f"its name holds {what}")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise refuse(where, raw, "its name is not a plain relative path (a '..', '.' or empty part, or a leading '/')")
    if len(parts) > depth:
        raise refuse(where, raw, f"{len(parts)} levels deep, over the bound of {depth}")
    if any(len(p.encode()) > 255 for p in parts):
        raise refuse(where, raw, "a part of its name is longer than 255 bytes")
    if len(raw) > NAME_BYTES:
        raise refuse(where, raw, f"its name is {len(raw)} bytes long, over the bound of {NAME_BYTES} (a host path "
                                 "holds at most 4096 bytes, the store's location included)")
    return name


def folded(name: str) -> str:
    """What a case-insensitive or normalizing file system (macOS, Windows, an ext4 casefold
    directory) makes of a name: each part NFKC-normalized and case-folded, trailing dots and blanks
    dropped (Windows). Two names of one tree that fold alike are one file there, and which one's
    bytes it holds depends on the order they were written; Python also reads an identifier in NFKC
    (``import ﬁle`` imports ``file``)."""
    return "/".join(unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", p).casefold()).rstrip(". ")
                    for p in name.split("/"))


def _twins(names: Iterable[str], where: str) -> None:
    """Refuse two names that fold alike (``folded``): the digest would name two files where a
    deployment unpacked on such a file system holds one."""
    seen: dict[str, str] = {}
    for name in sorted(names):
        other = seen.setdefault(folded(name), name)
        if other != name:
            raise refuse(where, name, f"it and {other!r} are one file on a case-insensitive or normalizing file "
                                      "system (macOS, Windows): the tree would not be the same tree there")


_KINDS = {stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket", 0o160000: "a submodule (git link)"}


def _kind(mode: int) -> str:
    kind = stat.S_IFMT(mode)
    return _KINDS.get(kind, f"of file type {kind:o}")


@dataclass
class _Plan:
    files: dict[str, Entry]
    total: int
    bytecode: list[str]
    empty: list[str]
    links: dict[str, str]  # name -> target, stored
    out: dict[str, str]  # name -> target, left out


# What Python imports or runs by name: a link out of the package under such a name would leave the
# probed tree without a module a checkout has (setuptools copies the target into a wheel).
_IMPORTED = (".py", ".pyi", ".pyw", ".so", ".pyd", ".pth")


def _target(raw: bytes, where: str, name: str) -> list[str]:
    """A link's target text as parts: valid UTF-8, printable, no backslash, relative, no empty
    part (a trailing ``/`` or ``//``), at most ``NAME_BYTES``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeError:
        raise refuse(where, name, "a symbolic link whose target is not valid UTF-8") from None
    if not text or len(raw) > NAME_BYTES or not text.isprintable() or "\\" in text:
        raise refuse(where, name, f"a symbolic link whose target ({text[:80]!r}) is empty, longer than {NAME_BYTES} "
                                  "bytes, or not plain printable text")
    if text.startswith("/"):
        raise refuse(where, name, f"a symbolic link to an absolute path ({text[:80]!r}): it would name a host file")
    parts = text.split("/")
    if "" in parts:
        raise refuse(where, name, f"a symbolic link whose target ({text[:80]!r}) has an empty part or a trailing '/'")
    return parts


def _lead(name: str, raw: bytes, inside: Callable[[str], str | None], around: Around | None,
          where: str) -> tuple[bool, str]:
    """Where the link ``name`` (target ``raw``) leads, resolved as the kernel would, one part at a
    time, against what the source listed (``inside``: a path of the package; ``around``: one
    beside it), never against the host: (whether it stays inside the package, its target text).
    Refused, naming it: an absolute target, one that leaves the repository (the package, without
    ``around``), passes through or ends on a link (a chain, a loop), ends on a directory or on
    nothing (dangles), or leaves the package and comes back (stored, it would climb out of the
    store's copy)."""
    parts = _target(raw, where, name)
    text = raw.decode()
    top = list(around.parts if around else ())
    here = [*top, *name.split("/")[:-1]]
    left = False
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "..":
            if not here:
                place = "the repository" if around else "the package"
                raise refuse(where, name, f"a symbolic link ({text[:80]!r}) that leaves {place}")
            here.pop()
            left = left or len(here) < len(top)
        elif part != ".":
            here.append(part)
            rel = here[len(top):]
            kind = inside("/".join(rel)) if here[:len(top)] == top and rel else around.kind(tuple(here)) if around else None
            if kind == "dir" and not last:
                continue
            if kind == "file" and last:
                break
            why = {"link": "to another link (a chain of links, or a loop)", "dir": "to a directory",
                   None: "whose target does not exist (it dangles)"}.get(kind, f"to {kind}, not a regular file")
            raise refuse(where, name, f"a symbolic link ({text[:80]!r}) {why}")
        if last:
            raise refuse(where, name, f"a symbolic link ({text[:80]!r}) to a directory")
    stays = here[:len(top)] == top and len(here) > len(top)
    if stays and left:
        raise refuse(where, name, f"a symbolic link ({text[:80]!r}) that leaves the package and comes back")
    if not stays and name.endswith(_IMPORTED):
        raise refuse(where, name, f"a symbolic link ({text[:80]!r}) out of the package under a name Python imports: "
                                  "the package does not hold what a checkout would run")
    return stays, text


def _plan(entries: Iterable[Entry], bounds: Bounds, where: str, around: Around | None) -> _Plan:
    """Check every entry (names, types, bounds, where links lead) before anything is read: the
    files to store, their total size, the links, and what is left out (byte-code, empty
    directories, links out of the package)."""
    files: dict[str, Entry] = {}
    dirs: set[str] = set()
    bytecode: set[str] = set()
    links: dict[str, bytes] = {}
    count = total = 0
    for e in entries:
        name = check_name(e.name, where, bounds.depth)
        if name in files or name in dirs or name in bytecode or name in links:
            raise refuse(where, name, "it appears twice")
        count += 1
        if count > bounds.files:
            raise Refused(f"{where}: refused: more than {bounds.files} files and directories (raise it with --max-files)")
        kind = stat.S_IFMT(e.mode)
        if kind == stat.S_IFDIR:
            dirs.add(name)
        elif kind == stat.S_IFLNK and isinstance(e.content, bytes):
            links[name] = e.content  # its target: bytes the source read (bounded), nothing followed
        elif kind != stat.S_IFREG:
            raise refuse(where, name, f"it is {_kind(e.mode)}; only regular files, directories and links inside "
                                      "the package are taken in")
        elif is_bytecode(name):
            bytecode.add(name)
        elif not 0 <= e.size <= bounds.file_size:
            raise refuse(where, name, f"{e.size} bytes, over the bound of {bounds.file_size} for one file "
                                      "(raise it with --max-file-size)")
        else:
            total += e.size
            if total > bounds.total_size:
                raise Refused(f"{where}: refused: more than {bounds.total_size} bytes in all (raise it with --max-tree-size)")
            files[name] = e
    parents: set[str] = set()
    for name in [*files, *bytecode, *links]:
        parent = name.rpartition("/")[0]
        while parent and parent not in parents:
            if parent in files or parent in bytecode or parent in links:
                raise refuse(where, parent, "it is both a file and a directory")
            parents.add(parent)
            parent = parent.rpartition("/")[0]
    # an empty directory's own parents are names of the tree too (``a./b`` beside a file ``a``: on Windows one name)
    above = {"/".join(d.split("/")[:i]) for d in dirs for i in range(1, d.count("/") + 1)}
    _twins([*files, *bytecode, *links, *dirs, *((parents | above) - dirs)], where)

    def inside(rel: str) -> str | None:
        if rel in files:
            return "file"
        if rel in dirs or rel in parents:
            return "dir"
        return "link" if rel in links else "byte-code, which is not taken in" if rel in bytecode else None

    stored: dict[str, str] = {}
    out: dict[str, str] = {}
    for name in sorted(links):
        stays, text = _lead(name, links[name], inside, around, where)
        if is_bytecode(name):
            bytecode.add(name)
        else:
            (stored if stays else out)[name] = text
    empty = sorted(d for d in dirs if d not in parents and not is_bytecode(d + "/"))
    return _Plan(files, total, sorted(bytecode), empty, stored, out)


def _chunks(e: Entry, where: str, name: str) -> Iterator[bytes]:
    """The entry's bytes, never more than one past its declared size."""
    if isinstance(e.content, bytes) or e.content is None:
        yield e.content or b""
        return
    try:
        with e.content() as f:
            left = e.size + 1
            while left > 0 and (chunk := f.read(min(_CHUNK, left))):
                left -= len(chunk)
                yield chunk
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        raise refuse(where, name, f"it cannot be read ({type(err).__name__}: {err})") from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _Chain:
    """Directory descriptors along one path below a root, opened ``O_NOFOLLOW`` one part at a time
    (made first if ``create``): files taken in name order mostly share their parents, so each is
    opened once, and no path is looked up from the top again."""

    def __init__(self, root: int, create: bool = False):
        self.fds = [root]
        self.parts: list = []
        self.create = create

    def open_dir(self, parts: list) -> int:
        keep = 0
        while keep < min(len(parts), len(self.parts)) and parts[keep] == self.parts[keep]:
            keep += 1
        for fd in self.fds[keep + 1:]:
            os.close(fd)
        del self.fds[keep + 1:], self.parts[keep:]
        for part in parts[keep:]:
            if self.create:
                try:
                    os.mkdir(part, 0o755, dir_fd=self.fds[-1])
                except FileExistsError:
                    pass
            self.fds.append(os.open(part, _DIR, dir_fd=self.fds[-1]))
            self.parts.append(part)
        return self.fds[-1]

    def close(self) -> None:
        self.open_dir([])


def _copy(files: dict[str, Entry], dest: int | None, where: str) -> list[tuple[str, str]]:
    """Read each file once, in name order; write it under the directory ``dest`` (a descriptor; None:
    only hash it) and hash the bytes written."""
    made = _Chain(dest, create=True) if dest is not None else None
    out = []
    try:
        for name in sorted(files):
            e = files[name]
            fd = None
            if made is not None:
                *parts, base = name.split("/")
                fd = os.open(base, _NEW, 0o644, dir_fd=made.open_dir(parts))
            h = hashlib.sha256()
            got = 0
            try:
                for chunk in _chunks(e, where, name):
                    got += len(chunk)
                    if got > e.size:
                        break
                    h.update(chunk)
                    if fd is not None:
                        _write_all(fd, chunk)
            finally:
                if fd is not None:
                    os.close(fd)
            if got != e.size:
                raise refuse(where, name, f"{e.size} bytes declared, {'more' if got > e.size else got} read: "
                                          "it changed while being read, or is not what it says")
            out.append((name, h.hexdigest()))
    finally:
        if made is not None:
            made.close()
    return out


def _link(links: dict[str, str], dest: int) -> None:
    """Make each link under ``dest`` with its target text: each leads, inside the copy, to the copy
    of a file stored beside it (``_lead``)."""
    made = _Chain(dest, create=True)  # a directory may hold links only
    try:
        for name in sorted(links):
            *parts, base = name.split("/")
            os.symlink(links[name], base, dir_fd=made.open_dir(parts))
    finally:
        made.close()


def take(entries: Iterable[Entry], dest: Path | None, bounds: Bounds, where: str, around: Around | None = None) -> Taken:
    """Take a package in: check every entry, then copy its files and links under ``dest`` (a fresh
    scratch directory of the store; None: only hash them, to verify a stored tree). ``where`` (the
    source, as the user wrote it) starts every refusal's line; ``around`` is where a link out of the
    package may lead (none: such a link is refused)."""
    plan = _plan(entries, bounds, where, around)

    def taken(files: list[tuple[str, str]]) -> Taken:
        return Taken(tuple(files), plan.total, tuple(plan.bytecode), tuple(plan.empty), tuple(sorted(plan.links.items())),
                     tuple(sorted(plan.out.items())))

    if dest is None:
        return taken(_copy(plan.files, None, where))
    dest.mkdir(parents=True, exist_ok=True)
    fd = os.open(dest, _DIR)
    try:
        files = _copy(plan.files, fd, where)
        _link(plan.links, fd)
        return taken(files)
    finally:
        os.close(fd)


# --- sources -----------------------------------------------------------------------------------


def _reader(chain: _Chain, parts: list[bytes], listed: os.stat_result, where: str) -> Callable[[], BinaryIO]:
    def open_() -> BinaryIO:
        name = b"/".join(parts)
        try:
            fd = os.open(parts[-1], _FILE, dir_fd=chain.open_dir(parts[:-1]))
        except OSError as err:
            raise refuse(where, name, f"it changed while being taken in ({err.strerror})") from None
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino, now.st_size) != (listed.st_dev, listed.st_ino, listed.st_size):
            os.close(fd)
            raise refuse(where, name, "it changed while being taken in (not the file listed)")
        return io.FileIO(fd, "rb")
    return open_


def _walk(chain: _Chain, where: str) -> Iterator[Entry]:
    root = os.fstat(chain.fds[0])
    links: dict[tuple[int, int], list] = {}  # (dev, ino) of a file with hard links -> [links, names seen, a name]
    fds: list[int] = []  # one per directory being listed below the root (DirEntry.stat uses it): depth-bounded
    stack = [([], os.scandir(chain.fds[0]))]
    try:
        while stack:
            parts, listing = stack[-1]
            entry = next(listing, None)
            if entry is None:
                listing.close()
                stack.pop()
                if parts:
                    os.close(fds.pop())
                continue
            here = [*parts, os.fsencode(entry.name)]
            name = b"/".join(here)
            st = entry.stat(follow_symlinks=False)
            if st.st_dev != root.st_dev:
                raise refuse(where, name, "it is on another file system (a mount point)")
            if stat.S_ISREG(st.st_mode):
                if st.st_nlink > 1:
                    seen = links.setdefault((st.st_dev, st.st_ino), [st.st_nlink, 0, name])
                    seen[1] += 1
                yield Entry(name, st.st_mode, st.st_size, _reader(chain, here, st, where))
                continue
            if stat.S_ISLNK(st.st_mode):  # its text, never followed (``_lead`` says where it leads)
                yield Entry(name, st.st_mode, st.st_size, os.fsencode(os.readlink(entry.name, dir_fd=chain.open_dir(parts))))
                continue
            yield Entry(name, st.st_mode, st.st_size)  # intake refuses anything but a directory
            if stat.S_ISDIR(st.st_mode):
                fd = os.open(entry.name, _DIR, dir_fd=chain.open_dir(parts))
                now = os.fstat(fd)
                if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                    os.close(fd)
                    raise refuse(where, name, "it changed while being taken in (not the directory listed)")
                fds.append(fd)
                stack.append((here, os.scandir(fd)))
        for count, seen, name in links.values():
            if seen < count:
                raise refuse(where, name, f"it has {count} hard links, {count - seen} of them outside the tree")
    finally:
        for _, listing in stack:
            listing.close()
        for fd in fds:
            os.close(fd)


@contextmanager
def directory(top: Path, where: str, inside: tuple[str, ...] = ()) -> Iterator[Iterator[Entry]]:
    """The package directory ``top/inside...`` as entries, walked without following anything.

    ``top`` is the user's own path (reached as given); from there on nothing is followed: each
    part of ``inside`` and every entry below is opened ``O_NOFOLLOW`` relative to its directory. A
    link or special file is listed as what it is (``take`` refuses it), a directory on another file
    system (a mount point) and a file with hard links outside the tree are refused, and each file
    is read, non-blocking, from the very inode listed (``fstat`` after open)."""
    try:
        fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        for part in inside:
            parent, fd = fd, None
            try:
                fd = os.open(part, _DIR, dir_fd=parent)
            finally:
                os.close(parent)
    except OSError as err:
        raise Refused(f"{where}: refused: {'/'.join((str(top), *inside))!r} cannot be opened as a directory "
                      f"without following links ({err.strerror})") from None
    chain = _Chain(fd)
    walk = _walk(chain, where)
    try:
        yield walk
    finally:
        walk.close()
        chain.close()
        os.close(fd)


_KIND_WORDS = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "link"}


def beside(top: Path, inside: tuple[str, ...]) -> Around:
    """The directory ``top`` (the user's own path) around the package ``top/inside...``, for links
    that leave it: each path asked about is looked up from ``top``, every part opened
    ``O_NOFOLLOW``, its type read with ``lstat``; nothing there is read or followed."""
    def kind(parts: tuple[str, ...]) -> str | None:
        try:
            fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            for part in parts[:-1]:
                inner = os.open(part, _DIR, dir_fd=fd)
                os.close(fd)
                fd = inner
            mode = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False).st_mode
        except OSError:
            return None
        finally:
            os.close(fd)
        return _KIND_WORDS.get(stat.S_IFMT(mode), _kind(mode))
    return Around(inside, kind)


def wheel(zf: zipfile.ZipFile, package: str, where: str = "") -> Iterator[Entry]:
    """The members of an open wheel (or any zip) under ``package/``, with the names and modes the
    archive records (a member without Unix mode bits is a regular file); a member is a directory
    when its name ends with ``/``, as installers read it, and one whose mode says otherwise is
    refused. Each is read through ``zipfile``, which stops at the declared size."""
    prefix = f"{package}/".encode()
    for info in zf.infolist():
        raw = info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437", "surrogateescape")
        if not raw.startswith(prefix) or raw == prefix:
            continue
        name = raw[len(prefix):]
        mode = info.external_attr >> 16 if info.create_system == 3 else 0
        if name.endswith(b"/"):
            yield Entry(name[:-1], stat.S_IFDIR | 0o755)
        elif stat.S_ISDIR(mode):  # an installer writes it as a file (a member's name decides): which is it?
            raise refuse(where or "wheel", name, "its mode says a directory but its name a file; installers write it "
                                                 "as a file")
        elif stat.S_ISLNK(mode):
            raise refuse(where or "wheel", name, "it is a symbolic link in a wheel; installers write it as a file "
                                                 "holding the link's text")
        else:
            yield Entry(name, mode if stat.S_IFMT(mode) else stat.S_IFREG | 0o644, info.file_size,
                        lambda info=info: zf.open(info))


def wheel_outside(zf: zipfile.ZipFile, package: str) -> list[str]:
    """The members of a wheel that are neither under ``package/`` nor its metadata (``*.dist-info/``),
    as the wheel names them: installing the wheel puts them on the import path beside the package
    (a ``.pth`` file runs at every interpreter start; ``*.data/purelib/`` lands inside the package),
    yet the tree is the package alone. Directories are left out of the list."""
    out = []
    for info in zf.infolist():
        top = info.filename.split("/", 1)[0]
        if top != package and not top.endswith(".dist-info") and not info.filename.endswith("/"):
            out.append(info.filename)
    return out
