"""Faults with real SGLang releases: a failing environment build, Ctrl-C and SIGTERM mid-run,
repeatability over runs and worker counts, and caches that a changed tree cannot poison (a hostile
tree against the sandbox: tests/sandbox/test_contained.py and test_hostile.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner import cli
from runner.evidence import bundle
from runner.sandbox import execute
from runner.store import envs, procs, sources, specs, torch_source
from tests import helpers
from tests.helpers import ROOT

# --- an environment build that fails ------------------------------------------------------------


@pytest.mark.slow
def test_a_failing_layer_build_exits_3_naming_the_step_with_the_tail_of_its_output(tmp_path, monkeypatch, capsys):
    lock = tmp_path / "lock.txt"
    torch = next(line for line in envs.LOCK.read_text().splitlines() if line.startswith("torch=="))
    lock.write_text(f"{torch}\ndiffprobe-no-such-package==0.0.0\n")  # torch installs; the rest of the lock fails
    monkeypatch.setattr(envs, "LOCK", lock)
    # torch "installs" as recorded (installing the real 800 MiB wheel proves nothing here): the lock's step fails
    record = torch_source.TorchRecord(requirement=torch, version=torch.split("==")[1], url="file:///torch.whl", sha256="0" * 64,
                                      source=torch_source.candidates(environ={})[0])
    monkeypatch.setattr(torch_source, "install", lambda *a, **k: record)
    tree = tmp_path / "tree"
    (tree / "sglang").mkdir(parents=True)
    (tree / "sglang" / "__init__.py").write_text("")
    cache = tmp_path / "cache"
    assert cli.main(["env", f"path:{tree}", "--cache-dir", str(cache)]) == 3
    lines = capsys.readouterr().err.splitlines()
    errors = [line for line in lines if line.startswith("diffprobe: error: ")]
    assert len(errors) == 1 and "install the locked dependency layer failed (exit 1); log: " in errors[0]
    detail = lines[lines.index(errors[0]) + 1:]  # what follows the error: the tail of the failing step
    assert detail and all(line.startswith("    ") for line in detail)
    assert any("diffprobe-no-such-package" in line for line in detail)  # pip's own last words
    assert list((cache / "layers").iterdir()) == []  # neither a layer nor its scratch directory remains


def test_an_interrupted_tool_is_stopped_not_left_writing_into_a_discarded_entry(tmp_path):
    def interrupt(line: str) -> None:
        raise KeyboardInterrupt

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        procs.run_logged(["sh", "-c", "echo $$ > pid; echo go; exec sleep 30"], step="tool", log=tmp_path / "log",
                         on_line=interrupt, cwd=tmp_path)
    assert not Path(f"/proc/{(tmp_path / 'pid').read_text().strip()}").exists()  # killed and reaped
    assert time.monotonic() - start < 10


# --- interrupted runs ---------------------------------------------------------------------------


def _harness_groups(pid: int) -> list[int]:
    """Process groups of the probe harnesses that ``pid`` started (each runs in its own session)."""
    out = subprocess.run(["pgrep", "-P", str(pid), "-f", f"{execute.CODE_DIR}/harness.py"], capture_output=True, text=True).stdout
    return [os.getpgid(int(p)) for p in out.split()]


def _alive(pgid: int) -> bool:
    return subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True).returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_run_leaves_nothing_half_written_and_no_probe_running(cache, tmp_path, signum, code):
    out = tmp_path / "work" / "bundle"
    argv = [sys.executable, "-m", "runner.cli", "run", "--via", "releases", "--pr", "38935", "--out", str(out),
            "--cache-dir", str(cache.root), "-j", "2", "--no-reuse"]  # probes must run to be interrupted
    # As from a terminal: SIGINT at its default even where this suite runs in a background job (which
    # starts with SIGINT ignored, and Python then leaves it ignored: the run would not be interrupted).
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 600
    while not (groups := _harness_groups(proc.pid)):
        assert proc.poll() is None and time.monotonic() < deadline, "no probe started"
        time.sleep(0.2)
    proc.send_signal(signum)  # at once: inside SGLang's import (a warm import can end, and with it the run, in 2 s)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code
    assert stderr.splitlines()[-1] == "diffprobe: interrupted; completed entries are kept, partial ones were discarded"
    allowed = ("✓ ", "warning: ", "unsandboxed: ", "… ")  # "unsandboxed:": a pinned release where bubblewrap cannot run; "…": a step still running
    assert [line for line in stderr.splitlines() if not line.startswith(allowed)] == stderr.splitlines()[-1:]
    assert not any(_alive(g) for g in groups)
    assert not out.parent.exists() or list(out.parent.iterdir()) == []
    start = time.monotonic()
    again = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    # the cache was reused as is (a test on another worker may be building an entry of the shared cache
    # that this run then waits for: that wait is not this run's doing)
    said = [line for line in again.stderr.splitlines() if not line.startswith("warning: waiting for another diffprobe process")]
    assert not any(word in line for line in said for word in ("download", "install", "warning")), again.stderr
    assert bundle.verify(out) == [] and time.monotonic() - start < 300


# --- repeatability ------------------------------------------------------------------------------


@pytest.mark.slow
def test_three_runs_observe_the_same(cache, tmp_path):
    """--repeat 3 fails (exit 1, no bundle) on any observation that differs between runs of one tree;
    runs that agree write the bundle, and the exit is the verdict's (0.5.21 lacks later defences).
    Every probe, three runs: each probe's observations agree run to run (five runs cost two more
    whole audits of CPU)."""
    assert cli.main(["audit", "pypi:sglang==0.5.21", "--repeat", "3", "--out", str(tmp_path / "a"),
                     "--cache-dir", str(cache.root)]) == helpers.audit_exit("0.5.21")
    assert bundle.verify(tmp_path / "a") == []


@pytest.mark.slow
def test_one_worker_and_two_workers_observe_the_same(cache, tmp_path):
    trees = ["pypi:sglang==0.5.20", "pypi:sglang==0.5.21"]
    for jobs in ("1", "2"):
        assert cli.main(["sweep", *trees, "-j", jobs, "--out", str(tmp_path / jobs), "--cache-dir", str(cache.root)]) == 0
    assert cli.main(["compare", str(tmp_path / "1"), str(tmp_path / "2")]) == 0


# --- caches -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_changed_tree_under_the_same_name_gets_its_own_entries(cache, tmp_path):
    """Caches are keyed by digest: what was built for the old bytes never serves the new ones."""
    src = tmp_path / "vendor"
    (src / "sglang").mkdir(parents=True)
    (src / "sglang" / "__init__.py").write_text("VERSION = 'a'\n")
    interp = envs.interpreter(None)
    first = sources.resolve(specs.parse(f"path:{src}"), cache)
    env_first = envs.env(first, cache, interp)
    (src / "sglang" / "__init__.py").write_text("VERSION = 'b'\n")
    second = sources.resolve(specs.parse(f"path:{src}"), cache)
    env_second = envs.env(second, cache, interp)
    assert first.identity.source == second.identity.source
    assert first.identity.tree_digest != second.identity.tree_digest
    assert first.root != second.root and env_first.root != env_second.root
    assert (first.root / "sglang" / "__init__.py").read_text() == "VERSION = 'a'\n"  # the old entry is untouched
    # each environment imports its own tree (through its overlay of links to that tree's files)
    for environment, tree in ((env_first, first), (env_second, second)):
        assert str(environment.root / "tree") in next(environment.root.rglob("diffprobe.pth")).read_text()
        assert (environment.root / "tree" / "sglang" / "__init__.py").resolve() == tree.root / "sglang" / "__init__.py"
