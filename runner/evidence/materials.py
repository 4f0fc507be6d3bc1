"""Materials (in-toto): the sha256 of each tree file a probe run imported, hashed by the host.

The harness only names the files: it runs in the same process as the tree's code, so any hash it
computed there could be made up. Each name must be one of the files the store verified for the
tree (``Tree.files``: the bytes the tree digest covers), read as a regular file without following
a link; any other name (outside the tree, a link, a directory, a file the tree does not have, one
planted in the store since) makes the run an error rather than a receipt.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from runner.errors import Infrastructure, one_line
from runner.files import tree_files
from runner.store.intake import Refused
from runner.store.trees import PKG, Tree, read_back

_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def rederive(tree: Tree | Path, names: Iterable[str]) -> dict[str, str]:
    """``{name: sha256}`` for ``names``, each one of ``tree.files``, read from ``tree.root``. Given a
    directory holding ``sglang/`` instead, its files are those intake reads back from it (nothing
    followed; a layout intake refuses is refused), never what a walk finds."""
    wanted = sorted(set(names))
    if isinstance(tree, Path):
        try:
            root, known = tree, {f"{PKG}/{n}" for n, _ in read_back(tree).files}
        except Refused as e:
            raise Infrastructure(f"the tree the probe run named files of is not one intake takes in: {e.message}") from None
    else:
        root, known = tree.root, set(tree.files)
    out = {}
    for name in wanted:
        try:
            if name not in known:
                raise ValueError(name)
            out[name] = _sha256_regular(root / name)
        except (OSError, ValueError):
            raise Infrastructure(f"the probe run names an imported file that is not one of the tree's: {one_line(name[:200])!r}") from None
    return out


def _sha256_regular(path: Path) -> str:
    """sha256 of ``path``, opened without following a link at its last part and checked to be a
    regular file after the open (ValueError otherwise), streamed."""
    fd = os.open(path, _OPEN)
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        h = hashlib.sha256()
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def reader(tree_root: Path) -> Callable[[str], str | None]:
    """Read a file of the stored tree by its name, as ``runner.judge.fixcode.measure`` reads the fix's code (None: not a regular file of the tree)."""
    known = set(tree_files(tree_root))

    def read(name: str) -> str | None:
        path = tree_root / name
        if name not in known or not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        return path.read_text(encoding="utf-8", errors="replace")

    return read
