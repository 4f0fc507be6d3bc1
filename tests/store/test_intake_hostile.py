"""A hostile fork's layout, built from a real release (0.5.21, copied once), against diffprobe's host
code: every case ends with exit 2 and one line naming the entry, before anything of the tree is
stored, built or run; no host file is read into the store, nothing is written outside it, nothing
hangs. The classes of issue #21 and variations of them; the mechanics are in test_intake.py.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest

from runner import cli
from runner.errors import BAD_INPUT
from runner.store import intake, trees

SECRET = b"HOST-SECRET-0d6c1f"
SCHEDULER = "srt/managers/scheduler.py"


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> dict[str, Path]:
    """What the host has outside every tree: a secret to read, a victim to overwrite, a directory."""
    root = tmp_path_factory.mktemp("host")
    (root / "secret.py").write_bytes(b"KEY = '" + SECRET + b"'\n")
    (root / "victim.py").write_bytes(b"HOST = 1\n")
    (root / "dir").mkdir()
    (root / "dir" / "mod.py").write_bytes(b"KEY = '" + SECRET + b"'\n")
    return {"root": root, "secret": root / "secret.py", "victim": root / "victim.py", "dir": root / "dir"}


@pytest.fixture(scope="module")
def fork(tmp_path_factory, release_tree) -> Path:
    """One copy of a real release's tree, laid out as a vendor's checkout (python/sglang)."""
    root = tmp_path_factory.mktemp("fork")
    shutil.copytree(release_tree("0.5.21").root / "sglang", root / "python" / "sglang")
    return root


@contextmanager
def changed(fork: Path, rel: str, make):
    """``make(path)`` at ``python/sglang/<rel>`` (the file there set aside), undone afterwards."""
    target = fork / "python" / "sglang" / rel
    aside = target.with_name(target.name + ".aside")
    if target.exists() or target.is_symlink():
        os.rename(target, aside)
    try:
        make(target)
        yield
    finally:
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            os.unlink(target)
        if aside.exists():
            os.rename(aside, target)


def _sparse(size: int):
    def make(p: Path) -> None:
        with open(p, "wb") as f:
            f.truncate(size)
    return make


def _audit(fork: Path, tmp_path: Path, capsys, *extra: str) -> tuple[int, list[str]]:
    """``diffprobe audit path:FORK`` within 60 s (a hang fails), its exit code and stderr lines."""
    def hung(*_):
        raise TimeoutError("diffprobe hung on a hostile layout")
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        code = cli.main(["audit", f"path:{fork}", "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out"), *extra])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return code, capsys.readouterr().err.strip().splitlines()


def _nothing_taken(tmp_path: Path, host: dict[str, Path]) -> None:
    """Nothing of the tree stored or built, no bundle, no host file read into the store or written."""
    cache = tmp_path / "cache"
    assert not (tmp_path / "out").exists()
    assert not (cache / "trees").exists() or not list((cache / "trees").iterdir())
    assert not (cache / "envs").exists()
    assert not any(SECRET in p.read_bytes() for p in cache.rglob("*") if p.is_file() and not p.is_symlink())
    assert host["victim"].read_bytes() == b"HOST = 1\n"


CASES = {
    # links followed on the host: read a host file into the store, byte-compile it, hang, crash
    "module-links-to-a-host-file": (SCHEDULER, lambda h: lambda p: os.symlink(h["secret"], p), "symbolic link"),
    "scanned-module-links-to-dev-zero": ("srt/environ.py", lambda h: lambda p: os.symlink("/dev/zero", p), "symbolic link"),
    "module-links-to-dev-stdin": (SCHEDULER, lambda h: lambda p: os.symlink("/dev/stdin", p), "symbolic link"),
    "dangling-link": ("srt/gone.py", lambda h: lambda p: os.symlink("/nonexistent/gone.py", p), "symbolic link"),
    "directory-link-python-imports-through": ("srt/plugins", lambda h: lambda p: os.symlink(h["dir"], p), "symbolic link"),
    "link-inside-the-package-to-a-directory": (SCHEDULER, lambda h: lambda p: os.symlink("..", p), "symbolic link"),
    "relative-link-climbing-out": (SCHEDULER, lambda h: lambda p: os.symlink("../../../../../" * 4 + "etc/hostname", p),
                                   "symbolic link"),
    # special files and hard links
    "fifo-as-a-module": (SCHEDULER, lambda h: lambda p: os.mkfifo(p), "FIFO"),
    "hard-link-to-a-host-file": (SCHEDULER, lambda h: lambda p: os.link(h["secret"], p), "hard links"),
    # sizes: a sparse file takes no disk in the fork and would be copied densely
    "sparse-file-of-1-TiB": ("srt/weights.bin", lambda h: _sparse(1 << 40), "--max-file-size"),
    "sparse-files-over-the-total": ("srt/w", lambda h: lambda p: (p.mkdir(), [_sparse(100 << 20)(p / f"{i}.bin") for i in range(6)]),
                                    "--max-tree-size"),
    # names: ambiguous digests, forged terminal output, undecodable
    "newline-in-a-name": ("srt/a\nb.py", lambda h: lambda p: p.write_bytes(b"x = 1\n"), "newline"),
    "terminal-escape-in-a-name": ("srt/\x1b[2J\x1b[32mfixed.py", lambda h: lambda p: p.write_bytes(b"x = 1\n"), "U+001B"),
    "name-not-utf-8": (os.fsdecode(b"srt/\xff\xfe.py"), lambda h: lambda p: p.write_bytes(b"x = 1\n"), "not valid UTF-8"),
    "right-to-left-override": ("srt/sched\u202eyp.py", lambda h: lambda p: p.write_bytes(b"x = 1\n"), "U+202E"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_layout_ends_with_exit_2_and_one_line(case, fork, host, tmp_path, capsys):
    rel, make, why = CASES[case]
    with changed(fork, rel, make(host)):
        code, err = _audit(fork, tmp_path, capsys)
    assert code == BAD_INPUT, err
    assert len(err) == 1 and why in err[0] and "\x1b" not in err[0], err
    assert why == "--max-tree-size" or f"'{rel[:4]}" in err[0]  # the entry is named (a total is not one entry's)
    _nothing_taken(tmp_path, host)


def test_the_package_itself_through_a_link_is_refused(fork, host, tmp_path, capsys):
    """A fork whose ``python/sglang`` is a link to a real tree elsewhere: impersonation by path."""
    impostor = tmp_path / "impostor"
    (impostor / "python").mkdir(parents=True)
    os.symlink(fork / "python" / "sglang", impostor / "python" / "sglang")
    code, err = _audit(impostor, tmp_path, capsys)
    assert code == BAD_INPUT and len(err) == 1 and "python/sglang" in err[0] and "symbolic link" in err[0]
    _nothing_taken(tmp_path, host)


def test_a_bound_is_an_option(fork, host, tmp_path, capsys):
    """The release itself is over a lowered bound (4 959 files in 5 000+ entries) and refused before
    anything is copied; the defaults take it in (test_the_release_copied_is_the_release)."""
    code, err = _audit(fork, tmp_path, capsys, "--max-files", "4000")
    assert code == BAD_INPUT and len(err) == 1 and "--max-files" in err[0]
    _nothing_taken(tmp_path, host)


def test_backport_onto_a_fork_with_a_link_writes_nothing(fork, host, tmp_path, capsys):
    """The target's link would have made backport write the host's file, as root."""
    patch = tmp_path / "fix.patch"
    patch.write_bytes(b"diff --git a/python/sglang/srt/managers/scheduler.py b/python/sglang/srt/managers/scheduler.py\n")
    with changed(fork, SCHEDULER, lambda p: os.symlink(host["victim"], p)):
        code = cli.main(["backport", "--pr", "38935", "--onto", f"path:{fork}", "--patch", str(patch), "--head", f"path:{fork}",
                         "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == BAD_INPUT and len(err) == 1 and "symbolic link" in err[0]
    _nothing_taken(tmp_path, host)


def _old_digest(root: Path) -> str:
    """The digest as it was before intake: every file under sglang/, sorted, newlines in names allowed."""
    files = sorted(str(p.relative_to(root)) for p in (root / "sglang").rglob("*") if p.is_file())
    lines = "".join(f"{hashlib.sha256((root / f).read_bytes()).hexdigest()}  {f}\n" for f in files)
    return "h1:" + base64.b64encode(hashlib.sha256(lines.encode()).digest()).decode()


def _part_of(release: Path, dest: Path) -> Path:
    """The release's package with what the scheduler needs beside it (sglang/__init__.py and
    srt/managers/): a real tree, small enough to build twice in a second."""
    shutil.copytree(release / "srt" / "managers", dest / "sglang" / "srt" / "managers")
    shutil.copy(release / "__init__.py", dest / "sglang" / "__init__.py")
    return dest


def test_a_buggy_tree_cannot_share_a_digest_with_a_fixed_one(fork, host, tmp_path, capsys):
    """The newline collision. A is the fixed release plus one file whose name runs on, past a
    newline, into the digest line of a buggy scheduler (``<sha256>  sglang/srt/managers/scheduler/
    __init__.py``); B is the fixed release plus that buggy scheduler as a package (Python imports
    it before scheduler.py) and a file named as A's name up to the newline. Before intake both had
    one digest: A probed "fixed", and its receipts and signed attestation then served B. Now A is
    refused (exit 2, one line) and B's digest, its own, is shared with no tree intake accepts."""
    fixed = fork / "python" / "sglang"
    buggy = b"# the scheduler without the fix\n" + (fixed / SCHEDULER).read_bytes()
    line = f"{hashlib.sha256(buggy).hexdigest()}  sglang/srt/managers/scheduler/__init__.py"
    a, b = _part_of(fixed, tmp_path / "a"), _part_of(fixed, tmp_path / "b")
    crafted = a / "sglang" / "srt" / "managers" / f"scheduler.pz\n{line}"  # directories, through the newline
    crafted.parent.mkdir(parents=True)
    crafted.write_bytes(b"vendor note\n")
    (b / "sglang" / "srt" / "managers" / "scheduler.pz").write_bytes(b"vendor note\n")
    (b / "sglang" / "srt" / "managers" / "scheduler").mkdir()
    (b / "sglang" / "srt" / "managers" / "scheduler" / "__init__.py").write_bytes(buggy)
    assert _old_digest(a) == _old_digest(b)  # the attack, as it was

    code, err = _audit(a, tmp_path, capsys)
    assert code == BAD_INPUT and len(err) == 1 and "newline" in err[0]
    _nothing_taken(tmp_path, host)
    with pytest.raises(intake.Refused, match="newline"):
        trees.read_back(a)
    assert trees.digest(trees.read_back(b)) == _old_digest(b)  # B is an honest tree: its digest names its own bytes


def test_the_release_copied_is_the_release(fork, release_tree, tmp_path):
    """The defaults take a real release in from a directory, as the same tree as its wheel."""
    assert trees.digest(trees.read_back(fork / "python")) == release_tree("0.5.21").identity.tree_digest
