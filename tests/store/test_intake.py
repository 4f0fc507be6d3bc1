"""Intake (runner/store/intake.py) on hand-made layouts: the mechanics, fast, no SGLang.

Each hostile layout ends as one refusal naming its entry (exit 2), before anything of the tree is
stored; the real-release variants are in test_intake_hostile.py, the generated ones in
test_intake_property.py.
"""

from __future__ import annotations

import io
import os
import stat
import zipfile
from pathlib import Path

import pytest

from runner.errors import BAD_INPUT
from runner.store import intake, path, specs, trees
from runner.store.cache import Store
from runner.store.intake import Bounds, Entry, Refused


def _pkg(root: Path) -> Path:
    pkg = root / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "__init__.py").write_text("x = 1\n")
    (pkg / "srt" / "a.py").write_text("def f():\n    return 2\n")
    return pkg


def _resolve(root: Path, cache: Store, bounds: Bounds = Bounds()):
    return path.resolve(specs.PathSpec(dir=str(root)), cache, bounds)


def _stored(cache: Store) -> list[str]:
    """What the tree store holds: entries and scratch alike."""
    return sorted(p.name for p in cache.trees().iterdir()) if cache.trees().exists() else []


def _refused(root: Path, cache: Store, bounds: Bounds = Bounds()) -> str:
    with pytest.raises(Refused) as e:
        _resolve(root, cache, bounds)
    assert e.value.exit_code == BAD_INPUT and "\n" not in e.value.message
    assert _stored(cache) == []  # nothing of a refused tree is left in the store
    return e.value.message


def test_a_plain_tree_is_taken_in_and_its_digest_is_the_documented_one(tmp_path):
    pkg = _pkg(tmp_path / "t")
    tree = _resolve(tmp_path / "t", Store(tmp_path / "c"))
    assert tree.files == ("sglang/__init__.py", "sglang/srt/a.py")
    assert tree.identity.tree_digest == trees.digest(trees.read_back(tmp_path / "t"))
    assert all(stat.S_ISREG(os.lstat(tree.root / f).st_mode) for f in tree.files)
    assert (tree.root / "sglang" / "srt" / "a.py").read_bytes() == (pkg / "srt" / "a.py").read_bytes()


@pytest.mark.parametrize("make, what", [
    (lambda p, host: os.symlink(host, p / "srt" / "b.py"), "symbolic link"),
    (lambda p, host: os.symlink("/nonexistent/x", p / "srt" / "b.py"), "symbolic link"),  # dangling
    (lambda p, host: os.symlink(host.parent, p / "srt" / "pkg"), "symbolic link"),  # a directory link
    (lambda p, host: os.symlink(".", p / "srt" / "b.py"), "symbolic link"),  # inside, to a directory
    (lambda p, host: os.symlink("../../host/secret.py", p / "srt" / "b.py"), "symbolic link"),  # out, to a host file
    (lambda p, host: os.symlink("/dev/zero", p / "srt" / "b.py"), "symbolic link"),
    (lambda p, host: os.mkfifo(p / "srt" / "b.py"), "FIFO"),
    (lambda p, host: os.link(host, p / "srt" / "b.py"), "hard links"),
])
def test_links_that_leave_or_special_files_are_refused_naming_the_entry(tmp_path, make, what):
    host = tmp_path / "host" / "secret.py"
    host.parent.mkdir()
    host.write_text("SECRET = 'host'\n")
    pkg = _pkg(tmp_path / "t")
    make(pkg, host)
    message = _refused(tmp_path / "t", Store(tmp_path / "c"))
    assert what in message and "srt/" in message


def test_a_socket_is_refused(tmp_path):
    import socket
    pkg = _pkg(tmp_path / "t")
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(pkg / "s.py"))
        assert "socket" in _refused(tmp_path / "t", Store(tmp_path / "c"))
    finally:
        s.close()


def test_hard_links_inside_the_tree_are_two_copies(tmp_path):
    pkg = _pkg(tmp_path / "t")
    os.link(pkg / "srt" / "a.py", pkg / "srt" / "b.py")
    tree = _resolve(tmp_path / "t", Store(tmp_path / "c"))
    assert "sglang/srt/b.py" in tree.files and os.lstat(tree.root / "sglang/srt/b.py").st_nlink == 1


def test_the_package_directory_itself_as_a_link_is_refused(tmp_path):
    real = _pkg(tmp_path / "elsewhere")
    (tmp_path / "t").mkdir()
    os.symlink(real, tmp_path / "t" / "sglang")
    assert "symbolic link" in _refused(tmp_path / "t", Store(tmp_path / "c"))
    (tmp_path / "u" / "python").mkdir(parents=True)
    os.symlink(real.parent, tmp_path / "u" / "python" / "x")
    os.symlink(tmp_path / "u" / "python" / "x" / "sglang", tmp_path / "u" / "python" / "sglang")
    assert "symbolic link" in _refused(tmp_path / "u", Store(tmp_path / "c"))


@pytest.mark.parametrize("name, why", [
    (b"srt/a\nb.py", "newline"),
    (b"srt/a\rb.py", "carriage return"),
    (b"srt/a\x1b[31mb.py", "U+001B"),
    (b"srt/a\\b.py", "backslash"),
    (b"srt/\xff\xfe.py", "not valid UTF-8"),
    (b"srt/a\xe2\x80\xaeb.py", "U+202E"),  # right-to-left override: prints as another name
    (b"srt/a\xe2\x80\xa8b.py", "U+2028"),  # a line separator to str.splitlines
])
def test_names_that_are_not_plain_and_printable_are_refused(tmp_path, name, why):
    pkg = _pkg(tmp_path / "t")
    Path(os.fsdecode(os.fsencode(pkg) + b"/" + name)).write_bytes(b"x = 1\n")
    assert why in _refused(tmp_path / "t", Store(tmp_path / "c"))


@pytest.mark.parametrize("name", [b"../x.py", b"/etc/x.py", b"srt/../../x.py", b"srt//x.py", b"./x.py", b"srt/."])
def test_names_that_leave_or_blur_the_package_are_refused(name):
    with pytest.raises(Refused, match="plain relative path"):
        intake.take([Entry(b"__init__.py", stat.S_IFREG | 0o644, 0, b""), Entry(name, stat.S_IFREG | 0o644, 1, b"x")],
                     None, Bounds(), "test")


def test_bounds_are_checked_before_anything_is_read(tmp_path):
    pkg = _pkg(tmp_path / "t")
    with open(pkg / "srt" / "sparse.bin", "wb") as f:  # takes no disk, reads as 1 TiB of zeros
        f.truncate(1 << 40)
    assert "over the bound" in _refused(tmp_path / "t", Store(tmp_path / "c"))
    os.unlink(pkg / "srt" / "sparse.bin")
    for i in range(3):
        (pkg / "srt" / f"m{i}.py").write_bytes(b"x" * 1000)
    assert "--max-files" in _refused(tmp_path / "t", Store(tmp_path / "c"), Bounds(files=5))
    assert "--max-tree-size" in _refused(tmp_path / "t", Store(tmp_path / "c"), Bounds(total_size=2500))
    assert "--max-file-size" in _refused(tmp_path / "t", Store(tmp_path / "c"), Bounds(file_size=999))
    deep = pkg.joinpath(*["d"] * 10)
    deep.mkdir(parents=True)
    assert "levels deep" in _refused(tmp_path / "t", Store(tmp_path / "c"), Bounds(depth=8))


def test_a_source_that_lies_about_a_size_or_changes_while_read_is_refused():
    ok = Entry(b"__init__.py", stat.S_IFREG | 0o644, 0, b"")
    for content in (b"four", lambda: io.BytesIO(b"four"), lambda: io.BytesIO(b"x" * (1 << 24))):
        with pytest.raises(Refused, match="changed while being read"):
            intake.take([ok, Entry(b"a.py", stat.S_IFREG | 0o644, 3, content)], None, Bounds(), "test")


def test_a_file_swapped_after_it_was_listed_is_refused(tmp_path):
    pkg = _pkg(tmp_path / "t")
    with intake.directory(tmp_path / "t", "test", ("sglang",)) as entries:
        listed = list(entries)
        os.rename(pkg / "srt" / "a.py", pkg / "srt" / "old.py")
        os.symlink("/etc/hostname", pkg / "srt" / "a.py")
        with pytest.raises(Refused, match="changed while being taken in"):
            intake.take(listed, None, Bounds(), "test")


def test_bytecode_and_empty_directories_are_left_out(tmp_path):
    pkg = _pkg(tmp_path / "t")
    (pkg / "srt" / "__pycache__").mkdir()
    (pkg / "srt" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0" * 16)
    (pkg / "srt" / "sourceless.pyc").write_bytes(b"\0" * 16)
    (pkg / "srt" / "namespace").mkdir()  # would import as a namespace package: nothing the digest covers
    tree = _resolve(tmp_path / "t", Store(tmp_path / "c"))
    assert tree.files == ("sglang/__init__.py", "sglang/srt/a.py")
    assert not (tree.root / "sglang" / "srt" / "namespace").exists()
    assert tree.identity.tree_digest == _resolve(_pkg(tmp_path / "plain").parent, Store(tmp_path / "c")).identity.tree_digest


def _wheel(path: Path, members: list[tuple[str | zipfile.ZipInfo, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("sglang/__init__.py", "x = 1\n")
        for info, data in members:
            zf.writestr(info, data)
    return path


def _link_member(name: str, target: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


@pytest.mark.filterwarnings("ignore:Duplicate name")
@pytest.mark.parametrize("members, why", [
    ([(_link_member("sglang/x.py", "/etc/passwd"), b"/etc/passwd")], "symbolic link"),
    ([("sglang/a.py", b"1"), ("sglang/a.py", b"2")], "appears twice"),
    ([("sglang/../evil.py", b"1")], "plain relative path"),
    ([("sglang/a\nb.py", b"1")], "newline"),
    ([("sglang/a.py", b"1"), ("sglang/a.py/b.py", b"2")], "both a file and a directory"),
])
def test_wheel_members_go_through_the_same_intake(tmp_path, members, why):
    wheel = _wheel(tmp_path / "w.whl", members)
    with zipfile.ZipFile(wheel) as zf, pytest.raises(Refused, match=why):
        trees.store(Store(tmp_path / "c"), intake.wheel(zf, "sglang"), where="w.whl")
    assert _stored(Store(tmp_path / "c")) == []


def test_a_wheel_member_larger_than_declared_is_refused(tmp_path):
    wheel = _wheel(tmp_path / "w.whl", [("sglang/a.py", b"x" * 100)])
    with zipfile.ZipFile(wheel) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        infos["sglang/a.py"].file_size = 10  # as a crafted central directory would declare
        with pytest.raises(Refused, match="cannot be read|changed while being read"):
            trees.store(Store(tmp_path / "c"), intake.wheel(zf, "sglang"), where="w.whl")


def test_a_stored_entry_is_served_only_if_its_bytes_are_the_digest(tmp_path):
    cache = Store(tmp_path / "c")
    _pkg(tmp_path / "t")
    tree = _resolve(tmp_path / "t", cache)
    planted = tree.root / "sglang" / "srt" / "a.py"
    planted.write_text("def f():\n    return 'planted'\n")  # same name, other bytes
    assert trees.load(cache, tree.identity.tree_digest) is None and not tree.root.exists()
    tree = _resolve(tmp_path / "t", cache)
    os.symlink("/etc/hostname", tree.root / "sglang" / "srt" / "host.py")  # a link intake never stores
    assert trees.load(cache, tree.identity.tree_digest) is None
    tree = _resolve(tmp_path / "t", cache)
    planted = tree.root / "sglang" / "srt" / "a.py"
    planted.write_text("def f():\n    return 'planted'\n")
    again = _resolve(tmp_path / "t", cache)  # storing the same tree again finds the entry damaged: replaced
    assert (again.root / "sglang" / "srt" / "a.py").read_text() == "def f():\n    return 2\n"


def test_the_cli_refuses_a_hostile_path_with_one_line_and_exit_2(tmp_path, capsys):
    from runner import cli
    pkg = _pkg(tmp_path / "t")
    os.symlink("/etc/hostname", pkg / "srt" / "b.py")
    code = cli.main(["resolve", f"path:{tmp_path / 't'}", "--cache-dir", str(tmp_path / "c")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == BAD_INPUT and len(err) == 1 and "srt/b.py" in err[0] and "symbolic link" in err[0]


def test_bound_options_raise_the_bounds(tmp_path, capsys):
    from runner import cli
    pkg = _pkg(tmp_path / "t")
    (pkg / "big.bin").write_bytes(b"\0" * 4096)
    argv = ["resolve", f"path:{tmp_path / 't'}", "--cache-dir", str(tmp_path / "c")]
    assert cli.main([*argv, "--max-file-size", "1K"]) == BAD_INPUT
    assert "--max-file-size" in capsys.readouterr().err
    assert cli.main([*argv, "--max-file-size", "8K", "--max-files", "10", "--max-tree-size", "1M"]) == 0
