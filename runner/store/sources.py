"""Turn a source spec into a Tree (runner/store/trees.py): ``pypi:`` (pypi.py), ``path:`` (path.py),
``wheel:`` (wheels.py), a container image (images.py) or ``git+`` (here; git plumbing in mirrors.py)."""

from __future__ import annotations

import git

from runner.errors import BadInput, Infrastructure
from runner.store import images, intake, mirrors, path, pypi, specs, trees, wheels
from runner.store.cache import Store, write_model
from runner.store.trees import PKG, Tree, TreeIdentity


def resolve(
    spec: specs.Spec,
    cache: Store,
    *,
    package_dir: str = "python/sglang",
    pinned_sha256: dict[str, str] | None = None,
    bounds: intake.Bounds = intake.Bounds(),
) -> Tree:
    """Every source's bytes come in through one intake (runner/store/intake.py), within ``bounds``."""
    if isinstance(spec, specs.GitSpec):
        return _resolve_git(spec, cache, package_dir, bounds)
    if isinstance(spec, specs.PypiSpec):
        return pypi.resolve(spec, cache, (pinned_sha256 or {}).get(spec.version), bounds)
    if isinstance(spec, specs.WheelSpec):
        return wheels.resolve(spec, cache, bounds)
    if isinstance(spec, specs.ImageSpec):
        return images.resolve(spec, cache, bounds)
    return path.resolve(spec, cache, bounds)


# --- git (where objects come from: runner/store/mirrors.py) -----------------------------------


def resolve_commit(url: str, rev: str, cache: Store) -> tuple[mirrors.Mirror, str]:
    m, sha, _ = mirrors.resolve(url, rev, cache)
    return m, sha


def read_file(url: str, sha: str, path: str, cache: Store, limit: int = intake.Bounds.file_size) -> bytes:
    """The exact bytes of ``path`` in commit ``sha``: one blob, fetched on demand by the mirror; one
    larger than ``limit`` is refused unread (``intake.Refused``, a BadInput)."""
    return mirrors.read_file(*resolve_commit(url, sha, cache), path, limit)


def diff(url: str, base: str, head: str, package_dir: str, cache: Store) -> bytes:
    """``git diff --binary base head -- package_dir`` in the repository's mirror."""
    return mirrors.diff(resolve_commit(url, base, cache)[0], base, head, package_dir)


def _resolve_git(spec: specs.GitSpec, cache: Store, package_dir: str, bounds: intake.Bounds) -> Tree:
    """A git failure is one line: bad input when it reads a local repository (its files are what
    git failed on: gitdir.py checked them, git found them malformed), else the machine's."""
    try:
        return _read_git(spec, cache, package_dir, bounds)
    except git.exc.GitCommandError as e:
        local = mirrors.canonical_url(spec.url).startswith("/")
        last = ((e.stderr or "").strip().splitlines() or [f"exit {e.status}"])[-1]
        raise (BadInput if local else Infrastructure)(f"git source {spec.url}: git cannot read it ({last})") from None


def _read_git(spec: specs.GitSpec, cache: Store, package_dir: str, bounds: intake.Bounds) -> Tree:
    """Stored trees are indexed by the package's git tree id: a commit that did not touch the
    package finds its tree without reading a blob."""
    m, sha, remote = mirrors.resolve(spec.url, spec.rev, cache, spec.ref)
    tree_id = mirrors.package_trees(m, [sha], package_dir)[0]
    if tree_id is None:
        raise BadInput(f"commit {sha}: no {package_dir} in its tree")
    index_path = cache.index("git-tree", tree_id)
    hit = trees.from_index(cache, index_path, bounds)
    if hit is None:
        entries = mirrors.entries(m, tree_id, f"commit {sha[:12]}: {package_dir}", bounds)
        stored = trees.store(cache, entries, where=str(spec), bounds=bounds, around=mirrors.around(m, sha, package_dir))
        write_model(index_path, trees.Index(tree_digest=stored.stamp.tree_digest, left_out=stored.left_out))
        hit = (None, stored)
    stored = hit[1]
    identity = TreeIdentity(
        kind="git", source=str(spec), repo=spec.url, rev=spec.rev, commit=sha, package_dir=package_dir,
        remote=remote, tree_digest=stored.stamp.tree_digest, files=stored.stamp.files, left_out=stored.left_out,
    )
    return Tree(identity, stored.root, stored.files)
