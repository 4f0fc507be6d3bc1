"""in-toto Statements v1 derived from a bundle: what a signature vouches for, in a format others read.

One Statement per receipt and one for the bundle, each with the in-toto test-result predicate
(https://in-toto.io/attestation/test-result/v0.1; spec: in-toto/attestation
spec/predicates/test-result.md). Derived, never stored apart: ``verify`` re-derives each one from the
bundle and refuses an envelope whose payload differs, so a signature covers exactly the receipt it names.

Mapping (README, "Signed attestations"):
- subjects: one per thing hashed, named for it: the wheel file (``sha256``), the commit
  (``gitCommit``), the package tree (``dirHash``: the tree digest in hex, annotated with the folder
  and the shell recipe that recomputes it). A consumer matches any of them.
- a test is a case (``probe/case``) or, for the bundle, a fix (``fix-N``); ``passedTests`` are cases
  observed clean, ``failedTests`` cases observed with the bug signature; a case that errored, timed out
  or did not apply is in neither, nor in ``warnedTests`` (it did not pass with a warning: it was not
  observed), but in the extension field ``diffprobeNotJudged`` with its outcome.
- ``result``: PASSED only when every test passed; otherwise FAILED.
- configuration: diffprobe itself (its judge's digest: the import closure of runner/judge; version), the probe, the receipt (the
  file's sha256 as listed in SHA256SUMS, its own ``digest``), the environment's lock and stand-ins, and
  how the tree's code was confined (``environment/confinement``: sandbox or none, interpreter, layer);
  the bundle's: each way its trees' code was confined, once, and every file, each annotated
  ``diffprobeFile`` with its role, the index with ``createdAt``.
- ``diffprobeNonce``: the verifier's challenge, when the signer was given one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any, Literal

import orjson

from runner.judge.judging import state
from runner.evidence.mutation import Mutation
from runner.evidence.receipts import TREE_KINDS, Differential, Environment, Receipt, Source, source_key

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
NOT_JUDGED = "diffprobeNotJudged"  # extension field: test id -> why it is neither passed nor failed
NONCE = "diffprobeNonce"  # extension field: the verifier's challenge the signer answered (attest --nonce)
FILE_ROLE = "diffprobeFile"  # annotation of a configuration entry that is a file of the bundle: its role
MEDIA_TYPE = "application/json"
Result = Literal["PASSED", "FAILED"]


# The dirHash of a package tree, recomputed in the directory that holds ``sglang/`` (a wheel unpacked,
# a commit's ``python/`` checked out): in-toto's ``find . -type f | ... | xargs -r sha256sum`` splits
# names at blanks, and SGLang ships file names with spaces, so names travel NUL-separated here.
# Byte-code is left out: a tree's store never holds any (runner.store.trees).
DIRHASH_RECIPE = ("find sglang -type f ! -path '*/__pycache__/*' ! -name '*.py[co]' -print0 | LC_ALL=C sort -z"
                  " | xargs -0 -r sha256sum | sha256sum | cut -d' ' -f1")


def subjects(source: Source) -> list[dict[str, Any]]:
    """What a receipt observed, one subject per thing hashed, each named for exactly that: the wheel
    file by its sha256, the commit by its id, a container image by its manifest digest (a
    docker-archive's, which holds none, by its config digest), the package tree by its dirHash (annotated with the
    folder and the recipe); a server or the model by the sha256 of its identity's canonical JSON.
    A consumer matches any of them; none pairs two digests of different things."""
    if source.kind in ("server", "model"):
        return [{"name": source.source, "digest": {"sha256": source_key(source)},
                 "annotations": {"kind": source.kind, "hashed": IDENTITY_HASHED}}]
    out = []
    if source.artifact_sha256:
        out.append({"name": source.artifact or source.source, "digest": {"sha256": source.artifact_sha256},
                    "annotations": {"kind": "wheel", "source": source.source}})
    if source.commit:
        out.append({"name": source.source, "digest": {"gitCommit": source.commit},
                    "annotations": {"kind": "git commit", "repo": source.repo or ""}})
    image = source.image
    if image is not None:  # the image by its manifest digest, what ``skopeo inspect`` prints (a docker-archive: its config)
        digest, kind = (image.manifest_digest, "image manifest") if image.manifest_digest else (image.config_digest, "image config")
        out.append({"name": source.source, "digest": {"sha256": digest.split(":", 1)[1]},
                    "annotations": {"kind": kind, "config": image.config_digest, "layers": ",".join(image.layers)}})
    folder = {"pypi": f"sglang/ of {source.artifact}", "wheel": f"sglang/ of {source.artifact}",
              "git": f"{source.package_dir}/ of commit {source.commit}, as sglang/",
              "path": f"the sglang package found in {source.path}, as sglang/"}.get(
                  source.kind, f"/{image.package if image else 'sglang'} in the image, as sglang/")
    tree = tree_subject(source.source, source.tree_digest, folder)
    return out + ([tree] if tree else [])


IDENTITY_HASHED = "the receipt's source object as canonical JSON (keys sorted, compact, UTF-8)"


def tree_subject(source: str, tree_digest: str, folder: str) -> dict[str, Any] | None:
    """A package tree by its dirHash; None for a digest that is not a well-formed ``h1:`` sha256 (a
    hand-edited receipt: its Statement then names what it observed by its other digests)."""
    hexed = dirhash_hex(tree_digest)
    if hexed is None:
        return None
    return {"name": f"{source}#sglang/", "digest": {"dirHash": hexed},
            "annotations": {"kind": "package tree", "folder": f"{folder} (byte-code left out)",
                            "recipe": DIRHASH_RECIPE, "treeDigest": tree_digest}}


def dirhash_hex(tree_digest: str) -> str | None:
    """in-toto's ``dirHash`` (lowercase hex) of an ``h1:`` tree digest, or None."""
    try:
        raw = base64.b64decode(tree_digest.removeprefix("h1:"), validate=True)
    except binascii.Error:
        return None
    return raw.hex() if tree_digest.startswith("h1:") and len(raw) == 32 else None


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
         "annotations": {FILE_ROLE: "receipt", "receiptDigest": receipt.digest,
                         "observationDigest": receipt.observation_digest}},
    ]
    if env.lock_sha256:
        configuration.append({"name": "environment/lock", "digest": {"sha256": env.lock_sha256},
                              "annotations": {"python": env.python, "platform": env.platform,
                                              "networkIsolated": env.network_isolated}})
    if env.standins:
        configuration.append({"name": "environment/standins", "digest": {"sha256": env.standins.sha256},
                              "annotations": {"used": env.standins.used}})
    if receipt.source.kind in TREE_KINDS:  # a tree's code ran: how it was confined
        configuration.append(confinement(env))
    return _statement(subjects(receipt.source), *_arrange(receipt_states(receipt), configuration))


CONFINEMENT_HASHED = "the receipt's environment.isolation as canonical JSON (keys sorted, compact, UTF-8; null: not recorded)"


def confinement(env: Environment) -> dict[str, Any]:
    """How the tree's code ran, as a configuration entry: the sandbox (or none: the tree's code ran with
    the user's rights), the interpreter and the dependency layer, as every screen says them
    (``Environment.confinement``); pinned by the digest of the isolation record the receipt holds."""
    record = env.isolation.model_dump(mode="json") if env.isolation else None
    said = env.confinement()
    return {"name": "environment/confinement",
            "digest": {"sha256": hashlib.sha256(orjson.dumps(record, option=orjson.OPT_SORT_KEYS)).hexdigest()},
            "annotations": {"sandboxed": bool(env.isolation and env.isolation.sandboxed), "sandbox": said["sandbox"],
                            "namespaces": env.isolation.namespaces if env.isolation else [],
                            "interpreter": said["interpreter"], "dependencyLayer": said["dependency layer"],
                            "hashed": CONFINEMENT_HASHED}}


def _arrange(states: dict[str, str], configuration: list[dict]):
    result, passed, failed, other = _tally(states)
    return result, configuration, passed, failed, other


FIX_STATES = {"fix observed": "clean", "fix not observed": "bug", "regression": "bug", "inconclusive": "inconclusive"}


def mutated_subject(m: Mutation) -> dict[str, Any] | None:
    """The tree a mutation report's mutants were made from, by its dirHash (all the report names)."""
    return tree_subject(m.source, m.tree_digest, f"sglang/ of {m.source}, the tree every mutant was made from")


def mutation_state(m: Mutation) -> str:
    """A mutation report as a test: passed when its evidence holds, failed on a survivor nobody
    explained, not judged when the unmutated tree does not read fixed (the score means nothing then)."""
    return "clean" if m.holds() else "bug" if m.unexplained() else f"baseline {m.score.baseline}"


def bundle_statement(files: dict[str, str], receipts: dict[str, Receipt], differentials: dict[str, Differential],
                     judge: tuple[str, str], mutations: dict[str, Mutation], index: tuple[str, str]) -> dict[str, Any] | None:
    """The bundle's Statement: its verdicts as tests (``fix-N`` passed when the fix was observed,
    failed on "fix not observed" or a regression), or, with no differential, each receipt as one
    test, or, with no receipt, each mutation report (``mutations``) as one test, its tree the
    subject; every file of the bundle (``files``: name -> sha256) in the configuration, marked with
    its role (``diffprobeFile``), so the signature covers the index and any extra file too and a
    verifier knows which entries are files. ``index``: the index file's name and its creation time,
    annotated on its entry (what ``verify --max-age`` reads). None for a bundle that observed nothing."""
    named = [s for r in receipts.values() for s in subjects(r.source)] or [mutated_subject(m) for m in mutations.values()]
    unique: dict[str, dict] = {}
    for s in filter(None, named):
        unique.setdefault(orjson.dumps(s, option=orjson.OPT_SORT_KEYS).decode(), s)
    if not unique:
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
    for entry in {orjson.dumps(e, option=orjson.OPT_SORT_KEYS): e for e in (
            confinement(r.environment) for r in receipts.values() if r.source.kind in TREE_KINDS)}.values():
        configuration.append(entry)  # each way the trees' code ran, once
    for name in sorted(files):
        entry: dict[str, Any] = {"name": name, "digest": {"sha256": files[name]}}
        if name.endswith(".json"):
            entry["mediaType"] = MEDIA_TYPE
        if name == index[0]:
            entry["annotations"] = {FILE_ROLE: "index", "createdAt": index[1]}
        elif name in receipts:
            entry["annotations"] = {FILE_ROLE: "receipt", "receiptDigest": receipts[name].digest}
        elif name in differentials:
            d = differentials[name]
            entry["annotations"] = {FILE_ROLE: "differential", "differentialDigest": d.digest, "verdict": d.verdict,
                                    "expected": d.expected}
        else:
            entry["annotations"] = {FILE_ROLE: "mutation" if name in mutations else "file"}
        configuration.append(entry)
    return _statement(list(unique.values()), *_arrange(states, configuration))


def with_nonce(statement: dict[str, Any], nonce: str | None) -> dict[str, Any]:
    """The Statement bound to a verifier's nonce (``attest --nonce``): an extension field of the
    predicate, so a signature made for one challenge never answers another."""
    if nonce is None:
        return statement
    return statement | {"predicate": statement["predicate"] | {NONCE: nonce}}


def payload(statement: dict[str, Any]) -> bytes:
    """The bytes that are signed: compact JSON, keys sorted (stable, so re-signing finds the same payload)."""
    return orjson.dumps(statement, option=orjson.OPT_SORT_KEYS)
