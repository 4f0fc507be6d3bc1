"""The tree store: one sglang package per entry, taken in through intake (runner/store/intake.py),
filed under its own digest and re-verified against it on every use and on every store, so whatever
was probed is exactly the bytes the identity names."""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal

from pydantic import BaseModel, ConfigDict
from rich.markup import escape

from runner import errors, ui
from runner.errors import BadInput, Infrastructure
from runner.files import dirhash1, scratch_dir
from runner.store import intake, specs
from runner.store.cache import Store, read_model, write_model
from runner.store.mirrors import RemoteState

PKG = specs.PACKAGE


class TreeIdentity(BaseModel):
    """Which bytes: what a receipt needs to name the probed tree without ambiguity."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["git", "pypi", "path"]
    source: str
    repo: str | None = None
    rev: str | None = None
    commit: str | None = None
    package_dir: str | None = None
    version: str | None = None
    artifact: str | None = None
    artifact_sha256: str | None = None
    path: str | None = None
    remote: RemoteState | None = None  # git names other than a full SHA: the remote state read
    tree_digest: str
    files: int
    # what the source holds that the tree does not (intake.Taken.bytecode, .empty; a wheel's members
    # outside the package): a deployment of the source may run it, this receipt never observed it
    left_out: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tree:
    identity: TreeIdentity
    root: Path  # the directory that holds the ``sglang`` package and nothing else
    files: tuple[str, ...]  # its regular files (``sglang/...``), as verified: nothing else is in it

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
    files: tuple[str, ...]  # ``sglang/...``, as hashed from the stored bytes
    left_out: tuple[str, ...] = ()  # what this source held that the tree does not (TreeIdentity.left_out)


def left_out(taken: intake.Taken, outside: Iterable[str] = ()) -> tuple[str, ...]:
    """What a source held that its stored tree does not: byte-code and empty directories of the
    package (``sglang/...``, a directory with a trailing ``/``), then ``outside`` (a wheel's members
    beyond the package, as the wheel names them)."""
    return (*sorted([f"{PKG}/{n}" for n in taken.bytecode] + [f"{PKG}/{d}/" for d in taken.empty]), *sorted(outside))


def digest(taken: intake.Taken) -> str:
    """The tree digest (``files.dirhash1``) of a package taken in: its files under ``sglang/``."""
    return dirhash1((f"{PKG}/{name}", sha) for name, sha in taken.files)


def read_back(root: Path, bounds: intake.Bounds = intake.Bounds()) -> intake.Taken:
    """The package under ``root`` (the directory holding ``sglang/``) read through intake without
    storing it: ``digest(read_back(root))`` is its tree digest. Raises ``intake.Refused``."""
    with intake.directory(root, str(root), (PKG,)) as entries:
        return intake.take(entries, None, bounds, str(root))


def _verify(root: Path, bounds: intake.Bounds) -> tuple[intake.Taken | None, str]:
    """The stored package at ``root`` read back, or None and why it is not what intake stores (a
    link, a special file, byte-code or an empty directory in it; more than this run's bounds)."""
    try:
        taken = read_back(root, bounds)
    except intake.Refused as e:
        return None, e.message.split(": ", 1)[-1]
    if taken.bytecode or taken.empty:
        return None, f"planted {(taken.bytecode + taken.empty)[0]!r}"
    return taken, ""


def load(cache: Store, tree_digest: str, bounds: intake.Bounds = intake.Bounds()) -> Stored | None:
    """The stored tree for ``tree_digest`` if present and intact; a damaged entry is dropped.

    Intact: its stamp names this digest, and its bytes, read back through intake, hash to it. A
    link, a special file or byte-code planted in it is damage: intake stores none, and Python
    would run planted byte-code in place of the source the digest covers.
    """
    root = cache.tree(tree_digest)
    if not root.exists():
        return None
    stamp = read_model(root / "tree.json", TreeStamp)
    taken, why = _verify(root, bounds) if stamp is not None and stamp.tree_digest == tree_digest else (None, "stamp")
    if taken is not None and digest(taken) != tree_digest:
        why = "digest mismatch"
    if why:
        ui.warn(escape(f"cache entry {root} is damaged ({why}); rebuilding it"))
        shutil.rmtree(root, ignore_errors=True)
        return None
    cache.used(root)
    return Stored(root, stamp, tuple(f"{PKG}/{name}" for name, _ in taken.files))


def store(cache: Store, entries: Iterable[intake.Entry], *, where: str, bounds: intake.Bounds = intake.Bounds(),
          outside: Iterable[str] = ()) -> Stored:
    """Take a package in (runner/store/intake.py) and file it under its own digest; what the source
    holds beside it (byte-code, empty directories, ``outside``: a wheel's other members) is said and
    returned as ``left_out``, for the receipt.

    An entry already filed under that digest is kept only if its bytes, read back, are the very
    files just taken in; anything else there is replaced, never served.
    """
    with scratch_dir(cache.trees()) as scratch:
        taken = intake.take(entries, scratch / PKG, bounds, where)
        names = {name for name, _ in taken.files}
        if "__init__.py" not in names:
            raise BadInput(f"{where}: no {PKG} package found (expected {PKG}/__init__.py)")
        outside = tuple(outside)
        left = []
        if taken.bytecode:
            left.append(f"{len(taken.bytecode)} byte-code file(s) (a deployment of this tree may run them in place of the source probed)")
        if taken.empty:
            left.append(f"{len(taken.empty)} empty director(ies)")
        if outside:
            left.append(f"{len(outside)} member(s) outside {PKG}/ (an installation of it carries them)")
        if left:
            first = (*taken.bytecode, *taken.empty, *outside)[0]
            ui.warn(escape(errors.printable(f"{where}: not taken in: {' and '.join(left)}, first {first!r}; the stored "
                                            "tree holds the package's source only, and its receipts list what was left out")))
        stamp = TreeStamp(tree_digest=digest(taken), files=len(taken.files))
        write_model(scratch / "tree.json", stamp)
        final = cache.tree(stamp.tree_digest)
        files = tuple(f"{PKG}/{name}" for name, _ in taken.files)
        gone = left_out(taken, outside)
        existing = _verify(final, bounds)[0] if final.exists() else None
        if existing is not None and existing.files == taken.files:
            cache.used(final)
            return Stored(final, stamp, files, gone)
        if final.exists():
            ui.warn(f"cache entry {final} does not hold the bytes its name says; replacing it")
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.replace(scratch, final)
        except OSError:  # another process filed it meanwhile: served only if it is these bytes too
            if (_verify(final, bounds)[0] or intake.Taken((), 0)).files != taken.files:
                raise Infrastructure(f"cache entry {final} is being replaced by another process with other bytes") from None
    return Stored(final, stamp, files, gone)


def from_index(cache: Store, index_path: Path, bounds: intake.Bounds = intake.Bounds()) -> tuple[Index, Stored] | None:
    """The source's index entry and its stored tree (with what the source left out, as indexed)."""
    entry = read_model(index_path, Index)
    stored = load(cache, entry.tree_digest, bounds) if entry else None
    return (entry, dataclasses.replace(stored, left_out=entry.left_out)) if stored else None
