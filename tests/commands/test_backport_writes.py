"""backport writes only inside its own scratch copy, whatever the target or the patch holds (fast,
hand-made trees: the mechanics of ``backport.apply``; the probing is in test_backport.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from runner.errors import BadInput
from runner.commands import backport
from runner.store import path, specs
from runner.store.cache import Store
from runner.store.intake import Refused


def _tree(root: Path, cache: Store, body: str = "def f():\n    return 1\n"):
    pkg = root / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "srt" / "a.py").write_text(body)
    return path.resolve(specs.PathSpec(dir=str(root)), cache)


def _diff(a: Path, b: Path) -> bytes:
    """A git diff between two directories holding python/sglang/..., as upstream's would read."""
    out = subprocess.run(["git", "diff", "--no-index", "--binary", "a", "b"], cwd=a.parent, capture_output=True).stdout
    return out.replace(b"a/a/", b"a/python/").replace(b"b/b/", b"b/python/")


@pytest.fixture
def victim(tmp_path) -> Path:
    v = tmp_path / "host" / "victim.py"
    v.parent.mkdir()
    v.write_text("HOST = 1\n")
    return v


def test_a_patch_naming_paths_outside_the_package_is_refused(tmp_path):
    onto = _tree(tmp_path / "onto", Store(tmp_path / "c"))
    patch = b"diff --git a/python/sglang/../../../host/victim.py b/python/sglang/../../../host/victim.py\n--- a/x\n+++ b/x\n"
    with pytest.raises(Refused, match="plain relative path"):
        backport.apply(onto, patch, tmp_path / "work" / "tree", None, None)


def test_a_link_the_patch_creates_is_refused_when_the_result_is_taken_in(tmp_path, victim):
    cache = Store(tmp_path / "c")
    onto = _tree(tmp_path / "onto", cache)
    (tmp_path / "a" / "sglang").mkdir(parents=True)
    (tmp_path / "b" / "sglang").mkdir(parents=True)
    os.symlink(victim, tmp_path / "b" / "sglang" / "evil.py")
    patch = _diff(tmp_path / "a", tmp_path / "b")
    work = tmp_path / "work" / "tree"
    assert backport.apply(onto, patch, work, None, None)[0] == "applied cleanly"
    with pytest.raises(Refused, match="symbolic link"):
        path.resolve(specs.PathSpec(dir=str(work)), cache)
    assert victim.read_text() == "HOST = 1\n"


def test_a_three_way_merge_never_writes_through_a_link_in_its_copy(tmp_path, victim):
    cache = Store(tmp_path / "c")
    onto = _tree(tmp_path / "onto", cache, "# onto\ndef f():\n    return 1\n")
    base = _tree(tmp_path / "base", cache)
    head = _tree(tmp_path / "head", cache, "def f():\n    return 2\n")
    work = tmp_path / "work" / "tree"
    work.mkdir(parents=True)
    (work / "sglang" / "srt").mkdir(parents=True)
    os.symlink(victim, work / "sglang" / "srt" / "a.py")  # as if something had swapped the copy's file
    assert backport._three_way(work, ["sglang/srt/a.py"], onto, base, head) == []
    assert victim.read_text() == "HOST = 1\n"
    assert (work / "sglang" / "srt" / "a.py").read_text() == "# onto\ndef f():\n    return 2\n"
    os.symlink(victim.parent, work / "sglang" / "out")  # a directory link on the way out
    with pytest.raises(OSError):
        backport._write_inside(work, "sglang/out/victim.py", b"x")
    assert victim.read_text() == "HOST = 1\n"


def test_a_hostile_target_is_refused_before_backport_writes_anything(tmp_path, victim, capsys):
    from runner import cli
    pkg = tmp_path / "fork" / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    os.symlink(victim, pkg / "srt" / "a.py")
    patch = tmp_path / "fix.patch"
    patch.write_bytes(b"diff --git a/python/sglang/srt/a.py b/python/sglang/srt/a.py\n")
    code = cli.main(["backport", "--pr", "38935", "--onto", f"path:{tmp_path / 'fork'}", "--patch", str(patch),
                     "--head", f"path:{tmp_path / 'fork'}", "--cache-dir", str(tmp_path / "c"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == BadInput.exit_code and len(err) == 1 and "symbolic link" in err[0]
    assert victim.read_text() == "HOST = 1\n" and not (tmp_path / "out").exists()


@pytest.mark.parametrize("patched", [True, False])
def test_out_of_reach_says_in_one_line_what_to_give_offline(tmp_path, capsys, patched):
    """The README's recipe offline: the PR's repository cannot be reached, and the line names --head
    (and --patch when it is missing too), not just the clone that failed."""
    from runner import cli
    _tree(tmp_path / "fork", Store(tmp_path / "c"))
    patch = tmp_path / "fix.patch"
    patch.write_bytes(b"diff --git a/python/sglang/srt/a.py b/python/sglang/srt/a.py\n")
    code = cli.main(["backport", "--pr", "38935", "--onto", f"path:{tmp_path / 'fork'}", "--repo", "https://nonexistent.invalid/sglang.git",
                     *(["--patch", str(patch)] if patched else []), "--cache-dir", str(tmp_path / "c"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and err[-1].startswith("diffprobe: error: ") and len([e for e in err if "error" in e]) == 1
    wanted = "offline, give --head SOURCE (a release or path:DIR carrying the fix)" + ("" if patched else " and --patch FILE")
    assert err[-1].endswith(wanted) and not (tmp_path / "out").exists()
