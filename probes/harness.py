"""Probe harness: the one entry point the host runs inside a tree's environment.

    <env python> -I -B /abs/probes/harness.py --probe PROBE_ID [--probe PROBE_ID ...] --out DIR
        [--case-timeout SECONDS] [--case CASE_ID ...] [--no-lines] [--conditions JSON]
        [--jobs N] [--progress-fd FD]
    <env python> -I -B /abs/<dir>/harness.py  < the same arguments, NUL-separated

(the host passes them on standard input, so that no command line a tree can read names them).

Implements ``docs/probe-contract.md`` (``diffprobe.observations/3``): imports SGLang once, forks
one child per case so cases share no state and never pay the import twice (``--jobs`` of them at
once: the host's share of the cores), kills a child that outlives its timeout, and writes the
observations file atomically. Exit 0 means the file was
written, whatever the cases did; any other exit is an infrastructure failure.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib
import importlib.util
import json
import os
import platform
import select
import signal
import sys
import time
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

SCHEMA = "diffprobe.observations/3"
# Run as a script (in a tree's sandbox) the package is loaded under a name that says nothing of
# what runs it: a tree must not find a harness by its module names. Imported, it is what it is.
PACKAGE = "_job" if __name__ == "__main__" else (__name__.rpartition(".")[0] or "probes")
HERE = os.path.dirname(os.path.abspath(__file__))
RECORD_LINES = True  # per-case coverage (probes/coverage.py); --no-lines exists to measure its cost
CONDITIONS: dict[int, str] | None = None  # index -> name of each condition the fix's code records (--conditions), once installed


def load_package() -> ModuleType:
    """Load the probes' package (as ``PACKAGE``) by file location: its parent directory may be the
    host's site-packages, which must not become importable here, so ``sys.path`` is left alone."""
    loaded = sys.modules.get(PACKAGE)
    if loaded is not None and list(getattr(loaded, "__path__", ())) == [HERE]:
        return loaded
    spec = importlib.util.spec_from_file_location(
        PACKAGE, os.path.join(HERE, "__init__.py"), submodule_search_locations=[HERE]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    spec.loader.exec_module(package)
    return package


load_package()  # before the imports below: the package is not on sys.path
_case = importlib.import_module(f"{PACKAGE}.case")
_coverage = importlib.import_module(f"{PACKAGE}.coverage")
_recording = importlib.import_module(f"{PACKAGE}.recording")
Case, Places, Probe, error, run_case = _case.Case, _case.Places, _case.Probe, _case.error, _case.run_case
not_applicable, unmet = _case.not_applicable, _case.unmet
Recorder, canonical = _coverage.Recorder, _coverage.canonical
publish_defaults = importlib.import_module(f"{PACKAGE}.tree").publish_defaults
# probe id -> its module (probes/registry.py, the one registry)
PROBE_MODULES = {e.id: f"{PACKAGE}.{e.module}" for e in importlib.import_module(f"{PACKAGE}.registry").PROBES}


def find_sglang_root() -> str | None:
    """The directory that holds the ``sglang`` package, found without importing it."""
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.dirname(os.path.abspath(list(spec.submodule_search_locations)[0]))


def import_sglang(modules: tuple[str, ...], places: Places) -> dict[str, Any]:
    """Import what the probe needs, once. A module the tree does not have is left to the cases'
    ``requires`` (they become not applicable); any other failure is an import error."""
    start = time.monotonic()
    failure = None
    for name in modules:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            absent = exc.name not in (None, "sglang") and (
                name == exc.name or name.startswith(exc.name + ".")
            )
            if not absent:
                failure = _import_error(exc, places)
                break
        except Exception as exc:  # SGLang failing to import is an outcome, not a crash
            failure = _import_error(exc, places)
            break
    return {
        "outcome": "ok" if failure is None else "error",
        "error": failure,
        "duration_ms": _ms_since(start),
    }


def warm_up(probes: Iterable[Probe] = ()) -> None:
    """Do once here what every case does first: publishing the default server configuration
    imports a dozen modules lazily, which each child would otherwise pay again (~60 ms a case), and
    each probe's own ``warm``. Every case publishes afresh, so nothing of this call reaches one; a
    failure is left to the cases, which meet it again and report it."""
    for warm in (publish_defaults, *(p.warm for p in probes if p.warm is not None)):
        try:
            warm()
        except Exception:
            pass


def _import_error(exc: BaseException, places: Places) -> dict[str, Any]:
    """The import failure, with the tree's own line that led to it when it was raised in a library
    (a file the tree reads at import, missing from it, fails in torch's extension builder)."""
    frame, own = places.frame(exc), places.tree_frame(exc)
    if own is not None and own != frame:
        frame = f"{frame}, called from {own}"
    return error(type(exc).__name__, places.in_tree(str(exc) or type(exc).__name__), "import", frame)


def imported_files(sglang_root: str | None, names: Iterable[str]) -> set[str]:
    """Files under ``sglang_root`` of the modules ``names``, relative, ``/``-separated."""
    if not sglang_root:
        return set()
    prefix = os.path.abspath(sglang_root) + os.sep
    found = set()
    for name in names:
        path = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(path, str) and os.path.abspath(path).startswith(prefix) and os.path.isfile(path):
            found.add(os.path.relpath(os.path.abspath(path), sglang_root).replace(os.sep, "/"))
    return found


def standins_among(names: Iterable[str]) -> set[str]:
    """The stand-in modules (``cpu_standins`` marks them) among ``names``."""
    return {n for n in names if getattr(sys.modules.get(n), "__dict__", {}).get("CPU_STANDIN", False) is True}


class ImportLog:
    """A meta path entry that only notes which modules the import system is asked for.

    Installed just before forking, it tells a child what it imported without walking
    ``sys.modules``: touching every inherited module (reference counts) copies most of the
    parent's heap page by page, ~30 ms a case. When the names noted do not account for every
    entry ``sys.modules`` gained (a module put there by hand, one removed), the child walks it.
    """

    def __init__(self, known: frozenset[str]):
        self.known = known
        self.names: list[str] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        self.names.append(name)
        return None

    def new_modules(self) -> list[str]:
        new = [n for n in dict.fromkeys(self.names) if n in sys.modules and n not in self.known]
        if len(sys.modules) != len(self.known) + len(new):
            new = sorted(sys.modules.keys() - self.known)
        return new


def run_forked(case: Case, places: Places, timeout: float, log: ImportLog) -> tuple[dict[str, Any], dict]:
    """Run one case in a forked child (``run_cases`` of one); return its result and its message."""
    return run_cases([case], places, timeout, log)[0]


def run_cases(cases: list[Case], places: Places, timeout: float, log: ImportLog, jobs: int = 1,
              finished: Callable[[Case], None] = lambda case: None) -> list[tuple[dict[str, Any], dict]]:
    """Run each case in a forked child, ``jobs`` children at once, each to its own deadline; return
    each one's result and message in the order of ``cases``, whatever order they ended in (a result
    never depends on which cases ran beside it: each child is a copy of this process as it was
    before any case ran). ``finished`` is told of each case as it ends. A child that cannot start
    because the tree holds every pipe or process the sandbox allows waits for a running one to end;
    with none running, that case is a Limit error."""
    done: list[tuple[dict[str, Any], dict] | None] = [None] * len(cases)
    waiting, running = list(range(len(cases)))[::-1], {}  # running: read descriptor -> (index, child)
    poll = select.poll()
    while waiting or running:
        while waiting and len(running) < max(1, jobs):
            started = _start(cases[waiting[-1]], places, timeout, log, list(running))
            if started is None:  # what it needs is held by the cases running: one of them must end first
                break
            index = waiting.pop()
            if isinstance(started, Child):
                running[started.fd] = (index, started)
                poll.register(started.fd, select.POLLIN)
            else:
                done[index] = started
                finished(cases[index])
        if not running:
            continue
        wait = min(child.deadline for _, child in running.values()) - time.monotonic()
        for fd, _ in poll.poll(max(0, int(wait * 1000) + 1)):
            running[fd][1].read()
        for fd, (index, child) in list(running.items()):
            if child.ended or time.monotonic() >= child.deadline:
                poll.unregister(fd)
                del running[fd]
                done[index] = child.finish()
                finished(cases[index])
    return [result for result in done if result is not None]


PRIVATE: list[int] = []  # descriptors of the parent no case's process may hold (--progress-fd)


class Child:
    """One case's process and what the parent has read of its one message: reading ends at
    ``eof``, at ``overflow`` (over ``MAX_MESSAGE``) or at its deadline."""

    def __init__(self, case: Case, pid: int, fd: int, start: float, timeout: float):
        self.case, self.pid, self.fd, self.start, self.deadline = case, pid, fd, start, start + timeout
        self.chunks: list[bytes] = []
        self.size = 0
        self.ended: str | None = None

    def read(self) -> None:
        chunk = os.read(self.fd, 1 << 16)
        self.size += len(chunk)
        if not chunk:
            self.ended = "eof"
        elif self.size > MAX_MESSAGE:
            self.ended, self.chunks = "overflow", []
        else:
            self.chunks.append(chunk)

    def finish(self) -> tuple[dict[str, Any], dict]:
        """The case's result and message. The message is checked here: one that is not well-formed
        (not JSON, a second document, fields out of the contract) makes this case an error and never
        stops the harness. A child that did not deliver is killed (past its deadline) and waited for."""
        os.close(self.fd)
        ended, data, problem = self.ended or "timeout", b"".join(self.chunks), None
        if ended == "eof" and data:
            message, problem = well_formed(data)
            if message is not None:  # its result is in; its exit (unmapping a large heap) need not hold up the next case
                EXITING.append(self.pid)
                return {**self.case.header(), **message["result"], "lines": message["lines"], "renamed": message["renamed"],
                        "conditions": message["conditions"], "duration_ms": _ms_since(self.start)}, message
        elif ended == "overflow":
            problem = f"more than {MAX_MESSAGE} bytes"
        if ended != "eof":
            os.kill(self.pid, signal.SIGKILL)
        _, status = os.waitpid(self.pid, 0)
        if ended == "timeout":
            result = _bare("timeout")
        elif problem:
            result = _bare("error", error("MalformedResult", f"the case's result message is not well-formed: {problem}", "process"))
        elif os.WIFSIGNALED(status):
            name = signal.Signals(os.WTERMSIG(status)).name
            result = _bare("error", error("Signal", f"case process killed by {name}{LIMIT_SIGNALS.get(name, '')}", "process"))
        else:
            message = f"case process exited with status {os.WEXITSTATUS(status)} without a result"
            result = _bare("error", error("NoResult", message, "process"))
        return {**self.case.header(), **result, "duration_ms": _ms_since(self.start)}, {}


def _start(case: Case, places: Places, timeout: float, log: ImportLog, siblings: list[int]) -> Child | tuple[dict, dict] | None:
    """Fork ``case``'s process, which first closes the pipes of the cases running beside it
    (``siblings``: no case reads or forges another's message) and ``PRIVATE``. Where no pipe or
    process is left: None while other cases run (they hold them), else the case's Limit error."""
    sys.stdout.flush()
    sys.stderr.flush()
    start = time.monotonic()
    try:
        read_fd, write_fd = os.pipe()
    except OSError as exc:  # the tree holds every file it may open
        return None if siblings else _limit_hit(case, f"no pipe for the case's process: {exc}")
    pid = _fork()
    if isinstance(pid, OSError):  # the tree holds every process the run may have (a fork bomb)
        os.close(read_fd)
        os.close(write_fd)
        return None if siblings else _limit_hit(case, f"no process for the case: {pid}")
    if pid == 0:
        for fd in (read_fd, *siblings, *PRIVATE):
            os.close(fd)
        _child(case, places, write_fd, log)
    os.close(write_fd)
    return Child(case, pid, read_fd, start, timeout)


def _fork() -> int | OSError:
    reap(block=False)
    try:
        return os.fork()
    except OSError:
        reap()  # children still exiting count against the run's process limit: wait for them, once
    try:
        return os.fork()
    except OSError as exc:
        return exc


def _limit_hit(case: Case, message: str) -> tuple[dict[str, Any], dict]:
    """A case that could not start because the tree holds what the sandbox's limits allow."""
    return {**case.header(), **_bare("error", error("Limit", message, "process")), "duration_ms": 0}, {}


# What a signal says about the sandbox's limits (runner/sandbox/limits.py): the case hit one.
LIMIT_SIGNALS = {
    "SIGKILL": " (from outside: the run's memory limit, when it was reached)",
    "SIGXFSZ": ": a file it wrote reached the file-size limit",
    "SIGXCPU": ": it reached the CPU-time limit",
}

# The result channel: one JSON object per case, nothing else (docs/probe-contract.md).
MAX_MESSAGE = 8 << 20
MAX_DEPTH = 64
RESULT_FIELDS = ("outcome", "classification", "effects", "error", "missing")
ERROR_FIELDS = ("type", "message", "where", "frame")
WHERE = ("setup", "sglang", "double")  # "import" and "process" are the parent's to say


def well_formed(data: bytes) -> tuple[dict | None, str | None]:
    """The child's message, or why it is not one: the parent takes nothing it would have to trust
    beyond the contract's shapes (the host validates and judges again)."""
    try:
        message = json.loads(data)
    except (ValueError, RecursionError) as exc:
        return None, f"not one JSON document ({type(exc).__name__})"
    if not isinstance(message, dict) or sorted(set(message) - {"renamed", "conditions"}) != ["lines", "modules", "result", "standins"]:
        return None, "not an object of result, lines, modules and standins (and renamed, conditions)"
    result = message["result"]
    if not _lines_ok(message["lines"]):
        return None, "lines are not null or file -> sorted, disjoint [start, end] line ranges"
    renamed = message.setdefault("renamed", None)
    if renamed is not None and not (isinstance(renamed, list) and isinstance(message["lines"], dict)
                                    and all(isinstance(n, str) and n in message["lines"] for n in renamed)):
        return None, "renamed is not null or a list of files whose lines were recorded"
    conditions = message.setdefault("conditions", None)
    if conditions is not None and not (isinstance(conditions, dict) and all(
            isinstance(k, str) and v in ([False], [True], [False, True]) for k, v in conditions.items())):
        return None, "conditions is not null or condition -> the values it took ([false], [true] or [false, true])"
    for key in ("modules", "standins"):
        if not isinstance(message[key], list) or not all(isinstance(n, str) for n in message[key]):
            return None, f"{key} is not a list of names"
    if not isinstance(result, dict) or sorted(result) != sorted(RESULT_FIELDS):
        return None, "the result's fields are not the contract's"
    outcome, effects, failure, missing = result["outcome"], result["effects"], result["error"], result["missing"]
    pairs = {"observed": ("bug", "clean"), "error": ("inconclusive",), "not_applicable": ("inconclusive",)}
    if result["classification"] not in pairs.get(outcome, ()):
        return None, "outcome and classification are not one of the contract's pairs"
    if not (isinstance(effects, dict) and _plain(effects, MAX_DEPTH) if outcome == "observed" else effects is None):
        return None, f"effects must be plain JSON (no floats, nested at most {MAX_DEPTH} deep) exactly when observed"
    if not (isinstance(missing, str) and missing if outcome == "not_applicable" else missing is None):
        return None, "missing must name an API exactly when not applicable"
    if outcome != "error":
        return (message, None) if failure is None else (None, "an error without the error outcome")
    if not isinstance(failure, dict) or sorted(failure) != sorted(ERROR_FIELDS) or failure["where"] not in WHERE:
        return None, "the error's fields are not the contract's"
    if not (isinstance(failure["type"], str) and isinstance(failure["message"], str) and isinstance(failure["frame"], (str, type(None)))):
        return None, "the error's fields are not strings"
    return message, None


def _lines_ok(lines: Any) -> bool:
    return lines is None or (isinstance(lines, dict) and all(isinstance(p, str) and canonical(s) for p, s in lines.items()))


def _plain(value: Any, depth: int) -> bool:
    if depth < 0 or isinstance(value, float):
        return False
    if isinstance(value, dict):
        return all(_plain(v, depth - 1) for v in value.values())
    if isinstance(value, list):
        return all(_plain(v, depth - 1) for v in value)
    return True


EXITING: list[int] = []  # children that delivered their result and are still exiting


def reap(block: bool = True) -> None:
    """Collect children that delivered their result; without ``block``, only those already gone.
    Every case reaps the ones before it: a mutation run forks thousands of cases, and unreaped
    children would fill the run's process limit (its cgroup counts them until they are waited for)."""
    still = []
    for pid in EXITING:
        if os.waitpid(pid, 0 if block else os.WNOHANG)[0] == 0:
            still.append(pid)
    EXITING[:] = still


def _child(case: Case, places: Places, write_fd: int, log: ImportLog) -> None:
    code = 1
    try:
        recorder = Recorder(places.sglang_root).start() if places.sglang_root and RECORD_LINES else None
        _recording.reset()
        try:
            result = run_case(case, places)
        finally:
            lines = recorder.stop() if recorder else None
        new = log.new_modules()
        payload = {
            "result": result,
            "lines": None if result["outcome"] == "not_applicable" else lines,
            "renamed": recorder.renamed() if recorder and lines is not None and result["outcome"] != "not_applicable" else None,
            "conditions": None if CONDITIONS is None or result["outcome"] == "not_applicable" else _recording.seen(CONDITIONS),
            "modules": sorted(imported_files(places.sglang_root, new)),
            "standins": sorted(standins_among(new)),
        }
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(json.dumps(payload).encode())
        code = 0
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _bare(outcome: str, failure: dict | None = None) -> dict[str, Any]:
    return {
        "outcome": outcome,
        "classification": "inconclusive",
        "effects": None,
        "error": failure,
        "missing": None,
        "lines": None,
        "conditions": None,
    }


def _ms_since(start: float) -> int:
    return int((time.monotonic() - start) * 1000)


def materials(sglang_root: str | None, files: set[str]) -> dict[str, str]:
    """For ``pytest_outcomes``' own file format; the host re-hashes every name from the stored tree."""
    digests = {}
    for rel in sorted(files):
        with open(os.path.join(sglang_root or "", rel), "rb") as handle:
            digests[rel] = hashlib.sha256(handle.read()).hexdigest()
    return digests


class Progress:
    """How far the run is, for the host to show (``--progress-fd``): a line ``DONE TOTAL`` once the
    import is done (the cases that need no process already done), then one as each case ends. Only
    ever shown: nothing is concluded from it. No case's process holds the descriptor (``PRIVATE``)."""

    def __init__(self, fd: int | None, total: int, forked: int):
        self.fd, self.done, self.total = fd, total - forked, total
        if fd is not None:
            PRIVATE.append(fd)
            self.write()

    def finished(self, case: Case) -> None:
        self.done += 1
        self.write()

    def write(self) -> None:
        if self.fd is not None:
            try:
                os.write(self.fd, f"{self.done} {self.total}\n".encode())
            except OSError:  # the host stopped reading: the run goes on
                self.fd = None


def write_atomically(path: str, document: dict[str, Any]) -> None:
    target = os.path.abspath(path)
    temporary = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=2, ensure_ascii=False)
        handle.write("\n")
    os.replace(temporary, target)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run diffprobe probes against this environment's SGLang.")
    parser.add_argument("--probe", required=True, action="append", dest="probes", choices=sorted(PROBE_MODULES))
    parser.add_argument("--out", required=True, help="directory that receives one <probe>.json per probe")
    parser.add_argument("--case-timeout", type=float, default=60.0)
    parser.add_argument("--case", action="append", dest="cases", metavar="CASE_ID")
    parser.add_argument("--jobs", type=int, default=1, help="cases run at once, each in its own process (the host's share of cores)")
    parser.add_argument("--progress-fd", type=int, metavar="FD", help="a descriptor that receives 'DONE TOTAL' as cases end")
    parser.add_argument("--no-lines", action="store_true", help="record no per-case lines (to measure what recording costs)")
    parser.add_argument("--conditions", metavar="JSON",
                        help="the atomic conditions of the fix's code, as the host read them from the stored tree "
                             "(probes/recording.py install): each case records which it evaluated, and to what")
    parser.add_argument("--mutate", action="store_true",
                        help="run the cases against mutants of the fix's code; writes mutation-<probe>.json")
    parser.add_argument("--hunks", metavar="JSON",
                        help="with --mutate: these changes of the fix's code (a JSON list of id, function, old, new) "
                             "are the mutants")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv or [a for a in sys.stdin.read().split("\0") if a])
    global RECORD_LINES
    RECORD_LINES = not args.no_lines
    probes: list[Probe] = [importlib.import_module(PROBE_MODULES[p]).PROBE for p in dict.fromkeys(args.probes)]
    selected = {probe.id: [c for c in probe.cases if not args.cases or c.id in args.cases] for probe in probes}
    unknown = sorted(set(args.cases or ()) - {c.id for probe in probes for c in probe.cases})
    if unknown:
        print(f"unknown case id(s): {', '.join(unknown)}", file=sys.stderr)
        return 2

    sglang_root = find_sglang_root()
    places = Places(sglang_root=sglang_root, probes_dir=HERE)
    # One import serves every probe: the import is most of the cost of a run.
    imported = import_sglang(tuple(dict.fromkeys(m for probe in probes for m in probe.imports)), places)
    if imported["outcome"] == "ok":
        warm_up(probes)
        if args.conditions is not None and sglang_root:
            global CONDITIONS
            CONDITIONS = _recording.install(json.loads(args.conditions), sglang_root)
    # Asked here, before any case is forked: a case the tree cannot run costs no process (and anything the
    # question imports is the parent's, like the import itself).
    lacking = {c.id: unmet(c) for probe in probes for c in selected[probe.id]} if imported["outcome"] == "ok" else {}
    known = frozenset(sys.modules)
    parent_files, parent_standins = imported_files(sglang_root, known), standins_among(known)
    log = ImportLog(known)
    sys.meta_path.insert(0, log)
    gc.freeze()  # children would otherwise copy the whole heap when their collector walks it
    if args.mutate and imported["outcome"] == "ok":
        mutation = importlib.import_module(f"{PACKAGE}.mutation")

        hunks = json.loads(args.hunks) if args.hunks else None
        for probe in probes:
            document = mutation.run(probe, selected[probe.id], lambda case: run_forked(case, places, args.case_timeout, log)[0],
                                    places.display, hunks)
            write_atomically(os.path.join(args.out, f"mutation-{probe.id}.json"), {**document, "import": imported})
        reap()
        return 0
    # Every probe's cases at once, in one queue: a probe's last case never leaves a core idle.
    results: dict[str, list] = {probe.id: [] for probe in probes}
    forked = []
    for probe in probes:
        for case in selected[probe.id]:
            if imported["outcome"] != "ok":
                results[probe.id].append(({**case.header(), **_bare("error", imported["error"]), "duration_ms": 0}, {}))
            elif lacking.get(case.id) is not None:
                results[probe.id].append(({**case.header(), **not_applicable(lacking[case.id]), "lines": None, "duration_ms": 0}, {}))
            else:
                forked.append((probe.id, len(results[probe.id])))
                results[probe.id].append(None)
    progress = Progress(args.progress_fd, sum(map(len, selected.values())), len(forked))
    ran = run_cases([selected[probe][index] for probe, index in forked], places, args.case_timeout, log, args.jobs,
                    progress.finished)
    for (probe, index), result in zip(forked, ran):
        results[probe][index] = result
    for probe in probes:
        payloads = [payload for _, payload in results[probe.id]]
        write_atomically(
            os.path.join(args.out, f"{probe.id}.json"),
            {
                "schema": SCHEMA,
                "probe": probe.id,
                "fix": probe.fix,
                "python": platform.python_version(),
                "implementation": platform.python_implementation(),
                "platform": platform.platform(),
                "sglang_root": sglang_root,
                "import": imported,
                # names only: the host hashes them from the stored tree
                "imported": sorted(parent_files.union(*(p.get("modules", ()) for p in payloads))),
                "standins": sorted(parent_standins.union(*(p.get("standins", ()) for p in payloads))),
                "cases": [result for result, _ in results[probe.id]],
            },
        )
    reap()
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is written; skip interpreter teardown, which for torch and SGLang costs seconds.
    os._exit(code)
