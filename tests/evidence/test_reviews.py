"""The static reach of a tree's changed code and the review ledger, on hand-made trees (real forks:
tests/commands/test_review_real.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner import errors
from runner.evidence import departures, reach, reviews

DOOR = "import sglang.srt.helpers\n\n\ndef is_reject(req):\n    return req.status == 400\n"
FILES = {
    "sglang/__init__.py": "",
    "sglang/version.py": '__version__ = "0.5.21"\n',
    "sglang/srt/__init__.py": "",
    "sglang/srt/disaggregation/__init__.py": "",
    "sglang/srt/disaggregation/utils.py": DOOR,  # named by the probes and by FIX_CODE
    "sglang/srt/helpers.py": "from .lazy import thing\n\n\ndef helper():\n    return 1\n",
    "sglang/srt/lazy.py": "thing = 'sglang.srt.named_only'\n",
    "sglang/srt/named_only.py": "X = 1\n",
    "sglang/tools/bench.py": "def main():\n    return 0\n",  # nothing the probes import reaches it
}


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _compare(tmp_path, edits: dict[str, str]) -> departures.Departures:
    base = _tree(tmp_path / "base", FILES)
    fork = _tree(tmp_path / "fork", {**FILES, **edits})
    return departures.compare("path:fork", "h1:fork", fork, "pypi:sglang==0.5.21", "h1:base", base, "declared", "0.5.21", [])


def _read(root: Path):
    return lambda rel: (root / rel).read_bytes() if (root / rel).is_file() else None


def test_the_closure_follows_imports_relative_ones_text_and_parent_packages(tmp_path):
    root = _tree(tmp_path, FILES)
    got = reach.closure(list(FILES), _read(root))
    assert got == set(FILES) - {"sglang/tools/bench.py", "sglang/version.py"}
    assert reach.closure(list(FILES), _read(root), seeds=["sglang/tools/bench.py"]) >= {"sglang/tools/bench.py"}


def test_every_changed_module_is_read_whatever_the_process_reported(tmp_path):
    """No receipt names any file: the package __init__.py that rewrites code and the helper are still
    found, reachable; the bench script is listed, unreachable."""
    record = _compare(tmp_path, {
        "sglang/srt/disaggregation/__init__.py": "from . import utils\nutils.is_reject.__code__ = (lambda req: False).__code__\n"
                                                 "del __file__\n",
        "sglang/srt/helpers.py": FILES["sglang/srt/helpers.py"].replace("return 1", "return 2"),
        "sglang/tools/bench.py": "def main():\n    return 1\n",
    })
    reached = {(h.file, h.function): h.reach for h in record.hunks()}
    assert reached == {("sglang/srt/disaggregation/__init__.py", "<module>"): "at import",
                       ("sglang/srt/helpers.py", "helper"): "imported",
                       ("sglang/tools/bench.py", "main"): "unreachable"}
    assert [h.file for h in record.reachable()] == ["sglang/srt/disaggregation/__init__.py", "sglang/srt/helpers.py"]


def test_a_review_holds_until_one_byte_of_its_hunk_changes(tmp_path):
    edit = {"sglang/srt/helpers.py": FILES["sglang/srt/helpers.py"].replace("return 1", "return 2")}
    [hunk] = _compare(tmp_path / "a", edit).reachable()
    ledger = reviews.Ledger().with_([reviews.Review(key=hunk.key, file=hunk.file, function=hunk.function, decision="accepted",
                                                    reviewer="alice", date="2026-12-04")])
    moved = {"sglang/srt/helpers.py": "VENDOR = 1\n\n" + edit["sglang/srt/helpers.py"]}  # lines shift, hunk the same
    unreviewed, _, accepted = reviews.standing(_compare(tmp_path / "b", moved), ledger)
    assert [h.function for h in accepted] == ["helper"] and [h.function for h in unreviewed] == ["<module>"]
    one_byte = {"sglang/srt/helpers.py": FILES["sglang/srt/helpers.py"].replace("return 1", "return 3")}
    unreviewed, _, accepted = reviews.standing(_compare(tmp_path / "c", one_byte), ledger)
    assert not accepted and [h.function for h in unreviewed] == ["helper"]
    rejected = ledger.with_([reviews.Review(key=hunk.key, file=hunk.file, function=hunk.function, decision="rejected",
                                            reviewer="bob", date="2026-12-04", note="reads the clock")])
    assert [r.decision for r in rejected.reviews] == ["rejected"]  # a later decision on a key replaces the earlier
    assert reviews.standing(_compare(tmp_path / "d", edit), rejected)[1] == [hunk]


def test_a_ledger_round_trips_atomically_and_a_bad_one_is_one_line(tmp_path):
    path = tmp_path / "reviews.json"
    ledger = reviews.Ledger(reviews=[reviews.Review(key="a" * 64, file="sglang/x.py", function="f", decision="accepted",
                                                    reviewer="alice", date="2026-12-04")])
    reviews.save(path, ledger)
    assert reviews.load(path) == ledger and reviews.load(tmp_path / "none.json", missing_ok=True) == reviews.Ledger()
    path.write_text('{"schema_version": "diffprobe.reviews/1", "reviews": [{"key": "zz"}]}')
    with pytest.raises(errors.BadInput, match="is not a review ledger"):
        reviews.load(path)
    with pytest.raises(errors.BadInput, match="no review ledger"):
        reviews.load(tmp_path / "none.json")


def test_a_data_file_changed_is_one_reachable_place_and_a_removed_module_is_listed(tmp_path):
    """A removed file is listed only: a checkout lacks the wheel's compiled modules, and that is not a change to review."""
    base = _tree(tmp_path / "base", {**FILES, "sglang/srt/table.json": "{}\n"})
    fork = _tree(tmp_path / "fork", {**{k: v for k, v in FILES.items() if k != "sglang/srt/named_only.py"},
                                     "sglang/srt/table.json": '{"acme": 1}\n'})
    record = departures.compare("path:fork", "h1:fork", fork, "pypi:sglang==0.5.21", "h1:base", base, "declared", "0.5.21", [])
    assert {(h.file, h.function, h.reach) for h in record.reachable()} == {("sglang/srt/table.json", "<changed file>", "data")}
    assert next(f for f in record.files if f.path == "sglang/srt/named_only.py").change == "removed"
    assert all(len(h.key) == 64 and " sha256 " in h.diff[0] for h in record.reachable())  # addressed by the bytes


def test_a_signed_ledger_is_imported_with_its_signers_key_only(tmp_path):
    from runner.evidence import dsse

    private, public, _ = dsse.generate(tmp_path / "alice")
    _, stranger, _ = dsse.generate(tmp_path / "mallory")
    theirs = reviews.Ledger(reviews=[reviews.Review(key=k * 64, file="sglang/x.py", function="f", decision=d, reviewer="alice",
                                                    date="2026-12-04", note="read") for k, d in (("a", "accepted"), ("b", "rejected"))])
    path = tmp_path / "alice.json"
    reviews.save(path, theirs, [dsse.load_signer(private)])
    envelope = path.with_name(path.name + reviews.SIGNED)
    assert reviews.imported(envelope, dsse.load_keys(public)) == theirs
    mine = reviews.Ledger(reviews=[theirs.reviews[1].model_copy(update={"decision": "accepted", "reviewer": "me"})])
    merged, taken = reviews.merged(mine, theirs, "alice")
    assert taken == 1 and merged.decided()["b" * 64].reviewer == "me"  # mine stand
    assert merged.decided()["a" * 64].note == "imported, signed by alice: read"
    with pytest.raises(errors.DiffprobeError, match="not imported: signed only by key"):
        reviews.imported(envelope, dsse.load_keys(stranger))
    forged = envelope.read_text().replace(envelope.read_text().split('"payload": "')[1].split('"')[0],
                                          __import__("base64").b64encode(b'{"reviews": []}').decode())
    (tmp_path / "forged.json").write_text(forged)
    with pytest.raises(errors.DiffprobeError, match="does not verify"):
        reviews.imported(tmp_path / "forged.json", dsse.load_keys(public))
