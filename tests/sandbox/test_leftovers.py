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
from runner.sandbox import execute, limits



def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _killed_diffprobe(tmp_path: Path, sandboxed: bool) -> tuple[Path, str]:
    """A diffprobe whose run (a sleep, and a detached one) is under way, killed with SIGKILL:
    its run directory and the marker its processes' command lines hold."""
    marker = f"1000.{os.getpid()}{time.time_ns() % 10**6}"  # a duration sleep accepts, found by pgrep
    script = textwrap.dedent(f"""
        import os
        from runner.sandbox import execute
        with execute.run_dir() as work:
            print(work, flush=True)
            sleep = f"sleep {{os.environ['MARK']}}"
            execute.run_isolated(["/bin/sh", "-c", f"(setsid {{sleep}} &); exec {{sleep}}"], work_dir=work, timeout=600,
                                 read_only=[], sandboxed={sandboxed})
    """)
    diffprobe = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                                 env={**os.environ, "TMPDIR": str(tmp_path), "MARK": marker})
    work = Path(diffprobe.stdout.readline().strip())
    deadline = time.monotonic() + 30
    while len(_running(marker)) < 2:
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.1)
    diffprobe.send_signal(signal.SIGKILL)
    diffprobe.wait()
    return work, marker


def _running(marker: str) -> list[str]:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()


def _gone(marker: str, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while _running(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.needs("bubblewrap")
def test_a_killed_diffprobe_leaves_no_sandboxed_process_and_its_run_directory_is_swept(tmp_path, monkeypatch):
    work, marker = _killed_diffprobe(tmp_path, sandboxed=True)
    assert _gone(marker), "a sandboxed process outlived the diffprobe that started it"
    assert work.is_dir()  # SIGKILL: nothing of ours ran to clean up
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with execute.run_dir():
        assert not work.exists()  # the next run swept it


def test_a_killed_diffprobe_takes_its_unsandboxed_process_and_the_next_run_its_daemons(tmp_path):
    """Without the sandbox: the process it started dies with it (parent-death signal); a detached
    daemon lives on until the next run sweeps the killed run's cgroup, where cgroups can be made."""
    work, marker = _killed_diffprobe(tmp_path, sandboxed=False)
    if not execute.death_wrapper():
        pytest.skip("no setpriv here")
    deadline = time.monotonic() + 10
    while len(_running(marker)) > 1:
        assert time.monotonic() < deadline, "the unsandboxed process outlived the diffprobe that started it"
        time.sleep(0.1)
    with limits.group(limits.configured()) as group:  # the next run: it sweeps the stale groups first
        pass
    if group.limits.processes is None:
        for pid in _running(marker):  # ours, ended by its id
            os.kill(int(pid), signal.SIGKILL)
        pytest.skip("no cgroup of our own can be made here")
    assert _gone(marker), "the killed run's daemon outlived the next run's sweep"


def test_a_stale_tree_copy_is_swept_and_a_live_one_kept(tmp_path):
    stale = tmp_path / f".scratch-{_dead_pid()}-abc"
    live = tmp_path / f".scratch-{os.getpid()}-def"
    for d in (stale, live):
        (d / "sglang").mkdir(parents=True)
    with files.scratch_dir(tmp_path):
        assert not stale.exists() and live.exists()
