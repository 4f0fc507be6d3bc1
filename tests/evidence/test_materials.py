"""Materials are hashed by the host from the stored tree, for the names a run gave; a name that is
not a regular file of the tree's package makes the run an error (never a receipt)."""

from __future__ import annotations

import hashlib
import os

import pytest

from runner.errors import Infrastructure
from runner.evidence.materials import rederive
from runner.store import path, specs
from runner.store.cache import Store


@pytest.fixture
def tree(tmp_path):
    """A tree as the store holds it, then things planted in the stored copy: a link, a file the
    store never verified."""
    (tmp_path / "src" / "sglang" / "srt").mkdir(parents=True)
    (tmp_path / "src" / "sglang" / "__init__.py").write_text("")
    (tmp_path / "src" / "sglang" / "srt" / "x.py").write_text("X = 1\n")
    stored = path.resolve(specs.PathSpec(dir=str(tmp_path / "src")), Store(tmp_path / "cache"))
    os.symlink("/etc/hostname", stored.root / "sglang" / "link.py")
    (stored.root / "sglang" / "planted.py").write_text("P = 1\n")  # in the store's copy, never verified
    return stored


def test_each_name_is_hashed_from_the_tree(tree):
    got = rederive(tree, ["sglang/srt/x.py", "sglang/__init__.py", "sglang/srt/x.py"])
    assert got == {"sglang/__init__.py": hashlib.sha256(b"").hexdigest(),
                   "sglang/srt/x.py": hashlib.sha256(b"X = 1\n").hexdigest()}


@pytest.mark.parametrize("name", ["sglang/missing.py", "../etc/passwd", "/etc/passwd", "sglang/../tree.json", "tree.json",
                                  "sglang/link.py", "sglang/srt", "sglang/\x1b[2J.py", "sglang/planted.py"])
def test_a_name_that_is_not_a_file_of_the_tree_is_an_error(tree, name):
    with pytest.raises(Infrastructure, match="not one of the tree's") as raised:
        rederive(tree, ["sglang/__init__.py", name])
    assert "\x1b" not in raised.value.message


def test_a_directory_is_read_back_through_intake_not_walked(tmp_path):
    """Given a directory (not a stored Tree), its files are those intake reads back: a link in it
    refuses the whole tree rather than being skipped or followed."""
    (tmp_path / "d" / "sglang").mkdir(parents=True)
    (tmp_path / "d" / "sglang" / "__init__.py").write_text("")
    assert rederive(tmp_path / "d", ["sglang/__init__.py"]) == {"sglang/__init__.py": hashlib.sha256(b"").hexdigest()}
    os.symlink("/etc/hostname", tmp_path / "d" / "sglang" / "host.py")
    with pytest.raises(Infrastructure, match="not one intake takes in"):
        rederive(tmp_path / "d", ["sglang/__init__.py"])
