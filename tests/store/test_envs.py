"""Environments over real releases and real git commits: each imports only its own tree."""

import pytest

from runner.sandbox.import_check import import_check
from runner.store import envs, sources, specs
from runner.store.cache import Store
from runner.errors import Infrastructure
from runner.files import sha256_file
from tests import tools

pytestmark = pytest.mark.slow  # real releases, environments and SGLang imports


def test_git_commit_env_imports_only_its_own_files(request, upstream_repo, cache, interp):
    path, commits = upstream_repo["path"], upstream_repo["commits"]
    a = sources.resolve(specs.parse(f"git+{path}@{commits['0.5.19']}"), cache)
    b = sources.resolve(specs.parse(f"git+{path}@{commits['0.5.20']}"), cache)
    env_a, env_b = envs.env(a, cache, interp), envs.env(b, cache, interp)
    assert env_a.root != env_b.root
    assert env_a.stamp.layer_key == env_b.stamp.layer_key  # one shared dependency layer
    check = import_check(env_a, a, sandboxed=tools.sandboxed(request))
    assert check.ok, check.modules
    assert check.outside == []
    assert len(check.files) > 100
    for rel, digest in check.files.items():
        assert sha256_file(a.root / rel) == digest
    prefill = "sglang/srt/disaggregation/prefill.py"
    assert check.files[prefill] != sha256_file(b.root / prefill)
    # a git checkout carries no compiled modules: recorded, and never silent
    assert set(env_a.stamp.standins.tree_lacks) == {"sglang.srt.rust_extensions", "sglang.srt.mem_cache.rust_tree_core"}
    assert {"triton", "torchvision"} <= set(check.standins)


def test_release_env_reuses_everything_on_second_call(request, cache, interp, release_tree):
    tree = release_tree("0.5.21")
    first = envs.env(tree, cache, interp)
    second = envs.env(tree, cache, interp)
    assert first == second
    assert first.stamp.standins.tree_lacks == []
    assert set(first.stamp.standins.declared) >= {"triton", "torchvision"}
    assert first.stamp.lock_sha256 == envs.lock_sha256()
    check = import_check(first, tree, sandboxed=tools.sandboxed(request))
    assert check.ok and check.outside == []


def test_interrupted_env_build_leaves_nothing_valid(tmp_path, cache, interp, release_tree, monkeypatch):
    """Share the session's layer and byte-code store but build the tree env in a fresh place, and crash half-way."""
    tree = release_tree("0.5.20")
    layer_root, stamp = envs.layer(cache, interp)
    private = Store.at(tmp_path / "c")
    (private.root / "layers").mkdir(parents=True)
    (private.root / "layers" / stamp.key).symlink_to(layer_root)
    (private.root / "bytecode").symlink_to(cache.bytecode(interp.bytecode_key).parent)
    real = envs._site_packages

    def crash(python):
        real(python)
        raise Infrastructure("simulated crash after the virtualenv was created")

    monkeypatch.setattr(envs, "_site_packages", crash)
    with pytest.raises(Infrastructure):
        envs.env(tree, private, interp)
    assert [p.name for p in (private.root / "envs").iterdir()] == []
    monkeypatch.setattr(envs, "_site_packages", real)
    built = envs.env(tree, private, interp)
    assert (built.root / "env.json").is_file()


def test_note_when_the_interpreter_cannot_load_the_wheel(release_tree):
    other = envs.Interpreter(executable="/usr/bin/python3.12", implementation="CPython", version="3.12.1", tag="cp312", machine="x86_64")
    notes = envs._notes(release_tree("0.5.21"), other)
    assert len(notes) == 1 and "cannot load this tree's 4 compiled modules (built for cp311)" in notes[0]
