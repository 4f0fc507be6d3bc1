"""``wheel:FILE.whl``: a wheel a vendor built, copied into the cache (the copy is what is hashed and
read), each member checked against the hash its ``RECORD`` lists as it is taken in through intake
(runner/store/intake.py); only its ``sglang/`` becomes the tree.

A wheel's RECORD is what an installer writes into ``site-packages`` and what ``pip`` checks the
installed files against; a member it does not list, or lists with other bytes, is not the wheel its
builder signed off, so the tree is refused rather than probed."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import stat
import zipfile
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from runner.errors import BadInput
from runner.files import building_dir, scratch_dir
from runner.store import intake, specs, trees
from runner.store.cache import Store, write_model
from runner.store.trees import PKG, Tree, TreeIdentity

RECORD_BYTES = 16 * intake.MiB
_HASHES = ("sha256", "sha384", "sha512")  # what PEP 376 allows a RECORD to use (never md5 or sha1)


def resolve(spec: specs.WheelSpec, cache: Store, bounds: intake.Bounds = intake.Bounds()) -> Tree:
    source = specs.local_path(spec.file, str(spec))
    copy, sha = _copy(source, cache, str(spec), bounds)
    index_path = cache.index("wheel", sha)
    hit = trees.from_index(cache, index_path, bounds)
    if hit is None:
        stored = _take(copy, cache, str(spec), bounds)
        write_model(index_path, trees.Index(tree_digest=stored.stamp.tree_digest, artifact=source.name,
                                            artifact_sha256=sha, left_out=stored.left_out))
        hit = trees.from_index(cache, index_path, bounds)
        assert hit is not None
    _, stored = hit
    with zipfile.ZipFile(copy) as zf:
        version = _dist_info(zf, str(spec))[0].split("-", 1)[1].removesuffix(".dist-info")
    identity = TreeIdentity(kind="wheel", source=str(spec), version=version, artifact=source.name, artifact_sha256=sha,
                            path=str(source), tree_digest=stored.stamp.tree_digest, files=stored.stamp.files,
                            left_out=stored.left_out)
    return Tree(identity, stored.root, stored.files)


def _copy(source: Path, cache: Store, where: str, bounds: intake.Bounds) -> tuple[Path, str]:
    """The wheel copied once into the cache, hashed as it is copied: what is read later is these bytes."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise BadInput(f"{where}: cannot open the wheel ({e.strerror})") from None
    with io.FileIO(fd, "rb") as f, scratch_dir(cache.download(""), ".wheel-") as scratch:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadInput(f"{where}: not a regular file")
        h, got = hashlib.sha256(), 0
        with open(scratch / "wheel.whl", "xb") as out:
            while chunk := f.read(intake.MiB):
                got += len(chunk)
                if got > bounds.total_size:
                    raise intake.Refused(f"{where}: refused: more than {bounds.total_size} bytes (raise it with --max-tree-size)")
                h.update(chunk)
                out.write(chunk)
        sha = h.hexdigest()
        final = cache.download(f"wheel-{sha}")
        if not (final / "wheel.whl").is_file():
            with building_dir(final) as building:
                os.replace(scratch / "wheel.whl", building / "wheel.whl")
    cache.used(final)
    return final / "wheel.whl", sha


def _dist_info(zf: zipfile.ZipFile, where: str) -> tuple[str, str]:
    """The wheel's one ``sglang-VERSION.dist-info`` directory and its RECORD's name."""
    tops = {i.filename.split("/", 1)[0] for i in zf.infolist()}
    infos = sorted(t for t in tops if t.endswith(".dist-info"))
    if len(infos) != 1 or not infos[0].lower().startswith(f"{PKG}-"):
        raise BadInput(f"{where}: not a wheel of {PKG} (its .dist-info directories: {infos or 'none'})")
    return infos[0], f"{infos[0]}/RECORD"


def _record(zf: zipfile.ZipFile, where: str) -> dict[str, tuple[str, str]]:
    """RECORD: member name -> (hash name, urlsafe base64 digest); every member but RECORD (and its
    signatures) must be listed with a hash."""
    _, name = _dist_info(zf, where)
    try:
        info = zf.getinfo(name)
    except KeyError:
        raise BadInput(f"{where}: no {name} (a wheel lists every member's hash there)") from None
    if info.file_size > RECORD_BYTES:
        raise intake.Refused(f"{where}: {name!r}: refused: {info.file_size} bytes, over {RECORD_BYTES}")
    listed: dict[str, tuple[str, str]] = {}
    for row in csv.reader(io.TextIOWrapper(zf.open(info), encoding="utf-8", newline="")):
        if len(row) >= 2 and row[1]:
            algorithm, _, value = row[1].partition("=")
            if algorithm not in _HASHES:
                raise intake.refuse(f"{where}: RECORD", row[0], f"hashed with {algorithm!r}, not sha256 or stronger")
            listed[row[0]] = (algorithm, value)
    for member in zf.infolist():
        n = member.filename
        if not n.endswith("/") and n != name and not n.endswith((".dist-info/RECORD.jws", ".dist-info/RECORD.p7s")) \
                and n not in listed:
            raise intake.refuse(where, n, "it is not listed with a hash in the wheel's RECORD")
    return listed


def _checked(open_: Callable[[], BinaryIO], expected: tuple[str, str], where: str, name: str) -> Callable[[], BinaryIO]:
    """``open_``, its reader checking at the end of the member the hash RECORD lists for it."""
    algorithm, value = expected

    class Reader(io.RawIOBase):
        def __init__(self) -> None:
            self.f, self.h = open_(), hashlib.new(algorithm)

        def readable(self) -> bool:
            return True

        def read(self, n: int = -1) -> bytes:
            chunk = self.f.read(n)
            self.h.update(chunk)
            if not chunk and n != 0:
                got = base64.urlsafe_b64encode(self.h.digest()).rstrip(b"=").decode()
                if got != value.rstrip("="):
                    raise intake.refuse(where, name, f"its bytes do not have the {algorithm} its RECORD lists")
            return chunk

        def close(self) -> None:
            self.f.close()
            super().close()

    return Reader


def _take(wheel: Path, cache: Store, where: str, bounds: intake.Bounds) -> trees.Stored:
    try:
        with zipfile.ZipFile(wheel) as zf:
            listed = _record(zf, where)
            for member in intake.wheel_outside(zf, PKG) + [i.filename for i in zf.infolist()
                                                          if i.filename.split("/", 1)[0].endswith(".dist-info")]:
                if member in listed:  # the members beside the package are checked too: all of the wheel is its RECORD's
                    with _checked(lambda m=member: zf.open(m), listed[member], where, member)() as f:
                        while f.read(intake.MiB):
                            pass
            return trees.store(cache, _entries(zf, listed, where), where=where, bounds=bounds,
                               outside=intake.wheel_outside(zf, PKG))
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as e:
        raise BadInput(f"{where}: not a readable wheel ({e})") from None


def _entries(zf: zipfile.ZipFile, listed: dict[str, tuple[str, str]], where: str) -> Iterator[intake.Entry]:
    for e in intake.wheel(zf, PKG, where):
        if callable(e.content):
            name = f"{PKG}/{os.fsdecode(e.name) if isinstance(e.name, bytes) else e.name}"
            yield intake.Entry(e.name, e.mode, e.size, _checked(e.content, listed[name], where, name))
        else:
            yield e
