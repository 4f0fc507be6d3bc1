"""Attacks on intake beyond those its author listed (issue #21 as a class): names a file system folds
into one, a name too long for a host path, wheel members an installer reads otherwise, git trees git
reads otherwise, objects that decompress to far more than they take, swaps during a walk, and what a
source holds beside its package, named in the receipt. Hand-made and fast: each hostile input ends as
one line (exit 2) before anything is stored; the real-release suite is test_intake_hostile.py.
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

import pytest

from runner.errors import BAD_INPUT, BadInput
from runner.files import sha256_file
from runner.store import intake, mirrors, path, pypi, sources, specs, trees
from runner.store.cache import Store, write_model
from runner.store.intake import Bounds, Refused
from tests import gitrepo
from tests.gitrepo import Step, git

PKG = "python/sglang"


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    """``root/sglang`` holding ``files`` (names relative to it, made byte for byte)."""
    for name, data in {"__init__.py": b"", **files}.items():
        target = os.fsencode(root / "sglang") + b"/" + os.fsencode(name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(data)
    return root


def _stored(cache: Store) -> list[str]:
    return sorted(p.name for p in cache.trees().iterdir()) if cache.trees().exists() else []


def _refused(call, cache: Store) -> str:
    with pytest.raises(BadInput) as e:
        call()
    assert e.value.exit_code == BAD_INPUT and "\n" not in e.value.message
    assert _stored(cache) == []
    return e.value.message


def _resolve(root: Path, cache: Store, bounds: Bounds = Bounds()):
    return path.resolve(specs.PathSpec(dir=str(root)), cache, bounds)


# --- names one file system takes for one file -------------------------------------------------------

TWINS = {
    "case": ("srt/managers/Scheduler.py", "srt/managers/scheduler.py"),
    "kelvin-sign": ("srt/\u212a.py", "srt/k.py"),  # K folds to k
    "nfc-nfd": ("srt/caf\u00e9.py", "srt/cafe\u0301.py"),  # one name to macOS, two byte strings here
    "ligature": ("srt/\ufb01le.py", "srt/file.py"),  # NFKC: the identifier `ﬁle` imports file
    "trailing-dot": ("srt/a.py.", "srt/a.py"),  # Windows drops it
    "trailing-blank": ("srt/a.py ", "srt/a.py"),
    "directory-case": ("SRT/x.py", "srt/y.py"),  # two directories that are one
    "file-and-directory": ("srt/Mod", "srt/mod/__init__.py"),
}


@pytest.mark.parametrize("case", TWINS)
def test_two_names_a_folding_file_system_takes_for_one_are_refused(tmp_path, case):
    """Stored on Linux they are two files under one digest; unpacked where the fork deploys (or the
    store lives) on macOS or Windows they are one, whose bytes depend on the order of writing. A
    fixed ``scheduler.py`` probed beside a buggy ``Scheduler.py`` would read "fixed" for a tree
    that runs the other. Refused from every source, naming the entry."""
    first, second = TWINS[case]
    cache = Store(tmp_path / "c")
    root = _tree(tmp_path / "t", {first: b"A = 1\n", second: b"B = 2\n"})
    message = _refused(lambda: _resolve(root, cache), cache)
    assert "case-insensitive or normalizing" in message
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang/__init__.py", "")
        zf.writestr(f"sglang/{first}", "A = 1\n")
        zf.writestr(f"sglang/{second}", "B = 2\n")
    with zipfile.ZipFile(wheel) as zf:
        assert "case-insensitive" in _refused(lambda: trees.store(cache, intake.wheel(zf, "sglang"), where="w.whl"), cache)


def test_twins_in_a_git_tree_are_refused_too(tmp_path):
    repo = tmp_path / "repo"
    commit = gitrepo.build(repo, [Step("one", files={f"{PKG}/__init__.py": b"", f"{PKG}/srt/scheduler.py": b"FIXED = 1\n",
                                                     f"{PKG}/srt/Scheduler.py": b"FIXED = 0\n"})])["one"]
    cache = Store.at(tmp_path / "cache")
    message = _refused(lambda: sources.resolve(specs.parse(f"git+{repo}@{commit}"), cache), cache)
    assert "'srt/scheduler.py'" in message and "case-insensitive" in message


def test_every_real_release_name_is_its_own_when_folded(release_tree):
    """The rule costs nothing real: no release holds two names that fold alike."""
    for version in ("0.5.21",):
        folded = {intake.folded(f) for f in release_tree(version).files}
        assert len(folded) == len(release_tree(version).files)


# --- a name longer than a host path holds -----------------------------------------------------------


def test_a_name_too_long_for_a_host_path_is_refused_before_it_is_stored(tmp_path):
    """20 levels of 240-byte names: each part is legal and the depth is within bounds, intake wrote it
    through directory descriptors, but the environment's overlay (and Python, the scan, byte-code
    compilation) reach a stored file by its full path: ENAMETOOLONG, an internal error, not one line."""
    root = _tree(tmp_path / "t", {})
    fd = os.open(root / "sglang", os.O_RDONLY)
    for i in range(20):  # made part by part: the whole path is too long to name
        os.mkdir(f"d{i}" + "x" * 240, dir_fd=fd)
        fd, parent = os.open(f"d{i}" + "x" * 240, os.O_RDONLY, dir_fd=fd), fd
        os.close(parent)
    os.close(os.open("mod.py", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    os.close(fd)
    cache = Store(tmp_path / "c")
    message = _refused(lambda: _resolve(root, cache), cache)
    assert f"over the bound of {intake.NAME_BYTES}" in message


# --- wheels: what an installer reads, not what a mode bit says --------------------------------------


def _member(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = mode << 16
    return info


def test_a_member_whose_mode_says_directory_but_name_a_file_is_refused(tmp_path):
    """``pip`` decides by the name (a trailing ``/``): it would install ``scheduler.py`` with these bytes,
    where a reading by mode made it an empty directory, left out, never probed."""
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang/__init__.py", "")
        zf.writestr(_member("sglang/srt/scheduler.py", stat.S_IFDIR | 0o755), "FIXED = 0\n")
    cache = Store(tmp_path / "c")
    with zipfile.ZipFile(wheel) as zf:
        message = _refused(lambda: trees.store(cache, intake.wheel(zf, "sglang", "w.whl"), where="w.whl"), cache)
    assert "'srt/scheduler.py'" in message and "mode says a directory" in message


def test_a_zip_bomb_is_refused_by_its_declared_size_before_it_is_inflated(tmp_path):
    """200 MiB of zeros deflate to 200 KiB: the bound reads the declared size, nothing is inflated."""
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("sglang/__init__.py", "")
        with zf.open("sglang/weights.bin", "w", force_zip64=True) as member:
            for _ in range(200):
                member.write(bytes(1 << 20))
    assert wheel.stat().st_size < 1 << 20
    cache = Store(tmp_path / "c")
    with zipfile.ZipFile(wheel) as zf:
        message = _refused(lambda: trees.store(cache, intake.wheel(zf, "sglang"), where="w.whl",
                                               bounds=Bounds(file_size=64 << 20)), cache)
    assert "'weights.bin'" in message and "--max-file-size" in message


def test_a_member_named_differently_in_its_local_header_is_refused(tmp_path):
    """The central directory lists ``a.py``; the bytes at its offset say they are ``b.py``: one line."""
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang/__init__.py", "")
        zf.writestr("sglang/a.py", "A = 1\n")
    data = wheel.read_bytes()
    first = data.index(b"sglang/a.py")  # the local header's copy comes first
    wheel.write_bytes(data[:first] + b"sglang/b.py" + data[first + len(b"sglang/a.py"):])
    cache = Store(tmp_path / "c")
    with zipfile.ZipFile(wheel) as zf:
        assert "cannot be read" in _refused(lambda: trees.store(cache, intake.wheel(zf, "sglang"), where="w.whl"), cache)


def _fake_download(cache: Store, version: str, wheel: Path) -> None:
    """A wheel in the download store as ``pypi._download`` leaves one (stamp and sha256)."""
    final = cache.download(f"sglang-{version}")
    final.mkdir(parents=True)
    (final / wheel.name).write_bytes(wheel.read_bytes())
    write_model(final / "download.json", pypi._Download(artifact=wheel.name, sha256=sha256_file(wheel)))


def test_what_a_wheel_installs_beside_its_package_is_named_in_the_receipt(tmp_path):
    """An installer puts a top-level ``.pth`` (run at every interpreter start), ``.data/purelib/``
    (inside the package), a module beside it and an absolute name on the import path; the tree is
    ``sglang/`` alone. Every one is in ``TreeIdentity.left_out``, from the download and from the
    index alike, so a receipt never reads as covering the wheel whole."""
    wheel = tmp_path / "sglang-9.9.9-cp311-cp311-manylinux_2_34_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang/__init__.py", "")
        zf.writestr("sglang/srt/__pycache__/x.cpython-311.pyc", b"\0" * 16)
        zf.writestr("sglang-9.9.9.dist-info/METADATA", "Name: sglang\n")
        zf.writestr("zz_vendor.pth", "import zz_vendor\n")
        zf.writestr("zz_vendor.py", "print('runs first')\n")
        zf.writestr("sglang-9.9.9.data/purelib/sglang/srt/hidden.py", "HIDDEN = 1\n")
        zf.writestr("/sglang/absolute.py", "A = 1\n")
    cache = Store(tmp_path / "c")
    _fake_download(cache, "9.9.9", wheel)
    spec = specs.PypiSpec(version="9.9.9")
    want = ("sglang/srt/__pycache__/x.cpython-311.pyc", "/sglang/absolute.py",
            "sglang-9.9.9.data/purelib/sglang/srt/hidden.py", "zz_vendor.pth", "zz_vendor.py")
    first = pypi.resolve(spec, cache, None)
    again = pypi.resolve(spec, cache, None)  # from the index
    assert first.identity.left_out == again.identity.left_out == want
    assert first.files == ("sglang/__init__.py",)


def test_what_a_directory_holds_beside_its_source_is_named_in_the_receipt(tmp_path):
    root = _tree(tmp_path / "t", {"srt/a.py": b"A = 1\n", "srt/__pycache__/a.cpython-311.pyc": b"\0" * 16,
                                  "srt/b.pyc": b"\0" * 16})
    (root / "sglang" / "srt" / "namespace").mkdir()  # imports as a namespace package in a deployment
    tree = _resolve(root, Store(tmp_path / "c"))
    assert tree.identity.left_out == ("sglang/srt/__pycache__/a.cpython-311.pyc", "sglang/srt/b.pyc", "sglang/srt/namespace/")
    assert tree.files == ("sglang/__init__.py", "sglang/srt/a.py")


def test_a_flood_of_empty_directories_counts_against_the_bound(tmp_path):
    root = _tree(tmp_path / "t", {})
    for i in range(300):
        (root / "sglang" / f"e{i:03d}").mkdir()
    cache = Store(tmp_path / "c")
    assert "--max-files" in _refused(lambda: _resolve(root, cache, Bounds(files=100)), cache)


# --- a directory that changes while it is taken in --------------------------------------------------


@pytest.mark.parametrize("swap", ["other-directory", "link-to-a-copy"])
def test_a_directory_swapped_after_it_was_listed_is_refused(tmp_path, swap):
    """Listed, then ``srt`` replaced: by another directory holding other bytes under the same names, or
    by a link to such a copy. The files are read from what was listed or not at all."""
    root = _tree(tmp_path / "t", {"srt/a.py": b"FIXED = 1\n"})
    with intake.directory(root, "test", ("sglang",)) as entries:
        listed = list(entries)
        os.rename(root / "sglang" / "srt", tmp_path / "old-srt")
        other = _tree(tmp_path / "o", {"srt/a.py": b"FIXED = 0\n"}) / "sglang" / "srt"
        if swap == "other-directory":
            os.rename(other, root / "sglang" / "srt")
        else:
            os.symlink(other, root / "sglang" / "srt")
        with pytest.raises(Refused, match="changed while being taken in"):
            intake.take(listed, None, Bounds(), "test")


def test_a_link_on_the_way_to_the_package_is_refused(tmp_path):
    """``python`` itself a link to another checkout's: the package is not inside the directory given."""
    real = _tree(tmp_path / "elsewhere" / "python", {})
    (tmp_path / "fork").mkdir()
    os.symlink(real, tmp_path / "fork" / "python")
    cache = Store(tmp_path / "c")
    assert "symbolic link" in _refused(lambda: _resolve(tmp_path / "fork", cache), cache)


# --- git: trees as git reads them, objects within bounds before they are read -----------------------


def _literal(repo: Path, entries: list[tuple[str, bytes, str]]) -> str:
    body = b"".join(mode.encode() + b" " + name + b"\0" + bytes.fromhex(oid) for mode, name, oid in entries)
    return git(repo, "hash-object", "-t", "tree", "-w", "--literally", "--stdin", stdin=body).decode().strip()


def _blob(repo: Path, data: bytes) -> str:
    return git(repo, "hash-object", "-w", "--stdin", stdin=data).decode().strip()


def _commit(repo: Path, package: str, message: str = "odd") -> str:
    python = _literal(repo, [("40000", b"sglang", package)])
    root = _literal(repo, [("40000", b"python", python)])
    return git(repo, "-c", "user.name=t", "-c", "user.email=t@diffprobe.invalid", "commit-tree", root, "-F", "-",
               stdin=message.encode()).decode().strip()


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    gitrepo.build(repo, [Step("one", files={f"{PKG}/__init__.py": b""})])
    return repo


def test_a_zero_padded_tree_mode_is_read_as_the_tree_git_checks_out(tmp_path):
    """``040000`` is a tree to git (fsck only warns); read as a string it was no tree, and its subtree
    was not what the digest covered. Now the commit's tree is the one a checkout writes."""
    repo = _repo(tmp_path)
    init, sub = _blob(repo, b"from .hidden.mod import X\n"), _literal(repo, [("100644", b"mod.py", _blob(repo, b"X = 0\n"))])
    padded = _commit(repo, _literal(repo, [("100644", b"__init__.py", init), ("040000", b"hidden", sub)]))
    plain = _commit(repo, _literal(repo, [("100644", b"__init__.py", init), ("40000", b"hidden", sub)]))
    cache = Store.at(tmp_path / "cache")
    got = sources.resolve(specs.parse(f"git+{repo}@{padded}"), cache)
    assert got.files == ("sglang/__init__.py", "sglang/hidden/mod.py")
    assert got.identity.tree_digest == sources.resolve(specs.parse(f"git+{repo}@{plain}"), cache).identity.tree_digest


def test_a_chain_of_trees_deeper_than_the_bound_is_refused_level_by_level(tmp_path):
    """300 trees each holding the next: one git process per level, cut at the depth bound."""
    repo = _repo(tmp_path)
    tree = _literal(repo, [("100644", b"x.py", _blob(repo, b""))])
    for _ in range(300):
        tree = _literal(repo, [("40000", b"d", tree)])
    commit = _commit(repo, _literal(repo, [("100644", b"__init__.py", _blob(repo, b"")), ("40000", b"deep", tree)]))
    cache = Store.at(tmp_path / "cache")
    message = _refused(lambda: sources.resolve(specs.parse(f"git+{repo}@{commit}"), cache), cache)
    assert f"more than {Bounds.depth} levels deep" in message


def test_a_tree_object_larger_than_its_entries_could_take_is_refused_unread(tmp_path):
    """A tree of 2 000 entries against a bound of 50: its size says so before its body is read (git
    stores it compressed: a tree of millions of entries fits in a small repository)."""
    repo = _repo(tmp_path)
    blob = _blob(repo, b"")
    big = _literal(repo, [("100644", b"__init__.py", blob)] + [("100644", f"m{i:05d}.py".encode(), blob) for i in range(2000)])
    commit = _commit(repo, big)
    cache = Store.at(tmp_path / "cache")
    message = _refused(lambda: sources.resolve(specs.parse(f"git+{repo}@{commit}"), cache, bounds=Bounds(files=50)), cache)
    assert "bytes, over the" in message and "--max-files" in message


def test_a_commit_of_megabytes_is_refused_unread(tmp_path):
    repo = _repo(tmp_path)
    commit = _commit(repo, _literal(repo, [("100644", b"__init__.py", _blob(repo, b""))]), message="x" * (2 << 20))
    cache = Store.at(tmp_path / "cache")
    message = _refused(lambda: sources.resolve(specs.parse(f"git+{repo}@{commit}"), cache), cache)
    assert f"the commit {commit[:12]}" in message and "bytes, over the" in message


def test_a_file_read_from_git_is_bounded_before_it_is_read(tmp_path):
    """upstream-tests read a test file (and its helpers) from a commit: its size is read first."""
    repo = tmp_path / "repo"
    commit = gitrepo.build(repo, [Step("one", files={f"{PKG}/__init__.py": b"", "test/big.py": b"x" * 4096})])["one"]
    cache = Store.at(tmp_path / "cache")
    assert sources.read_file(str(repo), commit, "test/big.py", cache, limit=4096) == b"x" * 4096
    with pytest.raises(Refused, match="4096 bytes, over the bound of 4095"):
        sources.read_file(str(repo), commit, "test/big.py", cache, limit=4095)
    with pytest.raises(BadInput, match="no file test/none.py"):
        sources.read_file(str(repo), commit, "test/none.py", cache)


def test_the_entry_bound_of_a_git_tree_names_its_option(tmp_path):
    repo = _repo(tmp_path)
    blob = _blob(repo, b"")
    commit = _commit(repo, _literal(repo, [("100644", b"__init__.py", blob)] + [("100644", f"m{i}.py".encode(), blob) for i in range(20)]))
    cache = Store.at(tmp_path / "cache")
    m = mirrors.resolve(str(repo), commit, cache)[0]
    tree = mirrors.package_trees(m, [commit], PKG)[0]
    message = _refused(lambda: mirrors.package_files(m, tree, "pkg", Bounds(files=10)), cache)
    assert "more than 10 files and directories (raise it with --max-files)" in message
