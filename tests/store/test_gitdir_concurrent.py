"""A repository its owner's git is packing while diffprobe checks it (``git gc`` runs detached after a
large commit, packing loose objects and removing their directories) is read as it is, not refused:
an entry gone since it was listed holds nothing for git to read."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from runner.store import gitdir


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "repo"
    path.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    run = lambda *a: subprocess.run(["git", "-C", str(path), *a], check=True, capture_output=True, env=env)  # noqa: E731
    run("init", "-q")
    (path / "a.txt").write_text("a\n")
    run("add", "a.txt")
    run("-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-q", "-m", "a")
    return path


@pytest.mark.parametrize("gone", ["directory", "file"])
def test_loose_objects_packed_away_while_the_check_walks_are_not_a_refusal(repo, monkeypatch, gone):
    objects = repo / ".git" / "objects"
    loose = sorted(d for d in objects.iterdir() if len(d.name) == 2)
    assert loose
    listing = os.scandir

    def racing(path):
        if isinstance(path, int):  # shutil.rmtree's own descriptor-relative listing (os is one module)
            return listing(path)
        entries = list(listing(path))  # listed, then gc removes what was listed
        if os.fspath(path) == os.fspath(objects if gone == "directory" else loose[0]):
            if gone == "directory":
                shutil.rmtree(loose[0])
            else:
                for f in loose[0].iterdir():
                    f.unlink()
        return iter(entries)

    monkeypatch.setattr(gitdir.os, "scandir", racing)
    assert gitdir.check(repo, "git+test").git_dir == repo / ".git"


def test_a_git_directory_that_is_gone_is_still_refused(repo, monkeypatch):
    monkeypatch.setattr(gitdir.os, "scandir", lambda path: (_ for _ in ()).throw(FileNotFoundError(2, "No such file or directory")))
    with pytest.raises(Exception, match="cannot be listed"):
        gitdir.check(repo, "git+test")
