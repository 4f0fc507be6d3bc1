"""Formats are versioned by ``schema_version``, not by the code that wrote them: a bundle written before a
format change (here: receipts from before ``judge_files``) still verifies and compares as the same
observations, and a version this diffprobe does not read is named as such."""

from __future__ import annotations

import orjson
import pytest

from runner import __version__, cli
from runner.evidence import bundle, receipts
from runner.files import sha256_file
from tests.helpers import case, receipt


def write(out, receipts_):
    return bundle.write(out, kind="run", created_at="2026-12-04T00:00:00Z", receipts=receipts_, differentials=[],
                        pins_sha256=None)


def rewritten(root, edit) -> None:
    """Each receipt of ``root`` edited by ``edit`` (raw JSON) and sealed again, the manifest made again:
    what an older (or newer) diffprobe would have written."""
    for name in orjson.loads((root / bundle.INDEX).read_bytes())["receipts"]:
        raw = orjson.loads((root / name).read_bytes())
        edit(raw)
        raw["digest"] = receipts.seal(raw)
        (root / name).write_bytes(orjson.dumps(raw, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    files = [p for p in root.rglob("*") if p.is_file() and p.name != bundle.MANIFEST]
    (root / bundle.MANIFEST).write_text(bundle._render({p.relative_to(root).as_posix(): sha256_file(p) for p in files}))


@pytest.fixture
def made():
    return [receipt(v, [case("rejected", bug=v == "0.5.20"), case("valid", role="guard")]) for v in ("0.5.20", "0.5.21")]


def test_a_bundle_from_before_a_format_change_verifies_and_compares(tmp_path, made, capsys):
    new = write(tmp_path / "new", made)
    old = write(tmp_path / "old", made)
    rewritten(old, lambda raw: raw["environment"].pop("judge_files"))
    assert "judge_files" not in (old / bundle.receipt_name(made[0])).read_text()
    assert bundle.verify(old) == []
    capsys.readouterr()
    assert cli.main(["compare", str(old), str(new)]) == 0
    assert "same observations" in capsys.readouterr().out


def test_a_receipt_in_a_format_this_diffprobe_does_not_read_is_named(tmp_path, made):
    root = write(tmp_path / "b", made)
    rewritten(root, lambda raw: raw.update(schema_version="diffprobe.receipt/2"))
    problems = bundle.verify(root)
    assert problems and all("written in format 'diffprobe.receipt/2'; this diffprobe reads 'diffprobe.receipt/1'" in p
                            for p in problems)
    assert cli.main(["compare", str(root), str(root)]) != 0


def test_an_index_in_another_format_is_named(tmp_path, made):
    root = write(tmp_path / "b", made)
    raw = orjson.loads((root / bundle.INDEX).read_bytes())
    (root / bundle.INDEX).write_bytes(orjson.dumps({**raw, "schema_version": "diffprobe.bundle/9"}))
    rewritten(root, lambda raw: None)
    assert bundle.verify(root) == [f"{bundle.INDEX}: written in format 'diffprobe.bundle/9'; this diffprobe reads "
                                   f"'diffprobe.bundle/1' (diffprobe {__version__})"]
