"""The tree store: one sglang package per entry, taken in through intake (runner/store/intake.py),
filed under its own digest and re-verified against it on every store and on use, so whatever was
probed is exactly the bytes the identity names.

On use, an entry is read back and hashed in full the first time in a process; later uses in the
same process compare its seal instead (every entry's name, size, modification time and inode, read
with ``lstat``: ~20 ms against ~300 ms of hashing for 4,600 files), and hash again on any difference.
Only the host writes the cache (trees see it read-only), so what the seal guards against is damage
on disk and another process replacing the entry, both of which change what ``lstat`` reads."""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal

from pydantic import BaseModel, ConfigDict

from runner import errors
from runner.errors import BadInput, Infrastructure
from runner.files import dirhash1, scratch_dir, sha256_bytes
from runner.store import intake, specs
from runner.store.cache import Store, read_model, write_model
from runner.store.mirrors import RemoteState

PKG = specs.PACKAGE


class ImageIdentity(BaseModel):
    """Which container image held the tree, by the digests a stranger checks (``skopeo inspect``,
    ``sha256sum`` of the blobs): the manifest (None in a docker-archive, which holds none), the index
    it was picked from (a multi-platform image), the config, and the layers, in order, that put a file
    of the package where it is found."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    index_digest: str | None = None
    manifest_digest: str | None = None
    config_digest: str
    layers: tuple[str, ...]
    package: str  # where in the image's file system the package was found: ``usr/lib/python3.11/site-packages/sglang``
    python: str | None = None  # the image's Python (``3.11``) whose import path holds the package


class TreeIdentity(BaseModel):
    """Which bytes: what a receipt needs to name the probed tree without ambiguity."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["git", "pypi", "path", "wheel", "oci", "docker-archive", "registry"]
    source: errors.Redacted  # a URL's user info (a token) is never recorded: every receipt and bundle names the tree
    repo: errors.Redacted | None = None
    rev: str | None = None
    commit: str | None = None
    package_dir: str | None = None
    version: str | None = None
    artifact: str | None = None
    artifact_sha256: str | None = None
    path: str | None = None
    remote: RemoteState | None = None  # git names other than a full SHA: the remote state read
    image: ImageIdentity | None = None  # oci, docker-archive, registry
    tree_digest: str
    files: int
    # what the source holds that the tree does not (intake.Taken.bytecode, .empty; a wheel's members
    # outside the package): a deployment of the source may run it, this receipt never observed it
    left_out: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tree:
    identity: TreeIdentity
    root: Path  # the directory that holds the ``sglang`` package and nothing else
    files: tuple[str, ...]  # its regular files and links (``sglang/...``), as verified: nothing else is in
    # it; each link leads to one of its files (intake._lead)

    @property
    def compiled_modules(self) -> list[str]:
        return [p for p in self.files if p.endswith((".so", ".pyd"))]


class TreeStamp(BaseModel):
    tree_digest: str
    files: int


class Index(BaseModel):
    tree_digest: str
    artifact: str | None = None
    artifact_sha256: str | None = None
    left_out: tuple[str, ...] = ()  # of this source (one wheel, one git tree): the stored tree is shared by digest


@dataclass(frozen=True)
class Stored:
    root: Path
    stamp: TreeStamp
    files: tuple[str, ...]  # ``sglang/...``, files and links as hashed from the stored bytes
    left_out: tuple[str, ...] = ()  # what this source held that the tree does not (TreeIdentity.left_out)


def left_out(taken: intake.Taken, outside: Iterable[str] = ()) -> tuple[str, ...]:
    """What a source held that its stored tree does not: byte-code, empty directories and links out
    of the package (``sglang/...``, a directory with a trailing ``/``, a link as ``name -> target``),
    then ``outside`` (a wheel's members beyond the package, as the wheel names them)."""
    return (*sorted([f"{PKG}/{n}" for n in taken.bytecode] + [f"{PKG}/{d}/" for d in taken.empty]
                    + [f"{PKG}/{n} -> {t}" for n, t in taken.out]), *sorted(outside))


def link_line(target: str) -> str:
    """What stands for a link in its digest line, where a file's sha256 does: ``symlink:`` and the
    sha256 of its target text (git's blob of a link is that text). A file's line starts with 64 hex
    digits, so no file, whatever its bytes, reads as a link."""
    return f"symlink:{sha256_bytes(target.encode())}"


def digest(taken: intake.Taken) -> str:
    """The tree digest (``files.dirhash1``) of a package taken in: its files and links under
    ``sglang/`` (a link's line: ``link_line``). Without links, the same as before links were taken."""
    return dirhash1([*((f"{PKG}/{name}", sha) for name, sha in taken.files),
                     *((f"{PKG}/{name}", link_line(target)) for name, target in taken.links)])


def _names(taken: intake.Taken) -> tuple[str, ...]:
    return tuple(sorted(f"{PKG}/{name}" for name, _ in (*taken.files, *taken.links)))


def read_back(root: Path, bounds: intake.Bounds = intake.Bounds()) -> intake.Taken:
    """The package under ``root`` (the directory holding ``sglang/``) read through intake without
    storing it: ``digest(read_back(root))`` is its tree digest. Raises ``intake.Refused``."""
    with intake.directory(root, str(root), (PKG,)) as entries:
        return intake.take(entries, None, bounds, str(root))


def _check(root: Path, tree_digest: str, bounds: intake.Bounds) -> tuple[intake.Taken | None, str]:
    """The entry at ``root`` read back through intake if it is intact for ``tree_digest``, else None
    and why not: its stamp does not read or names another digest; it holds what intake never stores
    (a link, a special file, byte-code, an empty directory) or more than this run's bounds; its
    bytes hash to another digest. Python would run planted byte-code in place of the source the
    digest covers, so it is damage like any other. Its links are read back as intake reads any
    tree: each must still lead to one of its files (nothing around the stored package is asked)."""
    stamp = read_model(root / "tree.json", TreeStamp)
    if stamp is None or stamp.tree_digest != tree_digest:
        return None, "its stamp tree.json does not read or names another digest"
    try:
        taken = read_back(root, bounds)
    except intake.Refused as e:
        return None, e.message.split(": ", 1)[-1]
    if taken.bytecode:
        return None, f"planted byte-code {taken.bytecode[0]!r}"
    if taken.empty:
        return None, f"an empty directory {taken.empty[0] + '/'!r}, which intake never stores"
    if taken.out:
        return None, f"a link out of the package {taken.out[0][0]!r}, which intake never stores"
    if digest(taken) != tree_digest:
        return None, "digest mismatch"
    return taken, ""


def _drop(cache: Store, root: Path, why: str) -> None:
    """The one warning for a damaged entry, on use or on store: it is removed, never served."""
    cache.notices.warn(f"cache entry {root} is damaged ({why}); rebuilding it")
    shutil.rmtree(root, ignore_errors=True)


def seal(root: Path) -> str:
    """What ``lstat`` reads of the stamp and of every entry of the package under ``root`` (name,
    type, size, modification time, inode), hashed: any write, replacement, addition or removal
    changes it (the store's use marker beside them does not)."""
    try:
        st = os.lstat(root / "tree.json")
    except OSError:
        return "no stamp"
    lines = [f"tree.json\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"]
    for dirpath, dirnames, filenames in os.walk(root / PKG):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            st = os.lstat(os.path.join(dirpath, name))
            lines.append(f"{os.path.relpath(os.path.join(dirpath, name), root)}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}")
    return sha256_bytes("\n".join(lines).encode("utf-8", "surrogateescape"))


# (entry, digest, bounds) -> (its seal, the stored tree) once hashed in full in this process
_VERIFIED: dict[tuple[Path, str, intake.Bounds], tuple[str, "Stored"]] = {}


def load(cache: Store, tree_digest: str, bounds: intake.Bounds = intake.Bounds()) -> Stored | None:
    """The stored tree for ``tree_digest`` if present and intact (``_check``, or its seal unchanged
    since this process checked it); a damaged entry is said once and dropped."""
    root = cache.tree(tree_digest)
    if not root.exists():
        return None
    known = _VERIFIED.get((root, tree_digest, bounds))
    if known is not None and known[0] == seal(root):
        cache.used(root)
        return known[1]
    _VERIFIED.pop((root, tree_digest, bounds), None)
    before = seal(root)
    taken, why = _check(root, tree_digest, bounds)
    if taken is None:
        _drop(cache, root, why)
        return None
    cache.used(root)
    stored = Stored(root, TreeStamp(tree_digest=tree_digest, files=len(taken.files)), _names(taken))
    if seal(root) == before:  # nothing changed while it was hashed
        _VERIFIED[(root, tree_digest, bounds)] = (before, stored)
    return stored


def store(cache: Store, entries: Iterable[intake.Entry], *, where: str, bounds: intake.Bounds = intake.Bounds(),
          outside: Iterable[str] = (), around: intake.Around | None = None) -> Stored:
    """Take a package in (runner/store/intake.py) and file it under its own digest; what the source
    holds beside it (byte-code, empty directories, ``outside``: a wheel's other members) is said and
    returned as ``left_out``, for the receipt. ``around``: where a link out of the package may
    lead (intake.Around; none, and such a link is refused).

    An entry already filed under that digest is kept only if its bytes, read back, are the very
    files just taken in; anything else there is replaced, never served.
    """
    with scratch_dir(cache.trees()) as scratch:
        taken = intake.take(entries, scratch / PKG, bounds, where, around)
        names = {name for name, _ in taken.files}
        if "__init__.py" not in names:
            raise BadInput(f"{where}: no {PKG} package found (expected {PKG}/__init__.py)")
        outside = tuple(outside)
        left = []
        if taken.bytecode:
            left.append(f"{len(taken.bytecode)} byte-code file(s) (a deployment of this tree may run them in place of the source probed)")
        if taken.empty:
            left.append(f"{len(taken.empty)} empty director(ies)")
        if taken.out:
            left.append(f"{len(taken.out)} link(s) out of the package (a wheel leaves them out too)")
        if outside:
            left.append(f"{len(outside)} member(s) outside {PKG}/ (an installation of it carries them)")
        if left:
            first = (*taken.bytecode, *taken.empty, *(f"{n} -> {t}" for n, t in taken.out), *outside)[0]
            cache.notices.warn(f"{where}: not taken in: {' and '.join(left)}, first {first!r}; the stored "
                               "tree holds the package's source only, and its receipts list what was left out")
        stamp = TreeStamp(tree_digest=digest(taken), files=len(taken.files))
        write_model(scratch / "tree.json", stamp)
        final = cache.tree(stamp.tree_digest)
        files = _names(taken)
        gone = left_out(taken, outside)
        if final.exists():
            existing, why = _check(final, stamp.tree_digest, bounds)
            if existing is not None and (existing.files, existing.links) == (taken.files, taken.links):
                cache.used(final)
                return Stored(final, stamp, files, gone)
            _drop(cache, final, why or "digest mismatch")
        try:
            os.replace(scratch, final)
        except OSError:  # another process filed it meanwhile: served only if it is these bytes too
            other = _check(final, stamp.tree_digest, bounds)[0] or intake.Taken((), 0)
            if (other.files, other.links) != (taken.files, taken.links):
                raise Infrastructure(f"cache entry {final} is being replaced by another process with other bytes") from None
    return Stored(final, stamp, files, gone)


def from_index(cache: Store, index_path: Path, bounds: intake.Bounds = intake.Bounds()) -> tuple[Index, Stored] | None:
    """The source's index entry and its stored tree (with what the source left out, as indexed)."""
    entry = read_model(index_path, Index)
    stored = load(cache, entry.tree_digest, bounds) if entry else None
    return (entry, dataclasses.replace(stored, left_out=entry.left_out)) if stored else None
