"""Running the external tools diffprobe drives (pip, git), with logs kept and failures explained."""

from __future__ import annotations

import subprocess
from collections import deque
from pathlib import Path
from typing import Callable, Sequence

from runner.errors import Infrastructure

TAIL = 12


def run_logged(
    argv: Sequence[str],
    *,
    step: str,
    log: Path,
    on_line: Callable[[str], None] | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    stdin: str | None = None,
    error: type[Infrastructure] = Infrastructure,
) -> str:
    """Run ``argv``; stream its merged output to ``log`` (and ``on_line``); return the output.

    A non-zero exit raises ``error`` naming ``step`` with the last lines of output as detail,
    which is what the user needs to see; the full log stays on disk.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    tail: deque[str] = deque(maxlen=TAIL)
    lines: list[str] = []
    with open(log, "w", encoding="utf-8") as sink:
        sink.write("$ " + " ".join(argv) + "\n")
        try:
            proc = subprocess.Popen(
                list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                text=True, env=env, cwd=cwd, bufsize=1, errors="replace",
            )
        except OSError as e:
            raise error(f"{step}: cannot start {argv[0]}: {e.strerror}") from None
        if stdin:
            proc.stdin.write(stdin)
            proc.stdin.close()
        try:
            for line in proc.stdout:
                sink.write(line)
                line = line.rstrip("\n")
                lines.append(line)
                tail.append(line)
                if on_line:
                    on_line(line)
            code = proc.wait()
        except BaseException:  # interrupted: the tool must not go on writing into an entry being discarded
            proc.kill()
            proc.wait()
            raise
    if code != 0:
        raise error(f"{step} failed (exit {code}); log: {log}", detail="\n".join(tail))
    return "\n".join(lines)
