"""Greedy forks of a real release (tests/sandbox/greedy_fork.py) audited through the real CLI with
small limits: a fork bomb at import, a memory balloon and a 10 GiB file inside one case. Each is
contained (its limit recorded in the receipt, nothing left running, the machine's memory and disk
untouched), each hit limit is an error of the cases it touched, never a behaviour, and diffprobe
ends with one clear exit code: 1, the fix not shown fixed."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from runner.evidence.receipts import Receipt
from runner.sandbox import execute, limits
from tests import forks
from tests.helpers import ROOT
from tests.sandbox import greedy_fork
from tests.sandbox.host import processes_with

pytestmark = [pytest.mark.slow, pytest.mark.needs("bubblewrap")]
SMALL = "memory=2G,processes=64,file-size=16M"


def _audit(cache, release_tree, tmp_path, attack: str, where: str) -> tuple[subprocess.CompletedProcess, dict]:
    fork = greedy_fork.make(release_tree("0.5.21").root, tmp_path / f"fork-{uuid.uuid4().hex[:8]}", attack, where)
    out = tmp_path / "bundle"
    proc = subprocess.Popen([sys.executable, "-m", "runner.cli", "audit", f"path:{fork}", "--out", str(out),
                             "--cache-dir", str(cache.root), "--no-reuse"], cwd=ROOT, env={**os.environ, limits.VARIABLE: SMALL},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=900)
    cli = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert processes_with(f"{execute.RUN_PREFIX}{proc.pid}-") == []  # no process of its runs is left
    receipts = [Receipt.model_validate_json(p.read_bytes()) for p in sorted((out / "receipts").glob("*.json"))]
    assert receipts, cli.stderr[-2000:]
    admission = next(r for r in receipts if r.probe.id == "admission")
    return cli, admission


def _limited(receipt: Receipt) -> None:
    in_force = receipt.environment.isolation.limits
    assert in_force.file_size == 16 << 20 and in_force.address_space == limits.DEFAULTS.address_space
    if in_force.processes is None or in_force.memory is None:
        pytest.skip("no cgroup of our own can be made here")
    assert (in_force.processes, in_force.memory) == (64, 2 << 30)


def test_a_fork_bomb_at_import_makes_every_case_an_error(cache, release_tree, tmp_path):
    cli, receipt = _audit(cache, release_tree, tmp_path, "fork", "import")
    _limited(receipt)
    assert cli.returncode == 1, cli.stderr[-2000:]
    # A case the tree lacks the API for is not applicable, asked in the harness before any fork (it names
    # the API); every case that runs is forked, and each is an error: none observed, none passed.
    ran = [c for c in receipt.cases if c.outcome != "not_applicable"]
    assert all(c.missing for c in receipt.cases if c.outcome == "not_applicable")
    assert ran and all(c.outcome == "error" for c in ran), [c for c in ran if c.outcome != "error"]
    assert {c.id for c in ran} >= {*forks.rejected_at("prefill"), *forks.rejected_at("decode")}  # the fix's bug cases all ran
    assert {c.error.type for c in ran} <= {"Limit", "RuntimeError", "BlockingIOError"}, ran


@pytest.mark.parametrize("attack, error", [
    ("balloon", ("Signal", "killed by SIGKILL (from outside: the run's memory limit")),  # the kernel's, at 2 GiB
    ("write", ("OSError", "File too large")),  # refused at 16 MiB, in the tree's own frame
])
def test_a_case_that_hits_a_limit_is_that_cases_error(cache, release_tree, tmp_path, attack, error):
    cli, receipt = _audit(cache, release_tree, tmp_path, attack, "case")
    _limited(receipt)
    assert cli.returncode == 1, cli.stderr[-2000:]
    cases = {c.id: c for c in receipt.cases}
    hit = cases.pop("prefill-door-rejected")
    assert hit.outcome == "error" and hit.error.type == error[0] and error[1] in hit.error.message, hit.error
    assert all(c.outcome != "error" for c in cases.values()), [c for c in cases.values() if c.outcome == "error"]
