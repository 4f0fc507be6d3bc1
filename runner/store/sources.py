"""Turn a source spec into a Tree: a frozen local copy of one sglang package plus its identity.

Trees are stored under ``trees/<digest>`` and re-verified against that digest on every use, so
whatever was probed is exactly the bytes the identity names.
"""

from __future__ import annotations

import base64
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

import git
from pydantic import BaseModel, ConfigDict

from runner import ui
from runner.store import specs
from runner.store.cache import Cache, read_model, write_model
from runner.errors import BadInput, Infrastructure
from runner.files import building_dir, dirhash1, is_bytecode, scratch_dir, sha256_bytes, sha256_file, tree_files
from runner.store.procs import run_logged

PKG = specs.PACKAGE
# Release wheels are the only artifacts of recent releases and are built for this tag alone.
WHEEL_TAG = ("cp", "311", "cp311", "manylinux_2_34_x86_64")
GIT_ENV = {
    "GIT_TERMINAL_PROMPT": "0",  # never hang on a credential prompt
    "GIT_ALLOW_PROTOCOL": "file:git:http:https:ssh",  # no ext::, fd:: or other command transports
    "GIT_PROTOCOL_FROM_USER": "0",
    "GIT_CONFIG_NOSYSTEM": "1",
}
GIT_OPTS = ["-c", "protocol.ext.allow=never", "-c", "gc.auto=0", "-c", "core.hooksPath=/dev/null"]


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
    cache: Cache,
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


def _digest_dirname(digest: str) -> str:
    return base64.b64decode(digest.removeprefix("h1:")).hex()


def _load_tree(cache: Cache, digest: str) -> tuple[Path, _TreeStamp] | None:
    """The stored tree for ``digest`` if present and intact; a damaged entry is dropped.

    Byte-code counts as damage: Python would run it in place of the source and the digest leaves
    it out. None is ever stored, and environments cache theirs in their own overlay of the tree,
    so any found here was planted.
    """
    root = cache.dir("trees", _digest_dirname(digest))
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


def _store_tree(cache: Cache, fill: Callable[[Path], None]) -> tuple[Path, _TreeStamp]:
    """Let ``fill(scratch)`` write ``scratch/sglang``, then file it under its own digest."""
    with scratch_dir(cache.dir("trees")) as scratch:
        fill(scratch)
        if not (scratch / PKG / "__init__.py").is_file():
            raise BadInput(f"no {PKG} package found (expected {PKG}/__init__.py)")
        for rel in tree_files(scratch / PKG, bytecode=True):  # shipped in an archive or a commit: not the tree's
            if is_bytecode(rel):
                (scratch / PKG / rel).unlink()
        files = [f"{PKG}/{p}" for p in tree_files(scratch / PKG)]
        stamp = _TreeStamp(tree_digest=dirhash1(scratch, files), files=len(files))
        write_model(scratch / "tree.json", stamp)
        final = cache.dir("trees", _digest_dirname(stamp.tree_digest))
        if _load_tree(cache, stamp.tree_digest) is None:
            os.replace(scratch, final)
    return final, stamp


def _from_index(cache: Cache, index_path: Path) -> tuple[_Index, Path, _TreeStamp] | None:
    entry = read_model(index_path, _Index)
    stored = _load_tree(cache, entry.tree_digest) if entry else None
    return (entry, *stored) if stored else None


# --- pypi -----------------------------------------------------------------------------------


def _resolve_pypi(spec: specs.PypiSpec, cache: Cache, pinned: str | None) -> Tree:
    index_path = cache.dir("index", "pypi", f"{spec.version}.json")
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


def _download(spec: specs.PypiSpec, cache: Cache, pinned: str | None) -> Path:
    """The release wheel, from the artifact cache or the package index, checked against the pin.

    A cached wheel counts only if it still has the sha256 its stamp recorded at download time: a
    truncated or altered wheel is downloaded again (with a warning), never unpacked.
    """
    final = cache.dir("downloads", f"{PKG}-{spec.version}")
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
            run_logged(argv, step=f"download {spec}", log=cache.dir("logs", f"download-{spec.version}.log"),
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


def _resolve_path(spec: specs.PathSpec, cache: Cache) -> Tree:
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


# --- git ------------------------------------------------------------------------------------


def _clone_url(url: str) -> str:
    """Local paths go through file:// so that git honours --filter (a plain path copies everything)."""
    return Path(url).as_uri() if url.startswith("/") else url


class _CloneProgress(git.RemoteProgress):
    def __init__(self, advance):
        super().__init__()
        self._advance = advance

    def update(self, op_code, cur_count, max_count=None, message=""):
        self._advance(message or None, int(cur_count), int(max_count) if max_count else None)


def _mirror(url: str, cache: Cache) -> git.Repo:
    """One blobless bare mirror per repository URL."""
    path = cache.dir("git", sha256_bytes(url.encode())[:24] + ".git")
    if path.exists():
        try:
            return git.Repo(path)
        except git.exc.GitError:
            ui.warn(f"git mirror {path} is damaged; cloning again")
            shutil.rmtree(path)
    local = url.startswith(("/", "file://"))
    with building_dir(path) as scratch, ui.step(f"clone {url} (blobless)") as advance:
        progress = _CloneProgress(advance)
        try:
            git.Repo.clone_from(_clone_url(url), scratch, bare=True, progress=progress, env=GIT_ENV,
                                multi_options=["--filter=blob:none"])
        except git.exc.GitCommandError as e:
            lines = progress.error_lines + progress.other_lines + str(e).splitlines()
            fatal = [ln.split("fatal:", 1)[1].strip() for ln in lines if "fatal:" in ln]
            reason = fatal[0] if fatal else f"git exit {e.status}"
            raise (BadInput if local else Infrastructure)(f"git source {url}: cannot clone: {reason}") from None
    return git.Repo(path)


def _git(repo: git.Repo, *args: str, stdin: str | None = None) -> str:
    argv = ["git", *GIT_OPTS, "--git-dir", repo.git_dir, *args]
    env = {**os.environ, **GIT_ENV}
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise git.exc.GitCommandError(argv, proc.returncode, proc.stderr)
    return proc.stdout


def git_lines(repo: git.Repo, *args: str) -> list[str]:
    return _git(repo, *args).splitlines()


def _commit(repo: git.Repo, rev: str) -> str | None:
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}").strip()
    except git.exc.GitCommandError:
        return None


def resolve_commit(url: str, rev: str, cache: Cache, extra_refs: list[str] = ()) -> tuple[git.Repo, str]:
    """Full SHA of ``rev`` in the mirror, fetching branches, tags, ``extra_refs`` or the SHA itself."""
    repo = _mirror(url, cache)
    sha = _commit(repo, rev)
    if sha is None:
        refspecs = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"]
        refspecs += [f"+{ref}:refs/diffprobe/{ref.removeprefix('refs/')}" for ref in extra_refs]
        with ui.step(f"fetch {url}"):
            for refspec in [refspecs, *([[rev]] if re.fullmatch(r"[0-9a-f]{40}", rev) else [])]:
                try:
                    _git(repo, "fetch", "--quiet", "--filter=blob:none", "origin", *refspec)
                except git.exc.GitCommandError as e:
                    if refspec is refspecs and "couldn't find remote ref" not in (e.stderr or ""):
                        raise Infrastructure(f"git source {url}: fetch failed: {(e.stderr or '').strip().splitlines()[-1:]}") from None
                sha = _commit(repo, rev)
                if sha:
                    break
    if sha is None:
        raise BadInput(f"git source {url}: revision {rev!r} does not resolve to a commit")
    return repo, sha


def read_file(url: str, sha: str, path: str, cache: Cache) -> bytes:
    """The exact bytes of ``path`` in commit ``sha``: one blob, fetched on demand by the mirror."""
    repo, sha = resolve_commit(url, sha, cache)
    entries = [e for e in _git(repo, "ls-tree", "-z", "--full-tree", sha, "--", path).split("\0") if e]
    if len(entries) != 1 or entries[0].split()[1] != "blob" or entries[0].split("\t", 1)[1] != path:
        raise BadInput(f"commit {sha}: no file {path} in its tree")
    oid = entries[0].split()[2]
    proc = subprocess.run(["git", *GIT_OPTS, "--git-dir", repo.git_dir, "cat-file", "blob", oid],
                          capture_output=True, env={**os.environ, **GIT_ENV})
    if proc.returncode:
        raise Infrastructure(f"commit {sha}: cannot read {path}: {proc.stderr.decode(errors='replace').strip()[-200:]}")
    return proc.stdout


def diff(url: str, base: str, head: str, package_dir: str, cache: Cache) -> bytes:
    """``git diff --binary base head -- package_dir``; call after both trees were resolved, so
    the mirror already holds every blob and nothing is fetched one object at a time."""
    repo, _ = resolve_commit(url, base, cache)
    proc = subprocess.run(["git", *GIT_OPTS, "--git-dir", repo.git_dir, "diff", "--binary", "--no-color", "--no-ext-diff", "--no-renames",
                           base, head, "--", package_dir], capture_output=True, env={**os.environ, **GIT_ENV})
    if proc.returncode:
        raise Infrastructure(f"git diff {base[:12]}..{head[:12]} failed: {proc.stderr.decode(errors='replace').strip()[-200:]}")
    return proc.stdout


def _materialise(repo: git.Repo, sha: str, package_dir: str, scratch: Path) -> None:
    """Only ``package_dir`` of ``sha``: its missing blobs in one batched fetch, then extracted."""
    listing = _git(repo, "ls-tree", "-r", "-z", "--full-tree", sha, "--", package_dir)
    entries = [e for e in listing.split("\0") if e]
    if not entries:
        raise BadInput(f"commit {sha}: no {package_dir} in its tree")
    oids = sorted({e.split("\t", 1)[0].split()[2] for e in entries if e.split()[1] == "blob"})
    # rev-list --missing=print reports promisor gaps without fetching them one by one (cat-file would)
    absent = {line[1:] for line in _git(repo, "rev-list", "--objects", "--no-walk", "--missing=print", sha).splitlines() if line.startswith("?")}
    missing = [oid for oid in oids if oid in absent]
    if missing:
        with ui.step(f"fetch {len(missing)} files of {sha[:12]}:{package_dir}"):
            _git(repo, "-c", "fetch.negotiationAlgorithm=noop", "fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
                 "--recurse-submodules=no", "--filter=blob:none", "--stdin", "origin", stdin="\n".join(missing) + "\n")
    archive = subprocess.run(
        ["git", *GIT_OPTS, "--git-dir", repo.git_dir, "archive", "--format=tar", sha, "--", package_dir],
        capture_output=True, env={**os.environ, **GIT_ENV},
    )
    if archive.returncode:
        raise Infrastructure(f"commit {sha}: git archive failed: {archive.stderr.decode(errors='replace').strip()[-200:]}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tf:
        tf.extractall(scratch / "_checkout", filter="data")
    os.replace(scratch / "_checkout" / package_dir, scratch / PKG)
    shutil.rmtree(scratch / "_checkout")


def _resolve_git(spec: specs.GitSpec, cache: Cache, package_dir: str, extra_refs: list[str]) -> Tree:
    repo, sha = resolve_commit(spec.url, spec.rev, cache, extra_refs)
    index_path = cache.dir("index", "git", f"{sha}-{sha256_bytes(package_dir.encode())[:12]}.json")
    hit = _from_index(cache, index_path)
    if hit is None:
        root, stamp = _store_tree(cache, lambda scratch: _materialise(repo, sha, package_dir, scratch))
        write_model(index_path, _Index(tree_digest=stamp.tree_digest))
        hit = (None, root, stamp)
    _, root, stamp = hit
    identity = TreeIdentity(
        kind="git", source=str(spec), repo=spec.url, rev=spec.rev, commit=sha, package_dir=package_dir,
        tree_digest=stamp.tree_digest, files=stamp.files,
    )
    return Tree(identity, root)
