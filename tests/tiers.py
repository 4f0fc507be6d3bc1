"""The test tiers, declared in one place: which tests the README's test command runs, and how the
exhaustive corpus is cut into slices that CI runs in rotation.

- **fast**: every test not marked ``slow`` (no real release, environment or SGLang import).
- **integration**: the slow tests named in ``INTEGRATION``: every probe family end to end on the
  pinned releases (sandboxed where bubblewrap runs), forks of a real release, the CLI's bad-input and
  exit-code contract, a git source, a backport, a bundle's verify/compare/report (HTML and headless
  browser), audits of forks and their departures, intake of hostile layouts, attestations. Fast + integration is the README's test command
  (pyproject's ``addopts`` deselects ``exhaustive``), budgeted at 15 minutes on two cores from a cold cache.
- **exhaustive**: every other slow test (mutant sets, hostile corpora, eras, the release line, repeats,
  shard merges, sweeps of many releases). ``pytest -m exhaustive`` runs all of it; with
  ``--exhaustive-slice K/N`` (or ``DIFFPROBE_EXHAUSTIVE_SLICE``) only slice K of N. ``.ci/run`` runs one
  slice of four after the README's command, chosen from the commit (``commit``: the count of commits
  up to it, modulo four), so the slices come round in turn as commits land; ``all`` runs every slice.

A new slow test is exhaustive until it is named here: the README's command grows only by decision.
Slices are whole modules (a module's fixtures are built once), dealt to the slice with the least cost
so far, costliest module first, by ``costs.json``; the cut depends only on that table and the modules'
names, so it is the same on every machine.

    python -m tests.tiers commit      # the slice CI runs for the checked-out commit, e.g. "3/4"
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COSTS = Path(__file__).with_name("costs.json")
SLICES = 4  # CI's rotation: the exhaustive corpus is cut into this many slices

# The slow tests the README's command runs: a module (every test in it) or one test's node id.
INTEGRATION = (
    "tests/commands/test_probes_real.py",  # run --via releases: every probe family on every pinned release; forks
    "tests/commands/test_bad_input.py",  # every bad input: one line, its exit code
    "tests/commands/test_run_commits.py",  # a git source: commits of a repository laid out like upstream
    "tests/store/test_intake_links.py",  # upstream's own layout (its in-package link) committed and taken in
    "tests/commands/test_images_real.py::test_an_image_pulled_by_digest_audits_as_its_release",  # a container image by digest
    "tests/commands/test_backport.py::test_fix_applied_onto_an_older_tree_behaves_like_head",  # one backport
    "tests/commands/test_backport_old.py::test_offline_a_patch_and_a_head_are_all_a_backport_needs",  # the README's recipe offline
    "tests/commands/test_departures_real.py",  # audits of vendor-style forks of a release, their departures
    "tests/commands/test_review_real.py",  # a probe-aware fork never passes; an honest one passes once reviewed
    "tests/commands/test_baseline_real.py",  # the baseline of git forks of real releases: by ancestry, a forged tag refused
    "tests/commands/test_drift_real.py",  # drift 0.5.22 -> 0.5.23 lists the defences 0.5.23 added (issue 44 item 3)
    "tests/views/test_report.py",  # report terminal/HTML of a real run, chromium, tampered bundles
    "tests/views/test_timeline.py",
    "tests/views/test_report_width.py",  # the HTML report fits a 1280 px screen (headless chromium)
    "tests/test_evidence.py",  # the committed bundles verify
    "tests/store/test_sources.py",  # pypi and git sources, pins, the same bytes from two sources
    "tests/store/test_env_seal.py",
    "tests/store/test_intake_hostile.py",  # hostile layouts around a real release
    "tests/store/test_intake_attacks.py",
    "tests/store/test_cpu_lock.py",
    "tests/evidence/test_attest.py",  # attestations of a real run, verified independently
    "tests/evidence/test_attest_forgeries.py",
    "tests/probes/test_space_follows_code.py",
    "tests/probes/test_cases_at_once_real.py",  # a release's cases run at once observe what they observe one at a time
    "tests/commands/test_rejudge.py",  # a judge-only edit re-judges stored observations; a changed probe is probed again
)
# The releases the integration tier probes (the pinned ones): what the prefetch fetches for it.
INTEGRATION_RELEASES = ["0.5.21", "0.5.20", "0.5.19", "0.5.22", "0.5.23"]


def module_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


def tier(nodeid: str, slow: bool) -> str:
    """``fast``, ``integration`` or ``exhaustive``."""
    if not slow:
        return "fast"
    named = any(nodeid == n or nodeid.startswith(n + "::") or nodeid.startswith(n + "[") for n in INTEGRATION)
    return "integration" if named else "exhaustive"


def _costs() -> dict[str, float]:
    return json.loads(COSTS.read_text()) if COSTS.exists() else {}


def cut(modules: set[str], n: int = SLICES, costs: dict[str, float] | None = None) -> list[list[str]]:
    """``modules`` dealt into ``n`` slices of near-equal cost (longest processing time first; a module
    not in the table costs the table's mean; ties by name): a partition, the same wherever it is run."""
    costs = _costs() if costs is None else costs
    mean = sum(costs.values()) / len(costs) if costs else 1.0
    slices: list[list[str]] = [[] for _ in range(n)]
    loads = [0.0] * n
    for module in sorted(modules, key=lambda m: (-costs.get(m, mean), m)):
        k = min(range(n), key=lambda i: (loads[i], i))
        slices[k].append(module)
        loads[k] += costs.get(module, mean)
    return slices


def parse_slice(text: str) -> tuple[int, int] | None:
    """``all`` -> None; ``K/N`` (1 <= K <= N) -> (K, N); ``commit`` -> the slice of the checked-out commit."""
    if text == "all":
        return None
    if text == "commit":
        return commit_slice()
    k, sep, n = text.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise ValueError(f"exhaustive slice {text!r}: expected 'all', 'commit' or K/N with 1 <= K <= N (e.g. 2/4)")
    return int(k), int(n)


def commit_slice(n: int = SLICES) -> tuple[int, int]:
    """Slice ``(count of commits up to HEAD) mod n``, plus one: consecutive commits take the slices in
    turn. Outside a git checkout (no history to count), slice 1."""
    try:
        count = int(subprocess.run(["git", "-C", str(ROOT), "rev-list", "--count", "HEAD"], capture_output=True,
                                   text=True, check=True, timeout=30, stdin=subprocess.DEVNULL).stdout.strip())
    except (OSError, subprocess.SubprocessError, ValueError):
        count = 0
    return count % n + 1, n


def main(argv: list[str]) -> None:
    if argv not in ([], ["commit"]):
        print("usage: python -m tests.tiers [commit]", file=sys.stderr)
        sys.exit(2)
    k, n = commit_slice()
    print(f"{k}/{n}")


if __name__ == "__main__":
    main(sys.argv[1:])
