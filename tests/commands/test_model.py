"""``diffprobe model``: a verified bundle of receipts labelled as synthetic, versioned by the model's source."""

from __future__ import annotations

from pathlib import Path

import orjson

from runner import cli
from runner.evidence import bundle, dsse
from runner.evidence.receipts import PROJECT, Receipt
from runner.files import sha256_file
from runner.model import incident
from tests.evidence.test_attest import third_party_check
from tests.helpers import check_signed, key_pair


def test_command_writes_a_verified_bundle_of_labelled_receipts(tmp_path: Path, capsys):
    out = tmp_path / "bundle"
    assert cli.main(["model", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "not SGLang code" in text and "6/6 clean" in text and "9/9 clean" in text
    assert bundle.verify(out) == []
    index = orjson.loads((out / "bundle.json").read_bytes())
    assert "not SGLang code" in index["extra"]["synthetic"]
    receipts = [Receipt.model_validate(orjson.loads((out / n).read_bytes())) for n in index["receipts"]]
    assert len(receipts) == 2 * len(incident.CONFIGS)
    digest = sha256_file(Path(incident.__file__))
    for r in receipts:
        assert r.source.kind == "model" and r.probe.sha256 == digest and r.probe.id in ("model-handoff", "model-admission")
        assert r.probe.files == {"runner/model/incident.py": digest}
        assert all("not SGLang code" in c.title for c in r.cases)


def test_custom_configuration(tmp_path: Path, capsys):
    out = tmp_path / "bundle"
    assert cli.main(["model", "--defence", "transfer_check", "--fault-off", "pool_short", "--out", str(out)]) == 0
    (r, _) = [Receipt.model_validate(orjson.loads(p.read_bytes())) for p in sorted((out / "receipts").iterdir())]
    assert r.source.switches["transfer_check"] and not r.source.switches["pool_short"]


def test_signed_with_the_key_option_or_the_environment(tmp_path: Path, capsys, monkeypatch):
    private, public = key_pair(tmp_path / "keys")
    monkeypatch.delenv(dsse.ENV_KEY, raising=False)
    assert cli.main(["model", "--out", str(tmp_path / "a"), "--sign", str(private)]) == 0
    check_signed(tmp_path / "a", public, capsys)
    for envelope in (tmp_path / "a" / "attestations").iterdir():  # securesystemslib, in-toto-attestation, the schemas
        assert third_party_check(envelope.read_bytes(), public.read_bytes())["subject"]
    monkeypatch.setenv(dsse.ENV_KEY, str(private))
    assert cli.main(["model", "--defence", "abort_cleanup", "--out", str(tmp_path / "b")]) == 0
    check_signed(tmp_path / "b", public, capsys)


def test_the_label_names_the_file_the_receipts_are_versioned_by(tmp_path: Path):
    """Every model receipt says where the synthetic code lives: the file its probe digest covers."""
    assert cli.main(["model", "--defence", "pool_check", "--out", str(tmp_path / "b")]) == 0
    for p in (tmp_path / "b" / "receipts").iterdir():
        r = Receipt.model_validate(orjson.loads(p.read_bytes()))
        (path,) = r.probe.files
        assert f"(diffprobe {path})" in r.source.source and (PROJECT / path).is_file()
