import os
import subprocess

import pytest

from runner import cli
from runner.evidence import bundle, compare, receipts
from runner.errors import BadInput
from tests.helpers import case, receipt


@pytest.fixture
def made(tmp_path):
    base = receipt("0.5.20", [case("rejected", bug=True), case("valid", role="guard")])
    head = receipt("0.5.21", [case("rejected"), case("valid", role="guard")])
    diff = receipts.differential(38935, "t", ["admission"], [(bundle.receipt_name(base), base)],
                                 [(bundle.receipt_name(head), head)], "fix observed")
    return bundle.write(tmp_path / "b", kind="run", created_at="2026-11-30T00:00:00Z", receipts=[base, head],
                        differentials=[diff], pins_sha256=None)


def _files(root):
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_written_bundle_verifies_with_sha256sum_and_diffprobe(made):
    assert bundle.verify(made) == []
    subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=made, check=True)
    assert cli.main(["verify", str(made)]) == 0
    assert not list(made.parent.glob(".partial-*"))


def test_one_byte_changed_anywhere_fails_verify(made):
    for path in _files(made):
        original = path.read_bytes()
        for offset in (0, len(original) // 2, len(original) - 2):
            flipped = bytearray(original)
            flipped[offset] ^= 0x01
            path.write_bytes(bytes(flipped))
            assert bundle.verify(made) if path.name != "SHA256SUMS" else _rejects(made), (path, offset)
            path.write_bytes(original)
    assert bundle.verify(made) == []


def _rejects(root) -> bool:
    try:
        return bool(bundle.verify(root))
    except BadInput:
        return True


def test_resealed_receipt_is_still_caught_by_its_own_digest(made):
    """Editing a receipt and fixing SHA256SUMS is not enough: the receipt's digest seals it."""
    name = made / "receipts" / "sglang-0.5.20.admission.json"
    text = name.read_text()
    assert '"rid": "rejected"' in text
    name.write_text(text.replace('"rid": "rejected"', '"rid": "someone-else"'))
    manifest = subprocess.run(["sha256sum", *[str(p.relative_to(made)) for p in _files(made) if p.name != "SHA256SUMS"]],
                              cwd=made, capture_output=True, text=True, check=True).stdout
    (made / "SHA256SUMS").write_text(manifest)
    problems = bundle.verify(made)
    assert any("digest does not match" in p for p in problems)
    assert cli.main(["verify", str(made)]) == 1


def test_verify_refuses_paths_outside_and_symlinks(made, tmp_path):
    secret = tmp_path / "outside.txt"
    secret.write_text("x")
    digest = subprocess.run(["sha256sum", str(secret)], capture_output=True, text=True).stdout.split()[0]
    with open(made / "SHA256SUMS", "a") as f:
        f.write(f"{digest}  ../outside.txt\n")
    assert any("refused" in p for p in bundle.verify(made))
    lines = (made / "SHA256SUMS").read_text().splitlines()[:-1]
    (made / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    os.symlink(secret, made / "receipts" / "link.json")
    assert any("symlink" in p for p in bundle.verify(made))


def test_unlisted_file_is_reported(made):
    (made / "receipts" / "extra.json").write_text("{}")
    assert any("not listed" in p for p in bundle.verify(made))


def test_not_a_bundle_exits_2(tmp_path):
    assert cli.main(["verify", str(tmp_path)]) == 2
    (tmp_path / "SHA256SUMS").write_text("garbage\n")
    assert cli.main(["verify", str(tmp_path)]) == 2


def test_refuses_to_overwrite_a_non_empty_directory(made):
    with pytest.raises(BadInput, match="not empty"):
        bundle.write(made, kind="run", created_at="x", receipts=[], differentials=[], pins_sha256=None)
    assert bundle.verify(made) == []


def test_compare_same_and_different(made, tmp_path):
    again = bundle.write(tmp_path / "again", kind="run", created_at="2027-01-01T00:00:00Z",
                         receipts=[receipt("0.5.20", [case("rejected", bug=True, duration_ms=77), case("valid", role="guard")]),
                                   receipt("0.5.21", [case("rejected"), case("valid", role="guard")])],
                         differentials=[], pins_sha256=None)
    assert compare.compare(made, again) == []
    assert cli.main(["compare", str(made), str(again)]) == 0
    changed = bundle.write(tmp_path / "changed", kind="run", created_at="x",
                           receipts=[receipt("0.5.20", [case("rejected"), case("valid", role="guard")])],
                           differentials=[], pins_sha256=None)
    lines = compare.compare(made, changed)
    assert any("rejected: classification" in line for line in lines)
    assert any("only in A" in line for line in lines)
    assert cli.main(["compare", str(made), str(changed)]) == 1
