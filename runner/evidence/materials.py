"""Materials (in-toto): the sha256 of each tree file a probe run imported, hashed by the host.

The harness only names the files: it runs in the same process as the tree's code, so any hash it
computed there could be made up. Each name must be a regular file of the stored tree (the bytes
the tree digest covers); any other name (outside the tree, a link, a directory, a file the tree
does not have) makes the run an error rather than a receipt.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from runner.errors import Infrastructure, one_line
from runner.files import sha256_file, tree_files
from runner.store.sources import PKG


def rederive(tree_root: Path, names: Iterable[str]) -> dict[str, str]:
    """``{name: sha256}`` for ``names``, each read from ``tree_root``."""
    wanted = sorted(set(names))
    known = {name for name in tree_files(tree_root) if name.startswith(f"{PKG}/")}
    for name in wanted:
        path = tree_root / name
        if name not in known or not stat.S_ISREG(os.lstat(path).st_mode):
            raise Infrastructure(f"the probe run names an imported file that is not one of the tree's: {one_line(name[:200])!r}")
    return {name: sha256_file(tree_root / name) for name in wanted}
