"""The byte-code store on hand-made trees, no SGLang, no layer: a module is compiled once per
interpreter whatever tree or path holds it, its byte-code serves every path with its bytes, a source
changed under its byte-code is never run stale, a damaged entry is replaced, and gc evicts the store."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from runner.store import bytecode, gc
from runner.app.notices import PRINTED
from runner.store.cache import USED, Store

RAISES = "def f():\n    raise ValueError('from a')\n"
FILES = {"sglang/__init__.py": "", "sglang/a.py": RAISES, "sglang/b.py": "B = 1\n"}


def _overlay(tmp_path: Path, name: str, files: dict[str, str]) -> tuple[Path, list[Path]]:
    """A tree under ``name/src`` and its overlay of links under ``name/ov``, as an environment has."""
    modules = []
    for rel, text in files.items():
        src, link = tmp_path / name / "src" / rel, tmp_path / name / "ov" / rel
        src.parent.mkdir(parents=True, exist_ok=True)
        link.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(text)
        link.symlink_to(src)
        modules.append(link)
    return tmp_path / name / "ov", modules


def _fill(store: Store, interp, tmp_path: Path, name: str, files: dict[str, str] = FILES) -> tuple[Path, bytecode.BytecodeRecord]:
    overlay, modules = _overlay(tmp_path, name, files)
    return overlay, bytecode.fill(store, interp.bytecode_key, interp.cache_tag, Path(sys.executable), modules, tmp_path / f"{name}.log")


_PROBE = """
import json, sys, traceback
sys.path.insert(0, sys.argv[1])
import sglang.a as a, sglang.b as b
try:
    a.f()
except ValueError as e:
    where = traceback.extract_tb(e.__traceback__)[-1].filename
print(json.dumps({"co_filename": a.f.__code__.co_filename, "traceback": where, "B": b.B}))
"""


def imported(overlay: Path, python: Path = Path(sys.executable)) -> tuple[dict, str]:
    """Import ``FILES``' modules from the overlay in a fresh interpreter that writes no byte-code:
    where its function and a traceback say they come from, and (``-v``) which byte-code it loaded."""
    done = subprocess.run([str(python), "-I", "-B", "-v", "-c", _PROBE, str(overlay)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout), done.stderr


def test_a_tree_differing_in_one_file_compiles_only_that_file_and_imports_under_its_own_paths(tmp_path, interp):
    store = Store.at(tmp_path / "cache")
    _, first = _fill(store, interp, tmp_path, "release")
    assert (first.modules, first.compiled, first.copied) == (3, 3, 0)
    fork, second = _fill(store, interp, tmp_path, "fork", {**FILES, "sglang/b.py": "B = 2\n"})
    assert (second.modules, second.compiled, second.copied) == (3, 1, 2)
    seen, log = imported(fork)
    a = fork / "sglang" / "a.py"
    assert seen == {"co_filename": str(a), "traceback": str(a), "B": 2}  # compiled elsewhere, re-pointed at this path
    assert f"code object from '{fork / 'sglang' / '__pycache__' / ('a.' + interp.cache_tag + '.pyc')}'" in log
    pyc = fork / "sglang" / "__pycache__" / f"a.{interp.cache_tag}.pyc"
    assert marshal.loads(pyc.read_bytes()[16:]).co_filename != str(a)
    assert pyc.stat().st_nlink == 1  # a copy: environments are sealed one by one and share no inode


def test_identical_bytes_at_different_paths_share_one_entry(tmp_path, interp):
    store = Store.at(tmp_path / "cache")
    overlay, done = _fill(store, interp, tmp_path, "t", {"sglang/__init__.py": "", "sglang/x/u.py": "U = 1\n",
                                                         "sglang/y/v.py": "U = 1\n", "sglang/x/__init__.py": ""})
    assert (done.modules, done.compiled, done.copied) == (4, 2, 0)
    assert len(list(store.bytecode(interp.bytecode_key).glob("*.pyc"))) == 2
    for rel in ("x/__pycache__/u", "y/__pycache__/v", "__pycache__/__init__", "x/__pycache__/__init__"):
        assert (overlay / "sglang" / f"{rel}.{interp.cache_tag}.pyc").is_file()


def test_a_source_changed_under_its_byte_code_is_never_run_stale(tmp_path, interp):
    store = Store.at(tmp_path / "cache")
    overlay, _ = _fill(store, interp, tmp_path, "t")
    (tmp_path / "t" / "src" / "sglang" / "b.py").write_text("B = 3\n")  # its byte-code says B = 1
    seen, log = imported(overlay)
    pycache = overlay / "sglang" / "__pycache__"
    assert seen["B"] == 3
    assert f"code object from '{pycache / f'b.{interp.cache_tag}.pyc'}'" not in log  # its hash does not match: compiled from source
    assert f"code object from '{pycache / f'a.{interp.cache_tag}.pyc'}'" in log


@pytest.mark.parametrize("damage", ["flipped", "truncated", "misfiled"])
def test_a_damaged_entry_is_compiled_again_and_replaced_with_one_warning(tmp_path, interp, damage, capsys):
    store = Store.at(tmp_path / "cache", notices=PRINTED)
    _fill(store, interp, tmp_path, "first")
    entries = sorted(store.bytecode(interp.bytecode_key).glob("*.pyc"), key=lambda p: p.stat().st_size)
    small, large = entries[0], entries[-1]
    data = large.read_bytes()
    if damage == "flipped":
        large.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    elif damage == "truncated":
        large.write_bytes(data[: len(data) // 2])
    else:
        large.write_bytes(small.read_bytes())  # an intact entry, under another source's name
    capsys.readouterr()
    overlay, done = _fill(store, interp, tmp_path, "second")
    err = capsys.readouterr().err
    assert (done.compiled, done.copied) == (1, 2)
    assert "1 byte-code store entry damaged or misfiled" in err and len(err.strip().splitlines()) == 1
    assert imported(overlay)[0]["B"] == 1
    _, again = _fill(store, interp, tmp_path, "third")
    assert (again.compiled, again.copied) == (0, 3) and capsys.readouterr().err == ""


def test_two_builders_filing_the_same_entries_at_once_both_file_valid_ones(tmp_path, interp, capsys):
    store = Store.at(tmp_path / "cache")
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(lambda name: _fill(store, interp, tmp_path, name), ["one", "two"]))
    assert all(r.compiled + r.copied == 3 for _, r in done)
    _, again = _fill(store, interp, tmp_path, "three")
    assert (again.compiled, again.copied) == (0, 3) and "damaged" not in capsys.readouterr().err
    assert all(imported(overlay)[0]["B"] == 1 for overlay, _ in done)


def test_a_module_that_does_not_compile_is_left_to_theimported(tmp_path, interp):
    store = Store.at(tmp_path / "cache")
    overlay, done = _fill(store, interp, tmp_path, "t", {**FILES, "sglang/broken.py": "def (:\n"})
    assert (done.modules, done.compiled, done.copied) == (4, 3, 0)
    assert not (overlay / "sglang" / "__pycache__" / f"broken.{interp.cache_tag}.pyc").exists()


def test_gc_evicts_the_byte_code_store_and_environments_keep_their_copies(tmp_path, interp):
    store = Store.at(tmp_path / "cache")
    overlay, _ = _fill(store, interp, tmp_path, "t")
    folder = store.bytecode(interp.bytecode_key)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    left = folder.parent / f".scratch-{dead}-x1"  # a builder killed while compiling
    left.mkdir()
    assert [e.kind for e in gc.entries(store)] == ["bytecode"]
    assert gc.collect(store, 0).busy == [folder]  # used within the hour: maybe by a build right now
    assert not left.exists()
    old = time.time() - 86400
    os.utime(folder / USED, (old, old))
    assert [e.path for e in gc.collect(store, 0).removed] == [folder] and not folder.exists()
    assert imported(overlay)[0]["B"] == 1
    _, again = _fill(store, interp, tmp_path, "after")
    assert (again.compiled, again.copied) == (3, 0)
