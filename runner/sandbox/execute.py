"""Run a probed tree's code inside the sandbox and bring back what it observed.

Every process of a tree (the probe harness, pytest on an upstream test file, the environment's
import check) starts here, inside bubblewrap (``runner/sandbox/bwrap.py``): the tree's environment,
the shared layer, the stored tree and a fresh copy of the probes bound read-only, one writable
result directory, and an overall deadline on top of the harness's per-case timeouts. Where
bubblewrap cannot run, only a pinned tree, or any tree with ``--unsandboxed``, runs without it
(:func:`sandboxed_for`): its own process group, a scrubbed environment and, where the OS allows, no
network. Receipts record which (README, "Threat model").

What comes back is read as untrusted: the result file only if it is a regular file within
``RESULT_BYTES``, the log's last ``LOG_TAIL_BYTES``, and materials hashed here from the stored tree.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import shutil
import signal
import stat
import subprocess
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Sequence

from pydantic import ValidationError

from runner.errors import BadInput, Infrastructure
from runner.evidence import catalog
from runner.judge import conditions, judging
from runner.evidence.materials import reader, rederive
from runner.judge.observations import Observations
from runner.files import scratch_dir
from runner.sandbox import bwrap, limits, share
from runner.evidence.receipts import Isolation
from runner.store import envs
from runner.store.envs import Env, scrubbed_env
from runner.store.sources import TreeIdentity

DEFAULT_CASE_TIMEOUT = 60
# The overall deadline is a safety net over the per-case timeouts: an import allowance plus room
# for every case of every probe to time out (a probe whose cases the host does not know counts MAX_CASES).
IMPORT_ALLOWANCE = 600
MAX_CASES = 50
RESULT_BYTES = 64 << 20  # a result file larger than this is not one
PROGRESS_LINE = 64  # bytes of a progress line kept: more is not one
LOG_TAIL_BYTES = 64 << 10
RUN_PREFIX = "xrun-"  # names nothing of ours: a tree sees the paths under it (README, "Threat model")
CODE_DIR = "_job"  # the probes' copy, and the package name they are loaded under (probes/harness.py)
HAND_BACK_SECONDS = 60  # past a sandboxed run's deadline: for it to be stopped and its results handed back
NO_SANDBOX = "only a pinned release or commit runs outside its sandbox; pass --unsandboxed to run this tree's code unconfined"


@dataclass(frozen=True)
class Run:
    observations: Observations
    materials: dict[str, str]  # hashed here, from the stored tree, for each file the run named
    started_at: str
    finished_at: str
    isolation: Isolation
    log_tail: str


def now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def sandboxed_for(identity: TreeIdentity, *, unsandboxed: bool, pinned_sha256: dict[str, str],
                  pinned_commits: Sequence[str]) -> bool:
    """Whether this tree runs in the sandbox; fail closed where bubblewrap cannot run.

    ``--unsandboxed`` is the user's explicit choice. Without it, a tree runs sandboxed, and where
    that is impossible only a pinned release artifact or a pinned commit (full SHA) may run at all.
    """
    if unsandboxed:
        return False
    if bwrap.version():
        return True
    pinned = (identity.kind == "pypi" and identity.version in pinned_sha256
              and identity.artifact_sha256 == pinned_sha256[identity.version]) or (
              identity.kind == "git" and identity.commit in pinned_commits)
    if not pinned:
        raise BadInput(f"{identity.source}: bubblewrap cannot run here (not installed, or no user namespaces), and {NO_SANDBOX}")
    return False


@contextlib.contextmanager
def run_dir() -> Iterator[Path]:
    """A private directory for one run, named after our pid; those of runs whose diffprobe was
    killed (SIGKILL leaves them) are swept first: a scratch directory of the temporary directory."""
    with scratch_dir(Path(tempfile.gettempdir()), RUN_PREFIX) as work:
        yield work


def probes_copy(work_dir: Path) -> Path:
    """The probes' source files alone: no byte-code cache of the checkout is ever run."""
    dest = work_dir / CODE_DIR
    dest.mkdir()
    for path in catalog.probes_dir().glob("*.py"):
        shutil.copyfile(path, dest / path.name)
    return dest


def run_probes(
    environment: Env,
    probes: list[str],
    *,
    sandboxed: bool = True,
    case_timeout: int = DEFAULT_CASE_TIMEOUT,
    run_timeout: int | None = None,
    cases: list[str] | None = None,
    lines: bool = True,
    record_conditions: bool = True,
    listed: list[dict] | None = None,
    jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Run]:
    """Run ``probes`` in one harness process (one SGLang import), ``jobs`` cases at once (default: the
    share of one tree probed alone, runner/sandbox/share.py), and return each probe's run;
    ``lines=False`` records no per-case coverage, ``record_conditions=False`` no atomic conditions of the fix's
    code (bench/coverage_cost.py and bench/conditions_cost.py measure what each costs); ``listed``: those
    conditions when the caller has read them already (``conditions.wanted``); ``progress(done, total)``
    is told as cases end."""
    count = len(cases) if cases else sum(len(judging.case_ids(p)) or MAX_CASES for p in probes)
    run_timeout = run_timeout or IMPORT_ALLOWANCE + case_timeout * count
    args = ["--case-timeout", str(case_timeout), "--jobs", str(jobs or share.of(1).cases), *[a for p in probes for a in ("--probe", p)],
            *[a for c in cases or () for a in ("--case", c)], *(() if lines else ("--no-lines",)),
            *(condition_args(environment, listed) if record_conditions else ())]
    with harness(environment, args, timeout=run_timeout, sandboxed=sandboxed, progress=progress) as (run, out):
        if run.code is None:
            raise Infrastructure(f"probes {', '.join(probes)} in {environment.root.name} exceeded {run_timeout} s and were killed")
        if run.code != 0:
            how = f"killed by {signal.Signals(-run.code).name}" if run.code < 0 else f"exit {run.code}"
            raise Infrastructure(f"probe harness failed ({how}) in {environment.root.name}", detail=run.log_tail)
        read, named = {}, {}
        for probe in probes:
            try:
                read[probe] = Observations.model_validate_json(read_result(out / f"{probe}.json"))
            except ValidationError as e:
                raise Infrastructure(f"probe {probe} returned observations that break the contract: {e.errors()[0]['msg']}") from None
            ran = {path for case in read[probe].cases for path in case.lines or ()}  # a file that ran is a material too
            named[probe] = {*read[probe].imported, *ran}
        hashed = rederive(environment.tree, set().union(*named.values()))  # each file once: the probes share most of them
        return {probe: Run(observations, {name: hashed[name] for name in sorted(named[probe])}, run.started_at,
                           run.finished_at, run.isolation, run.log_tail) for probe, observations in read.items()}


def condition_args(environment: Env, listed: list[dict] | None = None) -> tuple[str, str]:
    """``--conditions``: the atomic conditions of every fix's code, read on the host from the stored tree (the
    tree's process records them; it never says which there are)."""
    return "--conditions", json.dumps(listed if listed is not None else conditions.wanted(reader(environment.tree.root)))


@contextlib.contextmanager
def harness(environment: Env, args: list[str], *, timeout: int, sandboxed: bool = True,
            progress: Callable[[int, int], None] | None = None) -> Iterator[tuple["Isolated", Path]]:
    """The probe harness in ``environment``'s sandbox with ``args`` and ``--out``; yields how it
    ended and its result directory (gone once the block ends). The arguments go on its standard
    input, NUL-separated: a command line is readable by every process of the tree, and these name
    the probes. ``progress``: told ``(done, total)`` from the harness's ``--progress-fd`` as cases end."""
    with run_dir() as work_dir:
        code = probes_copy(work_dir)
        out = work_dir / "out"
        argv = [str(environment.python), "-I", "-B", str(code / catalog.HARNESS)]
        told = _Told(progress) if progress else None
        extra = ["--progress-fd", str(told.write_fd)] if told else []
        try:
            run = run_isolated(argv, work_dir=work_dir, timeout=timeout, read_only=[*environment.read_only, code],
                               hidden=environment.hidden, sandboxed=sandboxed, stdin="\0".join([*args, *extra, "--out", str(out)]).encode(),
                               pass_fds=(told.write_fd,) if told else (), on_start=told.close_write if told else None)
        finally:
            if told:
                told.close_write()
                told.join(timeout=30)  # every writer is gone: the run has ended
        yield run, out


class _Told(threading.Thread):
    """Reads a harness's progress lines (``DONE TOTAL``) while it runs and tells ``progress``. What a
    tree's code may have written there too is only ever shown, never concluded from: a line that is not
    two counts (done at most total) is skipped, and no line is kept beyond ``PROGRESS_LINE`` bytes."""

    def __init__(self, progress: Callable[[int, int], None]):
        super().__init__(daemon=True)
        self.progress = progress
        self.read_fd, self.write_fd = os.pipe()
        self.start()

    def close_write(self) -> None:
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def run(self) -> None:
        pending = b""
        try:
            while chunk := os.read(self.read_fd, 1 << 12):
                *lines, pending = (pending + chunk).split(b"\n")
                pending = pending[-PROGRESS_LINE:]
                for line in lines:
                    counts = line.split()
                    if len(counts) == 2 and all(c.isdigit() and len(c) < 10 for c in counts) and int(counts[0]) <= int(counts[1]):
                        self.progress(int(counts[0]), int(counts[1]))
        except OSError:
            pass
        finally:
            os.close(self.read_fd)


def read_result(path: Path) -> bytes:
    """A result file the tree's process wrote: a regular file (not a link, a FIFO or a device)
    within ``RESULT_BYTES``, else an infrastructure error."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise Infrastructure(f"the probe run left no readable {path.name} ({e.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > RESULT_BYTES:
            raise Infrastructure(f"the probe run's {path.name} is not a regular file of at most {RESULT_BYTES} bytes")
        return handle.read(RESULT_BYTES + 1)


@dataclass(frozen=True)
class Isolated:
    code: int | None  # None: killed at its deadline
    started_at: str
    finished_at: str
    isolation: Isolation
    log_tail: str


def run_isolated(argv: list[str], *, work_dir: Path, timeout: int, read_only: Sequence[Path],
                 hidden: Sequence[Path] = (), cwd: Path | None = None, sandboxed: bool = True,
                 stdin: bytes | None = None, pass_fds: Sequence[int] = (), on_start: Callable[[], None] | None = None) -> Isolated:
    """Run ``argv`` (code of a tree) with ``read_only`` visible and ``work_dir/out`` its one
    writable directory; output goes to ``work_dir/log.txt``. Sandboxed: in bubblewrap, ``cwd``
    (default its private HOME) inside it. Otherwise: its own process group, a scrubbed
    environment, ``work_dir/home`` as HOME, no network where the OS allows. Whatever runs is
    killed at ``timeout`` and whenever we are interrupted. ``stdin``: what it reads on its standard
    input (nothing otherwise); ``pass_fds``: descriptors it inherits, ``on_start`` called once it has
    (to close our copies)."""
    if sandboxed and not bwrap.version():  # callers decide with sandboxed_for; one that did not fails closed here
        raise BadInput(f"bubblewrap cannot run here (not installed, or no user namespaces): {NO_SANDBOX}")
    out = work_dir / "out"
    out.mkdir(exist_ok=True)
    log_path = work_dir / "log.txt"
    info_read, info_write = os.pipe() if sandboxed else (-1, -1)
    results_read, results_write = os.pipe() if sandboxed else (-1, -1)
    mounts = bwrap.Mounts(tuple(read_only), out, tuple(hidden))
    if sandboxed:
        command = bwrap.command(argv, mounts, scrubbed_env(), str(cwd) if cwd else None, info_write, results_write,
                                timeout)
        env, where, fds = {"PATH": "/usr/bin:/bin"}, work_dir, (info_write, results_write)
    else:
        home = work_dir / "home"
        home.mkdir(exist_ok=True)
        command, env, where, fds = [*death_wrapper(), *network_wrapper(), *argv], scrubbed_env(home), cwd or home, ()
    asked = limits.configured()
    prefix, per_process = limits.rlimits(asked)
    if not sandboxed:  # it can write into the shared layer: until it has ended, each use checks the seal
        envs.LAYERS_CHECKED.clear()
    started, clock = now(), time.monotonic()
    try:
        with limits.group(asked) as group, open(log_path, "wb") as log:
            proc = subprocess.Popen([*group.join(), *prefix, *command], stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE, env=env, cwd=where,
                                    start_new_session=True, pass_fds=(*fds, *pass_fds))
            if on_start:
                on_start()
            if stdin is not None:  # a few hundred bytes: the pipe takes them whole, whatever the process does
                try:
                    proc.stdin.write(stdin)
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
            if sandboxed:
                os.close(info_write)
                os.close(results_write)
                info_write = results_write = -1
                handed_back, results_read = _Drain(results_read), -1  # it closes its end when done
            _live.add(proc)
            try:  # sandboxed, the deadline is kept inside (bwrap.command); ours is the safety net
                code: int | None = proc.wait(timeout=timeout + (HAND_BACK_SECONDS if sandboxed else 0))
            except subprocess.TimeoutExpired:
                code = None
            finally:
                if proc.poll() is None:  # past the deadline, or interrupted: take the whole group down
                    _kill_group(proc)
                _live.discard(proc)
            if sandboxed and code in (124, 128 + signal.SIGKILL) and time.monotonic() - clock >= timeout:
                code = None  # stopped at its deadline inside; what it wrote until then came back
        if sandboxed:
            unpack(handed_back.result(), out)
        else:
            envs.LAYERS_CHECKED.clear()
        in_force = limits.merged(group.limits, per_process)
        isolation = bwrap.isolation(mounts, _drain(info_read), in_force) if sandboxed else Isolation(
            sandbox="none", namespaces=["net"] if network_wrapper() else [], limits=in_force)
    finally:
        for fd in (info_read, info_write, results_read, results_write):
            if fd >= 0:
                os.close(fd)
    return Isolated(code, started, now(), isolation, log_tail(log_path))


class _Drain(threading.Thread):
    """Reads a sandbox's hand-back while it runs (a full pipe would block it), keeping at most
    what its result tmpfs can hold plus the archive's headers; owns the descriptor."""

    def __init__(self, fd: int):
        super().__init__(daemon=True)
        self.fd, self.data, self.limit = fd, bytearray(), bwrap.RESULTS_BYTES + (4 << 20)
        self.start()

    def run(self) -> None:
        try:
            while chunk := os.read(self.fd, 1 << 16):
                if len(self.data) <= self.limit:
                    self.data += chunk
        except OSError:
            pass
        finally:
            os.close(self.fd)

    def result(self) -> bytes:
        self.join(timeout=30)  # every writer is in the sandbox, which has ended
        return bytes(self.data) if len(self.data) <= self.limit else b""


def unpack(archive: bytes, out: Path) -> None:
    """The regular files of a sandbox's result directory, from its tar, into ``out``: nothing but
    regular files at plain relative paths within ``RESULT_BYTES`` each; a damaged archive ends
    the unpacking (what is missing is then reported missing by the caller)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
            for member in tar:
                parts = Path(member.name).parts
                if not member.isreg() or member.size > RESULT_BYTES or not parts or parts[0] == "/" or ".." in parts:
                    continue
                target = out.joinpath(*[p for p in parts if p != "."])
                if target == out:
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)  # only ever directories and files of ours
                source = tar.extractfile(member)
                if source is not None:
                    with open(target, "wb") as handle:
                        shutil.copyfileobj(source, handle)
    except (tarfile.TarError, OSError, EOFError):
        return


def _drain(fd: int) -> bytes:
    """What bubblewrap wrote on its info descriptor (every writer is gone: the sandbox ended)."""
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    return b"".join(chunks)


def log_tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log a tree wrote, read from its last ``LOG_TAIL_BYTES`` only (it may be
    huge); printing escapes them (errors.DiffprobeError)."""
    with open(path, "rb") as handle:
        handle.seek(max(0, os.fstat(handle.fileno()).st_size - LOG_TAIL_BYTES))
        return "\n".join(handle.read().decode(errors="replace").splitlines()[-lines:])


@functools.cache
def death_wrapper() -> tuple[str, ...]:
    """Outside the sandbox: the command prefix that kills the process when diffprobe dies (what
    --die-with-parent does in it), or () without ``setpriv``. What it started itself is ended by
    the run's cgroup, or by the next run's sweep of it (runner/sandbox/limits.py)."""
    setpriv = shutil.which("setpriv")
    return (setpriv, "--pdeathsig", "KILL", "--") if setpriv else ()


@functools.cache
def network_wrapper() -> tuple[str, ...]:
    """Outside the sandbox: the command prefix that gives a process no network, or () when this
    OS will not allow it."""
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
