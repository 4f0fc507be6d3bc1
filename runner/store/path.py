"""``path:DIR``: a plain directory holding ``sglang/`` (or ``python/sglang/``, or the package itself),
taken in through intake (runner/store/intake.py) as a copy in the tree store: the directory may
change after it was read, the copy cannot, and nothing in it is followed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from runner.errors import BadInput
from runner.store import intake, specs, trees
from runner.store.cache import Store
from runner.store.trees import PKG, Tree, TreeIdentity


def _package_in(directory: Path, where: str) -> tuple[str, ...] | None:
    """Which of ``sglang/``, ``python/sglang/`` or the directory itself is the package (parts below
    ``directory``). Nothing of the tree is followed: a link where a part of the package's path
    should be is refused, not looked through."""
    candidates = [(PKG,), ("python", PKG)] + ([()] if directory.name == PKG else [])
    for parts in candidates:
        here = directory
        for part in (*parts, "__init__.py"):
            here = here / part
            try:
                mode = os.lstat(here).st_mode
            except OSError:
                break
            if stat.S_ISLNK(mode):
                raise intake.refuse(where, str(here.relative_to(directory)), "it is a symbolic link; only regular files "
                                    "and directories are taken in")
            if not (stat.S_ISREG if part == "__init__.py" else stat.S_ISDIR)(mode):
                break
        else:
            return parts
    return None


def resolve(spec: specs.PathSpec, cache: Store, bounds: intake.Bounds = intake.Bounds()) -> Tree:
    directory = specs.local_path(spec.dir, str(spec))
    if not directory.is_dir():
        raise BadInput(f"{spec}: no such directory")
    parts = _package_in(directory, str(spec))
    if parts is None:
        raise BadInput(f"{spec}: no {PKG} package in it (looked for {PKG}/, python/{PKG}/ or the directory itself)")
    inside = parts or (PKG,)
    top = directory if parts else directory.parent
    around = intake.beside(top, inside) if parts else None  # the package itself named: nothing around it is the user's
    with intake.directory(top, str(spec), inside) as entries:
        stored = trees.store(cache, entries, where=str(spec), bounds=bounds, around=around)
    identity = TreeIdentity(kind="path", source=str(spec), path=str(directory), tree_digest=stored.stamp.tree_digest,
                            files=stored.stamp.files, left_out=stored.left_out)
    return Tree(identity, stored.root, stored.files)
