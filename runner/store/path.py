"""``path:DIR``: a plain directory holding ``sglang/`` (or ``python/sglang/``, or the package
itself), frozen into the tree store: the directory may change after it was hashed, the copy cannot."""

from __future__ import annotations

import shutil
from pathlib import Path

from runner.errors import BadInput
from runner.store import specs, trees
from runner.store.cache import Store
from runner.store.trees import PKG, Tree, TreeIdentity


def _package_in(directory: Path) -> Path | None:
    for candidate in (directory / PKG, directory / "python" / PKG, directory):
        if candidate.name == PKG and (candidate / "__init__.py").is_file():
            return candidate
    return None


def _copy_package(src: Path, scratch: Path) -> None:
    shutil.copytree(src, scratch / PKG, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo"))


def resolve(spec: specs.PathSpec, cache: Store) -> Tree:
    directory = specs.local_path(spec.dir, str(spec))
    if not directory.is_dir():
        raise BadInput(f"{spec}: no such directory")
    package = _package_in(directory)
    if package is None:
        raise BadInput(f"{spec}: no {PKG} package in it (looked for {PKG}/, python/{PKG}/ or the directory itself)")
    # Freeze a copy: the directory may change after we hashed it; the copy cannot.
    root, stamp = trees.store(cache, lambda scratch: _copy_package(package, scratch))
    identity = TreeIdentity(kind="path", source=str(spec), path=str(directory), tree_digest=stamp.tree_digest, files=stamp.files)
    return Tree(identity, root)
