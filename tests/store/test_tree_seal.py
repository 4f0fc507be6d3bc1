"""A stored tree is hashed in full once per process; later uses compare its seal (what ``lstat``
reads), and any change to the entry sends it back to a full check."""

from __future__ import annotations

import os

import pytest

from runner.store import intake, trees
from runner.store.cache import Store


@pytest.fixture
def stored(tmp_path):
    src = tmp_path / "src" / "sglang"
    (src / "srt").mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "srt" / "prefill.py").write_text("def door():\n    return 'retire'\n")
    cache = Store.at(tmp_path / "cache")
    with intake.directory(tmp_path / "src", "test", ("sglang",)) as entries:
        tree = trees.store(cache, entries, where="test")
    trees._VERIFIED.clear()
    return cache, tree.stamp.tree_digest


def _counting(monkeypatch):
    calls = []
    check = trees._check
    monkeypatch.setattr(trees, "_check", lambda *a: calls.append(1) or check(*a))
    return calls


def test_a_second_use_in_the_same_process_is_not_hashed_again(stored, monkeypatch):
    cache, digest = stored
    calls = _counting(monkeypatch)
    first, second = trees.load(cache, digest), trees.load(cache, digest)
    assert first == second and len(calls) == 1


@pytest.mark.parametrize("damage", ["same-size-rewrite", "added-file", "removed-file", "replaced-file", "stamp-rewritten"])
def test_any_change_to_the_entry_is_checked_in_full_and_damage_is_dropped(stored, monkeypatch, damage):
    cache, digest = stored
    assert trees.load(cache, digest) is not None
    calls = _counting(monkeypatch)
    pkg = cache.tree(digest) / "sglang"
    victim = pkg / "srt" / "prefill.py"
    if damage == "same-size-rewrite":
        st = victim.stat()
        victim.write_text("def door():\n    return 'admit!'\n")
        os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # even one nanosecond later is a change
    elif damage == "added-file":
        (pkg / "srt" / "extra.py").write_text("x = 1\n")
    elif damage == "removed-file":
        victim.unlink()
    elif damage == "replaced-file":
        body = victim.read_bytes()
        victim.unlink()
        victim.write_bytes(body.replace(b"retire", b"admits"))
    else:  # the same stamp written again: checked in full, and served, since the package is intact
        (cache.tree(digest) / "tree.json").write_text((cache.tree(digest) / "tree.json").read_text() + " ")
        assert trees.load(cache, digest) is not None and calls == [1]
        return
    assert trees.load(cache, digest) is None  # dropped with a warning, never served
    assert calls == [1]
