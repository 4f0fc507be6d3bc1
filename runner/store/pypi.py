"""``pypi:sglang==VERSION``: the release wheel, downloaded without dependencies and checked
against its pin; only its ``sglang/`` is unpacked into the tree store."""

from __future__ import annotations

import re
import shutil
import sys
import zipfile
from pathlib import Path

from pydantic import BaseModel

from runner.errors import BadInput, Infrastructure
from runner.files import building_dir, sha256_file, tree_files
from runner.store import intake, specs, trees
from runner.store.cache import Store, read_model, write_model
from runner.store.procs import run_logged
from runner.store.trees import PKG, Tree, TreeIdentity

# Release wheels are the only artifacts of recent releases and are built for this tag alone.
WHEEL_TAG = ("cp", "311", "cp311", "manylinux_2_34_x86_64")


class _Download(BaseModel):
    artifact: str  # the wheel's file name inside the download entry
    sha256: str


def resolve(spec: specs.PypiSpec, cache: Store, pinned: str | None, bounds: intake.Bounds = intake.Bounds()) -> Tree:
    index_path = cache.index("pypi", spec.version)
    hit = trees.from_index(cache, index_path, bounds)
    if hit is None or (pinned and hit[0].artifact_sha256 != pinned):
        wheel = _download(spec, cache, pinned)
        stored = _unpack(wheel, cache, str(spec), bounds)
        entry = trees.Index(tree_digest=stored.stamp.tree_digest, artifact=wheel.name, artifact_sha256=sha256_file(wheel),
                            left_out=stored.left_out)
        write_model(index_path, entry)
        hit = (entry, stored)
    entry, stored = hit
    identity = TreeIdentity(
        kind="pypi", source=str(spec), version=spec.version, artifact=entry.artifact,
        artifact_sha256=entry.artifact_sha256, tree_digest=stored.stamp.tree_digest, files=stored.stamp.files,
        left_out=stored.left_out,
    )
    return Tree(identity, stored.root, stored.files)


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
            cache.used(final)
            return wheel
        why = "does not match its pinned sha256" if stamp and stamp.sha256 != (pinned or stamp.sha256) else "is damaged (stamp or sha256)"
        cache.notices.warn(f"cached download {final} {why}; downloading again")
        shutil.rmtree(final)
    with building_dir(final) as scratch, cache.notices.step(f"download {spec}") as advance:
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


def _unpack(wheel: Path, cache: Store, where: str, bounds: intake.Bounds) -> trees.Stored:
    """Only the package directory's members, through intake (runner/store/intake.py); the wheel's
    other members (beside its ``.dist-info``) are named as left out."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            named = f"{where} ({wheel.name})"
            return trees.store(cache, intake.wheel(zf, PKG, named), where=named, bounds=bounds,
                               outside=intake.wheel_outside(zf, PKG))
    except zipfile.BadZipFile as e:
        raise Infrastructure(f"{wheel.name}: corrupt wheel ({e})") from None


def version_key(version: str) -> tuple:
    """Release order without a packaging dependency: numbers, then .postN after the release."""
    parts = re.findall(r"\d+|[a-z]+", version.lower())
    return tuple((0, int(p)) if p.isdigit() else (1 if p == "post" else -1, p) for p in parts)


def listed(cache: Store) -> list[str]:
    """Every release the package index lists, oldest first (one ``pip index versions``)."""
    out = run_logged([sys.executable, "-m", "pip", "index", "versions", PKG, "--disable-pip-version-check"],
                     step="list releases on the package index", log=cache.log("pip-index.log"))
    found = re.search(r"Available versions:\s*(.+)", out)
    if not found:
        raise Infrastructure("the package index did not list any sglang release")
    return sorted((v.strip() for v in found.group(1).split(",")), key=version_key)


class _Files(BaseModel):
    version: str
    tree_digest: str
    files: dict[str, str]  # the package's regular files: path -> sha256


def file_digests(root: Path) -> dict[str, str]:
    """The sha256 of every regular file of the package in the stored tree at ``root``."""
    return {rel: sha256_file(root / rel) for rel in tree_files(root)
            if rel.startswith(f"{PKG}/") and (root / rel).is_file() and not (root / rel).is_symlink()}


def release_files(version: str, cache: Store, pinned: str | None, bounds: intake.Bounds = intake.Bounds()) -> dict[str, str]:
    """The file digests of a release, kept in the store's index once computed, so finding the nearest
    release by shared files compares lists, and each release is downloaded once for every audit. A
    damaged list can only steer which release is chosen: the departures are read from the chosen
    release's verified tree."""
    path = cache.index("release-files", version)
    hit = read_model(path, _Files)
    if hit is not None and hit.version == version:
        return hit.files
    tree = resolve(specs.PypiSpec(version=version), cache, pinned, bounds)
    files = file_digests(tree.root)
    write_model(path, _Files(version=version, tree_digest=tree.identity.tree_digest, files=files))
    return files
