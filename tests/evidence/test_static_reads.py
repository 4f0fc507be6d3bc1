"""The static scan reads only the stored tree's verified files, bounded, following nothing (fast)."""

from __future__ import annotations

import os
from pathlib import Path

from runner.evidence import static
from runner.store import path, specs
from runner.store.cache import Store


def _tree(root: Path):
    pkg = root / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "srt" / "environ.py").write_text("class Envs:\n    SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE = EnvBool(True)\n")
    (pkg / "srt" / "server_args.py").write_text("x = 1\n")
    return path.resolve(specs.PathSpec(dir=str(root)), Store(root.parent / "c"))


def test_the_scan_finds_what_the_stored_files_say(tmp_path):
    tree = _tree(tmp_path / "t")
    found = {f.id: f for f in static.scan(tree.root, tree.files)}
    assert found["deferred-release"].present and found["deferred-release"].default == "True"
    assert found["deferred-release"].evidence[0].startswith("sglang/srt/environ.py:2:")


def test_a_file_swapped_for_a_fifo_or_a_link_after_verification_is_not_read(tmp_path):
    tree = _tree(tmp_path / "t")
    os.unlink(tree.root / "sglang/srt/environ.py")
    os.mkfifo(tree.root / "sglang/srt/environ.py")  # an open for reading would block forever
    os.unlink(tree.root / "sglang/srt/server_args.py")
    os.symlink("/dev/zero", tree.root / "sglang/srt/server_args.py")  # a read would never end
    (tree.root / "sglang/srt/planted.py").write_text("_maybe_ack_drained_abort(\n")  # not among the verified files
    found = {f.id: f for f in static.scan(tree.root, tree.files)}
    assert not any(f.present for f in found.values())
    assert "not read" in found["deferred-release"].caveat
