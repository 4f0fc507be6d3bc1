"""The clones users keep, of a repository of real release trees: a full clone, a blobless clone
(its promisor reachable over file://) and a snapshot whose history lacks every blob outside
python/sglang give one commit the same tree digest and the same audit; a snapshot lacking one blob
inside the package says which, in one line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest

from runner import cli as diffprobe
from runner.store import sources, specs
from runner.app.notices import PRINTED
from runner.store.cache import Store
from tests import gitrepo, helpers
from tests.commands.test_bad_input import assert_one_error, cli
from tests.gitrepo import Step, git


def _objects(git_dir: Path, kind: str | None = None) -> set[str]:
    """The objects a repository holds itself (alternates and promisors aside)."""
    out = git(git_dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)").decode()
    return {line.split()[0] for line in out.splitlines() if kind is None or line.endswith(f" {kind}")}


def _mirror(cache: Path) -> Path:
    [path] = (cache / "git").glob("*.git")
    return path


@pytest.fixture(scope="module")
def clones(upstream_repo, tmp_path_factory) -> dict:
    """A full clone of the release repository with a commit of assets outside the package on top,
    served with partial clones allowed; a blobless clone of it (checked out at its tip, as users
    keep them); snapshots lacking every blob outside the package, and one more inside it."""
    base = tmp_path_factory.mktemp("clones")
    full = base / "full"
    subprocess.run(["git", "clone", "-q", str(upstream_repo["path"]), str(full)], check=True)
    for key in ("uploadpack.allowFilter", "uploadpack.allowAnySHA1InWant"):
        git(full, "config", key, "true")
    tip = gitrepo.build(full, [Step("assets", files={"assets/weights.bin": gitrepo.noise("assets", 1 << 20),
                                                     **{f"test/cases/case_{i:03d}.txt": gitrepo.noise(f"c{i}", 64) for i in range(50)}})])["assets"]
    commits = {**upstream_repo["commits"], "tip": tip}
    blobless = base / "blobless"
    subprocess.run(["git", "clone", "-q", "--filter=blob:none", f"file://{full}", str(blobless)], check=True, capture_output=True)
    package = gitrepo.blobs_under(full, list(commits.values()))
    outside = base / "outside.git"
    gitrepo.snapshot(full, outside, package)
    own = gitrepo.blobs_under(full, [commits["0.5.19"]]) - gitrepo.blobs_under(full, [commits["0.5.20"], commits["0.5.21"]])
    dropped = sorted(own)[0]
    inside = base / "inside.git"
    gitrepo.snapshot(full, inside, package - {dropped})
    return {"full": full, "blobless": blobless, "outside": outside, "inside": inside, "commits": commits, "dropped": dropped}


def test_a_commit_is_one_tree_from_a_full_clone_a_blobless_clone_and_a_snapshot_lacking_blobs_outside(clones, tmp_path, capsys,
                                                                                                    monkeypatch):
    """Each read with its own cache (no stored tree to fall back on). The full clone and the
    snapshot are read in place: their mirrors hold nothing. The blobless clone's mirror holds
    exactly the package blobs it lacked, fetched from its promisor once, the fetch said; the
    user's repository is only read."""
    commits = clones["commits"]
    monkeypatch.setenv("DIFFPROBE_GIT_PROMISORS", f"file://{clones['full']}")  # the promisor the user names
    blobless_before = _objects(clones["blobless"])
    digests: dict[str, set[str]] = {}
    plan = {"full": ("v0.5.19", commits["tip"]), "outside": (commits["tip"],), "blobless": ("v0.5.19",)}
    for name, revs in plan.items():
        cache = tmp_path / name
        capsys.readouterr()
        for rev in revs:
            tree = sources.resolve(specs.parse(f"git+{clones[name]}@{rev}"), Store.at(cache, notices=PRINTED))
            digests.setdefault(rev, set()).add(tree.identity.tree_digest)
        fetches = [line for line in capsys.readouterr().err.splitlines() if "fetch" in line]
        held = _objects(_mirror(cache))
        if name != "blobless":
            assert held == set() and fetches == []
            continue
        # a blobless clone checked out at its tip holds the tip's blobs: 0.5.19's own ones are fetched
        wanted = gitrepo.blobs_under(clones["full"], [commits["0.5.19"]]) - blobless_before
        assert held == wanted and wanted
        assert fetches == [f"✓ fetch {len(wanted)} objects {clones['blobless']} lacks from its promisor file://{clones['full']}"]
        print(f"blobless clone: {len(wanted)} blobs fetched for 0.5.19, mirror "
              f"{sum(p.stat().st_size for p in (_mirror(cache) / 'objects').rglob('*') if p.is_file())} bytes")
    assert [len(d) for d in digests.values()] == [1, 1], digests
    assert _objects(clones["blobless"]) == blobless_before


def test_a_blob_missing_inside_the_package_is_one_line(clones, tmp_path):
    inside, commits = clones["inside"], clones["commits"]
    name = git(clones["full"], "ls-tree", "-r", "--full-tree", commits["0.5.19"], "--", "python/sglang").decode()
    path = next(line.split("\t")[1] for line in name.splitlines() if line.split()[2] == clones["dropped"])
    proc = cli("resolve", f"git+{inside}@v0.5.19", "--cache-dir", str(tmp_path / "cache"), timeout=120)
    assert_one_error(proc, 2, rf"{path} \({clones['dropped']}\) cannot be had: it is not in the repository")
    proc = cli("resolve", f"git+{inside}@v0.5.21", "--cache-dir", str(tmp_path / "cache"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    full = sources.resolve(specs.parse(f"git+{clones['full']}@v0.5.21"), Store.at(tmp_path / "full"))
    assert orjson.loads(proc.stdout)["tree_digest"] == full.identity.tree_digest


def _observed(bundle: Path) -> dict[str, str]:
    """probe -> observation digest (over the tree digest and what each case observed)."""
    receipts = [orjson.loads(path.read_bytes()) for path in (bundle / "receipts").glob("*.json")]
    return {r["probe"]["id"]: r["observation_digest"] for r in receipts}


def test_an_audit_is_the_same_from_each_clone(clones, cache, tmp_path):
    """The blobless clone's audit observes anew (no reuse); the others may reuse receipts of the
    same tree. Every probe's observation digest is the same (the two incident fixes' probes: what
    a clone could get wrong is the tree's bytes, which every probe reads alike)."""
    runs = {}
    for name, reuse in (("full", True), ("blobless", False), ("outside", True)):
        out = tmp_path / name
        code = diffprobe.main(["audit", f"git+{clones[name]}@v0.5.21", "--out", str(out), "--cache-dir", str(cache.root),
                               *([] if reuse else ["--no-reuse"]), *helpers.fix_args()])
        assert code == helpers.audit_exit("0.5.21", helpers.INCIDENT), name
        runs[name] = _observed(out)
    assert runs["full"] and runs["full"] == runs["blobless"] == runs["outside"]
