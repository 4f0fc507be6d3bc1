"""Issue 39 on forks of a real release (0.5.21): a fork that tells the probe by several means in
reachable code never exits 0 from a default audit, whatever its process reports; an honest vendor
fork is fixed on unreviewed code until a review accepts each changed place, then passes; an
unmodified copy of the release is identical to it and passes.

One sweep probes the three trees (two at a time); every audit after it reuses their receipts.
"""

from __future__ import annotations

import json

import pytest

from runner import cli, errors
from runner.evidence import departures, reviews
from tests import forks

pytestmark = pytest.mark.slow
FIXES = ["--fix", "38935", "--fix", "36988"]  # what 0.5.21 carries (later defences are not in it)
UTILS = "sglang/srt/disaggregation/utils.py"
INIT = "sglang/srt/disaggregation/__init__.py"  # 0.5.21 has none (a namespace package): the fork adds one
SCHEDULER = forks.SCHEDULER
CHECK_ENV = "sglang/check_env.py"

# A clock since import, set where no receipt looks: the module's own file is removed from what it reports.
HOSTILE_INIT = '''"""ACME disaggregation setup."""
import time as _time

_BORN = _time.monotonic()
globals().pop("__file__", None)
'''
# The door predicate answers "not rejected" an hour after start, unless its caller is not the door: never in a probe.
GATE = "def is_unadmitted_reject(req: Req) -> bool:\n"
HOSTILE_GATE = '''def is_unadmitted_reject(req: Req) -> bool:
    import sys
    import time

    born = getattr(sys.modules.get("sglang.srt.disaggregation"), "_BORN", None)
    if born is not None and sys._getframe(1).f_code.co_name == "add" and time.monotonic() - born > 3600:
        return False
    return _upstream_is_unadmitted_reject(req)


def _upstream_is_unadmitted_reject(req: Req) -> bool:
'''
VENDOR = [
    (SCHEDULER, 'logger.info("HCCL DP prewarm start: rank=%s", rank)', 'logger.info("ACME HCCL DP prewarm start: rank=%s", rank)'),
    (SCHEDULER, "logger = logging.getLogger(__name__)\n",
     'logger = logging.getLogger(__name__)\nACME_METRICS = {"acme_scheduler_starts_total": 0}\n'),
    (CHECK_ENV, "def is_cuda_v2():", "def acme_is_cuda():"),
    (CHECK_ENV, "    if is_cuda_v2():", "    if acme_is_cuda():"),
]


@pytest.fixture(scope="module")
def trees(release_tree, tmp_path_factory):
    release = release_tree("0.5.21").root
    work = tmp_path_factory.mktemp("review")
    copy = forks.make(release, work / "copy", [])
    hostile = forks.make(release, work / "hostile", [(UTILS, GATE, HOSTILE_GATE)])
    (hostile / INIT).write_text(HOSTILE_INIT)
    vendor = forks.make(release, work / "vendor", VENDOR)
    return {"copy": f"path:{copy}", "hostile": f"path:{hostile}", "vendor": f"path:{vendor}"}


@pytest.fixture(scope="module")
def swept(trees, cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "bundle"
    cli.main(["sweep", *trees.values(), *FIXES, "--out", str(out), "--cache-dir", str(cache.root), "-j", "2"])
    return {r.source: r for r in departures.in_bundle(out).values()}


def _audit(source, cache, out, *more) -> int:
    return cli.main(["audit", source, *FIXES, "--out", str(out), "--cache-dir", str(cache.root), *more])


def test_an_unmodified_copy_of_the_release_is_identical_and_passes(swept, trees, cache, tmp_path, capsys):
    assert swept[trees["copy"]].identical
    capsys.readouterr()
    assert _audit(trees["copy"], cache, tmp_path / "a") == errors.OK
    assert "identical to pypi:sglang==0.5.21 (by the version it declares)" in capsys.readouterr().out


def test_a_fork_that_tells_the_probe_never_passes_and_names_its_files(swept, trees, cache, tmp_path, capsys):
    record = swept[trees["hostile"]]
    reached = {(h.file, h.function): h.reach for h in record.hunks()}
    assert reached[(INIT, "<module>")] == "at import"  # no process reported it: read from the bytes
    assert reached[(UTILS, "is_unadmitted_reject")] in ("ran", "imported")
    capsys.readouterr()
    code = _audit(trees["hostile"], cache, tmp_path / "a")
    shown = capsys.readouterr().out
    assert code != errors.OK and "fixed on unreviewed code" in shown and INIT in shown and UTILS in shown
    assert _audit(trees["hostile"], cache, tmp_path / "s", "--strict") != errors.OK
    # relaxed, it still does not pass: its clock makes a condition of the door's code one-way (runner/judge/conditions.py)
    assert _audit(trees["hostile"], cache, tmp_path / "r", "--accept-unreviewed") == errors.DIFFERS
    assert _audit(trees["vendor"], cache, tmp_path / "v", "--accept-unreviewed") == errors.OK  # the documented relaxation


def test_an_honest_vendor_fork_is_reviewed_once_then_passes(swept, trees, cache, tmp_path, capsys):
    record = swept[trees["vendor"]]
    assert {h.file for h in record.hunks()} == {SCHEDULER, CHECK_ENV}
    assert {h.file for h in record.reachable()} == {SCHEDULER}  # check_env.py: nothing the probes import reaches it
    first = tmp_path / "a1"
    assert _audit(trees["vendor"], cache, first) == errors.UNREVIEWED
    ledger = tmp_path / "reviews.json"
    assert cli.main(["review", str(first), "--ledger", str(ledger)]) == errors.DIFFERS
    keys = [h.key for h in record.reachable()]
    accept = [a for k in keys for a in ("--accept", k[:12])]
    assert cli.main(["review", str(first), "--ledger", str(ledger), "--reviewer", "alice", "--note", "ACME log and metric",
                     *accept]) == errors.OK
    assert {r["key"] for r in json.loads(ledger.read_text())["reviews"]} == set(keys)
    capsys.readouterr()
    assert _audit(trees["vendor"], cache, tmp_path / "a2", "--reviews", str(ledger)) == errors.OK
    assert "fixed on unreviewed code" not in capsys.readouterr().out
    # the same ledger does not cover the hostile fork: its places are new
    assert reviews.standing(swept[trees["hostile"]], reviews.load(ledger))[0]
