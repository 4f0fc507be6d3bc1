"""Forgeries of a signed bundle, each refused by ``verify --key`` AND by the stand-alone verifier
(evidence/verify_bundle.py: securesystemslib and in-toto-attestation, no diffprobe code); keys given
as several files or one file of several, with a threshold; freshness (creation time, nonce).

Every forgery is what someone without the signing key can do: edit, delete, add or graft files and
envelopes, then recompute ``SHA256SUMS``. A genuine bundle passes both verifiers.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from runner import cli
from runner.evidence import attest, bundle, dsse, receipts, statements
from tests import helpers
from tests.evidence.test_attest import _reseal

STANDALONE = helpers.ROOT / "evidence" / "verify_bundle.py"
NOW = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
OLD = "2026-11-30T00:00:00Z"


def _write(path: Path, signers, versions=("0.5.20", "0.5.21"), created_at=NOW, fixed_at="0.5.21") -> Path:
    made = [helpers.receipt(v, [helpers.case("rejected", bug=v < fixed_at), helpers.case("valid", role="guard")])
            for v in versions]
    named = [(bundle.receipt_name(r), r) for r in made]
    diff = receipts.differential(38935, "t", ["admission"], named[:1], named[1:], "fix observed")
    return bundle.write(path, kind="run", created_at=created_at, receipts=made, differentials=[diff],
                        pins_sha256=None, signers=list(signers))


class Party:
    def __init__(self, directory: Path):
        private, self.public, self.keyid = dsse.generate(directory)
        self.signer = dsse.load_signer(private)


@pytest.fixture
def parties(tmp_path):
    return {name: Party(tmp_path / name) for name in ("signer", "intruder", "cosigner")}


def _both(root: Path, *argv: str, keys: list[Path]) -> tuple[list[str], int]:
    """(problems ``verify --key`` finds, the stand-alone verifier's exit code)."""
    loaded = {k: v for p in keys for k, v in dsse.load_keys(p).items()}
    threshold = int(argv[argv.index("--threshold") + 1]) if "--threshold" in argv else 1
    flags = [f for p in keys for f in ("--key", str(p))]
    return bundle.verify(root, loaded, threshold), helpers.standalone().main([str(root), *flags, *argv])


def _cli(root: Path, *argv: str) -> int:
    return cli.main(["verify", str(root), *argv])


# --- the verifier is stand-alone ------------------------------------------------------------------


def test_the_standalone_verifier_imports_only_the_standard_library_and_the_two_libraries():
    tree = ast.parse(STANDALONE.read_text())
    modules = {(n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0]
               for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    third_party = modules - set(sys.stdlib_module_names) - {"__future__"}
    # cryptography comes with securesystemslib[crypto], google.protobuf with in-toto-attestation
    assert third_party == {"securesystemslib", "in_toto_attestation", "cryptography", "google"}


def test_a_signed_bundle_verifies_with_the_standalone_script_run_where_diffprobe_cannot_be_imported(parties, tmp_path):
    """Run as a stranger runs it: a process in which importing diffprobe's packages fails."""
    root = _write(tmp_path / "b", [parties["signer"].signer])
    guard = ("import runpy, sys; sys.modules.update(runner=None, probes=None, tests=None); "
             f"sys.argv = ['verify_bundle.py'] + sys.argv[1:]; runpy.run_path({str(STANDALONE)!r}, run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", guard, str(root), "--key", str(parties["signer"].public), "--max-age", "1d",
                           "--artifact", str(tmp_path / "none")], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and "No such file" in done.stderr  # an unreadable --artifact: usage, not a verdict
    done = subprocess.run([sys.executable, "-c", guard, str(root), "--key", str(parties["signer"].public), "--max-age", "1d"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("OK ") and "attestations/bundle.intoto.json: PASSED" in done.stdout
    intruded = subprocess.run([sys.executable, "-c", guard, str(root), "--key", str(parties["intruder"].public)],
                              capture_output=True, text=True, cwd=tmp_path)
    assert intruded.returncode == 1 and intruded.stdout.startswith("REFUSED attestations/")


# --- forgeries ------------------------------------------------------------------------------------


def _envelope(root: Path, name: str) -> dict:
    return json.loads((root / "attestations" / name).read_bytes())


def _rewrite_signatures(root: Path, make) -> None:
    """Every envelope's signatures replaced by ``make(envelope) -> list[dict]``."""
    for path in (root / "attestations").iterdir():
        raw = json.loads(path.read_bytes())
        raw["signatures"] = make(raw)
        path.write_text(json.dumps(raw))


def _intruder_sigs(parties):
    intruder = parties["intruder"].signer

    def make(raw):
        return [intruder.sign(raw["payloadType"], base64.b64decode(raw["payload"])).model_dump()]
    return make


def bug_receipt_and_its_envelope_removed(root, parties, other):
    (root / "receipts" / "sglang-0.5.20.admission.json").unlink()
    (root / "attestations" / "sglang-0.5.20.admission.intoto.json").unlink()


def receipt_envelope_removed(root, parties, other):
    (root / "attestations" / "sglang-0.5.20.admission.intoto.json").unlink()


def envelopes_deleted(root, parties, other):
    shutil.rmtree(root / "attestations")


def bundle_envelope_deleted(root, parties, other):
    (root / "attestations" / "bundle.intoto.json").unlink()


def receipt_grafted_from_another_bundle(root, parties, other):
    """A genuine receipt and its genuinely signed envelope, from another bundle of the same signer."""
    for name in ("receipts/sglang-0.5.22.admission.json", "attestations/sglang-0.5.22.admission.intoto.json"):
        shutil.copy(other / name, root / name)


def receipt_replaced_by_another_bundles(root, parties, other):
    """The bug-showing receipt swapped for a clean one of the same name, signed in another bundle."""
    for name in ("receipts/sglang-0.5.20.admission.json", "attestations/sglang-0.5.20.admission.intoto.json"):
        shutil.copy(other / name, root / name)


def bundle_envelope_replayed_from_another_bundle(root, parties, other):
    shutil.copy(other / "attestations" / "bundle.intoto.json", root / "attestations" / "bundle.intoto.json")


def unsigned_extra_file(root, parties, other):
    (root / "notes.txt").write_text("the fix was observed everywhere\n")


def unsigned_file_among_the_attestations(root, parties, other):
    (root / "attestations" / "README").write_text("x\n")


def envelopes_swapped(root, parties, other):
    a, b = (root / "attestations" / f"sglang-{v}.admission.intoto.json" for v in ("0.5.20", "0.5.21"))
    data = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(data)


def receipt_edited(root, parties, other):
    path = root / "receipts" / "sglang-0.5.20.admission.json"
    raw = json.loads(path.read_bytes())
    raw["cases"][0]["classification"] = "clean"
    raw["cases"][0]["effects"] = {"senders": [], "queue": []}
    raw["summary"]["classifications"] = {"bug": 0, "clean": 2, "inconclusive": 0}
    raw["digest"] = receipts.seal(raw)
    path.write_text(json.dumps(raw))


def resigned_with_another_key(root, parties, other):
    _rewrite_signatures(root, _intruder_sigs(parties))


def relabelled_signatures(root, parties, other):
    """The intruder's signatures, labelled with the real signer's key id."""
    make = _intruder_sigs(parties)
    _rewrite_signatures(root, lambda raw: [s | {"keyid": parties["signer"].keyid} for s in make(raw)])


def garbage_signatures(root, parties, other):
    _rewrite_signatures(root, lambda raw: [{"keyid": parties["signer"].keyid, "sig": base64.b64encode(os.urandom(64)).decode()}])


def garbage_signature_beside_the_genuine_one(root, parties, other):
    """Two signatures claiming the real key: which one counts? Neither verifier guesses."""
    garbage = {"keyid": parties["signer"].keyid, "sig": base64.b64encode(os.urandom(64)).decode()}
    _rewrite_signatures(root, lambda raw: [garbage, *raw["signatures"]])


def relabelled_signature_added_under_a_cosigners_id(root, parties, other):
    """An intruder's signature labelled with a co-signer's id the verifier trusts too."""
    make = _intruder_sigs(parties)
    _rewrite_signatures(root, lambda raw: raw["signatures"] + [s | {"keyid": parties["cosigner"].keyid} for s in make(raw)])


def signatures_stripped(root, parties, other):
    _rewrite_signatures(root, lambda raw: [])


def payload_type_changed(root, parties, other):
    for path in (root / "attestations").iterdir():
        raw = json.loads(path.read_bytes())
        raw["payloadType"] = "application/json"
        path.write_text(json.dumps(raw))


def payload_type_changed_and_resigned_by_intruder(root, parties, other):
    payload_type_changed(root, parties, other)
    _rewrite_signatures(root, _intruder_sigs(parties))


def flipped_result(root, parties, other):
    path = root / "attestations" / "sglang-0.5.20.admission.intoto.json"
    raw = json.loads(path.read_bytes())
    raw["payload"] = base64.b64encode(base64.b64decode(raw["payload"]).replace(b'"FAILED"', b'"PASSED"')).decode()
    path.write_text(json.dumps(raw))


def subjects_swapped(root, parties, other):
    """The bundle Statement's subjects changed: its payload no longer what was signed."""
    path = root / "attestations" / "bundle.intoto.json"
    raw = json.loads(path.read_bytes())
    statement = json.loads(base64.b64decode(raw["payload"]))
    statement["subject"] = statement["subject"][::-1][:1]
    raw["payload"] = base64.b64encode(statements.payload(statement)).decode()
    path.write_text(json.dumps(raw))


FORGERIES = [bug_receipt_and_its_envelope_removed, receipt_envelope_removed, envelopes_deleted, bundle_envelope_deleted,
             receipt_grafted_from_another_bundle, receipt_replaced_by_another_bundles,
             bundle_envelope_replayed_from_another_bundle, unsigned_extra_file, unsigned_file_among_the_attestations,
             envelopes_swapped, receipt_edited, resigned_with_another_key, relabelled_signatures, garbage_signatures,
             garbage_signature_beside_the_genuine_one, relabelled_signature_added_under_a_cosigners_id,
             signatures_stripped, payload_type_changed, payload_type_changed_and_resigned_by_intruder, flipped_result,
             subjects_swapped]


@pytest.fixture
def genuine(tmp_path, parties):
    """A bundle signed by the signer, and another bundle of the same signer to graft from (other trees,
    the 0.5.20 receipt clean there)."""
    root = _write(tmp_path / "b", [parties["signer"].signer])
    other = _write(tmp_path / "other", [parties["signer"].signer], versions=("0.5.20", "0.5.22"), fixed_at="0.5.20")
    return root, other


def test_the_genuine_bundle_passes_both_verifiers(genuine, parties):
    root, other = genuine
    for b in (root, other):
        assert _both(b, keys=[parties["signer"].public]) == ([], 0)


@pytest.mark.parametrize("forge", FORGERIES, ids=lambda f: f.__name__)
def test_every_forgery_is_refused_by_verify_key_and_by_the_standalone_verifier(genuine, parties, forge, capsys):
    root, other = genuine
    forge(root, parties, other)
    _reseal(root)
    problems, standalone = _both(root, keys=[parties["signer"].public, parties["cosigner"].public])
    assert problems, "verify --key passed a forgery"
    assert standalone == 1, "the stand-alone verifier passed a forgery verify --key refuses"
    out = capsys.readouterr().out
    assert out.startswith("REFUSED ") and "OK " not in out


# --- what plain verify says about signatures ------------------------------------------------------


@pytest.mark.parametrize("forge", [garbage_signatures, relabelled_signatures], ids=lambda f: f.__name__)
def test_without_a_key_verify_never_says_signed_by(genuine, parties, forge, capsys):
    """Unchecked labels are reported as claims: the count and the ids claimed, "not checked"."""
    root, other = genuine
    forge(root, parties, other)
    _reseal(root)
    capsys.readouterr()
    assert _cli(root) == 0
    out = capsys.readouterr().out
    assert f"3 envelope(s) carry 3 signature(s) claiming key id(s) {parties['signer'].keyid[:16]}, not checked" in out
    assert "signed by" not in out and "signed:" not in out
    assert _cli(root, "--key", str(parties["signer"].public)) == 1


def test_with_a_key_verify_names_only_keys_whose_signatures_verified(tmp_path, parties, capsys):
    """A bundle co-signed by a key nobody gave is reported by the key that was checked only."""
    root = _write(tmp_path / "b", [parties["signer"].signer, parties["cosigner"].signer])
    capsys.readouterr()
    assert _cli(root, "--key", str(parties["signer"].public)) == 0
    out = capsys.readouterr().out
    assert f"(verified: {parties['signer'].keyid[:16]})" in out and parties["cosigner"].keyid[:16] not in out


# --- keys and thresholds ----------------------------------------------------------------------------


def test_a_key_file_of_several_keys_checks_each_signature_against_the_key_its_id_names(tmp_path, parties, capsys):
    """The file holds the intruder's key first: the old reader used only that one. Now every key of
    the file is a candidate, and each signature is checked against the key its id names."""
    ring = tmp_path / "ring.pub"
    ring.write_bytes(parties["intruder"].public.read_bytes() + b"\n" + parties["signer"].public.read_bytes())
    root = _write(tmp_path / "b", [parties["signer"].signer])
    assert _both(root, keys=[ring]) == ([], 0)
    assert set(dsse.load_keys(ring)) == {parties["intruder"].keyid, parties["signer"].keyid}
    # two of the ring's keys are asked for; only one signed
    problems, standalone = _both(root, "--threshold", "2", keys=[ring])
    assert standalone == 1 and len(problems) == 3 and all("fewer than the threshold 2" in p for p in problems)
    assert _cli(root, "--key", str(ring), "--threshold", "2") == 1
    # relabelled: the intruder's signature under the signer's id does not verify with the signer's key
    relabelled_signatures(root, parties, None)
    _reseal(root)
    problems, standalone = _both(root, keys=[ring])
    assert standalone == 1 and all("does not verify with that key" in p for p in problems)


def test_a_threshold_of_two_needs_two_distinct_keys_and_counts_a_repeated_key_once(tmp_path, parties, capsys):
    both = _write(tmp_path / "both", [parties["signer"].signer, parties["cosigner"].signer])
    keys = [parties["signer"].public, parties["cosigner"].public]
    assert _both(both, "--threshold", "2", keys=keys) == ([], 0)
    assert _cli(both, "--key", str(keys[0]), "--key", str(keys[1]), "--threshold", "2") == 0
    one = _write(tmp_path / "one", [parties["signer"].signer])
    problems, standalone = _both(one, "--threshold", "2", keys=keys)
    assert problems and standalone == 1
    capsys.readouterr()
    # the same key given twice is one key: a threshold of 2 cannot be met with it
    assert _cli(one, "--key", str(keys[0]), "--key", str(keys[0]), "--threshold", "2") == 2
    assert "only 1 distinct key(s) given" in capsys.readouterr().err
    assert helpers.standalone().main([str(one), "--key", str(keys[0]), "--key", str(keys[0]), "--threshold", "2"]) == 2
    assert _cli(one, "--threshold", "2") == 2  # a threshold without keys counts nothing


@pytest.mark.parametrize("content, why", [
    (b"", "not a PEM public key"),
    (b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "PRIVATE KEY block"),
    (b"-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n", "not a PEM public key"),
])
def test_a_key_file_with_anything_but_ed25519_public_keys_is_refused_whole(tmp_path, parties, content, why, capsys):
    bad = tmp_path / "bad.pub"
    bad.write_bytes(parties["signer"].public.read_bytes() + content)
    if content:
        assert _cli(tmp_path, "--key", str(bad)) == 2
        assert why in capsys.readouterr().err
    assert helpers.standalone().main([str(tmp_path), "--key", str(bad)]) == (2 if content else 1)


# --- freshness ------------------------------------------------------------------------------------


def test_an_old_genuine_bundle_is_refused_by_max_age_and_not_before(tmp_path, parties, capsys):
    pub = parties["signer"].public
    old = _write(tmp_path / "old", [parties["signer"].signer], created_at=OLD)
    fresh = _write(tmp_path / "fresh", [parties["signer"].signer])
    today = NOW[:10]  # the day the fresh bundle says it was made (a run across midnight: not the clock's day now)
    for argv in (["--max-age", "1d"], ["--not-before", today]):
        assert _cli(fresh, "--key", str(pub), *argv) == 0
        assert helpers.standalone().main([str(fresh), "--key", str(pub), *argv]) == 0
        capsys.readouterr()
        assert _cli(old, "--key", str(pub), *argv) == 1
        err = capsys.readouterr().err
        assert f"created {OLD}" in err and "attestations/bundle.intoto.json" in err
        assert helpers.standalone().main([str(old), "--key", str(pub), *argv]) == 1
    assert _cli(fresh, "--max-age", "1d") == 2  # freshness is of a signature: without a key it is refused


def test_a_creation_time_in_the_future_does_not_pass_max_age(tmp_path, parties):
    future = (datetime.now(timezone.utc) + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    root = _write(tmp_path / "b", [parties["signer"].signer], created_at=future)
    assert _cli(root, "--key", str(parties["signer"].public), "--max-age", "7d") == 1
    assert helpers.standalone().main([str(root), "--key", str(parties["signer"].public), "--max-age", "7d"]) == 1


def test_a_nonce_binds_the_signature_to_the_verifiers_challenge(tmp_path, parties, capsys):
    """attest --nonce N signs Statements carrying N; verify --nonce N accepts only those. A bundle
    signed for another challenge (replayed) or for none is refused; a co-signer keeps the nonce."""
    pub = str(parties["signer"].public)
    root = _write(tmp_path / "b", [])
    assert cli.main(["attest", str(root), "--sign", str(parties["signer"].signer.path), "--nonce", "challenge-1"]) == 0
    assert "for nonce 'challenge-1'" in capsys.readouterr().out
    assert _cli(root, "--key", pub, "--nonce", "challenge-1") == 0
    assert helpers.standalone().main([str(root), "--key", pub, "--nonce", "challenge-1"]) == 0
    capsys.readouterr()
    assert _cli(root, "--key", pub, "--nonce", "challenge-2") == 1
    assert "signed for another nonce" in capsys.readouterr().err
    assert helpers.standalone().main([str(root), "--key", pub, "--nonce", "challenge-2"]) == 1
    # a co-signer without --nonce signs the same Statements: both signatures stand
    assert cli.main(["attest", str(root), "--sign", str(parties["cosigner"].signer.path)]) == 0
    both = ["--key", pub, "--key", str(parties["cosigner"].public), "--threshold", "2", "--nonce", "challenge-1"]
    assert _cli(root, *both) == 0 and helpers.standalone().main([str(root), *both]) == 0
    # a new challenge: the other signatures signed another payload; dropped, and said so
    capsys.readouterr()
    assert cli.main(["attest", str(root), "--sign", str(parties["signer"].signer.path), "--nonce", "challenge-3"]) == 0
    assert f"dropped: signatures claiming key id(s) {parties['cosigner'].keyid[:16]}" in capsys.readouterr().out
    assert _cli(root, "--key", pub, "--nonce", "challenge-3") == 0
    unsigned_for_a_nonce = _write(tmp_path / "n", [parties["signer"].signer])
    capsys.readouterr()
    assert _cli(unsigned_for_a_nonce, "--key", pub, "--nonce", "challenge-3") == 1
    assert "signed without the nonce asked for" in capsys.readouterr().err


def test_envelopes_carrying_different_nonces_are_refused(tmp_path, parties):
    """Each envelope signed genuinely, but for different challenges: mixed from two attestations."""
    a, b = _write(tmp_path / "a", []), _write(tmp_path / "b", [])
    for root, nonce in ((a, "one"), (b, "two")):
        bundle.sign_existing(root, [parties["signer"].signer], nonce)
    shutil.copy(b / "attestations" / "sglang-0.5.20.admission.intoto.json", a / "attestations")
    _reseal(a)
    problems, standalone = _both(a, keys=[parties["signer"].public])
    assert standalone == 1 and any("another nonce" in p for p in problems)


@pytest.mark.parametrize("argv", [["--max-age", "7"], ["--max-age", "0d"], ["--not-before", "yesterday"], ["--nonce", ""],
                                  ["--nonce", "a\nb"], ["--threshold", "0"]])
def test_bad_freshness_options_are_one_line_bad_input(tmp_path, argv, capsys):
    with pytest.raises(SystemExit) as exited:
        _cli(tmp_path, "--key", "k", *argv)
    assert exited.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


# --- subjects -------------------------------------------------------------------------------------


def test_a_mutation_bundle_verifies_with_both_its_tree_the_subject(tmp_path, parties):
    """No receipt: the bundle Statement's subject is the tree the mutation report's mutants came from."""
    from runner.evidence import mutation
    from runner.judge import judging
    digest = "h1:" + base64.b64encode(b"\x01" * 32).decode()
    score = judging.score_of("admission", 38935, [("bug", "clean")], ["killed"])
    report = mutation.Mutation(source="pypi:sglang==0.5.21", tree_digest=digest, probe="admission", probe_sha256="a" * 64,
                               score=score, baseline=[mutation.BaselineCase(id="c", role="bug", state="clean")],
                               targets=[], missing=[], mutants=[mutation.Mutant(
                                   id="m", function="f", file="sglang/x.py", line=1, operator="delete", before="x()",
                                   after="pass", status="killed", why="c: duty")])
    root = bundle.write(tmp_path / "m", kind="mutate", created_at=NOW, receipts=[], differentials=[], pins_sha256=None,
                        files={f"{mutation.DIR}x.admission.json": json.dumps(report.model_dump(mode="json")).encode()},
                        extra={"scores": [report.score.model_dump(mode="json") | {"source": report.source}]},
                        signers=[parties["signer"].signer])
    assert _both(root, keys=[parties["signer"].public]) == ([], 0)
    whole = json.loads(base64.b64decode(_envelope(root, "bundle.intoto.json")["payload"]))
    assert whole["subject"] == [statements.mutated_subject(report)]
    assert whole["subject"][0]["digest"] == {"dirHash": "01" * 32}


def test_the_standalone_derives_the_same_subjects_as_diffprobe_for_every_kind_of_source():
    """Two implementations of one mapping (the stand-alone must not import diffprobe's)."""
    vb = helpers.standalone()
    digest = "h1:" + base64.b64encode(bytes(range(32))).decode()
    tree = helpers.tree("0.5.21").model_copy(update={"tree_digest": digest})
    git = tree.model_copy(update={"kind": "git", "artifact": None, "artifact_sha256": None, "commit": "f" * 40,
                                  "repo": "/r", "package_dir": "python/sglang"})
    path = tree.model_copy(update={"kind": "path", "artifact": None, "artifact_sha256": None, "path": "/p"})
    server = receipts.ServerIdentity(source="http://h:1", url="http://h:1", reported={"ü": ["x", 1, None, True]})
    model = receipts.ModelIdentity(source="model", switches={"b": True, "a": False})
    for source in (tree, git, path, server, model):
        made = statements.subjects(source)
        assert vb.source_subjects(source.model_dump(mode="json")) == vb.named({"subject": made}), source.kind
        assert all(len(s["digest"]) == 1 for s in made)


def test_the_readmes_recipes_recompute_the_subjects_of_a_real_release(release_tree, cache, tmp_path, parties):
    """On a real wheel (whose file names hold spaces), as a stranger would: sha256sum of the wheel,
    the wheel unpacked and the annotated recipe run in it; the stand-alone verifier's --artifact and
    --tree find the same subjects."""
    tree = release_tree("0.5.21")
    wheel = cache.download("sglang-0.5.21") / tree.identity.artifact  # where resolving the release left it
    made = statements.subjects(tree.identity)
    by_kind = {s["annotations"]["kind"]: s for s in made}
    assert subprocess.run(["sha256sum", str(wheel)], capture_output=True, text=True,
                          check=True).stdout.split()[0] == by_kind["wheel"]["digest"]["sha256"]
    subprocess.run([sys.executable, "-m", "zipfile", "-e", str(wheel), str(tmp_path / "x")], check=True)
    spaced = subprocess.run("find sglang -type f -name '* *' | head -1", shell=True, cwd=tmp_path / "x",
                            capture_output=True, text=True, check=True).stdout
    assert spaced.strip(), "expected a real release to ship a file name with a space"
    recipe = by_kind["package tree"]["annotations"]["recipe"]
    assert subprocess.run(recipe, shell=True, cwd=tmp_path / "x", capture_output=True, text=True,
                          check=True).stdout.strip() == by_kind["package tree"]["digest"]["dirHash"]
    receipt = receipts.make(helpers.PROBE, tree.identity, receipts.host_environment(), [helpers.case("a")],
                            started_at=NOW, finished_at=NOW)
    root = bundle.write(tmp_path / "b", kind="audit", created_at=NOW, receipts=[receipt], differentials=[],
                        pins_sha256=None, signers=[parties["signer"].signer])
    key = ["--key", str(parties["signer"].public)]
    assert helpers.standalone().main([str(root), *key, "--artifact", str(wheel), "--tree", str(tmp_path / "x")]) == 0
    (tmp_path / "x" / "sglang" / "version.py").write_text("changed\n")
    assert helpers.standalone().main([str(root), *key, "--tree", str(tmp_path / "x")]) == 1


def test_key_ids_and_names_from_a_bundle_are_printed_escaped(genuine, parties, capsys):
    """An envelope's key ids are whatever its author wrote: a terminal escape among them is shown, never sent."""
    root, _ = genuine
    _rewrite_signatures(root, lambda raw: [{"keyid": "\x1b[2J\x1b[31mevil", "sig": base64.b64encode(os.urandom(64)).decode()}])
    _reseal(root)
    capsys.readouterr()
    assert _cli(root) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[2J" in out
    problems, standalone = _both(root, keys=[parties["signer"].public])
    printed = capsys.readouterr().out
    assert standalone == 1 and "\x1b" not in printed
