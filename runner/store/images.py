"""Container images as sources: ``oci:DIR[@TAG|@sha256:HEX]`` (an OCI image layout),
``docker-archive:FILE.tar`` (what ``docker save`` and ``podman save`` write) and
``registry:HOST/NAME[:TAG|@sha256:HEX]`` (pulled by digest with skopeo into the cache, as git
sources are fetched with git). Whatever the format, an image is a manifest naming a config and
layers by digest; every one is checked against its digest as it is read, the layers are applied in
order (runner/store/image_fs.py) and the package the image's Python imports is taken in through
intake (runner/store/intake.py). The receipt names the image by those digests
(``trees.ImageIdentity``): what an operator deploys, checkable with ``skopeo inspect``.

A tree found once is indexed by the image's config digest: the config names every layer's
uncompressed digest, so the same config is the same file system, whichever format carried it."""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import posixpath
import re
import shutil
import stat
import subprocess
import tarfile
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from pydantic import BaseModel

from runner.errors import BadInput, Infrastructure
from runner.files import building_dir, scratch_dir
from runner.store import image_fs, intake, specs, trees
from runner.store.cache import Store, read_model, write_model
from runner.store.image_fs import ImageBounds
from runner.store.trees import PKG, ImageIdentity, Tree, TreeIdentity

INDEXES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
REF_NAME = "org.opencontainers.image.ref.name"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # a runtime's, where the config sets none
_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
_LOOPBACK = re.compile(r"^(localhost|127\.[0-9.]+)(:[0-9]+)?$")
SKOPEO_TIMEOUT = 3600


@dataclass
class Layer:
    digest: str | None  # the blob's (None in a docker-archive: named by its diff id)
    size: int | None
    open: Callable[[], BinaryIO]


@dataclass
class Image:
    """One image, whatever carried it: its digests, config and layers (blobs not yet read)."""

    config_digest: str
    config: dict
    layers: list[Layer]
    manifest_digest: str | None = None
    index_digest: str | None = None


class _Found(BaseModel):
    """What an image's config digest resolved to (the index entry ``image/<hex>.json``)."""

    tree_digest: str
    layers: tuple[int, ...]  # the positions of the layers that put the package's files there
    package: str
    python: str | None
    left_out: tuple[str, ...] = ()


def resolve(spec: specs.ImageSpec, cache: Store, bounds: intake.Bounds = intake.Bounds(),
            image_bounds: ImageBounds = ImageBounds()) -> Tree:
    where = str(spec)
    with ExitStack() as stack:
        if spec.kind == "oci":
            image = _oci(stack, specs.local_path(spec.where, where), spec, where, image_bounds)
        elif spec.kind == "docker-archive":
            image = _docker_archive(stack, specs.local_path(spec.where, where), where, image_bounds)
        else:
            image = _pull(stack, spec, cache, where, image_bounds)
        found, stored = _find(image, cache, where, bounds, image_bounds)
    diff_ids = image.config["rootfs"]["diff_ids"]
    identity = TreeIdentity(
        kind=spec.kind, source=where, path=str(specs.local_path(spec.where, where)) if spec.kind != "registry" else None,
        tree_digest=found.tree_digest, files=stored.stamp.files, left_out=found.left_out,
        image=ImageIdentity(index_digest=image.index_digest, manifest_digest=image.manifest_digest,
                            config_digest=image.config_digest, package=found.package,
                            layers=tuple(image.layers[i].digest or diff_ids[i] for i in found.layers),
                            python=found.python))
    return Tree(identity, stored.root, stored.files)


def _find(image: Image, cache: Store, where: str, bounds: intake.Bounds,
          image_bounds: ImageBounds) -> tuple[_Found, trees.Stored]:
    """The package the image's Python imports, taken in: from the index by config digest, else by
    applying every layer in order."""
    index_path = cache.index("image", image.config_digest.split(":", 1)[1])
    found = read_model(index_path, _Found)
    if found is not None and all(0 <= i < len(image.layers) for i in found.layers):
        stored = trees.load(cache, found.tree_digest, bounds)
        if stored is not None:
            return found, stored
    diff_ids = (image.config.get("rootfs") or {}).get("diff_ids")
    if not isinstance(diff_ids, list) or len(diff_ids) != len(image.layers):
        raise BadInput(f"{where}: config {image.config_digest}: its rootfs.diff_ids do not name its {len(image.layers)} layers")
    if len(image.layers) > image_bounds.layers:
        raise intake.Refused(f"{where}: refused: {len(image.layers)} layers, over the bound of {image_bounds.layers}")
    with scratch_dir(cache.trees(), ".image-") as scratch:
        fs = image_fs.FileSystem(scratch, where, bounds)
        for layer, diff_id in zip(image.layers, diff_ids):
            if not isinstance(diff_id, str) or not specs.DIGEST.match(diff_id):
                raise BadInput(f"{where}: config {image.config_digest}: a diff id that is not sha256:HEX")
            name = layer.digest or diff_id
            with layer.open() as raw:
                stream = image_fs.LayerStream(raw, layer.size, where, name, image_bounds, layer.digest)
                fs.apply(stream, name, image_bounds)
                stream.finish(diff_id)
        run = image.config.get("config")
        env = dict(e.split("=", 1) for e in (run.get("Env") if isinstance(run, dict) else None) or []
                   if isinstance(e, str) and "=" in e)
        site, python = fs.package(env.get("PATH", DEFAULT_PATH).split(":"))
        entries, layers = fs.entries(site)
        stored = trees.store(cache, entries, where=where, bounds=bounds, outside=fs.beside(site))
    found = _Found(tree_digest=stored.stamp.tree_digest, layers=tuple(layers), package=f"{site}/{PKG}", python=python,
                   left_out=stored.left_out)
    write_model(index_path, found)
    return found, stored


# --- reading what a manifest names, each by its digest -------------------------------------------


def _json(data: bytes, where: str, what: str) -> dict:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadInput(f"{where}: {what}: not JSON ({e})") from None
    if not isinstance(value, dict):
        raise BadInput(f"{where}: {what}: not a JSON object")
    return value


def _read(f: BinaryIO, limit: int, where: str, what: str) -> bytes:
    data = f.read(limit + 1)
    if len(data) > limit:
        raise intake.Refused(f"{where}: {what}: refused: over {limit} bytes")
    return data


def _checked(data: bytes, digest: str, where: str, what: str) -> bytes:
    got = f"sha256:{hashlib.sha256(data).hexdigest()}"
    if got != digest:
        raise intake.Refused(f"{where}: {what} {digest}: refused: its bytes hash to {got}, not the digest that names it")
    return data


def _descriptor(d: object, where: str, what: str) -> tuple[str, int | None]:
    if not isinstance(d, dict) or not isinstance(d.get("digest"), str) or not specs.DIGEST.match(d["digest"]):
        raise BadInput(f"{where}: {what}: not a descriptor with a sha256 digest")
    size = d.get("size")
    return d["digest"], size if isinstance(size, int) and size >= 0 else None


def _platform(index: dict, where: str, digest: str) -> str:
    """The manifest of this machine's platform (linux, its architecture) in an image index."""
    arch = _ARCH.get(platform.machine(), platform.machine())
    for d in index.get("manifests") or []:
        p = d.get("platform") or {} if isinstance(d, dict) else {}
        if p.get("os") == "linux" and p.get("architecture") == arch:
            return _descriptor(d, where, f"index {digest}")[0]
    raise BadInput(f"{where}: index {digest}: no image for linux/{arch}")


def _image(blob: Callable[[str], BinaryIO], digest: str, where: str, bounds: ImageBounds) -> Image:
    """The image whose manifest (or index: this platform's manifest in it) has ``digest``."""
    with blob(digest) as f:
        raw = _checked(_read(f, bounds.json_size, where, f"manifest {digest}"), digest, where, "manifest")
    manifest, index_digest = _json(raw, where, f"manifest {digest}"), None
    if manifest.get("mediaType") in INDEXES or "manifests" in manifest:
        index_digest, digest = digest, _platform(manifest, where, digest)
        with blob(digest) as f:
            raw = _checked(_read(f, bounds.json_size, where, f"manifest {digest}"), digest, where, "manifest")
        manifest = _json(raw, where, f"manifest {digest}")
    config_digest, _ = _descriptor(manifest.get("config"), where, f"manifest {digest}: config")
    with blob(config_digest) as f:
        config = _checked(_read(f, bounds.json_size, where, f"config {config_digest}"), config_digest, where, "config")
    layers = [_descriptor(d, where, f"manifest {digest}: layer") for d in manifest.get("layers") or []]
    return Image(config_digest, _json(config, where, f"config {config_digest}"),
                 [Layer(d, size, lambda d=d: blob(d)) for d, size in layers], digest, index_digest)


def _opener(root: int, where: str, *dirs: str) -> Callable[[str], BinaryIO]:
    """Files by name below the directory ``root``/``dirs``: each part opened without following links,
    the file read non-blocking from the very inode opened, a regular file only."""

    def open_(name: str) -> BinaryIO:
        shown, fds = "/".join((*dirs, name)), []
        try:
            for part in dirs:
                fds.append(os.open(part, intake._DIR, dir_fd=fds[-1] if fds else root))
            fd = os.open(name, intake._FILE, dir_fd=fds[-1] if fds else root)
        except OSError as e:
            raise BadInput(f"{where}: {shown!r} cannot be opened without following links ({e.strerror})") from None
        finally:
            for d in fds:
                os.close(d)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise intake.Refused(f"{where}: {shown!r}: refused: not a regular file")
        return io.FileIO(fd, "rb")

    return open_


def _hex(digest: str) -> str:
    return digest.split(":", 1)[1]


def _open_dir(stack: ExitStack, path: Path, where: str) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise BadInput(f"{where}: {str(path)!r} cannot be opened as a directory ({e.strerror})") from None
    stack.callback(os.close, fd)
    return fd


def _oci(stack: ExitStack, layout: Path, spec: specs.ImageSpec, where: str, bounds: ImageBounds) -> Image:
    """An OCI image layout: ``index.json`` names the images (by tag, ``org.opencontainers.image.ref.name``)."""
    root = _open_dir(stack, layout, where)
    blobs = _opener(root, where, "blobs", "sha256")
    blob = lambda digest: blobs(_hex(digest))  # noqa: E731
    if spec.digest is None:
        with _opener(root, where)("index.json") as f:
            index = _json(_read(f, bounds.json_size, where, "index.json"), where, "index.json")
        listed = [d for d in index.get("manifests") or [] if isinstance(d, dict)]
        if spec.tag:
            listed = [d for d in listed if (d.get("annotations") or {}).get(REF_NAME) == spec.tag]
        if len(listed) != 1:
            tags = sorted(str((d.get("annotations") or {}).get(REF_NAME)) for d in index.get("manifests") or [] if isinstance(d, dict))
            raise BadInput(f"{where}: {'no image tagged ' + repr(spec.tag) if spec.tag and not listed else f'{len(listed)} images'} "
                           f"in its index.json (tags: {', '.join(tags) or 'none'}); name one with @TAG or @sha256:HEX")
        digest = _descriptor(listed[0], where, "index.json")[0]
    else:
        digest = spec.digest
    return _image(blob, digest, where, bounds)


def _docker_archive(stack: ExitStack, path: Path, where: str, bounds: ImageBounds) -> Image:
    """``docker save``'s archive: ``manifest.json`` names the config and layers by their paths in it;
    the config is checked against its name's digest, each layer against the config's diff ids."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise BadInput(f"{where}: cannot open the archive ({e.strerror})") from None
    f = stack.enter_context(io.FileIO(fd, "rb"))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise BadInput(f"{where}: not a regular file")
    try:
        tar = stack.enter_context(tarfile.open(fileobj=f, mode="r:"))  # type: ignore[call-overload]
        members: dict[str, tarfile.TarInfo] = {}
        links: dict[str, str] = {}  # docker save links a layer it holds twice to its first copy
        for count, m in enumerate(tar, 1):
            tar.members = []
            if count > 100_000:
                raise intake.Refused(f"{where}: refused: more than 100000 members")
            name = m.name.removeprefix("./")
            if m.isreg():
                members[name] = m
            elif m.issym() or m.islnk():
                links[name] = posixpath.normpath(posixpath.join(posixpath.dirname(name), m.linkname) if m.issym()
                                                 else m.linkname.removeprefix("./"))
    except tarfile.TarError as e:
        raise BadInput(f"{where}: not a tar archive ({e})") from None

    def member(name: object) -> BinaryIO:  # only what manifest.json names is read, links followed inside the archive
        for _ in range(8):
            if not isinstance(name, str) or name not in links:
                break
            name = links[name]
        m = members.get(name) if isinstance(name, str) else None
        if m is None:
            raise BadInput(f"{where}: manifest.json names {name!r}, which the archive does not hold as a file")
        got = tar.extractfile(m)
        assert got is not None
        return got  # type: ignore[return-value]

    with member("manifest.json") as m:
        raw = _read(m, bounds.json_size, where, "manifest.json")
    try:
        listed = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadInput(f"{where}: manifest.json: not JSON ({e})") from None
    if not isinstance(listed, list) or len(listed) != 1 or not isinstance(listed[0], dict):
        raise BadInput(f"{where}: manifest.json: expected one image, found {len(listed) if isinstance(listed, list) else 'none'}")
    entry = listed[0]
    with member(entry.get("Config")) as c:
        config = _read(c, bounds.json_size, where, "config")
    config_digest = f"sha256:{hashlib.sha256(config).hexdigest()}"
    named = re.search(r"(?:^|/)([0-9a-f]{64})(?:\.json)?$", str(entry.get("Config")))
    if named:
        _checked(config, f"sha256:{named.group(1)}", where, "config")
    return Image(config_digest, _json(config, where, "config"),
                 [Layer(None, None, lambda n=n: member(n)) for n in entry.get("Layers") or []])


# --- registry: pulled by digest with skopeo --------------------------------------------------------


def _skopeo(args: list[str], where: str) -> bytes:
    if shutil.which("skopeo") is None:
        raise Infrastructure(f"{where}: a registry: source is pulled with skopeo, which is not installed "
                             "(apt-get install skopeo)")
    try:
        done = subprocess.run(["skopeo", *args], capture_output=True, timeout=SKOPEO_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise Infrastructure(f"{where}: skopeo {args[0]} took over {SKOPEO_TIMEOUT} s") from None
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise (BadInput if b"manifest unknown" in done.stderr or b"not found" in done.stderr else Infrastructure)(
            f"{where}: skopeo {args[0]} failed (exit {done.returncode}): {detail[-1] if detail else ''}")
    return done.stdout


def _pull(stack: ExitStack, spec: specs.ImageSpec, cache: Store, where: str, bounds: ImageBounds) -> Image:
    """The image by digest (a tag read once, to its digest), copied with its blobs exactly as they are
    (skopeo's ``dir:``) into the cache; skopeo's own TLS checks apply except to a loopback registry."""
    tls = ["--tls-verify=false"] if _LOOPBACK.match(spec.where.split("/", 1)[0]) else []
    ref = f"docker://{spec.where}" + (f"@{spec.digest}" if spec.digest else f":{spec.tag}")
    raw = _read(io.BytesIO(_skopeo(["inspect", "--raw", *tls, "--", ref], where)), bounds.json_size, where, "manifest")
    top = spec.digest or f"sha256:{hashlib.sha256(raw).hexdigest()}"
    top_manifest = _json(_checked(raw, top, where, "manifest"), where, f"manifest {top}")
    index_digest, digest = None, top
    if top_manifest.get("mediaType") in INDEXES or "manifests" in top_manifest:
        index_digest, digest = top, _platform(top_manifest, where, top)
    final = cache.download(f"image-{_hex(digest)}")
    if not (final / "manifest.json").is_file():
        with building_dir(final) as scratch:
            _skopeo(["copy", "--quiet", *(["--src-tls-verify=false"] if tls else []), "--",
                     f"docker://{spec.where}@{digest}", f"dir:{scratch}"], where)
    cache.used(final)
    files = _opener(_open_dir(stack, final, where), where)
    image = _image(lambda d: files("manifest.json" if d == digest else _hex(d)), digest, where, bounds)
    image.index_digest = index_digest
    return image
