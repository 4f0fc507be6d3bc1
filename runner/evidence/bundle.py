"""Evidence bundles: receipts, differentials, an index and a ``SHA256SUMS`` manifest.

A bundle is assembled in a ``.partial-*`` directory next to its destination and renamed into place
once every file and the manifest are written, so an interrupted run never leaves something that
looks like a bundle. ``sha256sum -c SHA256SUMS`` inside the directory checks it without diffprobe.
Signed bundles also hold DSSE envelopes under ``attestations/`` (runner.evidence.attest).
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from runner import __version__
from runner.errors import DIFFERS, BadInput, DiffprobeError, printable
from runner.files import digest_name, sha256_bytes, sha256_file
from runner.evidence import attest, dsse
from runner.evidence.catalog import judge_digest
from runner.evidence import catalog, departures, mutation
from runner.judge import judging
from runner.evidence.mutation import Mutation
from runner.evidence.receipts import Differential, Receipt, Source, differential, rederive, seal, source_key

INDEX = "bundle.json"
PARTIAL = ".partial-"  # prefix of a bundle being assembled; never a bundle, even when complete
MANIFEST = "SHA256SUMS"
BUNDLE_SCHEMA = "diffprobe.bundle/1"
LIMITS = [
    "CPU only: code paths of pinned SGLang trees driven with recording doubles, not a served model",
    "no GPU, no RDMA, no real KV transfer: the KV sender/receiver classes are recording doubles",
    "no real tenants or tenant data; not a reproduction of the cross-tenant leak itself",
    "scheduler collaborators (tree cache, allocators, HiCache, Mamba pools) are recording doubles",
]


class Index(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal["diffprobe.bundle/1"] = BUNDLE_SCHEMA
    kind: str  # run, audit, sweep, backport, ...
    created_at: str
    diffprobe: str
    diffprobe_sha256: str
    pins_sha256: str | None
    trees: list[Source]
    receipts: list[str]
    differentials: list[str]
    limits: list[str]
    extra: dict = {}


def label(identity: Source) -> str:
    """A short, stable, file-name-safe name for what a receipt observed."""
    if identity.kind == "pypi":
        return f"sglang-{identity.version}"
    if identity.kind == "git":
        return f"git-{identity.commit[:12]}"
    if getattr(identity, "tree_digest", None):  # path, wheel, an image: by the tree's digest in hex (base64 may hold '/')
        return f"{identity.kind}-" + digest_name(identity.tree_digest)[:12]
    return f"{identity.kind}-{source_key(identity)[:12]}"


def receipt_name(receipt: Receipt) -> str:
    return f"receipts/{label(receipt.source)}.{receipt.probe.id}.json"


def dump(value: BaseModel) -> bytes:
    return _ranges_inline(orjson.dumps(value.model_dump(mode="json"), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)) + b"\n"


_PAIR = re.compile(rb"\[\n\s+(-?\d+),\n\s+(-?\d+)\n\s+\]")
_PAIRS = re.compile(rb"\[\n\s+(\[-?\d+, -?\d+\](?:,\n\s+\[-?\d+, -?\d+\])*)\n\s+\]")


def _ranges_inline(text: bytes) -> bytes:
    """Indented JSON with each list of [start, end] pairs (a case's ``lines``) on one line: one
    number a line made receipts three times their size."""
    text = _PAIR.sub(rb"[\1, \2]", text)
    return _PAIRS.sub(lambda m: b"[" + re.sub(rb",\n\s+", b", ", m.group(1)) + b"]", text)


def out_path(out: str | None, kind: str) -> Path:
    """The bundle directory a command will write: ``--out`` or a dated default, checked up front."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return check_out(Path(out) if out else Path(f"diffprobe-{kind}-{stamp}"))


def check_out(out: Path) -> Path:
    """``out`` made absolute if a bundle may be written there. Commands call it before any work,
    so a taken name is refused in a second, not after minutes of probing."""
    out = out.resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"--out {out}: exists and is not empty; choose another directory")
    return out


def write(
    out: Path, *, kind: str, created_at: str, receipts: list[Receipt], differentials: list[Differential],
    pins_sha256: str | None, extra: dict | None = None, files: dict[str, bytes] | None = None,
    limits: list[str] = LIMITS, signers: list[dsse.Signer] = (),
) -> Path:
    """Write a bundle; ``limits`` says what its evidence does not show (CPU probes' by default);
    with ``signers``, its attestations signed by each."""
    out = check_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{PARTIAL}{out.name}-", dir=out.parent))
    try:
        contents: dict[str, bytes] = dict(files or {})
        trees: dict[str, Source] = {}
        for r in receipts:
            contents[receipt_name(r)] = dump(r)
            trees.setdefault(label(r.source), r.source)
        for d in differentials:
            contents[f"differentials/fix-{d.fix}.json"] = dump(d)
        index = Index(
            kind=kind, created_at=created_at, diffprobe=__version__, diffprobe_sha256=judge_digest(),
            pins_sha256=pins_sha256,
            trees=list(trees.values()), receipts=sorted(receipt_name(r) for r in receipts),
            differentials=sorted(f"differentials/fix-{d.fix}.json" for d in differentials),
            limits=limits, extra=extra or {},
        )
        contents[INDEX] = dump(index)
        if signers:
            contents |= attest.sign(_statements(contents), signers, {}, None)[0]
        _lay_out(staging, contents)
        if out.exists():
            out.rmdir()
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


def _lay_out(directory: Path, contents: dict[str, bytes]) -> None:
    for name, data in contents.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
    (directory / MANIFEST).write_text(_render({n: sha256_bytes(data) for n, data in contents.items()}))


def _statements(contents: dict[str, bytes]) -> dict[str, dict]:
    """The attestations' Statements for a bundle's files (name -> bytes; attestations left out), derived
    from the bytes themselves and in name order, so writing (files in the order a command made them)
    and verifying (files in the manifest's order) derive them the same way."""
    files = {n: d for n, d in sorted(contents.items()) if not n.startswith(attest.DIR)}
    index = Index.model_validate(orjson.loads(files[INDEX]))
    receipts = {n: Receipt.model_validate(orjson.loads(d)) for n, d in files.items() if n.startswith("receipts/")}
    diffs = {n: Differential.model_validate(orjson.loads(d)) for n, d in files.items() if n.startswith("differentials/")}
    mutations = {n: Mutation.model_validate(orjson.loads(d)) for n, d in files.items() if n.startswith(mutation.DIR)}
    return attest.expected({n: sha256_bytes(d) for n, d in files.items()}, receipts, diffs,
                           (index.diffprobe, index.diffprobe_sha256), mutations, (INDEX, index.created_at))


def _contents(root: Path) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """(attestations, every other file) of a bundle whose manifest checked out."""
    everything = {n: (root / n).read_bytes() for n in _manifest(root)}
    signed = {n: d for n, d in everything.items() if n.startswith(attest.DIR)}
    return signed, {n: d for n, d in everything.items() if n not in signed}


def sign_existing(root: Path, signers: list[dsse.Signer], nonce: str | None = None) -> list[str]:
    """Sign a bundle already written (``diffprobe attest``), its Statements bound to ``nonce`` (by
    default the one its attestations carry); it must verify. Signatures by other keys are kept while
    the payload stays the same; returns the key ids of those a new nonce dropped. The signed bundle is laid out beside it and swapped in, so an interruption leaves the
    original or the signed bundle (at worst the original under a ``.partial-*`` name), never a mix."""
    root = root.resolve()
    if problems := verify(root):
        raise Tampered(f"{root}: bundle does not verify, refusing to sign it ({problems[0]})")
    signed, files = _contents(root)
    if not (expected := _statements(files)):
        raise BadInput(f"{root}: nothing in this bundle can be attested (no receipt, no mutation report)")
    signatures, dropped = attest.sign(expected, signers, signed, nonce if nonce is not None else attest.nonce_of(signed))
    contents = files | signatures
    staging = Path(tempfile.mkdtemp(prefix=f"{PARTIAL}{root.name}-", dir=root.parent))
    old = Path(f"{staging}-replaced")
    try:
        _lay_out(staging, contents)
        os.rename(root, old)
        try:
            os.rename(staging, root)
        except BaseException:
            os.rename(old, root)
            raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return dropped


# --- reading and verifying -----------------------------------------------------------------

_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")
# No file diffprobe writes into a bundle comes near this; a larger entry is refused unread, so
# verify's memory stays bounded (README, "Probes, receipts, bundles").
MAX_ENTRY_BYTES = 64 << 20


def _render(entries: dict[str, str]) -> str:
    """The one form a manifest takes: sorted ``<sha256>  <name>`` lines (``sha256sum``'s own)."""
    return "".join(f"{entries[n]}  {n}\n" for n in sorted(entries))


class NotABundle(BadInput):
    pass


class Tampered(DiffprobeError):
    """A bundle whose contents do not verify: the answer is "do not trust it" (exit 1)."""

    exit_code = DIFFERS


def _manifest(root: Path) -> dict[str, str]:
    path = root / MANIFEST
    if root.name.startswith(PARTIAL):
        raise NotABundle(f"{root}: not a bundle (the staging directory of an interrupted write)")
    if not root.is_dir() or not path.is_file():
        raise NotABundle(f"{root}: not a bundle (no {MANIFEST})")
    if path.stat().st_size > MAX_ENTRY_BYTES:
        raise NotABundle(f"{path}: over {MAX_ENTRY_BYTES} bytes, more than a bundle's manifest holds")
    entries: dict[str, str] = {}
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        m = _LINE.match(line)
        if not m:
            raise NotABundle(f"{path}:{n}: not a sha256sum line")
        entries[m.group(2)] = m.group(1)
    if INDEX not in entries:
        raise NotABundle(f"{root}: not a bundle ({MANIFEST} does not list {INDEX})")
    return entries


def _safe(root: Path, name: str) -> Path | None:
    """The file ``name`` names inside ``root``, or None if it escapes it or passes through a link."""
    if name.startswith("/") or "\\" in name or any(p in ("..", "") for p in name.split("/")):
        return None
    path = root / name
    current = root
    for part in name.split("/"):
        current = current / part
        if current.is_symlink():
            return None
    return path


def verify(root: Path, keys: dict[str, dsse.Ed25519PublicKey] | None = None, threshold: int = 1) -> list[str]:
    """Every problem found, as one line each; empty means intact.

    Checks the manifest (refusing entries outside the bundle and symlinks), that nothing unlisted
    sits in the bundle, that each receipt and differential validates against its schema and its own
    digest, that each differential names receipts that are in the bundle with those digests, and
    that the attestations, if any, carry exactly the Statements of what the bundle holds. With
    ``keys`` (keyid -> public key), the bundle must be signed: each envelope by ``threshold`` of them.
    """
    root = root.resolve()
    entries = _manifest(root)
    problems: list[str] = []
    if (root / MANIFEST).read_bytes() != _render(entries).encode():  # same meaning, other bytes: edited by hand
        problems.append(f"{MANIFEST}: not in the form diffprobe writes (sorted '<sha256>  <name>' lines, one per file)")
    for name, digest in sorted(entries.items()):
        path = _safe(root, name)
        if path is None:
            problems.append(f"{name}: refused (path outside the bundle or through a symlink)")
        elif not path.is_file():
            problems.append(f"{name}: listed but missing")
        elif path.stat().st_size > MAX_ENTRY_BYTES:
            problems.append(f"{name}: {path.stat().st_size} bytes, over the {MAX_ENTRY_BYTES} a bundle entry may hold: refused")
        elif sha256_file(path) != digest:  # streamed: memory stays bounded whatever the file
            problems.append(f"{name}: sha256 differs from {MANIFEST}")
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            problems.append(f"{rel}: symlink inside the bundle")
        elif path.is_file() and rel != MANIFEST and rel not in entries:
            problems.append(f"{rel}: present but not listed in {MANIFEST}")
    if problems:
        return problems
    index = _load(root / INDEX, Index, problems)
    receipts: dict[str, Receipt] = {}
    diffs: dict[str, Differential] = {}
    mutations: dict[str, Mutation] = {}
    for name in sorted(entries):
        if name.startswith("receipts/"):
            r = _load(root / name, Receipt, problems)
            if r is not None:
                receipts[name] = r
        elif name.startswith("differentials/"):
            d = _load(root / name, Differential, problems)
            for side in (d.base + d.head) if d else []:
                if side.receipt not in receipts and side.receipt not in entries:
                    problems.append(f"{name}: names {side.receipt}, which is not in the bundle")
                elif side.receipt in receipts and receipts[side.receipt].digest != side.receipt_digest:
                    problems.append(f"{name}: {side.receipt} digest differs from the one it was judged on")
            if d is not None:
                diffs[name] = d
        elif name.startswith(mutation.DIR):
            if (m := _load(root / name, Mutation, problems)) is not None:
                mutations[name] = m
        elif name.startswith(departures.DIR):
            _load(root / name, departures.Departures, problems)
    if index is not None:
        for name in index.receipts + index.differentials:
            if name not in entries:
                problems.append(f"{INDEX}: lists {name}, which is not in {MANIFEST}")
    if problems:
        return problems
    # Judged again: every classification from its effects, summaries, digests, differentials.
    for name, receipt in receipts.items():
        version = catalog.probe_digest(receipt.probe.id) if receipt.probe.id in catalog.PROBES else None
        problems += [f"{name}: {p}" for p in rederive(receipt, version)]
    for name, d in diffs.items():
        problems += [f"{name}: {p}" for p in _rederive_differential(d, receipts)]
    problems += mutation.rederive(mutations, index.extra, receipts)
    signed, files = _contents(root)
    if not signed and not keys:
        return problems  # unsigned, and nobody asked for a signature: no Statement to derive
    return problems + attest.check(_statements(files), signed, keys or {}, threshold)


def _rederive_differential(d: Differential, receipts: dict[str, Receipt]) -> list[str]:
    """A differential judged again from the receipts it names: its transitions and verdict must follow."""
    sides = [[(side.receipt, receipts[side.receipt]) for side in group if side.receipt in receipts]
             for group in (d.base, d.head)]
    again = differential(d.fix, d.title, d.probes, sides[0], sides[1], d.expected, d.sites)
    return [f"{what} does not follow from its receipts" for what in ("cases", "verdict", "reasons", "as_expected")
            if getattr(again, what) != getattr(d, what)]


def attestations(root: Path) -> dict[str, bytes]:
    """The envelopes of a bundle whose manifest checked out, by name."""
    return _contents(root)[0]


def _first_field(e: Exception) -> str:
    """What a file fails its schema on: the first field by its path, and why (a forgery names what it changed)."""
    found = e.errors() if isinstance(e, ValidationError) else []
    if not found:
        return str(e).splitlines()[0]
    where = ".".join(str(part) for part in found[0]["loc"]) or "the document"
    more = f"; and {len(found) - 1} more" if len(found) > 1 else ""
    return f"{where}: {found[0]['msg']}{more}"


def _load(path: Path, model, problems: list[str]):
    rel = path.name if path.parent.name not in ("receipts", "differentials", "mutation", "departures") else f"{path.parent.name}/{path.name}"
    try:
        raw = orjson.loads(path.read_bytes())
        if (unread := _unread_version(raw, model)) is not None:
            problems.append(f"{rel}: {unread}")
            return None
        value = model.model_validate(raw)
    except (orjson.JSONDecodeError, ValidationError) as e:
        problems.append(f"{rel}: does not match its schema ({_first_field(e)[:160]})")
        return None
    if hasattr(value, "digest") and seal(raw) != raw.get("digest"):
        problems.append(f"{rel}: digest does not match its content")
        return None
    return value


def _unread_version(raw, model) -> str | None:
    """Why a file in another format version than this diffprobe reads is refused, said as such (not as a
    schema mismatch): formats are versioned by ``schema_version``, and a version this diffprobe knows
    still verifies and compares whatever code wrote it."""
    field = model.model_fields.get("schema_version")
    if field is None or not isinstance(raw, dict) or "schema_version" not in raw or raw["schema_version"] == field.default:
        return None
    return (f"written in format {printable(str(raw['schema_version']))[:80]!r}; this diffprobe reads {field.default!r} "
            f"(diffprobe {__version__})")


def load(root: Path) -> tuple[Index, dict[str, Receipt], dict[str, Differential]]:
    """A verified bundle's contents; anything tampered with or malformed is refused."""
    problems = verify(root)
    if problems:
        raise Tampered(f"{root}: bundle does not verify ({len(problems)} problem(s), first: {problems[0]})")
    return contents(root)


def contents(root: Path) -> tuple[Index, dict[str, Receipt], dict[str, Differential]]:
    """What a bundle holds, read without checking it again: only for one ``verify`` just passed
    (verifying hashes every file and re-judges every receipt; once is enough)."""
    index = Index.model_validate(orjson.loads((root / INDEX).read_bytes()))
    receipts = {n: Receipt.model_validate(orjson.loads((root / n).read_bytes())) for n in index.receipts}
    diffs = {n: Differential.model_validate(orjson.loads((root / n).read_bytes())) for n in index.differentials}
    return index, receipts, diffs
