"""Signed in-toto attestations: DSSE/Ed25519 envelopes over test-result Statements.

Interop is checked with implementations nobody here wrote: securesystemslib's DSSE ``Envelope`` and
``SSlibKey`` (secure-systems-lab, DSSE's authors) verify our signatures, and in-toto-attestation's
protobuf bindings parse our Statements and predicates. The predicate is also checked against a JSON
Schema encoded from the published spec (``TEST_RESULT_SCHEMA`` below).
"""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess

import jsonschema
import pytest
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from google.protobuf import json_format
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey

from runner import cli
from runner.errors import BadInput
from runner.evidence import attest, bundle, catalog, compare, dsse, receipts, statements
from runner.files import sha256_file
from runner.store import trees
from tests import helpers

# --- the published schema, encoded --------------------------------------------------------------
# From in-toto/attestation: spec/v1/statement.md (``_type`` is always https://in-toto.io/Statement/v1;
# ``subject`` a non-empty array of ResourceDescriptors, each of which MUST have ``digest`` set;
# ``predicateType`` a TypeURI), spec/v1/resource_descriptor.md (all fields optional but at least one
# of ``uri``, ``digest``, ``content``; ``annotations`` a map), spec/v1/digest_set.md (named standard
# algorithms such as ``sha256`` are lowercase hex; ``gitCommit`` the 40- or 64-hex of a commit;
# ``dirHash`` the directory Hash1 in lowercase hex, no "h1:" prefix), and
# spec/predicates/test-result.md (predicate type https://in-toto.io/attestation/test-result/v0.1;
# ``result`` required, one of PASSED, WARNED, FAILED; ``configuration`` required, a list of
# ResourceDescriptor; ``url`` optional ResourceURI; ``passedTests``, ``warnedTests``, ``failedTests``
# optional lists of strings). Unrecognised fields are allowed (spec/v1/README.md, parsing rules).
HEX = {"sha256": "^[0-9a-f]{64}$", "gitCommit": "^[0-9a-f]{40}([0-9a-f]{24})?$", "dirHash": "^[0-9a-f]{64}$"}
RESOURCE_DESCRIPTOR = {
    "type": "object",
    "properties": {
        "name": {"type": "string"}, "uri": {"type": "string"}, "content": {"type": "string"},
        "digest": {"type": "object", "additionalProperties": {"type": "string"},
                   "properties": {k: {"type": "string", "pattern": v} for k, v in HEX.items()}},
        "downloadLocation": {"type": "string"}, "mediaType": {"type": "string"}, "annotations": {"type": "object"},
    },
    "anyOf": [{"required": ["uri"]}, {"required": ["digest"]}, {"required": ["content"]}],
}
STATEMENT_SCHEMA = {
    "type": "object",
    "required": ["_type", "subject", "predicateType"],
    "properties": {
        "_type": {"const": "https://in-toto.io/Statement/v1"},
        "subject": {"type": "array", "minItems": 1,
                    "items": {"allOf": [RESOURCE_DESCRIPTOR, {"required": ["digest"],
                                                              "properties": {"digest": {"minProperties": 1}}}]}},
        "predicateType": {"type": "string", "format": "uri"},
        "predicate": {"type": "object"},
    },
}
TEST_RESULT_SCHEMA = {
    "type": "object",
    "required": ["result", "configuration"],
    "properties": {
        "result": {"enum": ["PASSED", "WARNED", "FAILED"]},
        "configuration": {"type": "array", "items": RESOURCE_DESCRIPTOR},
        "url": {"type": "string"},
        "passedTests": {"type": "array", "items": {"type": "string"}},
        "warnedTests": {"type": "array", "items": {"type": "string"}},
        "failedTests": {"type": "array", "items": {"type": "string"}},
    },
}


def third_party_check(envelope_bytes: bytes, public_pem: bytes) -> dict:
    """Verify an envelope and read its Statement without diffprobe's code; return the Statement."""
    envelope = SslibEnvelope.from_dict(json.loads(envelope_bytes))
    assert envelope.payload_type == "application/vnd.in-toto+json"
    envelope.verify([SSlibKey.from_crypto(load_pem_public_key(public_pem))], 1)
    statement = json.loads(envelope.payload)
    parsed = json_format.Parse(envelope.payload, statement_pb2.Statement())
    Statement.copy_from_pb(parsed).validate()
    assert parsed.predicate_type == "https://in-toto.io/attestation/test-result/v0.1"
    json_format.ParseDict(statement["predicate"], test_result_pb2.TestResult(), ignore_unknown_fields=True)
    jsonschema.validate(statement, STATEMENT_SCHEMA)
    jsonschema.validate(statement["predicate"], TEST_RESULT_SCHEMA)
    return statement


@pytest.fixture
def keys(tmp_path):
    private, public, keyid = dsse.generate(tmp_path / "keys")
    return dsse.load_signer(private), public.read_bytes(), keyid


# --- keys and envelopes ---------------------------------------------------------------------------


def test_keygen_writes_a_private_key_only_its_owner_reads_and_refuses_to_overwrite(tmp_path):
    private, public, keyid = dsse.generate(tmp_path)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert list(dsse.load_keys(public)) == [keyid] == [dsse.load_signer(private).keyid]
    with pytest.raises(BadInput, match="exists"):
        dsse.generate(tmp_path)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644, 0o620])
def test_a_private_key_others_can_reach_is_refused(tmp_path, mode):
    private, _, _ = dsse.generate(tmp_path)
    os.chmod(private, mode)
    with pytest.raises(BadInput, match="group or others"):
        dsse.load_signer(private)


def test_keys_that_are_not_ed25519_pem_are_one_line_bad_input(tmp_path):
    junk = tmp_path / "junk"
    junk.write_text("not a key\n")
    junk.chmod(0o600)
    for load in (dsse.load_signer, dsse.load_keys):
        with pytest.raises(BadInput):
            load(junk)
    with pytest.raises(BadInput, match="cannot read"):
        dsse.load_signer(tmp_path / "absent")


def test_keyid_is_the_one_securesystemslib_computes(keys):
    signer, public_pem, keyid = keys
    assert SSlibKey.from_crypto(load_pem_public_key(public_pem)).keyid == keyid


def test_pae_matches_securesystemslib():
    for payload_type, payload in [("application/vnd.in-toto+json", b'{"a":1}'), ("x", b""), ("t/é", "ü".encode())]:
        assert dsse.pae(payload_type, payload) == SslibEnvelope(payload, payload_type, {}).pae()


def test_envelope_verifies_with_securesystemslib_and_not_once_changed(keys, tmp_path):
    signer, public_pem, keyid = keys
    sealed = dsse.dump(dsse.seal(b'{"_type":"x"}', [signer]))
    envelope = SslibEnvelope.from_dict(json.loads(sealed))
    assert list(envelope.verify([SSlibKey.from_crypto(load_pem_public_key(public_pem))], 1)) == [keyid]
    raw = json.loads(sealed)
    raw["payload"] = base64.b64encode(b'{"_type":"y"}').decode()
    with pytest.raises(VerificationError):
        SslibEnvelope.from_dict(raw).verify([SSlibKey.from_crypto(load_pem_public_key(public_pem))], 1)


def test_signature_check_names_missing_foreign_and_broken_signatures(keys, tmp_path):
    signer, _, keyid = keys
    other = dsse.load_signer(dsse.generate(tmp_path / "other")[0])
    trusted = {keyid: signer.private.public_key()}
    assert dsse.check_signatures(dsse.seal(b"{}", [signer]), trusted) is None
    assert dsse.check_signatures(dsse.seal(b"{}", []), trusted) == "no signature"
    assert "not given" in dsse.check_signatures(dsse.seal(b"{}", [other]), trusted)
    co_signed = dsse.seal(b"{}", [other], dsse.seal(b"{}", [signer]))
    assert dsse.check_signatures(co_signed, trusted) is None and len(co_signed.signatures) == 2
    forged = dsse.seal(b"{}", [signer]).model_copy(update={"payload": base64.b64encode(b"[]").decode()})
    assert "does not verify" in dsse.check_signatures(forged, trusted)
    assert "payloadType" in dsse.check_signatures(forged.model_copy(update={"payloadType": "text/plain"}), trusted)


def test_resigning_replaces_the_signers_own_signature_only(keys, tmp_path):
    signer, _, _ = keys
    other = dsse.load_signer(dsse.generate(tmp_path / "other")[0])
    twice = dsse.seal(b"{}", [signer], dsse.seal(b"{}", [signer, other]))
    assert sorted(s.keyid for s in twice.signatures) == sorted([signer.keyid, other.keyid])


@pytest.mark.parametrize("data", [b"", b"[]", b'{"payload": "!!", "payloadType": "x", "signatures": []}',
                                  b'{"payload": "", "payloadType": "x", "signatures": [{"keyid": "k", "sig": "%"}]}'])
def test_malformed_envelopes_are_refused(data):
    with pytest.raises(ValueError, match="not a DSSE envelope"):
        dsse.parse(data)


# --- Statements -----------------------------------------------------------------------------------


def _statement(receipt, name="receipts/r.json", sha="e" * 64):
    return statements.receipt_statement(name, sha, receipt)


def test_subjects_name_each_thing_hashed_and_dirhash_is_the_annotated_recipe(tmp_path):
    """One subject per thing hashed: the commit by gitCommit, the package tree by a dirHash that the
    annotated recipe prints in the directory holding sglang/ (a file name with a space included: the
    spec's own ``xargs`` recipe would split it), never two digests of different things in one set."""
    (tmp_path / "sglang" / "srt").mkdir(parents=True)
    (tmp_path / "sglang" / "__init__.py").write_text("x = 1\n")
    (tmp_path / "sglang" / "srt" / "a b.py").write_text("y = 2\n")
    tree = helpers.tree("0.5.21").model_copy(update={"tree_digest": trees.digest(trees.read_back(tmp_path)), "kind": "git",
                                                     "commit": "f" * 40})
    made = statements.subjects(tree)
    assert [s["digest"] for s in made] == [{"sha256": "c" * 64}, {"gitCommit": "f" * 40}, {"dirHash": made[2]["digest"]["dirHash"]}]
    wheel, commit, package = made
    assert wheel["name"] == tree.artifact and commit["name"] == tree.source and package["name"] == f"{tree.source}#sglang/"
    recipe = package["annotations"]["recipe"]
    assert subprocess.run(recipe, shell=True, cwd=tmp_path, capture_output=True, text=True,
                          check=True).stdout.strip() == package["digest"]["dirHash"]
    assert "a b.py" in subprocess.run("find sglang -type f", shell=True, cwd=tmp_path, capture_output=True, text=True).stdout


def test_subjects_of_an_image_and_a_wheel():
    """An image by its manifest digest (a docker-archive by its config digest), then its package tree."""
    from runner.store.trees import ImageIdentity

    image = ImageIdentity(manifest_digest="sha256:" + "1" * 64, config_digest="sha256:" + "2" * 64,
                          layers=("sha256:" + "3" * 64,), package="usr/lib/python3.11/site-packages/sglang", python="3.11")
    h1 = "h1:" + base64.b64encode(b"\4" * 32).decode()
    tree = helpers.tree("0.5.21").model_copy(update={"kind": "registry", "source": "registry:r.example/s@sha256:" + "1" * 64,
                                                     "artifact": None, "artifact_sha256": None, "version": None, "image": image,
                                                     "tree_digest": h1})
    made = statements.subjects(tree)
    assert [s["digest"] for s in made][0] == {"sha256": "1" * 64} and made[0]["annotations"]["kind"] == "image manifest"
    assert made[1]["annotations"]["folder"].startswith("/usr/lib/python3.11/site-packages/sglang in the image")
    archive = tree.model_copy(update={"kind": "docker-archive", "image": image.model_copy(update={"manifest_digest": None})})
    assert statements.subjects(archive)[0]["digest"] == {"sha256": "2" * 64}
    for source in (tree, archive):  # the stand-alone verifier expects what diffprobe names
        assert {(x["name"], json.dumps(x["digest"], sort_keys=True)) for x in statements.subjects(source)} == \
            helpers.standalone().source_subjects(source.model_dump(mode="json"))
    wheel = helpers.tree("0.5.21").model_copy(update={"kind": "wheel", "tree_digest": h1})
    assert statements.subjects(wheel)[1]["annotations"]["folder"].startswith(f"sglang/ of {wheel.artifact}")


@pytest.mark.parametrize("digest", ["h1:!!", "h1:", "sha256:abc", "h1:" + base64.b64encode(b"short").decode()])
def test_a_tree_digest_that_is_not_h1_sha256_leaves_dirhash_out_instead_of_failing(digest):
    tree = helpers.tree("0.5.21").model_copy(update={"tree_digest": digest})
    assert [s["digest"] for s in statements.subjects(tree)] == [{"sha256": "c" * 64}]


def test_cases_map_to_passed_failed_and_never_to_passed_when_not_observed():
    clean = helpers.receipt("0.5.21", [helpers.case("a"), helpers.case("g", role="guard")])
    predicate = _statement(clean)["predicate"]
    assert predicate["result"] == "PASSED" and predicate["passedTests"] == ["admission/a", "admission/g"]
    assert predicate["failedTests"] == predicate["warnedTests"] == [] and predicate[statements.NOT_JUDGED] == {}
    bug = helpers.receipt("0.5.20", [helpers.case("a", bug=True), helpers.case("g", role="guard")])
    predicate = _statement(bug)["predicate"]
    assert predicate["result"] == "FAILED" and predicate["failedTests"] == ["admission/a"]
    for outcome in ("error", "timeout", "not_applicable"):
        unsure = helpers.receipt("0.5.21", [helpers.case("a", outcome=outcome), helpers.case("g", role="guard")])
        predicate = _statement(unsure)["predicate"]
        assert predicate["result"] == "FAILED", outcome
        assert predicate["passedTests"] == ["admission/g"] and predicate["failedTests"] == predicate["warnedTests"] == []
        assert predicate[statements.NOT_JUDGED] == {"admission/a": outcome}
    assert _statement(helpers.receipt("0.5.21", []))["predicate"]["result"] == "FAILED"


def test_configuration_binds_the_receipt_the_probe_and_the_judge():
    r = helpers.receipt("0.5.21", [helpers.case("a")])
    config = {c["name"]: c for c in _statement(r, "receipts/x.json", "9" * 64)["predicate"]["configuration"]}
    assert config["receipts/x.json"]["digest"] == {"sha256": "9" * 64}
    assert config["receipts/x.json"]["annotations"]["receiptDigest"] == r.digest
    assert config["probe/admission"]["digest"] == {"sha256": r.probe.sha256}
    assert config["diffprobe"]["digest"] == {"sha256": catalog.judge_digest()}
    assert config["diffprobe"]["annotations"] == {"version": r.environment.diffprobe}


# --- signed bundles -------------------------------------------------------------------------------


def _bundle(path, signers=()):
    base = helpers.receipt("0.5.20", [helpers.case("rejected", bug=True), helpers.case("valid", role="guard")])
    head = helpers.receipt("0.5.21", [helpers.case("rejected"), helpers.case("valid", role="guard")])
    diff = receipts.differential(38935, "t", ["admission"], [(bundle.receipt_name(base), base)],
                                 [(bundle.receipt_name(head), head)], "fix observed")
    return bundle.write(path, kind="run", created_at="2026-11-30T00:00:00Z", receipts=[base, head],
                        differentials=[diff], pins_sha256=None, signers=list(signers))


def test_a_bundle_signed_as_written_verifies_whatever_order_its_receipts_came_in(tmp_path, keys):
    """The Statements are derived from the files in name order: a command that hands its receipts over
    in another order (accept: gate by gate; model: configuration by configuration) still verifies."""
    signer, _, _ = keys
    made = [helpers.receipt(v, [helpers.case("rejected", bug=v < "0.5.21")]) for v in ("0.5.22", "0.5.21", "0.5.20")]
    root = bundle.write(tmp_path / "b", kind="audit", created_at="2026-11-30T00:00:00Z", receipts=made,
                        differentials=[], pins_sha256=None, signers=[signer])
    assert _verify(root, tmp_path / "keys" / dsse.PUBLIC_NAME) == []


def _reseal(root):
    """What an attacker without the key can still do: fix SHA256SUMS after an edit."""
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != "SHA256SUMS")
    (root / "SHA256SUMS").write_text("".join(f"{sha256_file(root / n)}  {n}\n" for n in files))


def _verify(root, *pubs):
    return bundle.verify(root, keys={k: v for p in pubs for k, v in dsse.load_keys(p).items()})


@pytest.fixture
def signed(tmp_path, keys):
    signer, public_pem, _ = keys
    return _bundle(tmp_path / "b", [signer]), tmp_path / "keys" / dsse.PUBLIC_NAME


def test_signed_bundle_verifies_with_diffprobe_sha256sum_and_a_third_party(signed):
    root, pub = signed
    assert bundle.verify(root) == [] and _verify(root, pub) == []
    subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=root, check=True)
    names = sorted(p.name for p in (root / "attestations").iterdir())
    assert names == ["bundle.intoto.json", "sglang-0.5.20.admission.intoto.json", "sglang-0.5.21.admission.intoto.json"]
    manifest = dict(reversed(line.split("  ", 1)) for line in (root / "SHA256SUMS").read_text().splitlines())
    for name in names:
        statement = third_party_check((root / "attestations" / name).read_bytes(), pub.read_bytes())
        for entry in statement["predicate"]["configuration"]:
            if entry["name"] in manifest:  # every file a Statement names is the file in the bundle
                assert entry["digest"]["sha256"] == manifest[entry["name"]]
    whole = json.loads(base64.b64decode(json.loads((root / "attestations/bundle.intoto.json").read_bytes())["payload"]))
    assert whole["predicate"]["passedTests"] == ["fix-38935"] and whole["predicate"]["result"] == "PASSED"
    assert {c["name"] for c in whole["predicate"]["configuration"]} >= {"bundle.json", "differentials/fix-38935.json"}


def test_flipped_payload_byte_swapped_envelope_and_other_key_each_fail(signed, tmp_path):
    root, pub = signed
    att = root / "attestations"
    a, b = att / "sglang-0.5.20.admission.intoto.json", att / "sglang-0.5.21.admission.intoto.json"
    original_a, original_b = a.read_bytes(), b.read_bytes()

    raw = json.loads(original_a)
    payload = bytearray(base64.b64decode(raw["payload"]))
    payload[payload.index(b"FAILED")] ^= 0x01  # one bit of the result
    raw["payload"] = base64.b64encode(bytes(payload)).decode()
    a.write_text(json.dumps(raw))
    _reseal(root)
    assert any(p.startswith("attestations/sglang-0.5.20") for p in bundle.verify(root))

    a.write_bytes(original_b)
    b.write_bytes(original_a)
    _reseal(root)
    problems = _verify(root, pub)
    assert len(problems) == 2 and all("payload is not the Statement" in p for p in problems)

    a.write_bytes(original_a)
    b.write_bytes(original_b)
    _reseal(root)
    other_pub = dsse.generate(tmp_path / "other")[1]
    problems = _verify(root, other_pub)
    assert len(problems) == 3 and all("not given" in p for p in problems)
    assert _verify(root, pub, other_pub) == []  # either trusted key is enough


def test_signature_by_another_key_over_the_right_payload_fails(signed, tmp_path):
    root, pub = signed
    intruder = dsse.load_signer(dsse.generate(tmp_path / "intruder")[0])
    for env in (root / "attestations").iterdir():
        sealed = dsse.parse(env.read_bytes())
        env.write_bytes(dsse.dump(dsse.seal(sealed.payload_bytes(), [intruder])))
    _reseal(root)
    assert bundle.verify(root) == []  # well-formed: without a key nothing says who should have signed
    assert all("not given" in p for p in _verify(root, pub)) and len(_verify(root, pub)) == 3


def test_a_removed_envelope_is_missing_not_unsigned(signed):
    root, pub = signed
    (root / "attestations" / "bundle.intoto.json").unlink()
    _reseal(root)
    assert bundle.verify(root) == ["attestations/bundle.intoto.json: missing (no signed attestation for the bundle)"]


def test_unsigned_bundle_verifies_and_fails_with_a_key(tmp_path, keys):
    root = _bundle(tmp_path / "u")
    assert bundle.verify(root) == [] and bundle.attestations(root) == {}
    problems = _verify(root, tmp_path / "keys" / dsse.PUBLIC_NAME)
    assert len(problems) == 3 and all(p.startswith("attestations/") and "missing" in p for p in problems)


def test_signing_an_existing_bundle_keeps_other_keys_signatures(tmp_path, keys):
    signer, _, _ = keys
    root = _bundle(tmp_path / "u")
    before = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != "SHA256SUMS"}
    bundle.sign_existing(root, [signer])
    second_private, second_pub, second_id = dsse.generate(tmp_path / "second")
    bundle.sign_existing(root, [dsse.load_signer(second_private)])
    assert _verify(root, tmp_path / "keys" / dsse.PUBLIC_NAME) == [] and _verify(root, second_pub) == []
    assert attest.claims(bundle.attestations(root)) == (6, sorted([signer.keyid, second_id]))
    assert all((root / n).read_bytes() == data for n, data in before.items())  # signing changes nothing else
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys", "second", "u"]  # no staging left behind


def test_a_bundle_that_does_not_verify_is_not_signed(tmp_path, keys):
    root = _bundle(tmp_path / "u")
    (root / "bundle.json").write_text("{}")
    with pytest.raises(bundle.Tampered):
        bundle.sign_existing(root, [keys[0]])
    assert not (root / "attestations").exists()


# --- the judge ------------------------------------------------------------------------------------


def test_the_judge_is_named_by_digest_and_a_different_judge_is_not_comparable():
    a = helpers.receipt("0.5.21", [helpers.case("a")])
    assert a.environment.diffprobe_sha256 == catalog.judge_digest()
    raw = a.model_dump(mode="json")
    raw["environment"]["diffprobe_sha256"] = "0" * 64
    raw["digest"] = receipts.seal(raw)
    b = receipts.Receipt.model_validate(raw)
    assert compare.compare_receipts(a, b, "x") == [f"x: not comparable, judges differ ({a.environment.diffprobe_sha256[:12]} vs 000000000000)"]
    base = helpers.receipt("0.5.20", [helpers.case("a", bug=True)])
    d = receipts.differential(38935, "t", ["admission"], [("b", base)], [("h", b)], "fix observed")
    assert d.verdict == "inconclusive" and "judge" in d.reasons[0]


# --- the command line -----------------------------------------------------------------------------


def test_verify_cli_with_key_passes_and_says_who_signed(signed, capsys):
    root, pub = signed
    assert cli.main(["verify", str(root), "--key", str(pub)]) == 0
    out = capsys.readouterr().out
    assert "every attestation carries valid signatures by at least 1 of the 1 key(s) given" in out
    assert cli.main(["verify", str(root)]) == 0
    out = capsys.readouterr().out
    assert "3 envelope(s) carry 3 signature(s) claiming key id(s)" in out and "not checked" in out
    assert "signed by" not in out


def test_verify_cli_foreign_key_is_exit_1_with_one_line_naming_the_file(signed, tmp_path, capsys):
    root, _ = signed
    other_pub = dsse.generate(tmp_path / "other")[1]
    capsys.readouterr()
    assert cli.main(["verify", str(root), "--key", str(other_pub)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "attestations/bundle.intoto.json: signed only by key(s) not given" in err[0]
    assert cli.main(["verify", str(root), "--key", str(tmp_path / "absent.pub")]) == 2


def test_unsigned_bundle_verifies_says_so_and_fails_with_a_key(tmp_path, keys, capsys):
    root = _bundle(tmp_path / "u")
    assert cli.main(["verify", str(root)]) == 0
    assert "unsigned" in capsys.readouterr().out
    assert cli.main(["verify", str(root), "--key", str(tmp_path / "keys" / dsse.PUBLIC_NAME)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "attestations/" in err[0] and "missing" in err[0]


def test_a_bundle_with_nothing_to_attest_is_neither_signed_nor_passed_by_a_key(tmp_path, keys, capsys):
    """No receipt and no mutation report: no Statement; ``attest`` refuses instead of saying "signed",
    and ``verify --key`` fails instead of vouching with no signature at all."""
    signer, _, _ = keys
    root = bundle.write(tmp_path / "e", kind="x", created_at="2026-11-30T00:00:00Z", receipts=[], differentials=[],
                        pins_sha256=None, files={"notes.txt": b"x"})
    assert cli.main(["attest", str(root), "--sign", str(signer.path)]) == 2
    assert "nothing in this bundle can be attested" in capsys.readouterr().err
    assert not (root / "attestations").exists() and cli.main(["verify", str(root)]) == 0
    capsys.readouterr()
    assert cli.main(["verify", str(root), "--key", str(tmp_path / "keys" / dsse.PUBLIC_NAME)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nothing in this bundle can be attested" in err[0]


def test_attest_cli_signs_and_a_second_key_co_signs(tmp_path, keys):
    signer, _, _ = keys
    root = _bundle(tmp_path / "u")
    assert cli.main(["attest", str(root), "--sign", str(signer.path)]) == 0
    second_private, second_pub, _ = dsse.generate(tmp_path / "second")
    assert cli.main(["attest", str(root), "--sign", str(second_private)]) == 0
    assert _verify(root, second_pub) == [] and _verify(root, tmp_path / "keys" / dsse.PUBLIC_NAME) == []
    assert len(json.loads((root / "attestations" / "bundle.intoto.json").read_bytes())["signatures"]) == 2


def test_keygen_cli_and_the_signing_key_from_the_environment(tmp_path, monkeypatch, capsys):
    assert cli.main(["keygen", str(tmp_path / "k")]) == 0
    assert dsse.PUBLIC_NAME in capsys.readouterr().out
    assert cli.main(["keygen", str(tmp_path / "k")]) == 2
    root = _bundle(tmp_path / "u")
    monkeypatch.delenv(dsse.ENV_KEY, raising=False)
    assert cli.main(["attest", str(root)]) == 2
    monkeypatch.setenv(dsse.ENV_KEY, str(tmp_path / "k" / dsse.PRIVATE_NAME))
    assert cli.main(["attest", str(root)]) == 0
    assert _verify(root, tmp_path / "k" / dsse.PUBLIC_NAME) == []
    os.chmod(tmp_path / "k" / dsse.PRIVATE_NAME, 0o644)
    capsys.readouterr()
    assert cli.main(["attest", str(root)]) == 2
    assert "group or others" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["run"], ["audit", "pypi:sglang==0.5.21"], ["sweep", "pypi:sglang==0.5.21"],
                                     ["backport", "--pr", "38935", "--onto", "pypi:sglang==0.5.20"],
                                     ["upstream-tests", "--tests", "t.py", "--base", "pypi:sglang==0.5.20",
                                      "--head", "pypi:sglang==0.5.21"],
                                     ["merge", "x"], ["model"], ["gate", "pool", "--url", "http://127.0.0.1:9"], ["mutate"],
                                     ["accept", "--prefill", "http://127.0.0.1:9", "--decode", "http://127.0.0.1:9"]])
def test_every_bundle_command_refuses_a_key_others_can_read_before_any_work(tmp_path, keys, command, capsys):
    signer, _, _ = keys
    os.chmod(signer.path, 0o644)
    assert cli.main([*command, "--out", str(tmp_path / "out"), "--sign", str(signer.path)]) == 2
    assert "group or others" in capsys.readouterr().err and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_signed_audit_of_a_real_release_verifies_here_and_with_a_third_party(tmp_path, keys, cache):
    signer, public_pem, _ = keys
    out = tmp_path / "audit"
    cli.main(["audit", "pypi:sglang==0.5.21", "--out", str(out), "--sign", str(signer.path),
              "--cache-dir", str(cache.root)])
    assert _verify(out, tmp_path / "keys" / dsse.PUBLIC_NAME) == []
    assert helpers.standalone().main([str(out), "--key", str(tmp_path / "keys" / dsse.PUBLIC_NAME), "--max-age", "1d"]) == 0
    for envelope in (out / "attestations").iterdir():
        statement = third_party_check(envelope.read_bytes(), public_pem)
        kinds = {s["annotations"]["kind"]: s["digest"] for s in statement["subject"]}
        assert set(kinds) == {"wheel", "package tree"} and set(kinds["wheel"]) == {"sha256"}
        assert set(kinds["package tree"]) == {"dirHash"}
