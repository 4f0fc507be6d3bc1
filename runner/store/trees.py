"""The tree store: one sglang package per entry, filed under its own digest and re-verified
against it on every use, so whatever was probed is exactly the bytes the identity names."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict

from runner import ui
from runner.errors import BadInput
from runner.files import dirhash1, is_bytecode, scratch_dir, tree_files
from runner.store import specs
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


@dataclass(frozen=True)
class Tree:
    identity: TreeIdentity
    root: Path  # the directory that holds the ``sglang`` package and nothing else

    @property
    def compiled_modules(self) -> list[str]:
        return [p for p in tree_files(self.root) if p.endswith((".so", ".pyd"))]


class TreeStamp(BaseModel):
    tree_digest: str
    files: int


class Index(BaseModel):
    tree_digest: str
    artifact: str | None = None
    artifact_sha256: str | None = None


def load(cache: Store, digest: str) -> tuple[Path, TreeStamp] | None:
    """The stored tree for ``digest`` if present and intact; a damaged entry is dropped.

    Byte-code counts as damage: Python would run it in place of the source and the digest leaves
    it out. None is ever stored, and environments cache theirs in their own overlay of the tree,
    so any found here was planted.
    """
    root = cache.tree(digest)
    if not root.exists():
        return None
    stamp = read_model(root / "tree.json", TreeStamp)
    everything = tree_files(root / PKG, bytecode=True)
    files = [f"{PKG}/{p}" for p in everything if not is_bytecode(p)]
    if stamp is None or stamp.tree_digest != digest or len(files) != len(everything) or dirhash1(root, files) != digest:
        ui.warn(f"cache entry {root} is damaged (digest mismatch or planted byte-code); rebuilding it")
        shutil.rmtree(root, ignore_errors=True)
        return None
    cache.used(root)
    return root, stamp


def store(cache: Store, fill: Callable[[Path], None]) -> tuple[Path, TreeStamp]:
    """Let ``fill(scratch)`` write ``scratch/sglang``, then file it under its own digest."""
    with scratch_dir(cache.trees()) as scratch:
        fill(scratch)
        if not (scratch / PKG / "__init__.py").is_file():
            raise BadInput(f"no {PKG} package found (expected {PKG}/__init__.py)")
        for rel in tree_files(scratch / PKG, bytecode=True):  # shipped in an archive or a commit: not the tree's
            if is_bytecode(rel):
                (scratch / PKG / rel).unlink()
        files = [f"{PKG}/{p}" for p in tree_files(scratch / PKG)]
        stamp = TreeStamp(tree_digest=dirhash1(scratch, files), files=len(files))
        write_model(scratch / "tree.json", stamp)
        final = cache.tree(stamp.tree_digest)
        if load(cache, stamp.tree_digest) is None:
            os.replace(scratch, final)
    return final, stamp


def from_index(cache: Store, index_path: Path) -> tuple[Index, Path, TreeStamp] | None:
    entry = read_model(index_path, Index)
    stored = load(cache, entry.tree_digest) if entry else None
    return (entry, *stored) if stored else None
