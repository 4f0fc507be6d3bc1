"""Turn a source spec into a Tree: a frozen local copy of one sglang package plus its identity.

Trees are stored under ``trees/<digest>`` and re-verified against that digest on every use, so
whatever was probed is exactly the bytes the identity names.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict

from runner import ui
from runner.store import mirrors, specs
from runner.store.cache import Store, read_model, write_model
from runner.errors import BadInput, Infrastructure
from runner.files import building_dir, dirhash1, is_bytecode, scratch_dir, sha256_file, tree_files
from runner.store.mirrors import RemoteState
from runner.store.procs import run_logged

PKG = specs.PACKAGE
# Release wheels are the only artifacts of recent releases and are built for this tag alone.
WHEEL_TAG = ("cp", "311", "cp311", "manylinux_2_34_x86_64")


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


class _TreeStamp(BaseModel):
    tree_digest: str
    files: int


class _Download(BaseModel):
    artifact: str  # the wheel's file name inside the download entry
    sha256: str


class _Index(BaseModel):
    tree_digest: str
    artifact: str | None = None
    artifact_sha256: str | None = None


def resolve(
    spec: specs.GitSpec | specs.PypiSpec | specs.PathSpec,
    cache: Store,
    *,
    package_dir: str = "python/sglang",
    pinned_sha256: dict[str, str] | None = None,
    extra_refs: list[str] = (),
) -> Tree:
    if isinstance(spec, specs.GitSpec):
        return _resolve_git(spec, cache, package_dir, list(extra_refs))
    if isinstance(spec, specs.PypiSpec):
        return _resolve_pypi(spec, cache, (pinned_sha256 or {}).get(spec.version))
    return _resolve_path(spec, cache)


# --- the tree store -------------------------------------------------------------------------


def _load_tree(cache: Store, digest: str) -> tuple[Path, _TreeStamp] | None:
    """The stored tree for ``digest`` if present and intact; a damaged entry is dropped.

    Byte-code counts as damage: Python would run it in place of the source and the digest leaves
    it out. None is ever stored, and environments cache theirs in their own overlay of the tree,
    so any found here was planted.
    """
    root = cache.tree(digest)
    if not root.exists():
        return None
    stamp = read_model(root / "tree.json", _TreeStamp)
    everything = tree_files(root / PKG, bytecode=True)
    files = [f"{PKG}/{p}" for p in everything if not is_bytecode(p)]
    if stamp is None or stamp.tree_digest != digest or len(files) != len(everything) or dirhash1(root, files) != digest:
        ui.warn(f"cache entry {root} is damaged (digest mismatch or planted byte-code); rebuilding it")
        shutil.rmtree(root, ignore_errors=True)
        return None
    return root, stamp


def _store_tree(cache: Store, fill: Callable[[Path], None]) -> tuple[Path, _TreeStamp]:
    """Let ``fill(scratch)`` write ``scratch/sglang``, then file it under its own digest."""
    with scratch_dir(cache.trees()) as scratch:
        fill(scratch)
        if not (scratch / PKG / "__init__.py").is_file():
            raise BadInput(f"no {PKG} package found (expected {PKG}/__init__.py)")
        for rel in tree_files(scratch / PKG, bytecode=True):  # shipped in an archive or a commit: not the tree's
            if is_bytecode(rel):
                (scratch / PKG / rel).unlink()
        files = [f"{PKG}/{p}" for p in tree_files(scratch / PKG)]
        stamp = _TreeStamp(tree_digest=dirhash1(scratch, files), files=len(files))
        write_model(scratch / "tree.json", stamp)
        final = cache.tree(stamp.tree_digest)
        if _load_tree(cache, stamp.tree_digest) is None:
            os.replace(scratch, final)
    return final, stamp


def _from_index(cache: Store, index_path: Path) -> tuple[_Index, Path, _TreeStamp] | None:
    entry = read_model(index_path, _Index)
    stored = _load_tree(cache, entry.tree_digest) if entry else None
    return (entry, *stored) if stored else None


# --- pypi -----------------------------------------------------------------------------------


def _resolve_pypi(spec: specs.PypiSpec, cache: Store, pinned: str | None) -> Tree:
    index_path = cache.index("pypi", spec.version)
    hit = _from_index(cache, index_path)
    if hit is None or (pinned and hit[0].artifact_sha256 != pinned):
        wheel = _download(spec, cache, pinned)
        root, stamp = _store_tree(cache, lambda scratch: _unpack(wheel, scratch))
        entry = _Index(tree_digest=stamp.tree_digest, artifact=wheel.name, artifact_sha256=sha256_file(wheel))
        write_model(index_path, entry)
        hit = (entry, root, stamp)
    entry, root, stamp = hit
    identity = TreeIdentity(
        kind="pypi", source=str(spec), version=spec.version, artifact=entry.artifact,
        artifact_sha256=entry.artifact_sha256, tree_digest=stamp.tree_digest, files=stamp.files,
    )
    return Tree(identity, root)


def _download(spec: specs.PypiSpec, cache: Store, pinned: str | None) -> Path:
    """The release wheel, from the artifact cache or the package index, checked against the pin.

    A cached wheel counts only if it still has the sha256 its stamp recorded at download time: a
    truncated or altered wheel is downloaded again (with a warning), never unpacked.
    """
    final = cache.download(f"{PKG}-{spec.version}")
    if final.exists():
        stamp = read_model(final / "download.json", _Download)
        wheel = final / Path(stamp.artifact).name if stamp else final
        if stamp and wheel.is_file() and sha256_file(wheel) == stamp.sha256 == (pinned or stamp.sha256):
            return wheel
        why = "does not match its pinned sha256" if stamp and stamp.sha256 != (pinned or stamp.sha256) else "is damaged (stamp or sha256)"
        ui.warn(f"cached download {final} {why}; downloading again")
        shutil.rmtree(final)
    with building_dir(final) as scratch, ui.step(f"download {spec}") as advance:
        py, impl, abi, platform = WHEEL_TAG
        argv = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
            "--only-binary=:all:", "--implementation", py, "--python-version", impl, "--abi", abi,
            "--platform", platform, "-d", str(scratch), f"{PKG}=={spec.version}",
        ]
        try:
            run_logged(argv, step=f"download {spec}", log=cache.log(f"download-{spec.version}.log"),
                       on_line=lambda line: advance(line[:60]))
        except Infrastructure as e:
            if e.detail and re.search(r"No matching distribution|Could not find a version", e.detail):
                raise BadInput(f"{spec}: no such release of {PKG} on the package index") from None
            raise
        got = sorted(scratch.glob("*.whl"))
        if len(got) != 1:
            raise Infrastructure(f"download {spec}: expected one wheel, got {[p.name for p in got]}")
        actual = sha256_file(got[0])
        if pinned and actual != pinned:
            raise Infrastructure(f"{spec}: downloaded {got[0].name} has sha256 {actual}, pinned {pinned}; refusing it")
        write_model(scratch / "download.json", _Download(artifact=got[0].name, sha256=actual))
    return final / got[0].name


def _unpack(wheel: Path, scratch: Path) -> None:
    """Only the package directory, and never a member that would land outside it."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            for member in zf.infolist():
                name = member.filename
                if not name.startswith(f"{PKG}/") or member.is_dir():
                    continue
                parts = Path(name).parts
                if Path(name).is_absolute() or ".." in parts:
                    raise Infrastructure(f"{wheel.name}: refusing archive member {name!r} outside the package")
                zf.extract(member, scratch)
    except zipfile.BadZipFile as e:
        raise Infrastructure(f"{wheel.name}: corrupt wheel ({e})") from None


# --- path -----------------------------------------------------------------------------------


def _package_in(directory: Path) -> Path | None:
    for candidate in (directory / PKG, directory / "python" / PKG, directory):
        if candidate.name == PKG and (candidate / "__init__.py").is_file():
            return candidate
    return None


def _copy_package(src: Path, scratch: Path) -> None:
    shutil.copytree(src, scratch / PKG, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo"))


def _resolve_path(spec: specs.PathSpec, cache: Store) -> Tree:
    directory = specs.local_path(spec.dir, str(spec))
    if not directory.is_dir():
        raise BadInput(f"{spec}: no such directory")
    package = _package_in(directory)
    if package is None:
        raise BadInput(f"{spec}: no {PKG} package in it (looked for {PKG}/, python/{PKG}/ or the directory itself)")
    # Freeze a copy: the directory may change after we hashed it; the copy cannot.
    root, stamp = _store_tree(cache, lambda scratch: _copy_package(package, scratch))
    identity = TreeIdentity(kind="path", source=str(spec), path=str(directory), tree_digest=stamp.tree_digest, files=stamp.files)
    return Tree(identity, root)


# --- git (plumbing in runner/store/mirrors.py) ------------------------------------------------


def resolve_commit(url: str, rev: str, cache: Store) -> tuple[mirrors.Mirror, str]:
    m, sha, _ = mirrors.resolve(url, rev, cache)
    return m, sha


def read_file(url: str, sha: str, path: str, cache: Store) -> bytes:
    """The exact bytes of ``path`` in commit ``sha``: one blob, fetched on demand by the mirror."""
    return mirrors.read_file(*resolve_commit(url, sha, cache), path)


def diff(url: str, base: str, head: str, package_dir: str, cache: Store) -> bytes:
    """``git diff --binary base head -- package_dir`` in the repository's mirror."""
    return mirrors.diff(resolve_commit(url, base, cache)[0], base, head, package_dir)


def _resolve_git(spec: specs.GitSpec, cache: Store, package_dir: str, extra_refs: list[str]) -> Tree:
    """Stored trees are indexed by the package's git tree id: a commit that did not touch the
    package finds its tree without reading a blob."""
    m, sha, remote = mirrors.resolve(spec.url, spec.rev, cache, extra_refs)
    tree_id = mirrors.package_trees(m, [sha], package_dir)[0]
    if tree_id is None:
        raise BadInput(f"commit {sha}: no {package_dir} in its tree")
    index_path = cache.index("git-tree", tree_id)
    hit = _from_index(cache, index_path)
    if hit is None:
        root, stamp = _store_tree(cache, lambda scratch: mirrors.materialise(m, sha, package_dir, scratch / PKG))
        write_model(index_path, _Index(tree_digest=stamp.tree_digest))
        hit = (None, root, stamp)
    _, root, stamp = hit
    identity = TreeIdentity(
        kind="git", source=str(spec), repo=spec.url, rev=spec.rev, commit=sha, package_dir=package_dir,
        remote=remote, tree_digest=stamp.tree_digest, files=stamp.files,
    )
    return Tree(identity, root)
