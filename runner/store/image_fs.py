"""A container image's file system, as far as the package is concerned: its layers applied in order,
OCI whiteouts included, each layer read once as a bounded stream; then the ``sglang`` package found
where the image's Python imports it from, handed to intake (runner/store/intake.py) as entries.

Nothing of a layer is extracted onto the host: every member is read by ``tarfile`` from a stream
this module decompresses and counts itself, and only the files of a possible package
(``.../site-packages/sglang/...``, ``.../dist-packages/sglang/...``) are copied, into a scratch
directory of the cache. What a layer holds that could act on the host, or that would make "the
package the image runs" depend on how it is unpacked, refuses the image with one line naming the
layer's digest and the member: an absolute name or a ``..`` part, a device, a link in or out of the
package (a symlink there, a hard link across its boundary), a member below a symbolic link, a
decompression bomb, too many members or bytes, a blob whose digest is not the one its manifest names.
"""

from __future__ import annotations

import hashlib
import re
import stat
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator

from runner.store import intake
from runner.store.trees import PKG

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
_GZIP, _ZSTD = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"
# a site directory: ``<prefix>/lib/python3.X/site-packages``, Debian's ``dist-packages`` too
SITE = re.compile(r"^(?P<prefix>(?:.+/)?)lib/python(?P<version>3(?:\.[0-9]+)?)/(?:site|dist)-packages$")
_IN_PACKAGE = re.compile(rf"(^|/)lib/python3(\.[0-9]+)?/(site|dist)-packages/{PKG}(/|$)")


@dataclass(frozen=True)
class ImageBounds:
    """What one image may hold, beyond what the package may (intake.Bounds): real SGLang images carry
    CUDA, torch and Python in a few layers of several GiB each; a gzip of zeros expands 1000-fold."""

    layers: int = 256
    members: int = 2_000_000  # members of one layer
    layer_size: int = 64 << 30  # bytes of one layer, uncompressed
    ratio: int = 100  # uncompressed per compressed byte beyond ``ratio_after``: a decompression bomb
    ratio_after: int = 64 * intake.MiB
    json_size: int = 4 * intake.MiB  # a manifest, an index or a config
    header_size: int = intake.MiB  # a tar member's extended header (pax, GNU long name)


def refuse(where: str, layer: str, name: str, why: str) -> intake.Refused:
    """One line naming the image, the layer by digest and the member (none: the layer as a whole)."""
    if not name:
        return intake.Refused(f"{where}: layer {layer}: refused: {why}")
    return intake.refuse(f"{where}: layer {layer}", name, why)


class _BoundedInfo(tarfile.TarInfo):
    """A member whose extended header (pax, a GNU long name) would be read into memory whole: refused
    past ``ImageBounds.header_size`` before it is read."""

    limit = ImageBounds.header_size

    def _proc_member(self, tarfile_):  # noqa: ANN001 (tarfile's own hook)
        special = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                   tarfile.SOLARIS_XHDTYPE)
        if self.type in special and self.size > self.limit:
            raise tarfile.HeaderError(f"an extended header of {self.size} bytes, over {self.limit}")
        return super()._proc_member(tarfile_)


class LayerStream:
    """A layer blob read once: its bytes counted and hashed as stored (checked against ``blob``, the
    digest its manifest names, if any), decompressed here (gzip or none) and hashed again (the diff
    id); too many bytes out, or out per byte in, refuse. ``digest`` names the layer in every refusal."""

    def __init__(self, raw: BinaryIO, size: int | None, where: str, digest: str, bounds: ImageBounds,
                 blob: str | None):
        self.raw, self.left, self.where, self.digest, self.bounds = raw, size, where, digest, bounds
        self.expected = blob
        self.blob, self.diff = hashlib.sha256(), hashlib.sha256()
        self.inn = self.out = 0
        self.parts: list[bytes] = []  # decompressed, not yet handed to the reader
        self.pending, self.pos = b"", 0  # what the reader reads from, and how far it has
        self.done = False
        head = self._raw(4)
        if head.startswith(_ZSTD):
            raise refuse(where, digest, "", "a zstd-compressed layer; only plain and gzip-compressed tar layers are read")
        self.gz = zlib.decompressobj(16 + zlib.MAX_WBITS) if head.startswith(_GZIP) else None
        self._feed(head)

    def _raw(self, n: int) -> bytes:
        if self.left is not None:
            n = min(n, self.left + 1)  # one byte past the declared size shows a longer blob
        chunk = self.raw.read(n) if n else b""
        self.inn += len(chunk)
        self.blob.update(chunk)
        if self.left is not None:
            self.left -= len(chunk)
            if self.left < 0:
                raise refuse(self.where, self.digest, "", "the blob is longer than its manifest says")
        return chunk

    def _feed(self, chunk: bytes) -> None:
        if self.gz is None:
            self._out(chunk)
            return
        try:
            data = self.gz.decompress(chunk, intake.MiB)
            self._out(data)
            while self.gz.unconsumed_tail:
                self._out(self.gz.decompress(self.gz.unconsumed_tail, intake.MiB))
            if self.gz.eof and self.gz.unused_data:  # a second gzip member follows
                rest, self.gz = self.gz.unused_data, zlib.decompressobj(16 + zlib.MAX_WBITS)
                self._feed(rest)
        except zlib.error as e:
            raise refuse(self.where, self.digest, "", f"not a gzip stream ({e})") from None

    def _out(self, data: bytes) -> None:
        self.out += len(data)
        self.diff.update(data)
        self.parts.append(data)
        if self.out > self.bounds.layer_size:
            raise refuse(self.where, self.digest, "", f"more than {self.bounds.layer_size} bytes uncompressed")
        if self.out > self.bounds.ratio_after and self.out > self.bounds.ratio * self.inn:
            raise refuse(self.where, self.digest, "", f"a decompression bomb: {self.out} bytes out of {self.inn}")

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (fewer at a chunk's end, as a pipe gives them); empty at the end only."""
        n = intake.MiB if n is None or n < 0 else n
        while self.pos >= len(self.pending) and not self.done:
            if not self.parts:
                chunk = self._raw(intake.MiB)
                if not chunk:
                    self.done = True
                    if self.gz is not None and not self.gz.eof:
                        raise refuse(self.where, self.digest, "", "the gzip stream ends early")
                    break
                self._feed(chunk)
            self.pending, self.pos, self.parts = b"".join(self.parts), 0, []
        out = self.pending[self.pos:self.pos + n]
        self.pos += len(out)
        return out

    def finish(self, diff_id: str | None) -> None:
        """Read what the tar did not (its padding), then check both digests and the declared size."""
        while self.read(intake.MiB):
            pass
        if self.left not in (None, 0):
            raise refuse(self.where, self.digest, "", "the blob is shorter than its manifest says")
        if self.expected is not None and f"sha256:{self.blob.hexdigest()}" != self.expected:
            raise refuse(self.where, self.digest, "", f"its bytes hash to sha256:{self.blob.hexdigest()}, not the "
                                                      "digest its manifest names")
        if diff_id is not None and f"sha256:{self.diff.hexdigest()}" != diff_id:
            raise refuse(self.where, self.digest, "", f"uncompressed, it hashes to sha256:{self.diff.hexdigest()}, not "
                                                      f"the diff id {diff_id} its config names")


@dataclass(slots=True)
class Node:
    kind: int  # stat.S_IFREG, S_IFDIR, S_IFLNK
    layer: int  # index of the layer that last put it (a directory: or anything below it) there
    mode: int = 0o644
    size: int = 0
    content: Path | None = None  # a package file's bytes, copied into scratch
    target: str = ""  # a symbolic link's
    children: dict[str, "Node"] = field(default_factory=dict)


class FileSystem:
    """The image's merged file system: a tree of ``Node`` (contents only for possible package files)."""

    def __init__(self, scratch: Path, where: str, bounds: intake.Bounds) -> None:
        self.root = Node(stat.S_IFDIR, -1, 0o755)
        self.scratch, self.where, self.bounds = scratch, where, bounds
        self.applied = 0  # layers applied so far: the next one's position
        self.copied = self.files = 0  # package files copied into scratch over every layer, their bytes

    def lookup(self, path: str) -> Node | None:
        node = self.root
        for part in path.split("/") if path else []:
            node = node.children.get(part) if node.kind == stat.S_IFDIR else None
            if node is None:
                return None
        return node

    def apply(self, stream: LayerStream, digest: str, image: ImageBounds) -> None:
        """Apply one layer, in order after those applied before it."""
        index, self.applied = self.applied, self.applied + 1
        try:
            bounded = type("BoundedInfo", (_BoundedInfo,), {"limit": image.header_size})
            tar = tarfile.open(fileobj=stream, mode="r|", tarinfo=bounded)  # type: ignore[arg-type]
            for count, member in enumerate(tar, 1):
                tar.members = []  # a stream's members are not kept: a layer may list millions
                if count > image.members:
                    raise refuse(self.where, digest, "", f"more than {image.members} members")
                self._member(tar, member, index, digest)
        except tarfile.TarError as e:
            raise refuse(self.where, digest, "", f"not a tar archive ({e})") from None

    def _member(self, tar: tarfile.TarFile, m: tarfile.TarInfo, index: int, digest: str) -> None:
        name = _plain(m.name).rstrip("/")
        if not name or name == ".":
            return
        parts = name.split("/")
        if m.name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise refuse(self.where, digest, m.name, "not a plain relative name (absolute, or a '..', '.' or empty part)")
        if m.ischr() or m.isblk():
            raise refuse(self.where, digest, m.name, "a device")
        *dirs, base = parts
        parent = self._dirs(dirs, index, digest, m.name)
        in_package = bool(_IN_PACKAGE.search(name))
        if base == OPAQUE:
            self._prune(parent, index)
            return
        if base.startswith(WHITEOUT):
            gone = base[len(WHITEOUT):]
            child = parent.children.get(gone)
            if child is not None:
                if child.layer < index:
                    del parent.children[gone]
                elif child.kind == stat.S_IFDIR:
                    self._prune(child, index)
            return
        if m.isdir():
            old = parent.children.get(base)
            if old is not None and old.kind == stat.S_IFDIR:
                old.layer, old.mode = index, m.mode
            else:
                parent.children[base] = Node(stat.S_IFDIR, index, m.mode)
            return
        if m.issym():
            if in_package:
                raise refuse(self.where, digest, m.name, "a symbolic link in the package; only regular files and "
                                                         "directories are taken in")
            parent.children[base] = Node(stat.S_IFLNK, index, target=m.linkname)
            return
        if m.islnk():
            parent.children[base] = self._hard_link(m, index, digest, in_package)
            return
        if not m.isreg():
            if in_package:
                raise refuse(self.where, digest, m.name, "a FIFO or other special file in the package")
            return  # a FIFO elsewhere in the image: nothing of it is read
        if m.sparse is not None and in_package:
            raise refuse(self.where, digest, m.name, "a sparse file in the package")
        node = Node(stat.S_IFREG, index, m.mode, m.size)
        if in_package and not base.endswith((".pyc", ".pyo")):
            node.content = self._copy(tar, m, index, digest)
        parent.children[base] = node

    def _dirs(self, dirs: list[str], index: int, digest: str, name: str) -> Node:
        """The parent directory of a member, made (implicitly, as an unpacker would) where missing,
        and marked as touched by this layer; a member below a symbolic link is refused: where it lands
        depends on how the image is unpacked."""
        node = self.root
        for i, part in enumerate(dirs):
            child = node.children.get(part)
            if child is not None and child.kind == stat.S_IFLNK:
                raise refuse(self.where, digest, name, f"below {'/'.join(dirs[:i + 1])!r}, a symbolic link")
            if child is None or child.kind != stat.S_IFDIR:
                child = node.children[part] = Node(stat.S_IFDIR, index, 0o755)
            child.layer = index
            node = child
        return node

    def _prune(self, node: Node, index: int) -> None:
        """An opaque directory: what lower layers put below it is gone; this layer's own stays."""
        for name, child in list(node.children.items()):
            if child.layer < index:
                del node.children[name]
            elif child.kind == stat.S_IFDIR:
                self._prune(child, index)

    def _hard_link(self, m: tarfile.TarInfo, index: int, digest: str, in_package: bool) -> Node:
        target = _plain(m.linkname)
        parts = target.split("/")
        if target.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise refuse(self.where, digest, m.name, f"a hard link to {m.linkname!r}, not a plain relative name")
        if in_package != bool(_IN_PACKAGE.search(target)) or (in_package and _package_of(target) != _package_of(_plain(m.name))):
            raise refuse(self.where, digest, m.name, f"a hard link across the package's boundary (to {m.linkname!r})")
        node = self.lookup(target)
        if node is None or node.kind != stat.S_IFREG:
            raise refuse(self.where, digest, m.name, f"a hard link to {m.linkname!r}, which is no regular file here")
        return Node(stat.S_IFREG, index, node.mode, node.size, node.content)

    def _copy(self, tar: tarfile.TarFile, m: tarfile.TarInfo, index: int, digest: str) -> Path:
        if m.size > self.bounds.file_size:
            raise refuse(self.where, digest, m.name, f"{m.size} bytes, over the bound of {self.bounds.file_size} for one "
                                                     "file (raise it with --max-file-size)")
        self.copied += m.size
        if self.copied > 2 * self.bounds.total_size:
            raise refuse(self.where, digest, m.name, f"the package's files of all layers exceed {2 * self.bounds.total_size} "
                                                     "bytes (raise it with --max-tree-size)")
        self.files += 1
        path = self.scratch / f"{index}-{self.files}"
        f = tar.extractfile(m)
        assert f is not None
        with open(path, "xb") as out:
            while chunk := f.read(intake.MiB):
                out.write(chunk)
        return path

    # --- where the image's Python imports the package from ----------------------------------------

    def package(self, env_path: list[str]) -> tuple[str, str | None]:
        """The site directory holding the package the image's Python imports, and that Python's
        version: the only one there is, else the first on the import path of the first ``python3``
        on the image's ``PATH``."""
        found = sorted(self._sites())
        if not found:
            raise intake.Refused(f"{self.where}: no {PKG} package in the image (looked for "
                                 f"lib/python3*/site-packages/{PKG}/__init__.py and dist-packages)")
        python = self._python(env_path)
        if python is not None:
            prefix, version, venv = python
            order = ([f"{venv}lib/python{version}/site-packages"] if venv is not None else []) + [
                f"{prefix}lib/python{version}/site-packages", f"{prefix}local/lib/python{version}/dist-packages",
                f"{prefix}lib/python3/dist-packages", f"{prefix}lib/python{version}/dist-packages"]
            for site in order:
                if site in found:
                    return site, version
        if len(found) == 1:
            m = SITE.match(found[0])
            version = m.group("version") if m and m.group("version") != "3" else (python[1] if python else None)
            return found[0], version
        raise intake.Refused(f"{self.where}: refused: {len(found)} {PKG} packages ({', '.join(found)}) and no python3 on the "
                             "image's PATH that says which one it imports")

    def _sites(self) -> Iterator[str]:
        def walk(node: Node, path: str, depth: int) -> Iterator[str]:
            if SITE.match(path):
                pkg = node.children.get(PKG)
                init = pkg.children.get("__init__.py") if pkg and pkg.kind == stat.S_IFDIR else None
                if init is not None and init.kind == stat.S_IFREG:
                    yield path
                return
            if depth < 12:
                for name, child in node.children.items():
                    if child.kind == stat.S_IFDIR:
                        yield from walk(child, f"{path}/{name}" if path else name, depth + 1)
        yield from walk(self.root, "", 0)

    def _python(self, env_path: list[str]) -> tuple[str, str, str | None] | None:
        """The first ``python3`` on ``PATH``: (its installation's prefix, its version, the prefix of
        the virtual environment it belongs to, if any), links followed inside the image only."""
        for d in env_path:
            d = d.strip("/")
            for name in ("python3", "python"):
                start = f"{d}/{name}" if d else name
                if self.lookup(start) is None:
                    continue
                real = self._resolve(start)
                m = re.search(r"(?:^|/)python(3\.[0-9]+)$", real or "")
                if real is None or m is None:
                    continue
                bin_dir = start.rpartition("/")[0]
                top = bin_dir.rpartition("/")[0]
                venv = top + "/" if self.lookup(f"{top}/pyvenv.cfg" if top else "pyvenv.cfg") else None
                prefix = real.rpartition("/")[0].rpartition("/")[0]
                return (prefix + "/" if prefix else ""), m.group(1), venv
        return None

    def _resolve(self, path: str) -> str | None:
        for _ in range(40):
            node, parts, done = self.root, path.split("/"), []
            for i, part in enumerate(parts):
                node = node.children.get(part) if node.kind == stat.S_IFDIR else None
                if node is None:
                    return None
                if node.kind == stat.S_IFLNK:
                    base = "" if node.target.startswith("/") else "/".join(done)
                    path = "/".join(p for p in f"{base}/{node.target}/{'/'.join(parts[i + 1:])}".split("/") if p not in ("", "."))
                    while "/../" in f"/{path}/":  # '..' taken lexically, inside the image
                        path = re.sub(r"(^|/)[^/]+/\.\.(/|$)", r"\1", path, count=1).strip("/")
                    break
                done.append(part)
            else:
                return path if node.kind == stat.S_IFREG else None
        return None

    def beside(self, site: str) -> list[str]:
        """What the image's Python runs at every start from the package's site directory, beside the
        package (``*.pth`` files, ``sitecustomize``, ``usercustomize``): it may change what the package
        does, and the tree never holds it, so the receipt names it as left out."""
        node = self.lookup(site)
        assert node is not None
        return sorted(f"/{site}/{name}" for name, child in node.children.items()
                      if name.endswith(".pth") or name.split(".")[0] in ("sitecustomize", "usercustomize"))

    def entries(self, site: str) -> tuple[list[intake.Entry], list[int]]:
        """The package below ``site`` as intake entries, and the layers (by position) its files came from."""
        out: list[intake.Entry] = []
        layers: set[int] = set()

        def walk(node: Node, rel: str) -> None:
            for name, child in sorted(node.children.items()):
                path = f"{rel}/{name}" if rel else name
                if child.kind == stat.S_IFDIR:
                    out.append(intake.Entry(path, stat.S_IFDIR | 0o755))
                    walk(child, path)
                else:
                    layers.add(child.layer)
                    content = child.content
                    out.append(intake.Entry(path, child.kind | (child.mode & 0o7777), child.size,
                                            (lambda c=content: open(c, "rb")) if content else b""))

        pkg = self.lookup(f"{site}/{PKG}")
        assert pkg is not None
        walk(pkg, "")
        return out, sorted(layers)


def _plain(name: str) -> str:
    """A member's name without the leading ``./`` tar writers put in front."""
    while name.startswith("./"):
        name = name[2:]
    return name


def _package_of(name: str) -> str:
    m = _IN_PACKAGE.search(name)
    return name[: m.end()].rstrip("/") if m else ""
