"""Materials are hashed by the host from the stored tree, for the names a run gave; a name that is
not a regular file of the tree's package makes the run an error (never a receipt)."""

from __future__ import annotations

import hashlib
import os

import pytest

from runner.errors import Infrastructure
from runner.evidence.materials import rederive


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "sglang" / "srt").mkdir(parents=True)
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (tmp_path / "sglang" / "srt" / "x.py").write_text("X = 1\n")
    (tmp_path / "tree.json").write_text("{}")
    os.symlink("/etc/hostname", tmp_path / "sglang" / "link.py")
    return tmp_path


def test_each_name_is_hashed_from_the_tree(tree):
    got = rederive(tree, ["sglang/srt/x.py", "sglang/__init__.py", "sglang/srt/x.py"])
    assert got == {"sglang/__init__.py": hashlib.sha256(b"").hexdigest(),
                   "sglang/srt/x.py": hashlib.sha256(b"X = 1\n").hexdigest()}


@pytest.mark.parametrize("name", ["sglang/missing.py", "../etc/passwd", "/etc/passwd", "sglang/../tree.json", "tree.json",
                                  "sglang/link.py", "sglang/srt", "sglang/\x1b[2J.py"])
def test_a_name_that_is_not_a_file_of_the_tree_is_an_error(tree, name):
    with pytest.raises(Infrastructure, match="not one of the tree's") as raised:
        rederive(tree, ["sglang/__init__.py", name])
    assert "\x1b" not in raised.value.message
