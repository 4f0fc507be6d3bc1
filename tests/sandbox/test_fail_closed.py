"""Fail closed: where bubblewrap cannot run, only a pinned release artifact or a pinned commit (full
SHA) runs outside the sandbox, unless the user says --unsandboxed; a receipt says which."""

from __future__ import annotations

import pytest

from runner import cli
from runner.errors import BadInput
from runner.evidence import pins
from runner.sandbox import bwrap, execute
from runner.store.sources import TreeIdentity

PINS = pins.load()
VERSION, SHA = next(iter(PINS.pinned_sha256.items()))
COMMIT = PINS.pinned_commits[0]


def _tree(**fields) -> TreeIdentity:
    return TreeIdentity(tree_digest="h1:x", files=1, **fields)


def _decide(identity: TreeIdentity, unsandboxed: bool = False) -> bool:
    return execute.sandboxed_for(identity, unsandboxed=unsandboxed, pinned_sha256=PINS.pinned_sha256,
                                 pinned_commits=PINS.pinned_commits)


@pytest.fixture
def no_bubblewrap(monkeypatch):
    monkeypatch.setattr(bwrap, "version", lambda: None)


def test_every_tree_runs_sandboxed_where_bubblewrap_runs(monkeypatch):
    monkeypatch.setattr(bwrap, "version", lambda: "0.8.0")
    assert _decide(_tree(kind="path", source="path:/srv/fork", path="/srv/fork"))
    assert not _decide(_tree(kind="path", source="path:/srv/fork", path="/srv/fork"), unsandboxed=True)  # the user's choice


@pytest.mark.parametrize("identity", [
    _tree(kind="path", source="path:/srv/fork", path="/srv/fork"),
    _tree(kind="pypi", source=f"pypi:sglang=={VERSION}", version=VERSION, artifact_sha256="0" * 64),  # not the pinned bytes
    _tree(kind="pypi", source="pypi:sglang==9.9.9", version="9.9.9", artifact_sha256=SHA),
    _tree(kind="git", source="git+/srv/fork@main", commit="f" * 40),
    _tree(kind="git", source=f"git+/srv/fork@{COMMIT[:8]}", commit=COMMIT[:8]),  # a short SHA can be forged
], ids=["path", "pypi-other-bytes", "pypi-unpinned", "git-unpinned", "git-short"])
def test_without_bubblewrap_an_unpinned_tree_is_refused(no_bubblewrap, identity):
    with pytest.raises(BadInput, match="--unsandboxed"):
        _decide(identity)
    assert not _decide(identity, unsandboxed=True)


@pytest.mark.parametrize("identity", [
    _tree(kind="pypi", source=f"pypi:sglang=={VERSION}", version=VERSION, artifact_sha256=SHA),
    _tree(kind="git", source=f"git+https://github.com/sgl-project/sglang@{COMMIT}", commit=COMMIT),
], ids=["pinned-release", "pinned-commit"])
def test_without_bubblewrap_a_pinned_tree_runs_unsandboxed(no_bubblewrap, identity):
    assert not _decide(identity)


def test_the_cli_refuses_before_building_anything(no_bubblewrap, tmp_path, capsys):
    tree = tmp_path / "fork"
    (tree / "sglang").mkdir(parents=True)
    (tree / "sglang" / "__init__.py").write_text("")
    cache = tmp_path / "cache"
    assert cli.main(["env", f"path:{tree}", "--cache-dir", str(cache)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bubblewrap cannot run here" in err[0] and "--unsandboxed" in err[0]
    assert not (cache / "envs").exists() or not any((cache / "envs").iterdir())
