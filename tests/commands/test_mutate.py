"""``diffprobe mutate``'s bundle: mutation reports read against their schema, attested and signed like
receipts (the mutants themselves run in tests/probes/test_mutation.py; here ``measure`` is stood in)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from runner import cli
from runner.commands import mutate
from runner.evidence import bundle
from runner.judge import judging
from runner.evidence.mutation import BaselineCase, Mutant, Mutation
from runner.files import sha256_file
from tests.evidence.test_attest import third_party_check
from tests.helpers import check_signed, key_pair
from tests.records import checked

TREE_DIGEST = "h1:" + base64.b64encode(bytes(range(32))).decode()


def report(baseline: str = "fixed", survivor_why: str = "no case reaches the retry branch") -> Mutation:
    mutants = [Mutant(id="m1", function="f", file="sglang/x.py", line=3, operator="negate-condition", before="if a:",
                      after="if not a:", status="killed", why="rejected: sender created"),
               Mutant(id="m2", function="f", file="sglang/x.py", line=5, operator="drop-call", before="g()", after="pass",
                      status="survived", why=survivor_why)]
    cases = [BaselineCase(id="rejected", role="bug", state="clean" if baseline == "fixed" else "bug")]
    score = judging.score_of("admission", 38935, [(c.role, c.state) for c in cases], [m.status for m in mutants])
    assert score.baseline == baseline
    return Mutation(source="pypi:sglang==0.5.21", tree_digest=TREE_DIGEST, probe="admission", probe_sha256="a" * 64,
                    score=score, baseline=cases, targets=[], missing=[], mutants=mutants)


def mutate_cli(monkeypatch, tmp_path: Path, found: Mutation, *extra: str) -> tuple[int, Path]:
    monkeypatch.setattr(mutate, "measure", lambda *a, **k: [("sglang-0.5.21", found)])
    out = tmp_path / "m"
    code = cli.main(["mutate", "--fix", "38935", "--cache-dir", str(tmp_path / "cache"), "--out", str(out), *extra])
    assert checked(out)["scores"] == [found.score.model_dump(mode="json") | {"source": found.source}]
    return code, out


def statement(root: Path) -> dict:
    envelope = json.loads((root / "attestations" / "bundle.intoto.json").read_bytes())
    return json.loads(base64.b64decode(envelope["payload"]))


def test_mutate_signs_its_bundle_and_the_statement_names_the_mutated_tree(monkeypatch, tmp_path, capsys):
    private, public = key_pair(tmp_path / "keys")
    code, out = mutate_cli(monkeypatch, tmp_path, report(), "--sign", str(private))
    assert code == 0
    check_signed(out, public, capsys)
    s = statement(out)
    assert third_party_check((out / "attestations" / "bundle.intoto.json").read_bytes(), public.read_bytes()) == s
    assert [(x["name"], x["digest"], x["annotations"]["treeDigest"]) for x in s["subject"]] == [
        ("pypi:sglang==0.5.21#sglang/", {"dirHash": bytes(range(32)).hex()}, TREE_DIGEST)]
    assert "the tree every mutant was made from" in s["subject"][0]["annotations"]["folder"]
    assert s["predicate"]["result"] == "PASSED" and s["predicate"]["passedTests"] == ["mutation/sglang-0.5.21.admission.json"]


@pytest.mark.parametrize("found, code, where", [
    (report(survivor_why=""), 1, "failedTests"),  # a survivor nobody explained
    (report(baseline="not fixed"), 1, "diffprobeNotJudged"),  # no score means anything on an unfixed tree
])
def test_the_statement_says_what_the_exit_code_says(monkeypatch, tmp_path, capsys, found, code, where):
    private, public = key_pair(tmp_path / "keys")
    got, out = mutate_cli(monkeypatch, tmp_path, found, "--sign", str(private))
    assert got == code
    s = statement(out)
    assert s["predicate"]["result"] == "FAILED" and "mutation/sglang-0.5.21.admission.json" in s["predicate"][where]


def test_a_mutation_report_off_its_schema_does_not_verify(monkeypatch, tmp_path):
    """Even with SHA256SUMS fixed after the edit: the report is read against its schema."""
    _, out = mutate_cli(monkeypatch, tmp_path, report())
    name = "mutation/sglang-0.5.21.admission.json"
    raw = json.loads((out / name).read_bytes())
    raw["score"]["killed"] = "all of them"
    (out / name).write_bytes(json.dumps(raw).encode())
    lines = (out / bundle.MANIFEST).read_text().splitlines()
    (out / bundle.MANIFEST).write_text("".join(
        (f"{sha256_file(out / name)}  {name}" if line.endswith(name) else line) + "\n" for line in lines))
    assert any(p.startswith(f"{name}: does not match its schema") for p in bundle.verify(out))
