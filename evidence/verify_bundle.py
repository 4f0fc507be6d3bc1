#!/usr/bin/env python3
"""Check a signed diffprobe bundle without diffprobe: securesystemslib and in-toto-attestation only.

    pip install 'securesystemslib[crypto]' in-toto-attestation
    python3 verify_bundle.py BUNDLE --key KEY.pub [--key MORE.pub] [--threshold K]
        [--not-before DATE] [--max-age AGE] [--nonce NONCE] [--artifact WHEEL]... [--tree DIR]...

Exit 0 when every check passes, 1 when one fails (one line per problem), 2 on a usage error or a key
that cannot be read. One file that imports nothing of diffprobe, so that whoever checks a bundle needs
to trust only these lines and two libraries diffprobe did not write. The rules (README, "Signed
attestations"), each a reason ``diffprobe verify --key`` refuses a bundle too:

1. files: every entry of BUNDLE is a regular file (no link, no device); ``SHA256SUMS`` lists exactly
   them, each once with its sha256, in the form diffprobe writes (sorted ``<sha256>  <name>`` lines).
2. signatures: each ``attestations/*.intoto.json`` is a DSSE envelope exactly (its three fields, each
   signature a keyid and a sig, standard padded base64, UTF-8 JSON without a byte order mark) of payload type
   ``application/vnd.in-toto+json``; a signature claiming the id of a given key must verify with that
   key (a relabelled or garbage signature is refused, not skipped); at least K distinct given keys
   sign every envelope (securesystemslib's ``Envelope.verify`` counts them once more).
3. Statements: every payload is an in-toto Statement v1 with the test-result predicate, parsed and
   validated by in-toto-attestation.
4. coverage: ``attestations/bundle.intoto.json`` is there; the configuration entries of its Statement
   that are files (annotated ``diffprobeFile``) are exactly the bundle's files other than
   ``SHA256SUMS`` and ``attestations/``, each with its sha256 (a file missing, added, grafted or
   edited is refused); every receipt ``receipts/X.json`` has ``attestations/X.intoto.json`` whose
   Statement names it with the same sha256; nothing else sits under ``attestations/``.
5. subjects: a receipt's Statement names what the receipt's ``source`` names (the wheel file by its
   sha256, the commit by ``gitCommit``, the package tree by ``dirHash``; a server or the model by the
   sha256 of its identity's canonical JSON); the bundle's Statement names the union of those (or,
   with no receipt, the trees of its mutation reports). ``--artifact FILE``: the file's sha256 must
   be a subject's; ``--tree DIR``: the dirHash of ``DIR/sglang`` must be, and ``DIR/sglang`` must hold
   nothing the dirHash leaves out (a link, byte-code, an empty directory, an unprintable name).
6. freshness: the signed creation time (``createdAt`` on the index's entry, equal to ``created_at``
   in ``bundle.json``) is not before ``--not-before`` nor older than ``--max-age``; every Statement
   carries the same nonce (``diffprobeNonce``), the one ``--nonce`` asks for.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import copy
import hashlib
import json
import os
import re
import stat
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

try:  # without them, one line naming what to install (main), never a traceback
    from cryptography.hazmat.primitives.serialization import load_pem_public_key  # securesystemslib[crypto]
    from google.protobuf import json_format  # in-toto-attestation's own dependency
    from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import UnverifiedSignatureError, VerificationError
    from securesystemslib.signer import SSlibKey
    MISSING = None
except ImportError as e:
    MISSING = (e.name or str(e)).split(".")[0]
INSTALL = "pip install 'securesystemslib[crypto]' in-toto-attestation"
# What a Statement's result says: the test result the tree recorded (did its cases show the bug?),
# signed as observed. It is not this script's verdict: that is the exit code and the VERIFIED line.
RESULTS = {"PASSED": "recorded: every case clean", "FAILED": "recorded: a case showed the bug or could not be judged"}

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
MANIFEST = "SHA256SUMS"
ATTESTATIONS = "attestations/"
BUNDLE_ENVELOPE = "attestations/bundle.intoto.json"
ROLE, NONCE = "diffprobeFile", "diffprobeNonce"
CLOCK_SKEW = timedelta(minutes=5)


class Refused(Exception):
    """One reason the bundle does not verify."""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if MISSING:
        print(f"verify_bundle: error: the module {MISSING} is missing: {INSTALL}", file=sys.stderr)
        return 2
    try:
        keys = load_keys(args.key)
    except (OSError, ValueError) as e:
        print(f"verify_bundle: error: {e}", file=sys.stderr)
        return 2
    for path in args.artifact or []:
        if not Path(path).is_file():
            print(f"verify_bundle: error: --artifact {path}: No such file", file=sys.stderr)
            return 2
    for path in args.tree or []:
        if not (Path(path) / "sglang").is_dir():
            print(f"verify_bundle: error: --tree {path}: No such directory holding sglang/", file=sys.stderr)
            return 2
    if args.threshold > len(keys):
        print(f"verify_bundle: error: --threshold {args.threshold}: only {len(keys)} distinct key(s) given", file=sys.stderr)
        return 2
    problems, report = verify(Path(args.bundle), keys, args.threshold, args)
    for line in problems:
        print(f"REFUSED {shown(line)}")
    if problems:
        return 1
    for line in report:
        print(shown(line))
    return 0


def _meaning(result: str) -> str:
    return f"{result} ({RESULTS.get(result, 'an unknown result')})"


def shown(text: str) -> str:
    """A line as printed: control characters and terminal escapes from the bundle shown escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def load_keys(paths: list[str]) -> dict[str, SSlibKey]:
    """keyid -> key for every PEM public key in every file (a file may hold several)."""
    keys = {}
    for path in paths:
        blocks = list(re.finditer(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----", Path(path).read_bytes(), re.DOTALL))
        if not blocks:
            raise ValueError(f"{path}: no PEM public key in it")
        for block in blocks:
            if block.group(1) != b"PUBLIC KEY":
                raise ValueError(f"{path}: holds a {block.group(1).decode()} block, not only public keys")
            try:
                key = SSlibKey.from_crypto(load_pem_public_key(block.group(0)))
            except Exception as e:  # a damaged block or an algorithm securesystemslib does not know
                raise ValueError(f"{path}: not a usable public key ({type(e).__name__})") from None
            if key.keytype != "ed25519":
                raise ValueError(f"{path}: not an Ed25519 key")
            keys[key.keyid] = key
    return keys


def verify(root: Path, keys: dict[str, SSlibKey], threshold: int, args) -> tuple[list[str], list[str]]:
    """(problems, report lines)."""
    problems: list[str] = []
    try:
        files = bundle_files(root)
    except Refused as e:
        return [str(e)], []
    problems += check_manifest(root, files)
    envelopes = {n: d for n, d in files.items() if n.startswith(ATTESTATIONS)}
    content = {n: d for n, d in files.items() if not n.startswith(ATTESTATIONS) and n != MANIFEST}
    statements, signers = {}, []
    for name in sorted(envelopes):
        try:
            statements[name], verified = open_envelope(root / name, keys, threshold)
            signers.append(verified)
        except Refused as e:
            problems.append(f"{name}: {e}")
    if problems:
        return problems, []
    problems += coverage(root, content, envelopes, statements)
    if problems:
        return problems, []
    problems += subjects(root, content, statements)
    problems += freshness(root, statements[BUNDLE_ENVELOPE], statements, args)
    problems += artifacts(statements, args)
    if problems:
        return problems, []
    whole = statements[BUNDLE_ENVELOPE]
    created = next(e["annotations"]["createdAt"] for e in whole["predicate"]["configuration"]
                   if e.get("annotations", {}).get(ROLE) == "index")
    report = [f"OK {root}: {len(content)} files, each named with its sha256 by the signed bundle Statement",
              f"OK signatures: {len(envelopes)} envelope(s), each signed by at least {threshold} of the {len(keys)} key(s) "
              f"given; verified on every one: {', '.join(k[:16] for k in sorted(set.intersection(*signers)))}",
              f"OK created {created}" + (f", nonce {whole['predicate'].get(NONCE)!r}" if NONCE in whole["predicate"] else "")]
    for name in sorted(statements):
        s = statements[name]
        report.append(f"   {name}: {_meaning(s['predicate']['result'])}; subjects: "
                      + "; ".join(f"{x['name']} {','.join(f'{k}:{v}' for k, v in sorted(x['digest'].items()))}"
                                  for x in s["subject"]) + "".join(f"; {how}" for how in confined(s)))
    loose = sorted({how for n, s in statements.items() if n != BUNDLE_ENVELOPE for how in confined(s) if how.startswith("UNSANDBOXED")})
    report += [f"WARNING a tree's code ran outside the sandbox, with its user's rights: {how}" for how in loose]
    report += [f"OK --tree {path}: the dirHash of its sglang/ is a subject of the bundle (it is the tree observed)"
               for path in args.tree or []]
    report += [f"OK --artifact {path}: its sha256 is a subject of the bundle" for path in args.artifact or []]
    results = [s["predicate"]["result"] for n, s in statements.items() if n != BUNDLE_ENVELOPE]
    report.append(f"VERIFIED: {len(content)} files and {len(envelopes)} signed Statements intact; "
                  f"{results.count('PASSED')} receipt(s) record PASSED, {results.count('FAILED')} FAILED. PASSED and FAILED "
                  "are the results the trees recorded (FAILED: a case showed the bug, as an unfixed tree does), not "
                  "outcomes of this check: every check passed")
    return [], report


def confined(statement: dict) -> list[str]:
    """How the trees' code ran, from each ``environment/confinement`` entry the Statement carries."""
    out = []
    for e in statement["predicate"]["configuration"]:
        if e.get("name") == "environment/confinement":
            a = e.get("annotations", {})
            how = f"{a.get('sandbox')}, {a.get('interpreter')}, layer {a.get('dependencyLayer')}"
            out.append(f"confined: {how}" if a.get("sandboxed") is True else f"UNSANDBOXED: {how}")
    return out


def bundle_files(root: Path) -> dict[str, str]:
    """Relative name -> sha256 of every file of the bundle; a link or a special file is refused."""
    if not (root / MANIFEST).is_file() or (root / MANIFEST).is_symlink():
        raise Refused(f"{root}: no {MANIFEST}: not a bundle")
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                raise Refused(f"{rel}: a symlink inside the bundle")
            if name in filenames:
                if not stat.S_ISREG(mode):
                    raise Refused(f"{rel}: not a regular file")
                files[rel] = sha256_file(path)
    return files


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def check_manifest(root: Path, files: dict[str, str]) -> list[str]:
    """``SHA256SUMS`` lists every file once, in the one form diffprobe writes (``sha256sum``'s own:
    ``<sha256>  <name>`` lines sorted by name): a name listed twice could be read either way, and
    ``diffprobe verify`` refuses any other form, so this verifier does too."""
    listed: dict[str, str] = {}
    raw = (root / MANIFEST).read_bytes()
    for line in raw.decode("utf-8", errors="replace").split("\n")[:-1]:  # what follows the last newline: the form check
        m = re.match(r"^([0-9a-f]{64})  ([^\r]+)$", line)
        if not m:
            return [f"{MANIFEST}: not a sha256sum line: {line[:80]!r}"]
        if m.group(2) in listed:
            return [f"{MANIFEST}: lists {m.group(2)} twice"]
        listed[m.group(2)] = m.group(1)
    if raw != "".join(f"{listed[n]}  {n}\n" for n in sorted(listed)).encode():
        return [f"{MANIFEST}: not in the form diffprobe writes (sorted '<sha256>  <name>' lines, one per file)"]
    present = {n: d for n, d in files.items() if n != MANIFEST}
    problems = [f"{n}: listed in {MANIFEST} but missing" for n in sorted(set(listed) - set(present))]
    problems += [f"{n}: present but not listed in {MANIFEST}" for n in sorted(set(present) - set(listed))]
    problems += [f"{n}: sha256 differs from {MANIFEST}" for n in sorted(set(listed) & set(present)) if listed[n] != present[n]]
    return problems


def open_envelope(path: Path, keys: dict[str, SSlibKey], threshold: int) -> tuple[dict, set[str]]:
    """(the Statement, key ids whose signature verified) of an envelope signed as the rules demand."""
    try:
        raw = json.loads(path.read_bytes().decode("utf-8"))  # a str: a byte order mark is refused
        dsse_form(raw)
        envelope = Envelope.from_dict(copy.deepcopy(raw))  # from_dict rewrites the dict it reads
    except Exception as e:  # any malformation: the library's own words, one line
        raise Refused(f"not a DSSE envelope ({type(e).__name__}: {str(e)[:120]})") from None
    if envelope.payload_type != PAYLOAD_TYPE:
        raise Refused(f"payloadType is {envelope.payload_type!r}, not {PAYLOAD_TYPE}")
    pae = envelope.pae()
    verified = set()
    for keyid, signature in envelope.signatures.items():
        if keyid not in keys:
            continue  # another party's signature: never counted
        try:
            keys[keyid].verify_signature(signature, pae)
        except UnverifiedSignatureError:
            raise Refused(f"signature claiming key {keyid[:16]} does not verify with that key") from None
        verified.add(keyid)
    try:
        envelope.verify(list(keys.values()), threshold)
    except VerificationError:
        raise Refused(f"signed by {len(verified)} of the given keys, fewer than the threshold {threshold}") from None
    try:
        statement = json.loads(envelope.payload)
        Statement.copy_from_pb(json_format.Parse(envelope.payload, statement_pb2.Statement())).validate()
        if statement["_type"] != STATEMENT_TYPE or statement["predicateType"] != TEST_RESULT:
            raise ValueError(f"not a test-result Statement v1 ({statement['predicateType']!r})")
        json_format.ParseDict(statement["predicate"], test_result_pb2.TestResult(), ignore_unknown_fields=True)
        named(statement), file_entries(statement)  # each subject and each file named once
    except Exception as e:
        raise Refused(f"payload is not an in-toto test-result Statement ({type(e).__name__}: {str(e)[:120]})") from None
    return statement, verified


def dsse_form(raw) -> None:
    """An envelope exactly as DSSE v1 lays it out: ``payload``, ``payloadType`` and ``signatures``
    (each a ``keyid`` and a ``sig``), strings, base64 in the standard alphabet with its padding, and
    nothing else. securesystemslib reads more (extra fields, the URL-safe alphabet); ``diffprobe
    verify`` does not, and what one verifier accepts the other must: ValueError otherwise."""
    if not isinstance(raw, dict) or set(raw) != {"payload", "payloadType", "signatures"} or not isinstance(raw["signatures"], list):
        raise ValueError("fields other than payload, payloadType and signatures")
    if any(not isinstance(x, dict) or set(x) != {"keyid", "sig"} for x in raw["signatures"]):
        raise ValueError("a signature of fields other than keyid and sig")
    texts = [raw["payload"], raw["payloadType"], *(v for x in raw["signatures"] for v in x.values())]
    if not all(isinstance(t, str) for t in texts):
        raise ValueError("a field that is not a string")
    for text in (raw["payload"], *(x["sig"] for x in raw["signatures"])):
        base64.b64decode(text, validate=True)


def file_entries(statement: dict) -> dict[str, dict]:
    """The configuration entries of a Statement that are files of the bundle, by name (a name twice
    is refused: which entry would count?)."""
    entries = [e for e in statement["predicate"]["configuration"] if ROLE in e.get("annotations", {})]
    by_name = {e["name"]: e for e in entries}
    if len(by_name) != len(entries):
        raise Refused("its Statement names a file twice")
    return by_name


def receipt_envelope(receipt: str) -> str:
    return ATTESTATIONS + receipt.removeprefix("receipts/").removesuffix(".json") + ".intoto.json"


def coverage(root: Path, content: dict[str, str], envelopes: dict[str, str], statements: dict[str, dict]) -> list[str]:
    if BUNDLE_ENVELOPE not in statements:
        return [f"{BUNDLE_ENVELOPE}: missing: nothing signed vouches for the bundle's files"]
    entries = file_entries(statements[BUNDLE_ENVELOPE])
    problems = [f"{n}: named by the signed bundle Statement but missing" for n in sorted(set(entries) - set(content))]
    problems += [f"{n}: not named by the signed bundle Statement (unsigned file)" for n in sorted(set(content) - set(entries))]
    problems += [f"{n}: sha256 differs from the one the signed bundle Statement names"
                 for n in sorted(set(entries) & set(content)) if entries[n].get("digest", {}).get("sha256") != content[n]]
    receipts = sorted(n for n, e in entries.items() if e["annotations"][ROLE] == "receipt")
    wanted = {receipt_envelope(n): n for n in receipts}
    for name in sorted(set(envelopes) - set(wanted) - {BUNDLE_ENVELOPE}):
        problems.append(f"{name}: attests nothing the signed bundle Statement names")
    for envelope, receipt in sorted(wanted.items()):
        if envelope not in statements:
            problems.append(f"{envelope}: missing: no signed Statement of {receipt}")
            continue
        named = file_entries(statements[envelope])
        if set(named) != {receipt} or named[receipt]["annotations"][ROLE] != "receipt":
            problems.append(f"{envelope}: its Statement does not name {receipt} (alone, as a receipt)")
        elif named[receipt].get("digest", {}).get("sha256") != content.get(receipt):
            problems.append(f"{envelope}: names {receipt} with another sha256 than the file's")
    return problems


def canonical(value) -> bytes:
    """diffprobe's canonical JSON: keys sorted, no blanks, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def hex_of_h1(tree_digest: str) -> str | None:
    """in-toto's dirHash of diffprobe's ``h1:`` tree digest (base64 of the same sha256)."""
    try:
        raw = base64.b64decode(tree_digest.removeprefix("h1:"), validate=True)
    except binascii.Error:
        return None
    return raw.hex() if tree_digest.startswith("h1:") and len(raw) == 32 else None


def source_subjects(source: dict) -> set[tuple[str, str]]:
    """(name, digest as JSON) of what a receipt's ``source`` names: what its Statement must name."""
    digest = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731
    kind = source.get("kind")
    if kind in ("server", "model"):
        return {(source["source"], digest({"sha256": hashlib.sha256(canonical(source)).hexdigest()}))}
    out = set()
    if source.get("artifact_sha256"):
        out.add((source.get("artifact") or source["source"], digest({"sha256": source["artifact_sha256"]})))
    if source.get("commit"):
        out.add((source["source"], digest({"gitCommit": source["commit"]})))
    if image := source.get("image"):  # a container image by its manifest digest (a docker-archive: its config's)
        out.add((source["source"], digest({"sha256": (image.get("manifest_digest") or image["config_digest"]).split(":", 1)[1]})))
    if hexed := hex_of_h1(source.get("tree_digest") or ""):
        out.add((f"{source['source']}#sglang/", digest({"dirHash": hexed})))
    return out


def named(statement: dict) -> set[tuple[str, str]]:
    """(name, digest) of each subject; a subject listed twice is refused (diffprobe lists each once)."""
    out = {(x["name"], json.dumps(x["digest"], sort_keys=True)) for x in statement["subject"]}
    if len(out) != len(statement["subject"]):
        raise Refused("its Statement lists a subject twice")
    return out


def read_json(path: Path):
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        raise Refused(f"{path.name}: not JSON") from None


def subjects(root: Path, content: dict[str, str], statements: dict[str, dict]) -> list[str]:
    problems, union = [], set()
    entries = file_entries(statements[BUNDLE_ENVELOPE])
    for name, entry in sorted(entries.items()):
        role = entry["annotations"][ROLE]
        try:
            if role == "receipt":
                expected = source_subjects(read_json(root / name)["source"])
                if named(statements[receipt_envelope(name)]) != expected:
                    problems.append(f"{receipt_envelope(name)}: subjects are not what {name} observed")
                union |= expected
        except (Refused, KeyError, TypeError) as e:
            problems.append(f"{name}: cannot read what it observed ({e})")
    if not union:  # a mutation bundle: the trees its reports were made from
        for name, entry in sorted(entries.items()):
            if entry["annotations"][ROLE] == "mutation":
                report = read_json(root / name)
                if hexed := hex_of_h1(report.get("tree_digest", "")):
                    union.add((f"{report['source']}#sglang/", json.dumps({"dirHash": hexed}, sort_keys=True)))
    if named(statements[BUNDLE_ENVELOPE]) != union:
        problems.append(f"{BUNDLE_ENVELOPE}: subjects are not the union of what the bundle's files observed")
    return problems


def freshness(root: Path, whole: dict, statements: dict[str, dict], args) -> list[str]:
    problems = []
    index = [e for e in whole["predicate"]["configuration"] if e.get("annotations", {}).get(ROLE) == "index"]
    created_at = index[0]["annotations"].get("createdAt") if len(index) == 1 else None
    try:
        if created_at is None or read_json(root / index[0]["name"]).get("created_at") != created_at:
            return [f"{BUNDLE_ENVELOPE}: no signed creation time matching the bundle index"]
        created = _utc(datetime.fromisoformat(created_at))
    except (Refused, ValueError, AttributeError):
        return [f"{BUNDLE_ENVELOPE}: signed creation time unreadable"]
    now = datetime.now(timezone.utc)
    if args.not_before and created < args.not_before:
        problems.append(f"created {created_at}, before --not-before {args.not_before.isoformat()}")
    if args.max_age and created < now - args.max_age:
        problems.append(f"created {created_at}, older than --max-age")
    if args.max_age and created > now + CLOCK_SKEW:
        problems.append(f"created {created_at}, in the future")
    nonces = {s["predicate"].get(NONCE) for s in statements.values()}
    if len(nonces) > 1:
        problems.append("the Statements carry different nonces")
    elif args.nonce is not None and nonces != {args.nonce}:
        problems.append("not signed for the nonce asked for")
    return problems


def dirhash(directory: Path) -> str:
    """in-toto's dirHash of ``directory/sglang``: the recipe in the subject's annotation. Refused
    (``Refused``) for a directory holding what the recipe leaves out but a deployment of it could
    run or import: a link or a special file (Python follows links; ``find -type f`` skips them),
    byte-code (run in place of its source), an empty directory (a namespace package), a name that
    is not printable UTF-8 (with a newline, two trees share one digest). diffprobe's intake refuses
    or leaves out the same, so a dirHash names a tree only for a directory holding nothing else."""
    lines = []
    top = directory / "sglang"
    for dirpath, dirnames, filenames in os.walk(top):
        if not dirnames and not filenames and Path(dirpath) != top:
            raise Refused(f"{tree_name(top, Path(dirpath))}/: an empty directory (Python imports it as a namespace package)")
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            rel = tree_name(top, path)
            mode = path.lstat().st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise Refused(f"{rel}: not a regular file or directory (a link is followed by Python, not hashed)")
            if name == "__pycache__" or name.endswith((".pyc", ".pyo")):
                raise Refused(f"{rel}: byte-code (Python may run it in place of the source hashed)")
            if name in filenames:
                lines.append((path.relative_to(directory).as_posix(), sha256_file(path)))
    return hashlib.sha256("".join(f"{d}  {n}\n" for n, d in sorted(lines)).encode()).hexdigest()


def tree_name(top: Path, path: Path) -> str:
    """``path`` below ``top`` as printed; Refused when it is not a plain printable UTF-8 name."""
    raw = os.fsencode(path.relative_to(top))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(f"{raw!r}: a name that is not UTF-8") from None
    if not text.isprintable() or "\\" in text:
        raise Refused(f"{text!r}: a name with a control character or a backslash (such names let two trees share a digest)")
    return text


def artifacts(statements: dict[str, dict], args) -> list[str]:
    digests = {(k, v) for s in statements.values() for x in s["subject"] for k, v in x["digest"].items()}
    problems = []
    for path in args.artifact or []:
        if ("sha256", sha256_file(Path(path))) not in digests:
            problems.append(f"--artifact {path}: its sha256 is no subject of the bundle")
    for path in args.tree or []:
        try:
            if ("dirHash", dirhash(Path(path))) not in digests:
                problems.append(f"--tree {path}: the dirHash of its sglang/ is no subject of the bundle")
        except Refused as e:
            problems.append(f"--tree {path}: sglang/{e}: refused, its dirHash would not name what it holds")
    return problems


def _utc(t: datetime) -> datetime:
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def _instant(text: str) -> datetime:
    try:
        return _utc(datetime.fromisoformat(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 date or time, got {text!r}") from None


def _age(text: str) -> timedelta:
    m = re.fullmatch(r"([1-9][0-9]{0,8})([smhdw])", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a duration like 90s, 30m, 12h, 7d or 2w, got {text!r}")
    return timedelta(seconds=int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)])


def _threshold(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="verify_bundle.py", description=__doc__.split("\n\n")[0])
    p.add_argument("bundle")
    p.add_argument("--key", action="append", required=True, help="Ed25519 public key file (PEM, one or several keys; repeatable)")
    p.add_argument("--threshold", type=_threshold, default=1, help="distinct given keys that must sign every envelope (default 1)")
    p.add_argument("--not-before", type=_instant, help="refuse a bundle created before this ISO 8601 date or time")
    p.add_argument("--max-age", type=_age, help="refuse a bundle created longer ago than this (90s, 30m, 12h, 7d, 2w)")
    p.add_argument("--nonce", help="require the Statements to be signed for this nonce")
    p.add_argument("--artifact", action="append", help="a file (the wheel) whose sha256 must be a subject (repeatable)")
    p.add_argument("--tree", action="append", help="a directory holding sglang/ whose dirHash must be a subject (repeatable)")
    return p


if __name__ == "__main__":
    sys.exit(main())
