"""in-toto Statements v1 derived from a bundle: what a signature vouches for, in a format others read.

One Statement per receipt and one for the bundle, each with the in-toto test-result predicate
(https://in-toto.io/attestation/test-result/v0.1; spec: in-toto/attestation
spec/predicates/test-result.md). Derived, never stored apart: ``verify`` re-derives each one from the
bundle and refuses an envelope whose payload differs, so a signature covers exactly the receipt it names.

Mapping (README, "Signed attestations"):
- subject: the observed tree by every digest known: ``sha256`` of the release artifact, ``gitCommit``,
  ``dirHash`` (the tree digest, hex; in-toto's DigestSet). Consumers match ANY of them.
- a test is a case (``probe/case``) or, for the bundle, a fix (``fix-N``); ``passedTests`` are cases
  observed clean, ``failedTests`` cases observed with the bug signature; a case that errored, timed out
  or did not apply is in neither, nor in ``warnedTests`` (it did not pass with a warning: it was not
  observed), but in the extension field ``diffprobeNotJudged`` with its outcome.
- ``result``: PASSED only when every test passed; otherwise FAILED.
- configuration: diffprobe itself (sha256 over its source files, version), the probe, the receipt (the
  file's sha256 as listed in SHA256SUMS, its own ``digest``), the environment's lock and stand-ins.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Literal

import orjson

from runner.evidence.judging import state
from runner.evidence.mutation import Mutation
from runner.evidence.receipts import Differential, Receipt, Source, source_key

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
NOT_JUDGED = "diffprobeNotJudged"  # extension field: test id -> why it is neither passed nor failed
MEDIA_TYPE = "application/json"
Result = Literal["PASSED", "FAILED"]


def digests(source: Source) -> dict[str, str]:
    """Every digest that names what a receipt observed (in-toto DigestSet keys)."""
    if source.kind in ("server", "model"):
        return {"sha256": source_key(source)}  # of the identity's canonical JSON: all there is to name
    found = {"sha256": source.artifact_sha256, "gitCommit": source.commit, "dirHash": dirhash_hex(source.tree_digest)}
    return {k: v for k, v in found.items() if v}


def dirhash_hex(tree_digest: str) -> str | None:
    """in-toto's ``dirHash`` (lowercase hex) of an ``h1:`` tree digest; None for one that is not a
    well-formed sha256 (a hand-edited receipt: its Statement then names the tree by its other digests)."""
    try:
        raw = base64.b64decode(tree_digest.removeprefix("h1:"), validate=True)
    except binascii.Error:
        return None
    return raw.hex() if tree_digest.startswith("h1:") and len(raw) == 32 else None


def subject(source: Source) -> dict[str, Any]:
    annotations = {"kind": source.kind}
    if source.kind in ("pypi", "git", "path"):
        annotations |= {k: v for k, v in (("artifact", source.artifact), ("repo", source.repo),
                                          ("treeDigest", source.tree_digest)) if v}
    return {"name": source.source, "digest": digests(source), "annotations": annotations}


def _judge(version: str, sha256: str) -> dict[str, Any]:
    return {"name": "diffprobe", "digest": {"sha256": sha256}, "annotations": {"version": version}}


def _statement(subjects: list[dict], result: Result, configuration: list[dict], passed: list[str],
               failed: list[str], not_judged: dict[str, str]) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": TEST_RESULT,
        "predicate": {
            "result": result,
            "configuration": configuration,
            "passedTests": passed,
            "warnedTests": [],
            "failedTests": failed,
            NOT_JUDGED: not_judged,
        },
    }


def _tally(states: dict[str, str]) -> tuple[Result, list[str], list[str], dict[str, str]]:
    """(result, passed, failed, not judged) from test id -> clean | bug | anything else."""
    passed = [t for t, s in states.items() if s == "clean"]
    failed = [t for t, s in states.items() if s == "bug"]
    other = {t: s for t, s in states.items() if s not in ("clean", "bug")}
    result: Result = "PASSED" if states and len(passed) == len(states) else "FAILED"
    return result, passed, failed, other


def receipt_states(receipt: Receipt) -> dict[str, str]:
    """Each case as a test: ``probe/case`` -> clean, bug, or its outcome; an import that failed is
    one test of its own, so a receipt with no case can never pass."""
    states = {f"{receipt.probe.id}/{c.id}": state(c) for c in receipt.cases}
    if receipt.import_result.outcome != "ok":
        states[f"{receipt.probe.id}/import"] = "error"
    return states


def receipt_statement(name: str, file_sha256: str, receipt: Receipt) -> dict[str, Any]:
    """The Statement of the receipt stored at ``name`` (bundle path) whose file has ``file_sha256``."""
    env = receipt.environment
    configuration = [
        _judge(env.diffprobe, env.diffprobe_sha256),
        {"name": f"probe/{receipt.probe.id}", "digest": {"sha256": receipt.probe.sha256},
         "annotations": {"files": receipt.probe.files, **({"fix": receipt.probe.fix} if receipt.probe.fix else {})}},
        {"name": name, "digest": {"sha256": file_sha256}, "mediaType": MEDIA_TYPE,
         "annotations": {"receiptDigest": receipt.digest, "observationDigest": receipt.observation_digest}},
    ]
    if env.lock_sha256:
        configuration.append({"name": "environment/lock", "digest": {"sha256": env.lock_sha256},
                              "annotations": {"python": env.python, "platform": env.platform,
                                              "networkIsolated": env.network_isolated}})
    if env.standins:
        configuration.append({"name": "environment/standins", "digest": {"sha256": env.standins.sha256},
                              "annotations": {"used": env.standins.used}})
    return _statement([subject(receipt.source)], *_arrange(receipt_states(receipt), configuration))


def _arrange(states: dict[str, str], configuration: list[dict]):
    result, passed, failed, other = _tally(states)
    return result, configuration, passed, failed, other


FIX_STATES = {"fix observed": "clean", "fix not observed": "bug", "regression": "bug", "inconclusive": "inconclusive"}


def mutated_subject(m: Mutation) -> dict[str, Any] | None:
    """A mutated tree as a subject: a mutation report names it by its tree digest only."""
    hexed = dirhash_hex(m.tree_digest)
    return {"name": m.source, "digest": {"dirHash": hexed}, "annotations": {"kind": "mutated", "treeDigest": m.tree_digest}} if hexed else None


def mutation_state(m: Mutation) -> str:
    """A mutation report as a test: passed when its evidence holds, failed on a survivor nobody
    explained, not judged when the unmutated tree does not read fixed (the score means nothing then)."""
    return "clean" if m.holds() else "bug" if m.unexplained() else f"baseline {m.score.baseline}"


def bundle_statement(files: dict[str, str], receipts: dict[str, Receipt], differentials: dict[str, Differential],
                     judge: tuple[str, str], mutations: dict[str, Mutation]) -> dict[str, Any] | None:
    """The bundle's Statement: its verdicts as tests (``fix-N`` passed when the fix was observed,
    failed on "fix not observed" or a regression), or, with no differential, each receipt as one
    test, or, with no receipt, each mutation report (``mutations``) as one test, its tree the
    subject; every file of the bundle (``files``: name -> sha256) in the configuration, so the
    signature covers the index and any extra file too. None for a bundle that observed nothing."""
    named = [subject(r.source) for r in receipts.values()] or [mutated_subject(m) for m in mutations.values()]
    subjects: dict[str, dict] = {}
    for s in filter(None, named):
        subjects.setdefault(orjson.dumps(s, option=orjson.OPT_SORT_KEYS).decode(), s)
    if not subjects:
        return None
    if differentials:
        states = {f"fix-{d.fix}": FIX_STATES[d.verdict] for d in differentials.values()}
    elif receipts:
        states = {}
        for name, r in receipts.items():
            result, _, failed, _ = _tally(receipt_states(r))
            states[name] = "clean" if result == "PASSED" else "bug" if failed else "inconclusive"
    else:
        states = {name: mutation_state(m) for name, m in mutations.items()}
    configuration = [_judge(*judge)]
    for name in sorted(files):
        entry: dict[str, Any] = {"name": name, "digest": {"sha256": files[name]}, "mediaType": MEDIA_TYPE}
        if name in receipts:
            entry["annotations"] = {"receiptDigest": receipts[name].digest}
        elif name in differentials:
            d = differentials[name]
            entry["annotations"] = {"differentialDigest": d.digest, "verdict": d.verdict, "expected": d.expected}
        configuration.append(entry)
    return _statement(list(subjects.values()), *_arrange(states, configuration))


def payload(statement: dict[str, Any]) -> bytes:
    """The bytes that are signed: compact JSON, keys sorted (stable, so re-signing finds the same payload)."""
    return orjson.dumps(statement, option=orjson.OPT_SORT_KEYS)
