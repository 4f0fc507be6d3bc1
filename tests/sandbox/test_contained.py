"""The sandbox against a hostile process (tests/sandbox/payloads.py run as a script, no SGLang): it
reads no other process's environment, reaches no socket of the host (not even by entering the
host's network namespace through /proc), writes nothing outside its result directory, and leaves
no process behind. The control run, without the sandbox, shows that each attack works."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from runner.sandbox import execute
from tests.sandbox import payloads
from tests.sandbox.host import accepted, exposed, planted, processes_with

pytestmark = pytest.mark.needs("bubblewrap")


@pytest.fixture
def host(tmp_path):
    with exposed(tmp_path) as facts:
        yield facts


def _run_payload(tmp_path: Path, config: dict, sandboxed: bool) -> tuple[dict, execute.Isolated]:
    work = tmp_path / ("work-sandboxed" if sandboxed else "work-open")
    code = work / "code"
    code.mkdir(parents=True)
    shutil.copy(payloads.__file__, code / "payloads.py")
    python = Path(os.path.realpath(sys.executable))
    prefix = python.parents[1]
    run = execute.run_isolated(
        [str(python), "-I", "-S", str(code / "payloads.py"), json.dumps({**config, "out": str(work / "out")})],
        work_dir=work, timeout=120, read_only=[prefix, code], sandboxed=sandboxed,
    )
    return json.loads((work / "out" / "report.json").read_text()), run


def test_a_hostile_process_in_the_sandbox_reaches_nothing_of_the_host(tmp_path, host):
    report, run = _run_payload(tmp_path, {**host["config"], "discover_parents": True}, sandboxed=True)
    assert run.code == 0, run.log_tail
    assert report["environ"] == [] and report["network"] == [] and report["unix_socket"] == []
    # on the host, whatever the payload says (its writes landed in its private tmpfs, if anywhere):
    assert accepted(host["listeners"]) == 0
    assert planted(host["decoys"]) == []
    assert processes_with(host["marker"]) == []  # its daemon ended with it
    assert host["secret"] not in (tmp_path / "work-sandboxed" / "log.txt").read_text()
    assert run.isolation.sandbox == "bubblewrap"
    assert set(run.isolation.namespaces) >= {"user", "mount", "pid", "net", "ipc", "uts"}
    assert run.isolation.writable == [str(tmp_path / "work-sandboxed" / "out")]


def test_the_control_without_the_sandbox_shows_each_attack_working(tmp_path, host):
    report, run = _run_payload(tmp_path, host["config"], sandboxed=False)
    assert report["environ"]  # our secret, read through /proc
    assert "path" in report["unix_socket"] and report["writes"]
    assert accepted(host["listeners"]) >= 1 and planted(host["decoys"])
    # a daemon outlived the run (the fixture ends it), unless the run's own cgroup took it down
    assert bool(processes_with(host["marker"])) != bool(run.isolation.limits.processes)
    if os.geteuid() == 0:  # root re-enters our network namespace through /proc/<pid>/ns/net
        assert report["network"]
    assert run.isolation.sandbox == "none"
