"""DSSE envelopes signed with Ed25519: who vouches for a bundle's Statements.

The signature layer of in-toto attestations (DSSE v1: ``payloadType`` and ``payload`` signed together
through the pre-authentication encoding, so neither can be swapped alone). Keys are PEM files: the
private key PKCS#8, refused when group or world may read it; the public key SubjectPublicKeyInfo. A
key's id is the one securesystemslib and in-toto compute (sha256 of the canonical JSON of
``{"keytype": "ed25519", "scheme": "ed25519", "keyval": {"public": <hex>}}``), so their verifiers
find our signatures by keyid. The signature itself is PyCA ``cryptography``'s Ed25519.
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import orjson
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, ValidationError

from runner.errors import BadInput
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


def load_public(path: Path) -> tuple[str, Ed25519PublicKey]:
    """(keyid, key) of a public key file (PEM SubjectPublicKeyInfo)."""
    try:
        key = serialization.load_pem_public_key(_read(path, "public key"))
    except (ValueError, UnsupportedAlgorithm):
        raise BadInput(f"{path}: not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise BadInput(f"{path}: not an Ed25519 public key")
    return keyid(key), key


# --- envelopes --------------------------------------------------------------------------------


def seal(payload: bytes, signers: list[Signer], previous: Envelope | None = None) -> Envelope:
    """An envelope over ``payload`` signed by each signer; signatures of ``previous`` by other keys
    are kept (several parties may sign one bundle), a signer's own earlier signature is replaced."""
    mine = {s.keyid for s in signers}
    kept = [s for s in (previous.signatures if previous else []) if s.keyid not in mine]
    return Envelope(payload=base64.b64encode(payload).decode(), payloadType=PAYLOAD_TYPE,
                    signatures=kept + [s.sign(PAYLOAD_TYPE, payload) for s in signers])


def dump(envelope: Envelope) -> bytes:
    return orjson.dumps(envelope.model_dump(), option=orjson.OPT_INDENT_2) + b"\n"


def parse(data: bytes) -> Envelope:
    """An envelope from its file's bytes; ValueError (one line) when it is not one."""
    try:
        envelope = Envelope.model_validate(orjson.loads(data))
        envelope.payload_bytes()
        for s in envelope.signatures:
            base64.b64decode(s.sig, validate=True)
    except (orjson.JSONDecodeError, ValidationError, binascii.Error) as e:
        raise ValueError(f"not a DSSE envelope ({str(e).splitlines()[0][:120]})") from None
    return envelope


def check_signatures(envelope: Envelope, keys: dict[str, Ed25519PublicKey]) -> str | None:
    """None when a signature by one of ``keys`` verifies and none by them is broken; else why not.

    Signatures by keys not given are ignored (another party may have co-signed), but they never
    count: an envelope signed only by strangers is refused.
    """
    if envelope.payloadType != PAYLOAD_TYPE:
        return f"payloadType is {envelope.payloadType!r}, not {PAYLOAD_TYPE}"
    signed = pae(envelope.payloadType, envelope.payload_bytes())
    good = []
    for s in envelope.signatures:
        key = keys.get(s.keyid)
        if key is None:
            continue
        try:
            key.verify(base64.b64decode(s.sig, validate=True), signed)
        except InvalidSignature:
            return f"signature by key {s.keyid[:16]} does not verify"
        good.append(s.keyid)
    if good:
        return None
    if not envelope.signatures:
        return "no signature"
    strangers = ", ".join(sorted({s.keyid[:16] for s in envelope.signatures}))
    return f"signed only by key(s) not given: {strangers}"
