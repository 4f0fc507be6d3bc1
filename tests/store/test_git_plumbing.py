"""git sources against a repository served like upstream (partial clones allowed) whose history is
larger than one tree: real release trees at python/sglang, large assets and wide directories
outside it, and a vendor branch the mirror's first clone does not fetch. Served by ``git daemon``
it is remote (a blobless mirror clone, as upstream); named by its path it is read in place."""

from __future__ import annotations

import subprocess
import zlib
from pathlib import Path

import pytest

from runner.errors import BadInput
from runner.store import mirrors, sources, specs
from runner.store.cache import Store
from tests import gitrepo
from tests.commands.test_bad_input import assert_one_error, cli
from tests.gitrepo import Step


def _wide(seed: str) -> dict[str, bytes]:
    """400 small files outside the package: their directory is a large tree object."""
    return {f"test/cases/case_{i:03d}.txt": gitrepo.noise(f"{seed}/{i}", 64) for i in range(400)}


@pytest.fixture(scope="module")
def history(tmp_path_factory, release_tree) -> dict:
    roots = {v: release_tree(v).root for v in ("0.5.19", "0.5.20", "0.5.21")}
    steps = [Step("r19", package=roots["0.5.19"], files={"README.md": b"fixture\n", **_wide("w")}, tag="v0.5.19")]
    for version, prev in (("0.5.20", "r19"), ("0.5.21", "r20")):
        for i in range(6):  # unrelated commits: a 1 MiB asset and one wide-directory file change each time
            steps.append(Step(f"{prev}-u{i}", files={"assets/weights.bin": gitrepo.noise(f"{prev}{i}", 1 << 20),
                                                     f"test/cases/case_{i:03d}.txt": f"{prev} {i}\n".encode()}))
        steps.append(Step(f"r{version[-2:]}", package=roots[version], tag=f"v{version}"))
    for i in range(3):  # a vendor branch off 0.5.20, outside refs/heads and refs/tags
        steps.append(Step(f"vendor{i}", branch="refs/vendor/side", parent="r20" if i == 0 else None,
                          files={"python/sglang/srt/vendor_patch.py": f"PATCH = {i}\n".encode(),
                                 "assets/vendor.bin": gitrepo.noise(f"v{i}", 1 << 20)}))
    path = tmp_path_factory.mktemp("history") / "repo"
    return {"path": path, "commits": gitrepo.build(path, steps)}


@pytest.fixture(scope="module")
def remote(history) -> str:
    """The history's URL over git:// (loopback): a remote repository, mirrored as upstream is."""
    with gitrepo.served(history["path"].parent) as base:
        yield f"{base}/{history['path'].name}"


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    return subprocess.run(["git", "--git-dir", str(repo), *args], input=stdin, check=True, capture_output=True).stdout


def _mirror_dirs(cache: Store) -> list[Path]:
    return sorted((cache.root / "git").glob("*.git"))


def _disk(mirror: Path) -> int:
    """Bytes of object storage: pack files and loose objects (indexes are derived, left out)."""
    objects = mirror / "objects"
    return sum(p.stat().st_size for p in objects.glob("pack/*.pack")) + sum(p.stat().st_size for p in objects.glob("??/*"))


def _loose_size(upstream: Path, oids: set[str]) -> int:
    """What ``oids`` take stored one by one (zlib, no deltas): the yardstick for a mirror."""
    out = _git(upstream, "cat-file", "--batch", stdin="".join(f"{o}\n" for o in sorted(oids)).encode())
    total, pos = 0, 0
    while pos < len(out):
        end = out.index(b"\n", pos)
        _, kind, size = out[pos:end].decode().split()
        body = out[end + 1 : end + 1 + int(size)]
        total += len(zlib.compress(f"{kind} {size}\0".encode() + body))
        pos = end + 1 + int(size) + 1
    return total


def _objects(repo: Path, *args: str) -> set[str]:
    return {line.split()[0] for line in _git(repo, "rev-list", "--objects", *args).decode().splitlines()}


def test_mirror_after_k_commits_holds_their_package_blobs_and_history_only(history, remote, tmp_path):
    """Probing k commits of a remote repository (one of them a vendor commit the first clone never
    saw) costs the package blobs of those k trees plus commits and trees, +10%: no lazy fetch
    resending the history, no blob outside python/sglang, no object stored twice."""
    cache = Store.at(tmp_path / "cache")
    upstream = history["path"] / ".git"
    probed = [history["commits"][c] for c in ("r19", "r21", "vendor2")]
    for sha in probed:
        sources.resolve(specs.parse(f"git+{remote}@{sha}"), cache)
    [mirror] = _mirror_dirs(cache)
    refs = _git(mirror, "for-each-ref", "--format=%(objectname)").decode().split()
    history_objects = _objects(upstream, "--filter=blob:none", *refs)
    package_blobs = set().union(*(_objects(upstream, f"{sha}:python/sglang") for sha in probed)) - history_objects
    bound = _loose_size(upstream, history_objects | package_blobs)
    held = _git(mirror, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)").decode().split("\n")
    held_blobs = {line.split()[0] for line in held if line.endswith(" blob")}
    assert held_blobs <= package_blobs  # nothing from assets/ or test/
    stored = sum(int(_git(mirror, "show-index", stdin=idx.read_bytes()).count(b"\n")) for idx in (mirror / "objects" / "pack").glob("*.idx"))
    # no history sent twice (a lazy fetch resends it all); completing a thin pack copies a few bases
    assert stored - len([line for line in held if line]) <= 0.01 * stored
    print(f"mirror {_disk(mirror)} bytes, bound {bound} bytes")
    assert _disk(mirror) <= 1.10 * bound, (_disk(mirror), bound)


def test_materialised_tree_is_the_commits_package(history, cache, release_tree):
    release = release_tree("0.5.20")
    tree = sources.resolve(specs.parse(f"git+{history['path']}@v0.5.20"), cache)
    assert tree.identity.files == release.identity.files - len(release.compiled_modules)
    rel = "sglang/srt/disaggregation/prefill.py"
    assert (tree.root / rel).read_bytes() == (release.root / rel).read_bytes()
    vendor = sources.resolve(specs.parse(f"git+{history['path']}@{history['commits']['vendor1']}"), cache)
    assert (vendor.root / "sglang/srt/vendor_patch.py").read_bytes() == b"PATCH = 1\n"


def test_a_commit_only_under_a_ref_outside_heads_and_tags_resolves_through_the_sources_ref(history, remote, tmp_path):
    """A squash-merged PR's head lives only under refs/pull/N/head: named by a short SHA (resolved
    after a fetch of the remote's refs) it is found only when the source names that ref
    (``#ref=``); a source whose ref is gone from the remote still resolves what heads and tags
    hold. (A local repository is read in place: every ref and object of it is there.)"""
    cache = Store.at(tmp_path / "cache")
    vendor = history["commits"]["vendor1"]
    with pytest.raises(BadInput, match="does not resolve"):
        sources.resolve(specs.parse(f"git+{remote}@{vendor[:10]}"), cache)
    tree = sources.resolve(specs.parse(f"git+{remote}@{vendor[:10]}#ref=refs/vendor/side"), cache)
    assert tree.identity.commit == vendor and tree.identity.source.endswith("#ref=refs/vendor/side")
    assert (tree.root / "sglang/srt/vendor_patch.py").read_bytes() == b"PATCH = 1\n"
    gone = sources.resolve(specs.parse(f"git+{remote}@v0.5.20#ref=refs/pull/404/head"), cache)
    assert gone.identity.commit == history["commits"]["r20"]
    local = sources.resolve(specs.parse(f"git+{history['path']}@{vendor[:10]}"), cache)
    assert local.identity.commit == vendor and local.identity.tree_digest == tree.identity.tree_digest


def test_a_range_whose_base_is_not_an_ancestor_is_refused(history, tmp_path):
    """vendor2..v0.5.21: the vendor commit is on a side branch; naming a "first observed" commit
    of such a range would be meaningless. One line, exit 2, before anything is probed."""
    proc = cli("sweep", "--commits", f"{history['commits']['vendor2']}..v0.5.21", "--repo", str(history["path"]),
               "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out"), timeout=120)
    assert_one_error(proc, 2, "not an ancestor")
    assert not (tmp_path / "out").exists()


def test_four_spellings_of_one_repository_share_one_mirror(history, tmp_path):
    cache = Store.at(tmp_path / "cache")
    path = history["path"]
    sha = history["commits"]["r19"]
    for url in (str(path), f"file://{path}", f"{path}/.git", f"file://localhost{path}", f"{path}/"):
        tree = sources.resolve(specs.parse(f"git+{url}@{sha}"), cache)
        assert tree.identity.commit == sha
    assert len(_mirror_dirs(cache)) == 1


def test_a_branch_that_moved_upstream_is_fetched_before_it_is_resolved(tmp_path, release_tree):
    """`@main` means the remote's main now, not the mirror's copy from the first clone; the
    receipt names the remote state it was resolved against."""
    cache = Store.at(tmp_path / "cache")
    repo = tmp_path / "moving"
    first = gitrepo.build(repo, [Step("one", package=release_tree("0.5.19").root)])["one"]
    before = sources.resolve(specs.parse(f"git+{repo}@main"), cache).identity
    assert before.commit == first and before.remote.ref == "refs/heads/main"
    moved = gitrepo.build(repo, [Step("two", files={"python/sglang/srt/moved.py": b"MOVED = True\n"})])["two"]
    after = sources.resolve(specs.parse(f"git+{repo}@main"), cache).identity
    assert after.commit == moved
    assert after.remote.refs_sha256 != before.remote.refs_sha256
    short = sources.resolve(specs.parse(f"git+{repo}@{moved[:10]}"), cache).identity
    assert short.commit == moved and short.remote.ref is None
    full = sources.resolve(specs.parse(f"git+{repo}@{moved}"), cache).identity
    assert full.remote is None  # a full SHA names the same bytes whatever the remote says


def test_a_deleted_branch_no_longer_resolves(tmp_path, release_tree):
    cache = Store.at(tmp_path / "cache")
    repo = tmp_path / "pruned"
    gitrepo.build(repo, [Step("one", package=release_tree("0.5.19").root), Step("side", branch="topic", parent="one")])
    sources.resolve(specs.parse(f"git+{repo}@topic"), cache)
    subprocess.run(["git", "-C", str(repo), "branch", "-D", "topic"], check=True, capture_output=True)
    with pytest.raises(BadInput, match="does not resolve"):
        sources.resolve(specs.parse(f"git+{repo}@topic"), cache)


def test_canonical_urls():
    assert mirrors.canonical_url("HTTPS://GitHub.com/sgl-project/sglang/") == "https://github.com/sgl-project/sglang"
    assert mirrors.canonical_url("ssh://Git@Example.COM/x") == "ssh://Git@example.com/x"
    assert mirrors.canonical_url("file:///srv/r%20x") == "/srv/r x"
    with pytest.raises(BadInput):
        mirrors.canonical_url("file://otherhost/srv/r")
