"""A seal over a directory's entries, cheap enough to check before every use.

An environment is read-only while a tree runs in it, so anything added or changed there came from
outside a sandbox: a run with ``--unsandboxed``, another tool, a hand. The seal covers every entry's
path, type, size, link target, modification time and change time (``ctime``, which no process can
set back): a planted ``.pth`` or ``.pyc``, or a file rewritten with its old mtime restored, breaks
it. Only stat calls: about 0.1 s for an environment of 10 000 entries, no file read.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def seal(root: Path, exclude: tuple[str, ...] = ()) -> str:
    """sha256 over the sorted entries under ``root`` (names in ``exclude`` at its top skipped)."""
    lines = []
    start = len(str(root)) + 1
    stack = [str(root)]
    while stack:
        top = stack.pop()
        with os.scandir(top) as entries:
            for entry in entries:
                rel = entry.path[start:]
                if top == str(root) and entry.name in exclude:
                    continue
                st = entry.stat(follow_symlinks=False)
                target = os.readlink(entry.path) if entry.is_symlink() else ""
                lines.append(f"{rel}\0{st.st_mode:o}\0{st.st_size}\0{target}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n")
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return hashlib.sha256("".join(sorted(lines)).encode()).hexdigest()
