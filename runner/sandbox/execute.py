"""Run one probe inside one tree's environment, isolated, and bring back its observations.

Probing a fork runs the fork's code. Each run is a separate process group with a scrubbed
environment, a private HOME/TMPDIR, an overall deadline on top of the harness's per-case timeouts,
and, where the OS allows it, a new network namespace with no interfaces but a downed loopback.
What is not isolated: the file system (the process runs as the invoking user and can read and
write what that user can) and CPU/memory (no cgroup limits). See README, "Isolation".
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pydantic import ValidationError

from runner.evidence import catalog
from runner.store.envs import Env, scrubbed_env
from runner.errors import Infrastructure
from runner.evidence.observations import Observations

DEFAULT_CASE_TIMEOUT = 60
# The overall deadline is a safety net over the per-case timeouts: an import allowance plus room
# for every case of every probe to time out.
IMPORT_ALLOWANCE = 600
MAX_CASES = 50


@dataclass(frozen=True)
class Run:
    observations: Observations
    started_at: str
    finished_at: str
    network_isolated: bool
    log_tail: str


def now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@functools.cache
def network_wrapper() -> tuple[str, ...]:
    """The command prefix that gives a process no network, or () when this OS will not allow it."""
    unshare = shutil.which("unshare")
    if not unshare:
        return ()
    for prefix in ((unshare, "--net"), (unshare, "--user", "--map-root-user", "--net")):
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0:
                return prefix
        except (OSError, subprocess.SubprocessError):
            continue
    return ()


def run_probes(
    environment: Env,
    probes: list[str],
    *,
    case_timeout: int = DEFAULT_CASE_TIMEOUT,
    run_timeout: int | None = None,
    cases: list[str] | None = None,
    isolate_network: bool = True,
) -> dict[str, Run]:
    """Run ``probes`` in one harness process (one SGLang import) and return each probe's run."""
    harness = catalog.probes_dir() / catalog.HARNESS
    run_timeout = run_timeout or IMPORT_ALLOWANCE + case_timeout * MAX_CASES
    with tempfile.TemporaryDirectory(prefix="diffprobe-run-") as work:
        work_dir = Path(work)
        out = work_dir / "out"
        out.mkdir()
        argv = [str(environment.python), "-I", str(harness), "--out", str(out),
                "--case-timeout", str(case_timeout), *[a for p in probes for a in ("--probe", p)],
                *[a for c in cases or () for a in ("--case", c)]]
        run = run_isolated(argv, work_dir=work_dir, timeout=run_timeout, isolate_network=isolate_network)
        if run.code is None:
            raise Infrastructure(f"probes {', '.join(probes)} in {environment.root.name} exceeded {run_timeout} s and were killed")
        files = {p: out / f"{p}.json" for p in probes}
        if run.code != 0 or not all(f.exists() for f in files.values()):
            how = f"killed by {signal.Signals(-run.code).name}" if run.code < 0 else f"exit {run.code}"
            raise Infrastructure(f"probe harness failed ({how}) in {environment.root.name}", detail=run.log_tail)
        runs = {}
        for probe, path in files.items():
            try:
                observations = Observations.model_validate_json(path.read_bytes())
            except ValidationError as e:
                raise Infrastructure(f"probe {probe} returned observations that break the contract: {e.errors()[0]['msg']}") from None
            runs[probe] = Run(observations, run.started_at, run.finished_at, run.network_isolated, run.log_tail)
    return runs


@dataclass(frozen=True)
class Isolated:
    code: int | None  # None: killed at its deadline
    started_at: str
    finished_at: str
    network_isolated: bool
    log_tail: str


def run_isolated(argv: list[str], *, work_dir: Path, timeout: int, cwd: Path | None = None,
                 isolate_network: bool = True) -> Isolated:
    """Run ``argv`` (code of a tree) as its own process group: scrubbed environment, ``work_dir/home``
    as HOME, TMPDIR and default cwd, no network where the OS allows it, output in ``work_dir/log.txt``.
    The group is killed at ``timeout`` and whenever we are interrupted."""
    home = work_dir / "home"
    home.mkdir(exist_ok=True)
    wrapper = network_wrapper() if isolate_network else ()
    started = now()
    log_path = work_dir / "log.txt"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([*wrapper, *argv], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=scrubbed_env(home), cwd=cwd or home, start_new_session=True)
        _live.add(proc)
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            if proc.poll() is None:  # past the deadline, or interrupted: take the whole group down
                _kill_group(proc)
            _live.discard(proc)
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
    return Isolated(code, started, now(), bool(wrapper), tail)


_live: set[subprocess.Popen] = set()


def kill_all() -> None:
    """Stop every probe process still running (their sessions do not receive our Ctrl-C)."""
    for proc in list(_live):
        _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
