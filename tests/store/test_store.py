"""The store's own mechanics, no SGLang: one path per entry, the build lock, use marks, health, gc."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.errors import BadInput
from runner.files import digest_name
from runner.store import envs, gc
from runner.store.cache import USED, Store
from tests.helpers import ROOT

DIGEST = "h1:" + "q83vEjRWeJA/ze8SNFZ4kA/N7xI0VniQq83vEjRWeJA="  # base64 that holds a "/"


def test_a_tree_digest_becomes_one_file_name(tmp_path):
    store = Store.at(tmp_path)
    assert store.tree(DIGEST).name == digest_name(DIGEST) and "/" not in digest_name(DIGEST)
    assert store.tree(DIGEST).parent == store.trees()


def test_a_build_lock_held_elsewhere_makes_a_second_builder_wait(tmp_path):
    store = Store.at(tmp_path)
    entry = store.layer("k")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys,time; from runner.store.cache import Store; from pathlib import Path\n"
         f"s = Store.at({str(tmp_path)!r})\nwith s.lock(s.layer('k')):\n    print('held', flush=True); time.sleep(1.5)"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    assert store.busy(entry)
    start = time.monotonic()
    with store.lock(entry):
        waited = time.monotonic() - start
    holder.wait()
    assert waited > 0.5 and not store.busy(entry)


def _entry(store: Store, kind: str, name: str, size: int, used: float) -> Path:
    path = store.dir(kind, name)
    path.mkdir()
    (path / "data").write_bytes(b"x" * size)
    (path / USED).touch()
    os.utime(path / USED, (used, used))
    return path


def test_gc_evicts_least_recently_used_first_down_to_the_budget(tmp_path):
    store = Store.at(tmp_path)
    old = time.time() - 10 * 86400
    oldest = _entry(store, "trees", "a", 200_000, old)
    middle = _entry(store, "envs", "b", 200_000, old + 100)
    newest = _entry(store, "git", "c.git", 200_000, old + 200)
    done = gc.collect(store, 250_000)
    assert [e.path for e in done.removed] == [oldest, middle]
    assert not oldest.exists() and not middle.exists() and newest.exists() and done.kept <= 250_000


def test_gc_keeps_what_is_in_use_and_a_dry_run_removes_nothing(tmp_path):
    store = Store.at(tmp_path)
    recent = _entry(store, "envs", "b", 200_000, time.time())
    assert gc.collect(store, 0, dry_run=True).busy == [recent]
    old = _entry(store, "trees", "a", 200_000, time.time() - 86400)
    assert [e.path for e in gc.collect(store, 0, dry_run=True).removed] == [old] and old.exists()


def test_gc_removes_scratch_left_by_a_dead_process_only(tmp_path):
    store = Store.at(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    left = store.dir("trees", f".scratch-{dead}-x1")
    mine = store.dir("layers", f".building-k-{os.getpid()}-x2")
    left.mkdir(parents=True)
    mine.mkdir(parents=True)
    assert gc.collect(store, None).orphans == [left]
    assert not left.exists() and mine.exists()


@pytest.mark.parametrize("text, size", [("500M", 500 << 20), ("20G", 20 << 30), ("1.5T", int(1.5 * (1 << 40))), ("4096", 4096)])
def test_sizes(text, size):
    assert gc.parse_size(text) == size


def test_a_bad_size_is_bad_input():
    with pytest.raises(BadInput):
        gc.parse_size("lots")


def test_an_environment_whose_tree_is_gone_is_not_healthy(tmp_path):
    store = Store.at(tmp_path)
    root = store.env("e")
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").symlink_to(sys.executable)
    (root / "tree").mkdir()
    (root / "tree" / "sglang").symlink_to(tmp_path / "evicted-tree")
    store.layer("L").mkdir(parents=True)
    stamp = envs.EnvStamp.model_construct(layer_key="L")
    environment = envs.Env.__new__(envs.Env)
    object.__setattr__(environment, "root", root)
    object.__setattr__(environment, "stamp", stamp)
    assert not envs.healthy(store, environment)
    (tmp_path / "evicted-tree").mkdir()
    (tmp_path / "evicted-tree" / "__init__.py").write_text("")
    assert envs.healthy(store, environment)
