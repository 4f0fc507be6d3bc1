"""Turn a source spec into a Tree (runner/store/trees.py): ``pypi:`` (pypi.py), ``path:`` (path.py)
or ``git+`` (here; git plumbing in mirrors.py)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from runner.errors import BadInput
from runner.store import mirrors, path, pypi, specs, trees
from runner.store.cache import Store, write_model
from runner.store.trees import PKG, Tree, TreeIdentity


def resolve(
    spec: specs.GitSpec | specs.PypiSpec | specs.PathSpec,
    cache: Store,
    *,
    package_dir: str = "python/sglang",
    pinned_sha256: dict[str, str] | None = None,
) -> Tree:
    if isinstance(spec, specs.GitSpec):
        return _resolve_git(spec, cache, package_dir)
    if isinstance(spec, specs.PypiSpec):
        return pypi.resolve(spec, cache, (pinned_sha256 or {}).get(spec.version))
    return path.resolve(spec, cache)


# --- git (where objects come from: runner/store/mirrors.py) -----------------------------------

# Until the one intake (runner/store/intake.py, I3) takes git trees in, its rules live here: this
# bound on a package's entries, and regular files only (_take_in).
MAX_GIT_ENTRIES = 100_000


def resolve_commit(url: str, rev: str, cache: Store) -> tuple[mirrors.Mirror, str]:
    m, sha, _ = mirrors.resolve(url, rev, cache)
    return m, sha


def read_file(url: str, sha: str, path: str, cache: Store) -> bytes:
    """The exact bytes of ``path`` in commit ``sha``: one blob, fetched on demand by the mirror."""
    return mirrors.read_file(*resolve_commit(url, sha, cache), path)


def diff(url: str, base: str, head: str, package_dir: str, cache: Store) -> bytes:
    """``git diff --binary base head -- package_dir`` in the repository's mirror."""
    return mirrors.diff(resolve_commit(url, base, cache)[0], base, head, package_dir, MAX_GIT_ENTRIES)


def _take_in(m: mirrors.Mirror, files: list[mirrors.GitFile], dest: Path, where: str) -> None:
    """Write a package's entries under ``dest``: regular files only. A symbolic link or a
    submodule is refused naming it, before any byte is read."""
    for f in files:
        if f.kind in ("symlink", "submodule"):
            raise BadInput(f"{where}/{f.path}: a {f.kind}; only regular files are taken in from a git tree")
        if ".git" in PurePosixPath(f.path).parts:
            raise BadInput(f"{where}/{f.path}: refusing the path")
    blobs = mirrors.read_blobs(m, sorted({f.oid for f in files}))
    for f in files:
        target = dest / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blobs[f.oid])
        if f.kind == "executable":
            target.chmod(0o755)


def _resolve_git(spec: specs.GitSpec, cache: Store, package_dir: str) -> Tree:
    """Stored trees are indexed by the package's git tree id: a commit that did not touch the
    package finds its tree without reading a blob."""
    m, sha, remote = mirrors.resolve(spec.url, spec.rev, cache, spec.ref)
    tree_id = mirrors.package_trees(m, [sha], package_dir)[0]
    if tree_id is None:
        raise BadInput(f"commit {sha}: no {package_dir} in its tree")
    index_path = cache.index("git-tree", tree_id)
    hit = trees.from_index(cache, index_path)
    if hit is None:
        where = f"commit {sha[:12]}: {package_dir}"
        files = mirrors.package_files(m, tree_id, where, MAX_GIT_ENTRIES)
        root, stamp = trees.store(cache, lambda scratch: _take_in(m, files, scratch / PKG, where))
        write_model(index_path, trees.Index(tree_digest=stamp.tree_digest))
        hit = (None, root, stamp)
    _, root, stamp = hit
    identity = TreeIdentity(
        kind="git", source=str(spec), repo=spec.url, rev=spec.rev, commit=sha, package_dir=package_dir,
        remote=remote, tree_digest=stamp.tree_digest, files=stamp.files,
    )
    return Tree(identity, root)
