"""A diffprobe killed with SIGKILL takes its sandbox with it (--die-with-parent, PID namespace), and
what it left on disk (its run directory, a tree copy being stored) is swept by the next run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from runner import files
from runner.sandbox import bwrap, execute

pytestmark = pytest.mark.skipif(not bwrap.version(), reason="bubblewrap cannot run here")


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_killed_diffprobe_leaves_no_sandboxed_process_and_its_run_directory_is_swept(tmp_path, monkeypatch):
    marker = f"1000.{os.getpid()}{time.time_ns() % 10**6}"  # a duration sleep accepts, found by pgrep
    script = textwrap.dedent("""
        import os
        from runner.sandbox import execute
        with execute.run_dir() as work:
            print(work, flush=True)
            sleep = f"sleep {os.environ['MARK']}"
            execute.run_isolated(["/bin/sh", "-c", f"(setsid {sleep} &); {sleep}"], work_dir=work, timeout=600, read_only=[])
    """)
    diffprobe = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                                 env={**os.environ, "TMPDIR": str(tmp_path), "MARK": marker})
    work = Path(diffprobe.stdout.readline().strip())
    deadline = time.monotonic() + 30
    while subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode != 0:
        assert time.monotonic() < deadline, "the sandboxed process never started"
        time.sleep(0.1)
    diffprobe.send_signal(signal.SIGKILL)
    diffprobe.wait()
    deadline = time.monotonic() + 10
    while subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "a sandboxed process outlived the diffprobe that started it"
        time.sleep(0.1)
    assert work.is_dir()  # SIGKILL: nothing of ours ran to clean up
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with execute.run_dir():
        assert not work.exists()  # the next run swept it


def test_a_stale_tree_copy_is_swept_and_a_live_one_kept(tmp_path):
    stale = tmp_path / f".scratch-{_dead_pid()}-abc"
    live = tmp_path / f".scratch-{os.getpid()}-def"
    for d in (stale, live):
        (d / "sglang").mkdir(parents=True)
    with files.scratch_dir(tmp_path):
        assert not stale.exists() and live.exists()
