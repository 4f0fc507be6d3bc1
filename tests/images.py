"""Container images made in Python for the tests, as a builder without a daemon writes them: tar
layers (gzip-compressed), a config naming their diff ids, a manifest naming both by digest, an OCI
image layout's index.json; real release wheels installed into a layer as pip lays them out."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import socket
import subprocess
import tarfile
import time
import urllib.request
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

SITE = "usr/local/lib/python3.11/site-packages"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


@dataclass(frozen=True)
class Member:
    name: str
    data: bytes = b""
    kind: bytes = tarfile.REGTYPE
    linkname: str = ""
    mode: int = 0o644


def directory(name: str) -> Member:
    return Member(name, kind=tarfile.DIRTYPE, mode=0o755)


def tar(members: list[Member]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as t:
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.type, info.linkname, info.mode, info.size = m.kind, m.linkname, m.mode, len(m.data)
            info.mtime = 1_700_000_000
            t.addfile(info, io.BytesIO(m.data) if m.kind in (tarfile.REGTYPE, tarfile.AREGTYPE) else None)
    return out.getvalue()


def python_layer() -> bytes:
    """What a python:3.11 base image holds of its interpreter, as far as finding it goes."""
    return tar([directory("usr"), directory("usr/local"), directory("usr/local/bin"),
                Member("usr/local/bin/python3.11", b"\x7fELF", mode=0o755),
                Member("usr/local/bin/python3", kind=tarfile.SYMTYPE, linkname="python3.11"),
                directory(SITE)])


def files_layer(files: dict[str, bytes], site: str = SITE) -> bytes:
    """A layer holding ``files`` (names relative to ``site``), their directories made as met."""
    members, dirs = [], set()
    for name, data in files.items():
        parts = f"{site}/{name}".split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in dirs:
                dirs.add(d)
                members.append(directory(d))
        members.append(Member(f"{site}/{name}", data))
    return tar(members)


def wheel_layer(wheel: Path, site: str = SITE, skip: tuple[str, ...] = ()) -> bytes:
    """``pip install --no-compile wheel`` into ``site``: every member, directories made as met."""
    with zipfile.ZipFile(wheel) as zf:
        return files_layer({i.filename: zf.read(i) for i in zf.infolist()
                            if not i.filename.endswith("/") and i.filename not in skip}, site)


def _blob(layout: Path, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return f"sha256:{digest}", len(data)


@dataclass(frozen=True)
class Built:
    layout: Path
    manifest: str  # digest
    config: str
    layers: tuple[str, ...]  # blob digests, in order


def oci(layout: Path, layers: list[bytes], tag: str = "latest", env_path: str | None = "/usr/local/bin:/usr/bin:/bin",
        compress: bool = True) -> Built:
    """An OCI image layout at ``layout`` holding one image of ``layers`` (uncompressed tars), tagged ``tag``."""
    layout.mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    blobs = [gzip.compress(t, compresslevel=1, mtime=0) if compress else t for t in layers]
    descriptors = []
    for data in blobs:
        digest, size = _blob(layout, data)
        descriptors.append({"mediaType": "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if compress else ""),
                            "digest": digest, "size": size})
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Env": [f"PATH={env_path}"]} if env_path else {},
              "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(t).hexdigest()}" for t in layers]}}
    config_digest, config_size = _blob(layout, json.dumps(config).encode())
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size},
                "layers": descriptors}
    manifest_digest, manifest_size = _blob(layout, json.dumps(manifest).encode())
    index = {"schemaVersion": 2, "manifests": [{"mediaType": OCI_MANIFEST, "digest": manifest_digest, "size": manifest_size,
                                                "annotations": {"org.opencontainers.image.ref.name": tag}}]}
    (layout / "index.json").write_text(json.dumps(index))
    return Built(layout, manifest_digest, config_digest, tuple(d["digest"] for d in descriptors))


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel(path: Path, files: dict[str, bytes], version: str = "0.0.1", record: dict[str, str] | None = None) -> Path:
    """A wheel of ``sglang`` holding ``files`` (names inside the wheel) and a RECORD of their hashes
    (``record`` overrides a member's hash column, or drops its row with an empty string)."""
    info = f"sglang-{version}.dist-info"
    members = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n".encode(),
               f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    rows = []
    for name, data in members.items():
        column = (record or {}).get(name, record_hash(data))
        if column != "":
            rows.append(f"{name},{column},{len(data)}\n")
    rows.append(f"{info}/RECORD,,\n")
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        zf.writestr(f"{info}/RECORD", "".join(rows))
    return path


def docker_archive(path: Path, layers: list[bytes], env_path: str = "/usr/local/bin:/usr/bin:/bin") -> str:
    """What ``docker save`` writes for an image of ``layers`` (uncompressed tars): the config's digest."""
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Env": [f"PATH={env_path}"]},
                         "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(t).hexdigest()}"
                                                                   for t in layers]}}).encode()
    config_hex = hashlib.sha256(config).hexdigest()
    names = [f"{hashlib.sha256(t).hexdigest()}/layer.tar" for t in layers]
    manifest = json.dumps([{"Config": f"{config_hex}.json", "RepoTags": ["vendor/sglang:latest"], "Layers": names}]).encode()
    with tarfile.open(path, "w") as t:
        for name, data in [(f"{config_hex}.json", config), *zip(names, layers), ("manifest.json", manifest)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return f"sha256:{config_hex}"


@contextmanager
def registry(root: Path) -> Iterator[str]:
    """Debian's docker-registry (distribution) on loopback, storing under ``root``: ``HOST:PORT``
    while the block runs, stopped after it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.yml").write_text(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
                                     f"    rootdirectory: {root / 'data'}\nhttp:\n  addr: 127.0.0.1:{port}\n")
    with open(root / "registry.log", "wb") as log:
        proc = subprocess.Popen(["docker-registry", "serve", str(root / "config.yml")], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    try:
        for _ in range(150):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, (root / "registry.log").read_text()
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def skopeo(*args: str) -> None:
    subprocess.run(["skopeo", *args], check=True, capture_output=True, timeout=600)


def push(image: Built, registry: str, name: str, tag: str) -> str:
    """``image`` (its tag ``tag``) copied by skopeo to ``registry`` as ``name:tag``: its source by digest."""
    skopeo("copy", "--dest-tls-verify=false", f"oci:{image.layout}:{tag}", f"docker://{registry}/{name}:{tag}")
    return f"registry:{registry}/{name}@{image.manifest}"
