"""A git source read from the repository users keep, on hand-made repositories (the runner's own
mechanics, no SGLang): objects hashed as they are read, the package's objects fetched from a
partial clone's promisor once, a missing one named, and tree entries that are not regular files
refused before a byte is read."""

from __future__ import annotations

import subprocess
import zlib
from pathlib import Path

import pytest

from runner.errors import BadInput
from runner.store import gitobjects, mirrors, sources, specs
from runner.app.notices import PRINTED
from runner.store.cache import Store
from tests import gitrepo
from tests.gitrepo import Step, git

PKG = "python/sglang"
ONE = {f"{PKG}/__init__.py": b"V = 1\n", f"{PKG}/srt/a.py": b"A = 1\n", f"{PKG}/srt/empty/__init__.py": b"",
       f"{PKG}/srt/same/__init__.py": b"", "docs/big.bin": gitrepo.noise("one", 1 << 16)}  # two identical subtrees


@pytest.fixture
def tiny(tmp_path) -> dict:
    path = tmp_path / "tiny"
    commits = gitrepo.build(path, [Step("one", files=ONE),
                                   Step("two", files={f"{PKG}/__init__.py": b"V = 2\n", "docs/big.bin": gitrepo.noise("two", 1 << 16)})])
    return {"path": path, "commits": commits}


def _resolve(url: Path | str, rev: str, cache: Path) -> sources.Tree:
    return sources.resolve(specs.parse(f"git+{url}@{rev}"), Store.at(cache, notices=PRINTED))


def _objects(git_dir: Path) -> set[str]:
    """The objects a repository holds itself (alternates and promisors aside)."""
    out = git(git_dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").decode()
    return set(out.split())


def _mirror(cache: Path) -> Path:
    [path] = (cache / "git").glob("*.git")
    return path


# --- objects -----------------------------------------------------------------------------------


def _tree(*entries: tuple[str, bytes, str]) -> bytes:
    return b"".join(mode.encode() + b" " + name + b"\0" + bytes.fromhex(oid) for mode, name, oid in entries)


@pytest.mark.parametrize("body, refusal", [
    (_tree(("40000", b"a/b", "a" * 40)), r"refusing the name b'a/b'"),
    (_tree(("100644", b"a.py", "a" * 40), ("40000", b"a.py", "b" * 40)), "appears twice"),
    (_tree(("100648", b"a.py", "a" * 40)), "not an octal number"),
    (_tree(("100644", b"a.py", "a" * 40))[:-3], "truncated"),
    (b"100644 a.py", "truncated"),
])
def test_what_only_a_tree_shows_is_refused_when_it_is_read(body, refusal):
    """A '/' in one name, a name twice: joined into paths, intake could no longer see them."""
    with pytest.raises(BadInput, match=refusal):
        gitobjects.tree_entries(body, "c" * 40)


def _commit_with(repo: Path, name: bytes, payload: bytes) -> str:
    """A commit whose package tree is ONE's plus a file ``name``, written as it is (``hash-object
    --literally``: what git's own tools would refuse to make)."""
    commit = gitrepo.build(repo, [Step("one", files=ONE)])["one"]
    blob = git(repo, "hash-object", "-w", "--stdin", stdin=payload).decode().strip()
    listed = git(repo, "ls-tree", "-z", f"{commit}:{PKG}").split(b"\0")
    own = [(line.split()[0].decode(), line.split(b"\t", 1)[1], line.split()[2].decode()) for line in listed if line]
    body = _tree(*sorted([*own, ("100644", name, blob)], key=lambda e: e[1]))
    package = git(repo, "hash-object", "-t", "tree", "-w", "--literally", "--stdin", stdin=body).decode().strip()

    def mktree(*lines: str) -> str:
        return git(repo, "mktree", stdin="".join(f"{line}\n" for line in lines).encode()).decode().strip()

    root = mktree(f"040000 tree {mktree(f'040000 tree {package}	sglang')}\tpython")
    return git(repo, "-c", "user.name=t", "-c", "user.email=t@diffprobe.invalid", "commit-tree", root, "-m", "odd").decode().strip()


@pytest.mark.parametrize("name, refusal", [
    (b"..", "not a plain relative path"),
    (b"new\nline.py", "holds a newline"),
    (b"bad\xff.py", "not valid UTF-8"),
    (b"", "not a plain relative path"),
])
def test_a_name_intake_refuses_is_one_line_naming_it_from_a_git_tree_too(tmp_path, name, refusal):
    """Names reach intake as git spells them: its rules, one place, for every source."""
    repo = tmp_path / "repo"
    commit = _commit_with(repo, name, b"X = 1\n")
    with pytest.raises(BadInput, match=refusal) as refused:
        _resolve(repo, commit, tmp_path / "cache")
    assert "\n" not in refused.value.message
    assert not list((tmp_path / "cache" / "trees").glob("h1*"))


def test_an_object_is_taken_only_if_it_hashes_to_its_id():
    body = b"A = 1\n"
    oid = gitobjects.object_id("blob", body)
    assert oid == subprocess.run(["git", "hash-object", "--stdin"], input=body, capture_output=True, check=True).stdout.decode().strip()
    batch = f"{oid} blob {len(body)}\n".encode() + body + b"\n" + b"f" * 40 + b" missing\n"
    assert gitobjects.parse_batch(batch, "here") == {oid: ("blob", body)}
    forged = f"{oid} blob 6\n".encode() + b"A = 2\n\n"
    with pytest.raises(BadInput, match=f"here: the blob {oid} does not hash to its id"):
        gitobjects.parse_batch(forged, "here")


def test_a_forged_object_in_a_repository_read_in_place_is_refused(tmp_path):
    """git's readers hand out a loose object's contents without hashing them; a tree read in
    place would carry bytes its commit id does not name."""
    repo = tmp_path / "forged"
    commit = gitrepo.build(repo, [Step("one", files=ONE)])["one"]
    oid = git(repo, "rev-parse", f"{commit}:{PKG}/srt/a.py").decode().strip()
    loose = repo / ".git" / "objects" / oid[:2] / oid[2:]
    loose.parent.mkdir(exist_ok=True)
    loose.write_bytes(zlib.compress(b"blob 6\0A = 2\n"))  # a loose copy wins over the packed one
    with pytest.raises(BadInput, match=f"blob {oid} does not hash to its id"):
        _resolve(repo, commit, tmp_path / "cache")


# --- where objects come from -------------------------------------------------------------------


def test_a_full_repository_is_read_in_place_and_nothing_of_it_is_copied(tiny, tmp_path):
    cache = tmp_path / "cache"
    tree = _resolve(tiny["path"], "main~1", cache)
    assert (tree.root / "sglang/srt/a.py").read_bytes() == b"A = 1\n" and tree.identity.files == 4
    assert (tree.root / "sglang/srt/same/__init__.py").exists() and (tree.root / "sglang/srt/empty/__init__.py").exists()
    assert _objects(_mirror(cache)) == set()
    bare = tmp_path / 'bare:"x.git'  # the alternates list's separator and quote, in the path
    subprocess.run(["git", "clone", "-q", "--bare", str(tiny["path"]), str(bare)], check=True)
    linked = tmp_path / "linked"
    git(tiny["path"], "worktree", "add", "-q", str(linked), "main~1")
    for url in (bare, linked, f"file://{bare}"):
        assert _resolve(url, "main~1", tmp_path / "other").identity.tree_digest == tree.identity.tree_digest


def test_a_blobless_clone_fetches_only_the_package_blobs_it_lacks_once_and_says_so(tiny, tmp_path, capsys, monkeypatch):
    blobless = tmp_path / "blobless"
    subprocess.run(["git", "clone", "-q", "--no-checkout", "--filter=blob:none", f"file://{tiny['path']}", str(blobless)], check=True)
    held = _objects(blobless)
    full = _resolve(tiny["path"], tiny["commits"]["one"], tmp_path / "full")
    capsys.readouterr()
    cache = tmp_path / "cache"
    with pytest.raises(BadInput, match=rf"its promisor remote file://{tiny['path']} is not one you named \(set "
                                       rf"DIFFPROBE_GIT_PROMISORS=file://{tiny['path']} to fetch from it\)"):
        _resolve(blobless, tiny["commits"]["one"], cache)  # the repository's own configuration names it: not contacted
    assert "fetch" not in capsys.readouterr().err
    monkeypatch.setenv("DIFFPROBE_GIT_PROMISORS", f"file://{tiny['path']}")
    one = _resolve(blobless, tiny["commits"]["one"], cache)
    assert one.identity.tree_digest == full.identity.tree_digest
    wanted = gitrepo.blobs_under(tiny["path"], [tiny["commits"]["one"]])
    assert len(wanted) == 3  # V = 1, A = 1, and the empty file of both subtrees
    said = [line for line in capsys.readouterr().err.splitlines() if "fetch" in line]
    assert said == [f"✓ fetch 3 objects {blobless} lacks from its promisor file://{tiny['path']}"]
    assert _objects(_mirror(cache)) == wanted  # not docs/big.bin
    _resolve(blobless, tiny["commits"]["two"], cache)  # one new blob: V = 2
    assert [line for line in capsys.readouterr().err.splitlines() if "fetch" in line] == [
        f"✓ fetch 1 objects {blobless} lacks from its promisor file://{tiny['path']}"]
    _resolve(blobless, tiny["commits"]["one"], cache)
    assert "fetch" not in capsys.readouterr().err
    assert _objects(blobless) == held  # the user's repository is only read


def test_a_repository_lacking_blobs_outside_the_package_reads_like_the_full_one(tiny, tmp_path):
    package = gitrepo.blobs_under(tiny["path"], list(tiny["commits"].values()))
    snapshot = tmp_path / "snapshot.git"
    gitrepo.snapshot(tiny["path"], snapshot, package)
    for rev in ("one", "two"):
        sha = tiny["commits"][rev]
        assert _resolve(snapshot, sha, tmp_path / "a").identity.tree_digest == _resolve(tiny["path"], sha, tmp_path / "b").identity.tree_digest


def test_a_package_blob_that_cannot_be_had_is_named(tiny, tmp_path, monkeypatch):
    one = tiny["commits"]["one"]
    a = git(tiny["path"], "rev-parse", f"{one}:{PKG}/srt/a.py").decode().strip()
    snapshot = tmp_path / "snapshot.git"
    gitrepo.snapshot(tiny["path"], snapshot, gitrepo.blobs_under(tiny["path"], [one]) - {a})
    with pytest.raises(BadInput, match=rf"{snapshot}: commit {one[:12]}: {PKG}/srt/a.py \({a}\) cannot be had: "
                                       "it is not in the repository, which has no promisor remote"):
        _resolve(snapshot, one, tmp_path / "cache")
    blobless = tmp_path / "blobless"
    subprocess.run(["git", "clone", "-q", "--no-checkout", "--filter=blob:none", f"file://{tiny['path']}", str(blobless)], check=True)
    git(blobless, "config", "remote.origin.url", str(tmp_path / "gone"))
    monkeypatch.setenv("DIFFPROBE_GIT_PROMISORS", str(tmp_path / "gone"))
    with pytest.raises(BadInput, match=rf"{PKG}/\S+ \([0-9a-f]{{40}}\) \(and 2 more objects\) cannot be had: the fetch from "
                                       rf"file://{tmp_path}/gone did not bring it"):
        _resolve(blobless, one, tmp_path / "cache")


@pytest.mark.parametrize("entry, kind", [(("120000", b"/etc/passwd"), "a symbolic link to an absolute path"),
                                        (("160000", "d" * 40), r"it is a submodule \(git link\); only regular files")])
def test_a_link_out_or_a_submodule_in_the_package_is_refused_naming_it(tmp_path, entry, kind):
    repo = tmp_path / "repo"
    commit = gitrepo.build(repo, [Step("one", files={**ONE, f"{PKG}/srt/odd.py": entry})])["one"]
    with pytest.raises(BadInput, match=rf"'srt/odd.py': refused: {kind}"):
        _resolve(repo, commit, tmp_path / "cache")
    assert not list((tmp_path / "cache" / "trees").glob("h1*"))


def test_a_tree_naming_one_subtree_many_times_is_refused_before_it_is_listed(tmp_path):
    """Twenty entries naming one tree, five levels deep: 3.2 million paths from a few objects."""
    repo = tmp_path / "repo"
    gitrepo.build(repo, [Step("one", files=ONE)])

    def mktree(*lines: str) -> str:
        return git(repo, "mktree", stdin="".join(f"{line}\n" for line in lines).encode()).decode().strip()

    empty = git(repo, "hash-object", "-w", "--stdin", stdin=b"").decode().strip()
    tree = mktree(f"100644 blob {empty}\tx.py")
    for _ in range(5):
        tree = mktree(*(f"040000 tree {tree}\td{i:02d}" for i in range(20)))
    package = mktree(f"100644 blob {empty}\t__init__.py", f"040000 tree {tree}\tdeep")
    root = mktree(f"040000 tree {mktree(f'040000 tree {package}	sglang')}\tpython")
    commit = git(repo, "-c", "user.name=t", "-c", "user.email=t@diffprobe.invalid", "commit-tree", root, "-m", "deep").decode().strip()
    with pytest.raises(BadInput, match=r"refused: more than 25000 files and directories"):
        _resolve(repo, commit, tmp_path / "cache")


def test_a_shallow_clone_reads_its_commits_and_its_history_ends_where_it_says(tiny, tmp_path):
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth=1", f"file://{tiny['path']}", str(shallow)], check=True)
    m, head, _ = mirrors.resolve(str(shallow), "main", Store.at(tmp_path / "cache"))
    assert m.lines("rev-list", head) == [head] == [tiny["commits"]["two"]]
    assert _resolve(shallow, "main", tmp_path / "cache").identity.tree_digest == \
        _resolve(tiny["path"], "main", tmp_path / "full").identity.tree_digest


def test_a_treeless_clone_fetches_the_trees_on_the_path_and_the_package_blobs_only(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFPROBE_GIT_PROMISORS", f"file://{tiny['path']}")
    """``--filter=tree:0``: the commit's trees come first (filtered, no blob), then the package's
    blobs; no blob outside the package."""
    treeless = tmp_path / "treeless"
    subprocess.run(["git", "clone", "-q", "--no-checkout", "--filter=tree:0", f"file://{tiny['path']}", str(treeless)], check=True)
    one = tiny["commits"]["one"]
    tree = _resolve(treeless, one, tmp_path / "cache")
    assert tree.identity.tree_digest == _resolve(tiny["path"], one, tmp_path / "full").identity.tree_digest
    fetched = git(_mirror(tmp_path / "cache"), "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)").decode()
    assert {line.split()[0] for line in fetched.splitlines() if line.endswith(" blob")} == gitrepo.blobs_under(tiny["path"], [one])
