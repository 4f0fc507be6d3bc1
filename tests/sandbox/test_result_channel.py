"""The harness's result channel: whatever a case's process writes into its pipe, a message that is
not well-formed makes that case an error and the harness goes on (no SGLang needed: the case's body
is replaced by what a hostile tree would do inside it)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from probes import duties, harness
from probes.case import Case, Places

GOOD = {"outcome": "observed", "classification": "clean", "effects": {"senders": []}, "error": None, "missing": None}


def _case(case_id: str = "c") -> Case:
    return Case(id=case_id, site="prefill-door", role="bug", title="t", duties=("door-returns",),
                build=lambda journal: None, requires=(), checks=duties.DUTIES)


def _pipes() -> list[int]:
    """The pipes this process may write to: what a payload looking for the result channel finds."""
    fds = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if stat.S_ISFIFO(os.fstat(int(name)).st_mode) and os.readlink(f"/proc/self/fd/{name}").startswith("pipe:"):
                fds.append(int(name))
        except OSError:
            continue
    return fds


def _run(monkeypatch, body, timeout: float = 10) -> dict:
    """Run one forked case whose body is ``body`` (in the child, in place of the probe's case)."""
    ours = set(_pipes())  # the test runner's own pipes are not the payload's target
    monkeypatch.setattr(harness, "run_case", lambda case, places: body(set(_pipes()) - ours))
    result, _ = harness.run_forked(_case(), Places(sglang_root=None, probes_dir=harness.HERE), timeout,
                                   harness.ImportLog(frozenset()))
    return result


def _forge(data: bytes):
    def body(pipes):
        for fd in pipes:
            try:
                os.write(fd, data)
            except OSError:
                pass
        return GOOD
    return body


def test_an_honest_case_is_taken_as_it_reported(monkeypatch):
    result = _run(monkeypatch, lambda pipes: GOOD)
    assert result["outcome"] == "observed" and result["effects"] == {"senders": []} and result["id"] == "c"


@pytest.mark.parametrize("written", [
    b"garbage",                                      # before the real message: no longer one JSON document
    json.dumps({"result": GOOD, "lines": None, "modules": [], "standins": []}).encode(),  # a second, well-formed document
    b"[" * 100_000,                                  # nested past the parser's recursion limit
], ids=["garbage", "second-document", "deep"])
def test_bytes_written_into_the_result_pipe_make_that_case_a_malformed_error(monkeypatch, written):
    result = _run(monkeypatch, _forge(written))
    assert result["outcome"] == "error" and result["error"]["type"] == "MalformedResult"
    assert result["error"]["where"] == "process" and result["classification"] == "inconclusive"


def test_an_endless_message_is_cut_at_the_limit_and_its_process_killed(monkeypatch):
    monkeypatch.setattr(harness, "MAX_MESSAGE", 1 << 20)

    def body(pipes):
        chunk = b" " * (1 << 16)
        while True:
            for fd in pipes:
                os.write(fd, chunk)

    result = _run(monkeypatch, body)
    assert result["error"]["type"] == "MalformedResult" and "more than 1048576 bytes" in result["error"]["message"]


@pytest.mark.parametrize("result, problem", [
    ({**GOOD, "id": "other-case"}, "fields"),                                 # would rename the case
    ({**GOOD, "classification": "inconclusive"}, "pairs"),
    ({**GOOD, "outcome": "timeout", "classification": "inconclusive", "effects": None}, "pairs"),  # the parent's to say
    ({**GOOD, "effects": {"x": 0.5}}, "plain JSON"),
    ({**GOOD, "effects": [1]}, "plain JSON"),
    ({**GOOD, "missing": "sglang.x"}, "missing"),
    ({**GOOD, "error": {"type": "X", "message": "m", "where": "setup", "frame": None}}, "error without"),
    ({**GOOD, "outcome": "error", "classification": "inconclusive", "effects": None,
      "error": {"type": "X", "message": "m", "where": "process", "frame": None}}, "contract"),
    ({**GOOD, "outcome": "error", "classification": "inconclusive", "effects": None,
      "error": {"type": 1, "message": "m", "where": "sglang", "frame": None}}, "strings"),
    ({**GOOD, "outcome": "not_applicable", "classification": "inconclusive", "effects": None, "missing": ""}, "missing"),
])
def test_a_message_outside_the_contract_is_refused_with_the_reason(result, problem):
    message, why = harness.well_formed(json.dumps({"result": result, "lines": None, "modules": [], "standins": []}).encode())
    assert message is None and problem in why


def test_names_must_be_lists_of_strings():
    assert harness.well_formed(json.dumps({"result": GOOD, "lines": None, "modules": [1], "standins": []}).encode())[0] is None
    assert harness.well_formed(json.dumps({"result": GOOD, "lines": None, "modules": "x", "standins": []}).encode())[0] is None
    assert harness.well_formed(json.dumps({"result": GOOD, "lines": None, "modules": ["a"], "standins": ["b"]}).encode())[0] is not None


def test_cases_that_delivered_their_result_are_reaped_as_the_run_goes_on(monkeypatch):
    """A mutation run forks thousands of cases in one process: children left unwaited for stay in
    the process table (and in the run's process limit) until reaped, and once they filled it every
    later case read as a Limit error. Each case now collects the ones before it."""
    for _ in range(60):
        assert _run(monkeypatch, lambda pipes: GOOD)["outcome"] == "observed"
    assert len(harness.EXITING) < 10
    harness.reap()
    assert harness.EXITING == []
