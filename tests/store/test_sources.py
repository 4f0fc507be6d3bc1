"""Source resolution against real releases from PyPI and a local git repository built from them."""

import shutil
import subprocess

import pytest

from runner.store import sources, specs
from runner.store.cache import USED, Store
from runner.errors import BadInput, Infrastructure
from runner.files import sha256_file
from tests.conftest import git


def _blobs(git_dir) -> int:
    out = subprocess.run(
        ["git", "--git-dir", str(git_dir), "cat-file", "--batch-all-objects", "--batch-check=%(objecttype)"],
        capture_output=True, text=True, check=True,
    ).stdout
    return out.split().count("blob")


@pytest.mark.slow
def test_git_commits_resolve_to_their_own_trees(upstream_repo, cache, release_tree):
    path, commits = upstream_repo["path"], upstream_repo["commits"]
    a = sources.resolve(specs.parse(f"git+{path}@{commits['0.5.19']}"), cache)
    b = sources.resolve(specs.parse(f"git+{path}@v0.5.20"), cache)
    assert a.identity.commit == commits["0.5.19"] and b.identity.commit == commits["0.5.20"]
    assert a.identity.kind == "git" and a.identity.package_dir == "python/sglang"
    assert a.identity.tree_digest != b.identity.tree_digest
    assert a.root != b.root
    # the materialised tree holds exactly the release's source (compiled modules aside)
    rel = "sglang/srt/disaggregation/prefill.py"
    assert sha256_file(a.root / rel) == sha256_file(release_tree("0.5.19").root / rel)
    assert sha256_file(b.root / rel) == sha256_file(release_tree("0.5.20").root / rel)
    assert sha256_file(a.root / rel) != sha256_file(b.root / rel)
    assert sorted(p.name for p in a.root.iterdir() if p.name != USED) == ["sglang", "tree.json"]  # and gc's marker


@pytest.mark.slow
def test_short_sha_is_recorded_in_full(upstream_repo, cache):
    full = upstream_repo["commits"]["0.5.19"]
    tree = sources.resolve(specs.parse(f"git+{upstream_repo['path']}@{full[:8]}"), cache)
    assert tree.identity.commit == full and tree.identity.rev == full[:8]


@pytest.mark.slow
def test_mirror_is_a_partial_clone(upstream_repo, tmp_path):
    """A local repository is read in place: the cache's repository for it is partial and holds
    none of its blobs (tests/store/test_git_partial.py: the clones users keep)."""
    cache = Store.at(tmp_path / "cache")
    path, commits = upstream_repo["path"], upstream_repo["commits"]
    total = _blobs(path / ".git")
    sources.resolve(specs.parse(f"git+{path}@{commits['0.5.19']}"), cache)
    mirrors = list((tmp_path / "cache" / "git").glob("*.git"))
    assert len(mirrors) == 1
    assert subprocess.run(["git", "--git-dir", str(mirrors[0]), "config", "remote.origin.partialclonefilter"],
                          capture_output=True, text=True).stdout.strip() == "blob:none"
    held = _blobs(mirrors[0])
    files_in_a = int(git(path, "ls-tree", "-r", commits["0.5.19"], "--", "python/sglang").count("\n")) + 1
    assert held <= files_in_a < total
    assert held < total * 0.8


@pytest.mark.slow
def test_unknown_revision_is_bad_input(upstream_repo, cache):
    with pytest.raises(BadInput, match="does not resolve to a commit"):
        sources.resolve(specs.parse(f"git+{upstream_repo['path']}@no-such-branch"), cache)


def test_missing_repository_is_bad_input(tmp_path, cache):
    with pytest.raises(BadInput, match="no git repository there"):
        sources.resolve(specs.parse(f"git+{tmp_path / 'nothing'}@HEAD"), cache)


@pytest.mark.slow
def test_pypi_records_artifact_digest_and_checks_the_pin(cache, release_tree):
    tree = release_tree("0.5.20")
    assert tree.identity.artifact == "sglang-0.5.20-cp311-cp311-manylinux_2_34_x86_64.whl"
    assert tree.identity.artifact_sha256 == "1573527042f4f6b4ead838302818595fc77fdc611dbcc2e40cd150fbc8f8513c"
    assert tree.compiled_modules  # a wheel carries its Rust modules
    again = sources.resolve(specs.PypiSpec(version="0.5.20"), cache,
                            pinned_sha256={"0.5.20": tree.identity.artifact_sha256})
    assert again == tree


@pytest.mark.slow
def test_pypi_pin_mismatch_is_refused(tmp_path, release_tree):
    cache = Store.at(tmp_path / "c")
    with pytest.raises(Infrastructure, match="refusing it"):
        sources.resolve(specs.PypiSpec(version="0.5.19"), cache, pinned_sha256={"0.5.19": "0" * 64})
    assert not list((tmp_path / "c" / "downloads").glob("sglang-0.5.19*"))


@pytest.mark.slow
def test_unknown_release_is_bad_input(cache):
    with pytest.raises(BadInput, match="no such release"):
        sources.resolve(specs.PypiSpec(version="0.0.999"), cache)


@pytest.mark.slow
def test_same_bytes_from_two_sources_are_the_same_tree(tmp_path, cache, release_tree):
    wheel = release_tree("0.5.21")
    fork = tmp_path / "vendor-fork"
    shutil.copytree(wheel.root / "sglang", fork / "sglang")
    same = sources.resolve(specs.parse(f"path:{fork}"), cache)
    assert same.identity.tree_digest == wheel.identity.tree_digest
    assert same.identity.kind == "path" and same.identity.path == str(fork)
    target = fork / "sglang" / "srt" / "disaggregation" / "prefill.py"
    target.write_bytes(target.read_bytes() + b"#")
    changed = sources.resolve(specs.parse(f"path:{fork}"), cache)
    assert changed.identity.tree_digest != wheel.identity.tree_digest
    # the probed copy is frozen: editing the fork afterwards does not change what was resolved
    target.write_bytes(b"")
    assert (changed.root / "sglang/srt/disaggregation/prefill.py").read_bytes().endswith(b"#")


def test_path_without_package_is_bad_input(tmp_path, cache):
    with pytest.raises(BadInput, match="no sglang package"):
        sources.resolve(specs.parse(f"path:{tmp_path}"), cache)


@pytest.mark.slow
def test_a_damaged_tree_entry_is_detected_and_rebuilt(tmp_path, release_tree):
    cache = Store.at(tmp_path / "c")
    tree = sources.resolve(specs.PypiSpec(version="0.5.19"), cache)
    victim = tree.root / "sglang" / "srt" / "disaggregation" / "prefill.py"
    victim.write_text("poisoned = True\n")
    again = sources.resolve(specs.PypiSpec(version="0.5.19"), cache)
    assert again.identity.tree_digest == tree.identity.tree_digest
    assert "poisoned" not in (again.root / "sglang/srt/disaggregation/prefill.py").read_text()
