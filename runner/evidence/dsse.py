"""DSSE envelopes signed with Ed25519: who vouches for a bundle's Statements.

The signature layer of in-toto attestations (DSSE v1: ``payloadType`` and ``payload`` signed together
through the pre-authentication encoding, so neither can be swapped alone). Keys are PEM files: the
private key PKCS#8, refused when group or world may read it; public keys SubjectPublicKeyInfo, one or
several to a file. A key's id is the one securesystemslib and in-toto compute (sha256 of the canonical
JSON of ``{"keytype": "ed25519", "scheme": "ed25519", "keyval": {"public": <hex>}}``), so their
verifiers find our signatures by keyid, and a signature is only ever checked against the key its id
names. The signature itself is PyCA ``cryptography``'s Ed25519.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import orjson
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, ValidationError

from runner.errors import BadInput, printable
from runner.files import sha256_bytes, write_atomic

PAYLOAD_TYPE = "application/vnd.in-toto+json"
PRIVATE_NAME = "diffprobe-signing.key"
PUBLIC_NAME = "diffprobe-signing.pub"
ENV_KEY = "DIFFPROBE_SIGNING_KEY"


class Signature(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    keyid: str
    sig: str  # base64


class Envelope(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    payload: str  # base64 of the Statement's bytes
    payloadType: str  # noqa: N815 (DSSE's field name)
    signatures: list[Signature]

    def payload_bytes(self) -> bytes:
        return base64.b64decode(self.payload, validate=True)


def shown(keyid: str) -> str:
    """A key id as printed: its first 16 characters, control characters escaped (an envelope's
    key ids are whatever its author wrote)."""
    return printable(keyid[:16])


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what is actually signed."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def keyid(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    key = {"keytype": "ed25519", "keyval": {"public": raw}, "scheme": "ed25519"}
    return sha256_bytes(orjson.dumps(key, option=orjson.OPT_SORT_KEYS))  # canonical JSON for ASCII-only values


@dataclass(frozen=True)
class Signer:
    private: Ed25519PrivateKey
    keyid: str
    path: Path

    def sign(self, payload_type: str, payload: bytes) -> Signature:
        sig = self.private.sign(pae(payload_type, payload))
        return Signature(keyid=self.keyid, sig=base64.b64encode(sig).decode())


# --- keys -------------------------------------------------------------------------------------


def generate(directory: Path) -> tuple[Path, Path, str]:
    """A new key pair in ``directory``: the private key readable by its owner only. Never overwrites."""
    private_path, public_path = directory / PRIVATE_NAME, directory / PUBLIC_NAME
    for p in (private_path, public_path):
        if p.exists() or p.is_symlink():
            raise BadInput(f"{p}: exists; refusing to overwrite a key")
    directory.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never world-readable, not even briefly
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public = key.public_key()
    write_atomic(public_path, public.public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    return private_path, public_path, keyid(public)


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise BadInput(f"{path}: cannot read the {what} ({e.strerror or e})") from None


def load_signer(path: Path) -> Signer:
    """The private key at ``path``, refused when anyone but its owner may read or write it (like ssh)."""
    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise BadInput(f"{path}: cannot read the signing key ({e.strerror or e})") from None
    if not stat.S_ISREG(mode):
        raise BadInput(f"{path}: the signing key is not a regular file")
    if mode & 0o077:
        raise BadInput(f"{path}: the signing key is accessible to group or others (mode {stat.S_IMODE(mode):04o}); "
                       f"chmod 600 it")
    try:
        key = serialization.load_pem_private_key(_read(path, "signing key"), password=None)
    except TypeError:
        raise BadInput(f"{path}: the signing key is encrypted; diffprobe reads unencrypted PKCS#8 PEM keys") from None
    except (ValueError, UnsupportedAlgorithm):
        raise BadInput(f"{path}: not a PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BadInput(f"{path}: not an Ed25519 key")
    return Signer(private=key, keyid=keyid(key.public_key()), path=path)


_PEM = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----", re.DOTALL)


def load_keys(path: Path) -> dict[str, Ed25519PublicKey]:
    """keyid -> key for every public key in a file (PEM SubjectPublicKeyInfo blocks, one or several).

    A file holding anything but Ed25519 public keys is refused whole: a private key given by
    mistake, another algorithm or a damaged block never leaves the others to be used silently.
    """
    data = _read(path, "public key")
    blocks = list(_PEM.finditer(data))
    if not blocks:
        raise BadInput(f"{path}: not a PEM public key")
    keys: dict[str, Ed25519PublicKey] = {}
    for n, block in enumerate(blocks, 1):
        where = f"{path}: key {n} of {len(blocks)}" if len(blocks) > 1 else str(path)
        if block.group(1) != b"PUBLIC KEY":
            raise BadInput(f"{where}: a {block.group(1).decode()} block, not a public key")
        try:
            key = serialization.load_pem_public_key(block.group(0))
        except (ValueError, UnsupportedAlgorithm):
            raise BadInput(f"{where}: not a PEM public key") from None
        if not isinstance(key, Ed25519PublicKey):
            raise BadInput(f"{where}: not an Ed25519 public key")
        keys[keyid(key)] = key
    return keys


# --- envelopes --------------------------------------------------------------------------------


def seal(payload: bytes, signers: list[Signer], previous: Envelope | None = None, *,
         payload_type: str = PAYLOAD_TYPE) -> Envelope:
    """An envelope over ``payload`` signed by each signer. Signatures of ``previous`` by other keys
    are kept when it carries the same payload (several parties may sign one bundle); over another
    payload they could never verify again and are left out (``kept_from``). A signer's own
    earlier signature is replaced."""
    mine = {s.keyid for s in signers}
    kept = [s for s in kept_from(previous, payload) if s.keyid not in mine]
    return Envelope(payload=base64.b64encode(payload).decode(), payloadType=payload_type,
                    signatures=kept + [s.sign(payload_type, payload) for s in signers])


def kept_from(previous: Envelope | None, payload: bytes) -> list[Signature]:
    """The signatures of ``previous`` that still sign ``payload`` (all of them or none)."""
    same = previous is not None and previous.payloadType == PAYLOAD_TYPE and previous.payload_bytes() == payload
    return list(previous.signatures) if same else []


def dump(envelope: Envelope) -> bytes:
    return orjson.dumps(envelope.model_dump(), option=orjson.OPT_INDENT_2) + b"\n"


def parse(data: bytes) -> Envelope:
    """An envelope from its file's bytes; ValueError (one line) when it is not one. Two signatures
    claiming one key id are refused, as securesystemslib refuses them: which one would count?"""
    try:
        envelope = Envelope.model_validate(orjson.loads(data))
        envelope.payload_bytes()
        for s in envelope.signatures:
            base64.b64decode(s.sig, validate=True)
    except (orjson.JSONDecodeError, ValidationError, binascii.Error) as e:
        raise ValueError(f"not a DSSE envelope ({str(e).splitlines()[0][:120]})") from None
    claimed = [s.keyid for s in envelope.signatures]
    if len(set(claimed)) != len(claimed):
        raise ValueError("not a DSSE envelope (two signatures claim the same key id)")
    return envelope


def verified_by(envelope: Envelope, keys: dict[str, Ed25519PublicKey], *,
                payload_type: str = PAYLOAD_TYPE) -> tuple[set[str], list[str]]:
    """(key ids of ``keys`` whose signature verifies, problems). Each signature is checked against
    the key its id names, and only that key; a signature claiming a given key that does not verify
    with it (garbage, or another key's signature relabelled) is a problem, never skipped."""
    if envelope.payloadType != payload_type:
        return set(), [f"payloadType is {printable(envelope.payloadType[:100])!r}, not {payload_type}"]
    signed = pae(envelope.payloadType, envelope.payload_bytes())
    good, problems = set(), []
    for s in envelope.signatures:
        key = keys.get(s.keyid)
        if key is None:
            continue
        try:
            key.verify(base64.b64decode(s.sig, validate=True), signed)
        except InvalidSignature:
            problems.append(f"signature claiming key {shown(s.keyid)} does not verify with that key")
            continue
        good.add(s.keyid)
    return good, problems


def check_signatures(envelope: Envelope, keys: dict[str, Ed25519PublicKey], threshold: int = 1, *,
                     payload_type: str = PAYLOAD_TYPE) -> str | None:
    """None when valid signatures by at least ``threshold`` distinct keys of ``keys`` sign the
    envelope and no signature claiming one of them is broken; else why not.

    Signatures claiming keys not given are ignored (another party may have co-signed), but they
    never count: an envelope signed only by strangers is refused.
    """
    good, problems = verified_by(envelope, keys, payload_type=payload_type)
    if problems:
        return problems[0]
    if len(good) >= threshold:
        return None
    if not envelope.signatures:
        return "no signature"
    if not good:
        strangers = ", ".join(sorted({shown(s.keyid) for s in envelope.signatures}))
        return f"signed only by key(s) not given: {strangers}"
    return f"signed by {len(good)} of the given keys, fewer than the threshold {threshold}"
