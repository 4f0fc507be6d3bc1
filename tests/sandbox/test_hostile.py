"""A hostile fork of a real release (tests/sandbox/hostile.py), audited through the real CLI by a
diffprobe process that holds a secret in its environment: one SGLang import runs every attack at
import and inside three cases. Nothing reaches the host, nothing outlives the run, nothing changes
what a later run of another tree observes; the receipt's materials and classifications are the
host's own; outside the hostile cases the verdict is the genuine release's; the terminal gets
no escape sequence."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from runner.app import pipeline
from runner.evidence import materials
from runner.evidence.receipts import Receipt
from runner.sandbox import execute
from runner.store import envs, seal
from tests.helpers import ROOT
from tests.sandbox import hostile, payloads
from tests.sandbox.host import SECRET_NAME, accepted, exposed, planted, processes_with

pytestmark = [pytest.mark.slow, pytest.mark.needs("bubblewrap")]
HOSTILE_CASES = {"prefill-door-rejected", "decode-door-rejected", "prefill-door-valid"}


@pytest.fixture(scope="module")
def audited(cache, release_tree, interp, tmp_path_factory):
    """The hostile fork audited once; the genuine 0.5.21's environment sealed before, for after."""
    genuine = release_tree("0.5.21")
    genuine_env = envs.env(genuine, cache, interp)
    work = tmp_path_factory.mktemp("hostile")
    with exposed(work) as host:
        config = {**host["config"], "discover_parents": True,
                  "envs": [*host["config"]["envs"], str(genuine_env.root)], "site_packages": [
                      *host["config"]["site_packages"], str(genuine_env.layer)]}
        fork = hostile.make(genuine.root, work / f"fork-{uuid.uuid4().hex[:8]}", config)
        before = {p: seal.seal(p, exclude=envs.STAMPS) for p in (genuine_env.root, genuine.root)}
        out = work / "bundle"
        env = {**os.environ, SECRET_NAME: host["secret"]}  # /proc/<diffprobe>/environ holds it
        cli = subprocess.run([sys.executable, "-m", "runner.cli", "audit", f"path:{fork}", "--out", str(out),
                              "--cache-dir", str(cache.root), "--no-reuse"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
        facts = {"accepted": accepted(host["listeners"]), "planted": planted(host["decoys"]),
                 "alive": processes_with(host["marker"]), "secret": host["secret"]}
    receipts = [Receipt.model_validate_json(p.read_bytes()) for p in sorted((out / "receipts").glob("*.json"))]
    return {"cli": cli, "receipts": receipts, "facts": facts, "before": before, "genuine": genuine,
            "genuine_env": genuine_env, "fork": fork}


def test_nothing_of_a_hostile_fork_reaches_the_host(audited):
    facts = audited["facts"]
    assert facts["accepted"] == 0  # no socket of the host: loopback (even via /proc/<pid>/ns/net), Unix, abstract
    assert facts["planted"] == []  # no file in HOME, /tmp, another run, a cache, a virtualenv
    assert facts["alive"] == []  # no daemon outlived the run (started at import and in a case)
    assert facts["secret"] not in audited["cli"].stdout + audited["cli"].stderr
    assert {p: seal.seal(p, exclude=envs.STAMPS) for p in audited["before"]} == audited["before"]  # another tree, its env


def test_the_terminal_gets_no_escape_sequence(audited):
    printed = audited["cli"].stdout + audited["cli"].stderr
    assert "\x1b[2J" not in printed and "\x07" not in printed, printed[-2000:]


def test_the_receipt_is_the_hosts_own(audited):
    """Materials hashed by the host from the names the run gave, classifications judged by the host (not
    the forged 'bug': an error, never a verdict), the sandbox recorded; outside its cases, the genuine verdict."""
    assert audited["receipts"], audited["cli"].stderr[-2000:]
    receipt = next(r for r in audited["receipts"] if r.probe.id == "admission")
    assert receipt.materials == materials.rederive(audited["fork"], receipt.materials)
    assert "sglang/srt/disaggregation/prefill.py" in receipt.materials
    isolation = receipt.environment.isolation
    assert isolation.sandbox == "bubblewrap" and {"user", "mount", "pid", "net", "ipc", "uts"} <= set(isolation.namespaces)
    cases = {c.id: c for c in receipt.cases}
    assert cases["prefill-door-rejected"].outcome == "error" and cases["prefill-door-rejected"].error.type == "MalformedResult"
    assert cases["decode-door-rejected"].outcome == "error" and cases["decode-door-rejected"].error.message == hostile.ESCAPES
    assert cases["prefill-door-valid"].outcome == "error" and cases["prefill-door-valid"].error.type == "Misjudged"
    run = execute.run_probes(audited["genuine_env"], ["admission"])["admission"]
    genuine = pipeline.receipt_of(pipeline.probe_ref("admission", 38935), audited["genuine"], audited["genuine_env"], run)
    for case in genuine.cases:
        if case.id not in HOSTILE_CASES:
            assert (cases[case.id].outcome, cases[case.id].classification) == (case.outcome, case.classification), case.id


def test_a_later_run_of_another_tree_uses_its_environment_unchanged(audited, cache, interp):
    again = envs.env(audited["genuine"], cache, interp)  # sealed: anything planted would rebuild it
    assert again.root == audited["genuine_env"].root and again.stamp.seal == audited["genuine_env"].stamp.seal
    assert not list(again.root.rglob(f"*{payloads.CANARY}*"))
