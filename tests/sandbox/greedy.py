"""Payloads that try to take the machine down: a fork bomb, a memory balloon, a 10 GiB write.
Each stops at the first refusal and reports how far it got (a script: the sandbox's tests run it
as the probed tree's code, hostile.py's forks import it)."""

from __future__ import annotations

import json
import os
import sys
import time

TEN_GIB = 10 << 30


def fork_bomb(limit: int = 100_000) -> int:
    """Children that stay alive until their parent's run ends; how many could be started."""
    started = 0
    try:
        while started < limit:
            if os.fork() == 0:
                time.sleep(600)
                os._exit(0)
            started += 1
    except OSError:
        pass
    return started


def balloon(limit: int = 64 << 30) -> int:
    """Memory touched, 64 MiB at a time, until refused (or killed)."""
    held, size, chunk = [], 0, 64 << 20
    try:
        while size < limit:
            block = bytearray(chunk)
            block[::4096] = b"x" * (chunk // 4096)  # every page written: resident, not merely reserved
            held.append(block)
            size += chunk
    except MemoryError:
        pass
    return size


def write(directory: str, total: int = TEN_GIB, files: int = 64) -> int:
    """Bytes written into files of ``directory``, a new file whenever one is refused (Python
    ignores SIGXFSZ: a write past the file-size limit raises)."""
    chunk, written, index = b"x" * (8 << 20), 0, 0
    while written < total and index < files:
        try:
            with open(os.path.join(directory, f"fill-{index}"), "wb") as handle:
                while written < total:
                    written += handle.write(chunk)
        except OSError:
            index += 1
    return written


def one_file(path: str, total: int = TEN_GIB) -> None:
    """One file of ``total`` bytes, as a careless tree would write it: a refusal raises."""
    with open(path, "wb") as handle:
        for _ in range(total >> 23):
            handle.write(b"x" * (8 << 20))


if __name__ == "__main__":
    attack, out = sys.argv[1], sys.argv[2]
    found = {"fork": fork_bomb, "balloon": balloon, "write": lambda: write(out)}[attack]()
    with open(os.path.join(out, "report.json"), "w") as handle:
        json.dump({attack: found}, handle)
