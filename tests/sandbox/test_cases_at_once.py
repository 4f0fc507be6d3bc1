"""A tree's cases run several at once (``harness.run_cases``, children of the one imported
interpreter): results come back in the cases' order whatever order they ended in, a case that hangs,
crashes or exits holds up only itself, no case can read a sibling's message or the progress
descriptor, and a case that finds no process left waits for a sibling to end rather than failing
(no SGLang needed: each case's body is replaced by what it is to do in the child)."""

from __future__ import annotations

import errno
import faulthandler
import os
import signal
import stat
import time

from probes import duties, harness
from probes.case import Case, Places

GOOD = {"outcome": "observed", "classification": "clean", "effects": {"senders": []}, "error": None, "missing": None}
PLACES = Places(sglang_root=None, probes_dir=harness.HERE)


def _case(case_id: str) -> Case:
    return Case(id=case_id, site="prefill-door", role="bug", title="t", duties=("door-returns",),
                build=lambda journal: None, requires=(), checks=duties.DUTIES)


def _run(monkeypatch, bodies: dict, jobs: int, timeout: float = 10, finished=lambda case: None) -> list[dict]:
    """Run one case per entry of ``bodies`` (case id -> what its process does, returning its result)."""
    monkeypatch.setattr(harness, "run_case", lambda case, places: bodies[case.id]())
    cases = [_case(name) for name in bodies]
    return [result for result, _ in harness.run_cases(cases, PLACES, timeout, harness.ImportLog(frozenset()), jobs, finished)]


def _after(seconds: float, result=GOOD):
    return lambda: (time.sleep(seconds), result)[1]


def _open_pipes() -> set[int]:
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if stat.S_ISFIFO(os.fstat(int(name)).st_mode):
                found.add(int(name))
        except OSError:
            continue
    return found


def test_results_come_back_in_the_cases_order_while_a_hang_a_crash_and_an_exit_hold_up_only_themselves(monkeypatch):
    bodies = {
        "hangs": lambda: time.sleep(60),
        "slow": _after(0.5),
        "crashes": lambda: (faulthandler.disable(), os.kill(os.getpid(), signal.SIGSEGV)),
        "exits": lambda: os._exit(3),
        "quick": lambda: GOOD,
    }
    ended = []
    start = time.monotonic()
    results = _run(monkeypatch, bodies, jobs=2, timeout=2, finished=lambda case: ended.append(case.id))
    assert time.monotonic() - start < 3.5  # the others ran beside the hang, not after its 2 s
    assert [r["id"] for r in results] == list(bodies)
    assert [r["outcome"] for r in results] == ["timeout", "observed", "error", "error", "observed"]
    assert "killed by SIGSEGV" in results[2]["error"]["message"] and results[3]["error"]["type"] == "NoResult"
    assert ended[-1] == "hangs" and sorted(ended) == sorted(bodies)  # told as each ended, the hang last


def test_cases_run_at_once_up_to_jobs_and_one_at_a_time_with_one(monkeypatch):
    bodies = {f"c{i}": _after(0.6) for i in range(4)}
    for jobs, at_most in ((4, 1.5), (2, 2.3)):
        start = time.monotonic()
        assert all(r["outcome"] == "observed" for r in _run(monkeypatch, bodies, jobs))
        assert time.monotonic() - start < at_most
    start = time.monotonic()
    _run(monkeypatch, bodies, jobs=1)
    assert time.monotonic() - start >= 2.4


def test_no_case_holds_a_siblings_pipe_nor_the_progress_descriptor(monkeypatch):
    """A case that reads every pipe it holds would take a sibling's message (the sibling would
    read as a case that exited without a result) or forge progress."""
    progress_read, progress_write = os.pipe()
    monkeypatch.setattr(harness, "PRIVATE", [progress_write])
    ours = _open_pipes() - {progress_write}

    def steal():
        held = _open_pipes() - ours
        assert progress_write not in held
        for fd in held:
            os.set_blocking(fd, False)
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline:
            for fd in held:
                try:
                    os.read(fd, 1 << 16)
                except OSError:
                    pass
        return GOOD

    try:
        results = _run(monkeypatch, {"early": _after(0.3), "thief": steal}, jobs=2)
    finally:
        os.close(progress_read)
        os.close(progress_write)
    assert [r["outcome"] for r in results] == ["observed", "observed"], results


def test_a_case_that_finds_no_process_left_waits_for_a_sibling_and_alone_is_a_limit_error(monkeypatch):
    real, forks = os.fork, []

    def fork():
        forks.append(1)
        if len(forks) in (2, 3):  # the second case's fork and its one retry, while the first case runs
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
        return real()

    monkeypatch.setattr(os, "fork", fork)
    results = _run(monkeypatch, {"first": _after(0.3), "second": lambda: GOOD}, jobs=2)
    assert [r["outcome"] for r in results] == ["observed", "observed"] and len(forks) == 4
    monkeypatch.setattr(os, "fork", lambda: (_ for _ in ()).throw(OSError(errno.EAGAIN, "no")))
    alone = _run(monkeypatch, {"only": lambda: GOOD}, jobs=2)
    assert alone[0]["error"]["type"] == "Limit" and "no process for the case" in alone[0]["error"]["message"]


def test_progress_says_done_of_total_as_cases_end(monkeypatch):
    read_fd, write_fd = os.pipe()
    monkeypatch.setattr(harness, "PRIVATE", [])
    progress = harness.Progress(write_fd, total=5, forked=3)  # two cases needed no process
    _run(monkeypatch, {f"c{i}": lambda: GOOD for i in range(3)}, jobs=2, finished=progress.finished)
    os.close(write_fd)
    assert os.read(read_fd, 1 << 16).decode().splitlines() == ["2 5", "3 5", "4 5", "5 5"]
    assert harness.PRIVATE == [write_fd]
    os.close(read_fd)
