"""Raw git objects, each checked against its id before anything is taken from it.

A local repository is read in place, and git's own readers (``cat-file``, ``ls-tree``) return an
object file's contents without hashing them: a damaged or forged object would be probed under a
commit id that does not name its bytes. Every commit, tree and blob diffprobe takes is hashed
here, so the chain commit -> tree -> ... -> blob holds whatever the repository's files say.
"""

from __future__ import annotations

import hashlib
import stat
from dataclasses import dataclass

from runner.errors import BadInput

TREE = "40000"
SUBMODULE = "160000"  # a commit id in a tree: no bytes of it here
LINK = "120000"  # a symbolic link: its blob is the target's text


@dataclass(frozen=True)
class Entry:
    """One line of a tree object."""

    name: bytes  # as git spells it: what a name may be is intake's rule (runner/store/intake.py)
    mode: str  # as git reads it (canonical): 40000 tree, 100644/100755 file, 120000 link, 160000 submodule
    oid: str


def canonical_mode(mode: str) -> str:
    """The mode git acts on for a mode as stored (git's ``canon_mode``): a zero-padded ``040000`` or
    an odd ``40755`` is a tree to git, ``100664`` a file, any unknown type a submodule. A tree is
    read as git would check it out, never as what a string comparison makes of it."""
    m = int(mode, 8)
    kind = stat.S_IFMT(m)
    if kind == stat.S_IFREG:
        return "100755" if m & 0o100 else "100644"
    return {stat.S_IFLNK: LINK, stat.S_IFDIR: TREE}.get(kind, SUBMODULE)


def object_id(kind: str, body: bytes, hexlen: int = 40) -> str:
    """The id git gives ``body`` as an object of ``kind`` (SHA-1, or SHA-256 in a sha256 repository)."""
    algorithm = hashlib.sha1 if hexlen == 40 else hashlib.sha256
    return algorithm(f"{kind} {len(body)}\0".encode() + body).hexdigest()


def parse_batch(out: bytes, where: str) -> dict[str, tuple[str, bytes]]:
    """``git cat-file --batch`` output -> {oid: (type, body)} for the objects present (a missing
    one is left out), each body checked against its id."""
    objects: dict[str, tuple[str, bytes]] = {}
    pos = 0
    while pos < len(out):
        end = out.index(b"\n", pos)
        header = out[pos:end].decode(errors="replace").split()
        if len(header) == 2 and header[1] == "missing":
            pos = end + 1
            continue
        oid, kind, size = header
        body = out[end + 1 : end + 1 + int(size)]
        if object_id(kind, body, len(oid)) != oid:
            raise BadInput(f"{where}: the {kind} {oid} does not hash to its id (a damaged or forged object)")
        objects[oid] = (kind, body)
        pos = end + 1 + int(size) + 1
    return objects


def commit_tree(body: bytes, oid: str) -> str:
    """The root tree a commit names (its first header line)."""
    first = body.split(b"\n", 1)[0].split()
    if len(first) != 2 or first[0] != b"tree":
        raise BadInput(f"commit {oid}: malformed (no tree line)")
    return first[1].decode()


def tree_entries(body: bytes, oid: str) -> list[Entry]:
    """A tree object's entries. What only the tree shows is refused here: a name holding ``/``
    (joined into a path it would read as two), a name twice (two subtrees of one name would
    merge), a mode that is not octal. Everything else a name or a mode may be is for intake."""
    rawlen = len(oid) // 2
    entries: list[Entry] = []
    seen: set[bytes] = set()
    pos = 0
    while pos < len(body):
        space = body.find(b" ", pos)
        nul = body.find(b"\0", space + 1)
        child = body[nul + 1 : nul + 1 + rawlen]
        if space < 0 or nul < 0 or len(child) != rawlen:
            raise BadInput(f"tree {oid}: truncated entry")
        mode, name = body[pos:space].decode(errors="replace"), body[space + 1 : nul]
        if not mode or not set(mode) <= set("01234567"):
            raise BadInput(f"tree {oid}: {name!r} has the mode {mode!r}, not an octal number")
        if b"/" in name:
            raise BadInput(f"tree {oid}: refusing the name {name!r} (a '/' in one entry's name)")
        if name in seen:
            raise BadInput(f"tree {oid}: the name {name!r} appears twice")
        seen.add(name)
        entries.append(Entry(name, canonical_mode(mode), child.hex()))
        pos = nul + 1 + rawlen
    return entries
