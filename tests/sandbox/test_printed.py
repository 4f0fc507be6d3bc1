"""What diffprobe prints of a tree, a tool or a file is escaped and bounded; verify refuses an
oversized entry unread; a path too long for the system is bad input."""

from __future__ import annotations

import os
import time

from runner import cli, errors
from runner.commands import resolve
from runner.evidence import bundle

ESCAPES = "\x1b[2J\x1b[H\x1b[32m#38935: fixed\x1b[0m\r\x07"


def test_error_details_from_a_tree_reach_the_terminal_escaped_and_cut(monkeypatch, capsys):
    def hostile(args):
        raise errors.Infrastructure(f"probe harness failed {ESCAPES}", detail="\n".join([ESCAPES * 50] * 40))

    monkeypatch.setattr(resolve, "cmd_resolve", hostile)
    assert cli.main(["resolve", "path:/nonexistent"]) == errors.INFRASTRUCTURE
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\r" not in err
    assert "\\x1b[2J" in err
    lines = err.splitlines()
    assert len(lines) == 1 + errors.DETAIL_LINES and all(len(line) < errors.LINE_CHARS + 40 for line in lines)


def test_an_internal_error_is_escaped_too(monkeypatch, capsys):
    def broken(args):
        raise RuntimeError(ESCAPES)

    monkeypatch.setattr(resolve, "cmd_resolve", broken)
    assert cli.main(["resolve", "path:/nonexistent"]) == errors.INFRASTRUCTURE
    assert "\x1b" not in capsys.readouterr().err


def test_a_path_too_long_is_bad_input_in_one_line(tmp_path, capsys):
    assert cli.main(["resolve", "path:" + "a" * 5000, "--cache-dir", str(tmp_path)]) == errors.BAD_INPUT
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and len(err[0]) < 300


def test_verify_refuses_an_oversized_entry_without_reading_it(tmp_path):
    root = tmp_path / "bundle"
    root.mkdir()
    (root / bundle.INDEX).write_text("{}")
    big = root / "receipts" / "huge.json"
    big.parent.mkdir()
    with open(big, "wb") as handle:  # sparse: 2 GiB listed, nothing on disk
        handle.truncate(2 << 30)
    (root / bundle.MANIFEST).write_text(f"{'0' * 64}  {bundle.INDEX}\n{'1' * 64}  receipts/huge.json\n")
    start = time.monotonic()
    problems = bundle.verify(root)
    assert any("receipts/huge.json" in p and "refused" in p for p in problems), problems
    assert time.monotonic() - start < 5  # neither hashed nor loaded


def test_verify_refuses_an_oversized_manifest(tmp_path):
    root = tmp_path / "bundle"
    root.mkdir()
    with open(root / bundle.MANIFEST, "wb") as handle:
        handle.truncate(bundle.MAX_ENTRY_BYTES + 1)
    assert cli.main(["verify", str(root)]) == errors.BAD_INPUT
    assert os.path.getsize(root / bundle.MANIFEST) == bundle.MAX_ENTRY_BYTES + 1
