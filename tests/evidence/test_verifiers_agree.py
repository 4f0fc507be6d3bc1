"""``diffprobe verify --key`` and the stand-alone verifier (evidence/verify_bundle.py) agree on every
bundle: forgeries beyond test_attest_forgeries.py (the manifest and the envelopes are not signed, so
anyone can rewrite them), Statements a trusted key signed that diffprobe would never derive, and a
``--tree`` directory whose dirHash matches but which holds more than the dirHash covers.

Each case is a genuine signed bundle changed one way; both verifiers must refuse it (and a genuine
bundle passes both). Before this module, the stand-alone accepted several that ``verify`` refused.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import pytest

from runner.evidence import dsse, statements
from tests import helpers
from tests.evidence.test_attest import _reseal
from tests.evidence.test_attest_forgeries import NOW, Party, _both, _write


@pytest.fixture
def parties(tmp_path):
    return {name: Party(tmp_path / name) for name in ("signer", "intruder")}


@pytest.fixture
def genuine(tmp_path, parties) -> Path:
    return _write(tmp_path / "b", [parties["signer"].signer])


RECEIPT = "receipts/sglang-0.5.20.admission.json"
ENVELOPE = "attestations/sglang-0.5.20.admission.intoto.json"


def _manifest(root: Path) -> list[str]:
    return (root / "SHA256SUMS").read_text().splitlines(keepends=True)


def _envelopes(root: Path, change) -> None:
    """Every envelope's JSON rewritten by ``change(raw) -> raw``: what signs nothing."""
    for path in (root / "attestations").iterdir():
        path.write_text(json.dumps(change(json.loads(path.read_bytes()))))


# --- the manifest: not signed, so it must mean one thing ---------------------------------------


def manifest_lists_a_file_twice_first_with_another_digest(root, parties):
    """``sha256sum -c`` reports a failure; a reader taking the first line takes another file."""
    lines = _manifest(root)
    i = next(i for i, line in enumerate(lines) if line.endswith(f"  {RECEIPT}\n"))
    lines.insert(i, f"{'0' * 64}  {RECEIPT}\n")
    (root / "SHA256SUMS").write_text("".join(lines))


def manifest_lists_a_file_twice(root, parties):
    lines = _manifest(root)
    (root / "SHA256SUMS").write_text("".join(lines + [next(x for x in lines if x.endswith(f"  {RECEIPT}\n"))]))


def manifest_unsorted(root, parties):
    (root / "SHA256SUMS").write_text("".join(_manifest(root)[::-1]))


def manifest_in_binary_mode(root, parties):
    (root / "SHA256SUMS").write_text("".join(line.replace("  ", " *", 1) for line in _manifest(root)))


def manifest_with_crlf(root, parties):
    (root / "SHA256SUMS").write_text("".join(line.replace("\n", "\r\n") for line in _manifest(root)))


# --- the envelopes: JSON outside the signature ---------------------------------------------------


def envelope_with_an_extra_field(root, parties):
    """securesystemslib keeps unknown fields; diffprobe's envelope has three."""
    _envelopes(root, lambda raw: raw | {"note": "verified by the vendor"})


def signature_with_an_extra_field(root, parties):
    _envelopes(root, lambda raw: raw | {"signatures": [s | {"cert": "x"} for s in raw["signatures"]]})


def payload_in_the_url_safe_alphabet(root, parties):
    """The same payload bytes, another encoding: the signature still verifies over them."""
    _envelopes(root, lambda raw: raw | {"payload": base64.urlsafe_b64encode(base64.b64decode(raw["payload"])).decode()})


def envelope_with_a_byte_order_mark(root, parties):
    for path in (root / "attestations").iterdir():
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())


def signature_id_as_a_number(root, parties):
    _envelopes(root, lambda raw: raw | {"signatures": raw["signatures"] + [{"keyid": 7, "sig": raw["signatures"][0]["sig"]}]})


# --- Statements a trusted key signed that diffprobe never derives ---------------------------------


def _resign(root: Path, signer, envelope: str, change) -> None:
    path = root / envelope
    raw = json.loads(path.read_bytes())
    statement = change(json.loads(base64.b64decode(raw["payload"])))
    path.write_bytes(dsse.dump(dsse.seal(statements.payload(statement), [signer])))


def subject_listed_twice(root, parties):
    _resign(root, parties["signer"].signer, ENVELOPE, lambda st: st | {"subject": st["subject"] + st["subject"][:1]})


def bundle_statement_names_a_file_twice(root, parties):
    """Two entries for one receipt, the second with another digest: which one vouches?"""
    def change(st):
        entry = next(e for e in st["predicate"]["configuration"] if e["name"] == RECEIPT)
        twin = entry | {"digest": {"sha256": "0" * 64}}
        return st | {"predicate": st["predicate"] | {"configuration": st["predicate"]["configuration"] + [twin]}}
    _resign(root, parties["signer"].signer, "attestations/bundle.intoto.json", change)


def receipt_statement_with_an_extra_subject(root, parties):
    extra = {"name": "sglang-0.5.22.whl", "digest": {"sha256": "1" * 64}}
    _resign(root, parties["signer"].signer, ENVELOPE, lambda st: st | {"subject": st["subject"] + [extra]})


AGREE = [manifest_lists_a_file_twice_first_with_another_digest, manifest_lists_a_file_twice, manifest_unsorted,
         manifest_in_binary_mode, manifest_with_crlf, envelope_with_an_extra_field, signature_with_an_extra_field,
         payload_in_the_url_safe_alphabet, envelope_with_a_byte_order_mark, signature_id_as_a_number,
         subject_listed_twice, bundle_statement_names_a_file_twice, receipt_statement_with_an_extra_subject]
RESEAL = {f for f in AGREE if not f.__name__.startswith("manifest_")}


def test_the_genuine_bundle_passes_both(genuine, parties):
    assert _both(genuine, keys=[parties["signer"].public]) == ([], 0)


@pytest.mark.parametrize("change", AGREE, ids=lambda f: f.__name__)
def test_both_verifiers_refuse_what_either_refuses(genuine, parties, change, capsys):
    if change is payload_in_the_url_safe_alphabet:  # find an envelope whose payload encodes differently
        payloads = [base64.b64decode(json.loads(p.read_bytes())["payload"]) for p in (genuine / "attestations").iterdir()]
        if all(base64.urlsafe_b64encode(d) == base64.b64encode(d) for d in payloads):
            pytest.skip("no '+' or '/' in these payloads' base64: the two forms are one")
    change(genuine, parties)
    if change in RESEAL:
        _reseal(genuine)
    problems, standalone = _both(genuine, keys=[parties["signer"].public])
    assert problems, "verify --key passed it"
    assert standalone == 1, f"the stand-alone verifier passed what verify --key refuses: {problems[0]}"
    out = capsys.readouterr().out
    assert out.startswith("REFUSED ") and "OK " not in out


# --- --tree: a directory whose dirHash matches, holding more than it covers -------------------------


@pytest.fixture
def signed_tree(tmp_path, parties) -> tuple[Path, Path]:
    """A directory holding a small package, and a bundle signed over a receipt of exactly that tree."""
    from runner.evidence import bundle, receipts
    from runner.store import path as pathsrc, specs
    from runner.store.cache import Store
    d = tmp_path / "tree"
    (d / "sglang" / "srt" / "managers").mkdir(parents=True)
    (d / "sglang" / "__init__.py").write_text("")
    (d / "sglang" / "srt" / "managers" / "scheduler.py").write_text("FIXED = True\n")
    tree = pathsrc.resolve(specs.PathSpec(dir=str(d)), Store(tmp_path / "cache"))
    receipt = receipts.make(helpers.PROBE, tree.identity, receipts.host_environment(), [helpers.case("a")],
                            started_at=NOW, finished_at=NOW)
    root = bundle.write(tmp_path / "b", kind="audit", created_at=NOW, receipts=[receipt], differentials=[],
                        pins_sha256=None, signers=[parties["signer"].signer])
    return d, root


def _shadow_package(d: Path, tmp: Path) -> None:
    """A package ``scheduler/`` beside ``scheduler.py`` (Python imports the package first), reached
    through a link: ``find -type f`` never enters it."""
    (tmp / "elsewhere").mkdir()
    (tmp / "elsewhere" / "__init__.py").write_text("FIXED = False\n")
    os.symlink(tmp / "elsewhere", d / "sglang" / "srt" / "managers" / "scheduler")


def _planted_bytecode(d: Path, tmp: Path) -> None:
    (d / "sglang" / "srt" / "managers" / "__pycache__").mkdir()
    (d / "sglang" / "srt" / "managers" / "__pycache__" / "scheduler.cpython-311.pyc").write_bytes(b"\0" * 16)


def _namespace(d: Path, tmp: Path) -> None:
    (d / "sglang" / "srt" / "disaggregation").mkdir()  # `import sglang.srt.disaggregation` now succeeds


def _newline_name(d: Path, tmp: Path) -> None:
    (d / "sglang" / "notes\nx").write_text("")


@pytest.mark.parametrize("plant", [_shadow_package, _planted_bytecode, _namespace, _newline_name], ids=lambda f: f.__name__[1:])
def test_a_tree_holding_what_the_dirhash_leaves_out_is_not_the_subject(signed_tree, parties, tmp_path, plant, capsys):
    """The dirHash recipe (``find -type f``, byte-code left out) matched such a directory: a link, a
    byte-code file or an empty directory changes what Python runs while the digest stays the
    subject's. The stand-alone verifier refuses to call it the signed tree."""
    d, root = signed_tree
    key = ["--key", str(parties["signer"].public)]
    assert helpers.standalone().main([str(root), *key, "--tree", str(d)]) == 0
    assert f"OK --tree {d}: the dirHash of its sglang/ is a subject of the bundle" in capsys.readouterr().out  # a match is said
    copy = tmp_path / "copy"
    shutil.copytree(d, copy)
    plant(copy, tmp_path)
    capsys.readouterr()
    assert helpers.standalone().main([str(root), *key, "--tree", str(copy)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("REFUSED --tree") and "\n" not in out.strip()
