"""Shared fixtures: one diffprobe cache per test session, real SGLang releases, a git fixture repo;
system tools some tests need (tests/tools.py).

Set DIFFPROBE_TEST_CACHE to keep the cache (downloads, layer, environments) between sessions.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner import ui
from runner.app import pipeline
from runner.commands import options
from runner.errors import BadInput, DiffprobeError
from runner.evidence import catalog, pins
from runner.sandbox import bwrap, execute
from runner.store import envs, sources, specs
from runner.app.notices import PRINTED
from runner.store.cache import Store
from tests import costs, tiers, tools

RELEASES = ["0.5.19", "0.5.20", "0.5.21"]
REAL = {"release_tree", "upstream_repo"}  # fixtures that download real SGLang releases
# Every release the slow tests use. In a run of many slow tests (the whole suite: CI) they are
# downloaded by a process of their own from the start, and the shared layer built, while the first
# tests run (tests/prefetch.py): downloads are I/O, and every later test finds its release ready.
# Add a release here when a new test needs one (better: use one already listed).
SUITE_RELEASES = ["0.5.21", "0.5.20", "0.5.19", "0.5.22", "0.5.23", "0.4.5", "0.4.6", "0.4.7", "0.4.9", "0.4.10", "0.5.5",
                  "0.5.10", "0.5.13", "0.5.14", "0.5.18"]
PREFETCH_FROM = 20  # slow tests selected
WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # this session is one of pytest-xdist's workers (gw0, gw1, ...)


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto`` (pyproject's addopts): one test worker per usable core, at most four (each may run
    two probe processes of ~1.5 GiB at once; beyond four the longest modules bound the run anyway).
    Much of a slow test is waiting (downloads, a case's timeout, one probe process), so workers keep
    the cores busy that one test at a time leaves idle."""
    return min(4, len(os.sched_getaffinity(0)))


def pytest_addoption(parser):
    parser.addoption("--times", metavar="PATH", help="write each test's wall and CPU seconds to PATH (JSON lines)")
    parser.addoption("--exhaustive-slice", metavar="K/N", default=os.environ.get("DIFFPROBE_EXHAUSTIVE_SLICE", "all"),
                     help="run only slice K of N of the exhaustive corpus ('all', 'commit' or K/N; tests/tiers.py); "
                          "default: $DIFFPROBE_EXHAUSTIVE_SLICE or all")


def pytest_configure(config):
    try:
        SLICE[0] = tiers.parse_slice(config.getoption("exhaustive_slice"))
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None


ASIDE = [0.0]  # CPU of the prefetch process (tests/prefetch.py): reaped during some test, but not its cost


def _cpu() -> float:
    """CPU seconds of this process and of its children that ended (probe runs, builds, sandboxes),
    the prefetch process's left out."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system - ASIDE[0]


TIMES: dict[str, tuple[float, float]] = {}  # test id -> (wall, CPU) seconds, set-up and tear-down included
TIER: dict[str, str] = {}  # test id -> its tier (tests/tiers.py), for the summary
SLICE: list = [None]  # the exhaustive slice this run is limited to: (K, N), or None for all of it
UNCONFINED: set[str] = set()  # tests that ran fixture trees unconfined, from every worker's reports
SESSION: dict[str, float] = {}
STARTED: dict[str, tuple[float, float]] = {}


def pytest_sessionstart(session):
    SESSION.update(wall=time.monotonic(), cpu=_cpu(), load=os.getloadavg()[0])


RUNNING = [""]  # the test running now (its set-up included): what ran a tree unconfined is counted by it


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    STARTED[item.nodeid] = (time.monotonic(), _cpu())
    RUNNING[0] = item.nodeid
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test's cost (and whether it ran a tree unconfined) rides on its tear-down report, which
    pytest-xdist carries from the worker that ran it to the process that prints the summary."""
    if call.when == "teardown":
        wall, cpu = STARTED.pop(item.nodeid)
        item.user_properties.append(("diffprobe-cost", (time.monotonic() - wall, _cpu() - cpu, item.nodeid in tools.UNCONFINED,
                                                         TIER.get(item.nodeid, "fast"))))
    yield


def pytest_runtest_logreport(report):
    for key, value in report.user_properties if report.when == "teardown" else ():
        if key == "diffprobe-cost":
            TIMES[report.nodeid] = (value[0], value[1])
            TIER[report.nodeid] = value[3]
            if value[2]:
                UNCONFINED.add(report.nodeid)


def pytest_collection_modifyitems(config, items):
    """A test that asks for a real release is slow wherever it is declared (files marked by hand
    mark the tests that build environments in other ways); a slow test is then ``integration`` or
    ``exhaustive`` (tests/tiers.py), and with a slice given, the exhaustive modules outside it are
    deselected. A test marked ``needs(tool)`` is skipped, with one line naming the tool and its
    install, where that tool cannot run. Modules then run in the order tests/costs.py gives (quick
    ones first, then the costliest)."""
    for item in items:
        if REAL & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        TIER[item.nodeid] = tiers.tier(item.nodeid, item.get_closest_marker("slow") is not None)
        if TIER[item.nodeid] != "fast":
            item.add_marker(getattr(pytest.mark, TIER[item.nodeid]))
        reasons = [tools.missing(name) for mark in item.iter_markers("needs") for name in mark.args]
        if any(reasons):
            item.add_marker(pytest.mark.skip(reason=next(r for r in reasons if r)))
    if SLICE[0] is not None:
        k, n = SLICE[0]
        kept = set(tiers.cut({tiers.module_of(i.nodeid) for i in items if TIER[i.nodeid] == "exhaustive"}, n)[k - 1])
        out = [i for i in items if TIER[i.nodeid] == "exhaustive" and tiers.module_of(i.nodeid) not in kept]
        if out:
            config.hook.pytest_deselected(items=out)
            items[:] = [i for i in items if i not in set(out)]
    costs.order(items, lambda item: item.get_closest_marker("slow") is not None)


@pytest.fixture(scope="session", autouse=True)
def unconfined_where_bubblewrap_is_missing():
    """Where bubblewrap cannot run, a test runs its trees (the project's own fixtures and releases,
    trusted) unconfined instead of being refused, and the run's summary counts it; session-wide, so
    that module- and session-scoped fixtures probing trees for several tests do so too. Tests that
    simulate the machine (replace ``bwrap.version``) get the real rule, and tests that need
    bubblewrap are skipped there. With bubblewrap usable this does nothing: every tree runs sandboxed."""
    if not tools.missing("bubblewrap"):
        yield
        return
    decide, probe_machine = execute.sandboxed_for, bwrap.version

    def trusted(identity, **kw):
        try:
            return decide(identity, **kw)
        except BadInput:
            if bwrap.version is not probe_machine:
                raise
            tools.UNCONFINED.add(RUNNING[0])
            return False

    patch = pytest.MonkeyPatch()
    patch.setattr(execute, "sandboxed_for", trusted)
    yield
    patch.undo()


def pytest_terminal_summary(terminalreporter, config):
    """The ten tests that took most CPU and the run's CPU and load (on a loaded machine the wall
    clock says little); each tier's tests, CPU and summed test wall, and the exhaustive slice that ran;
    how many tests were skipped for which missing tool, and how many ran fixture trees unconfined."""
    if TIMES:
        terminalreporter.write_sep("=", "ten most CPU-hungry tests (seconds of CPU: pytest and its children; wall)")
        for nodeid, (wall, cpu) in sorted(TIMES.items(), key=lambda kv: -kv[1][1])[:10]:
            terminalreporter.write_line(f"{cpu:8.1f} CPU {wall:8.1f} wall  {nodeid}")
        terminalreporter.write_line(
            f"this run: {_cpu() + ASIDE[0] - SESSION['cpu']:.0f} s CPU in {time.monotonic() - SESSION['wall']:.0f} s wall; "
            f"load average {SESSION['load']:.1f} at its start, {os.getloadavg()[0]:.1f} at its end ({os.cpu_count()} CPUs)")
        for name in ("fast", "integration", "exhaustive"):
            ran = [TIMES[t] for t in TIMES if TIER.get(t) == name]
            if ran:
                terminalreporter.write_line(f"tier {name}: {len(ran)} tests, {sum(c for _, c in ran):.0f} s CPU, "
                                            f"{sum(w for w, _ in ran):.0f} s of test wall (summed over workers)")
        exhaustive = sorted({tiers.module_of(t) for t in TIMES if TIER.get(t) == "exhaustive"})
        if exhaustive:
            which = "all of it" if SLICE[0] is None else "slice {}/{}".format(*SLICE[0])
            terminalreporter.write_line(f"exhaustive corpus, {which}: {len(exhaustive)} modules ({', '.join(exhaustive)})")
    path = config.getoption("times")
    if path:
        with open(path, "w") as out:
            for nodeid, (wall, cpu) in TIMES.items():
                out.write(json.dumps({"test": nodeid, "wall": round(wall, 2), "cpu": round(cpu, 2)}) + "\n")
    counts: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        tool = tools.tool_of(reason.removeprefix("Skipped: "))
        if tool:
            counts[tool] = counts.get(tool, 0) + 1
    if counts:
        terminalreporter.write_line("skipped for a missing system tool: " + ", ".join(
            f"{n} need {tool} ({tools.TOOLS[tool].install})" for tool, n in sorted(counts.items())), yellow=True)
    if UNCONFINED:
        terminalreporter.write_line(f"bubblewrap cannot run here: {len(UNCONFINED)} test(s) ran the project's trusted fixture "
                                    "trees unconfined (with bubblewrap they run sandboxed)", yellow=True)


@pytest.fixture(scope="session")
def cache(tmp_path_factory) -> Store:
    """One cache for the whole run. Under pytest-xdist every worker's session shares it (the store's
    build locks, ready markers and atomic writes make concurrent builders safe, as for ``-j``), so
    each release's tree, environment and receipts are built once for all workers, not once each."""
    root = os.environ.get("DIFFPROBE_TEST_CACHE")
    if not root and WORKER:
        root = _run_dir(tmp_path_factory) / "cache"
        root.mkdir(exist_ok=True)
    return Store.at(root or tmp_path_factory.mktemp("cache"), notices=PRINTED)  # its notices shown, as a command's


def _run_dir(tmp_path_factory) -> Path:
    """The directory every pytest-xdist worker of this run shares (each worker's own is inside it)."""
    return tmp_path_factory.getbasetemp().parent


@pytest.fixture(scope="session")
def interp():
    return envs.interpreter(None)


class Prefetch:
    """tests/prefetch.py running beside the tests; what a test needs from it, it waits for. Under
    pytest-xdist the first worker to create ``claim`` (one file for the run) starts it; the others
    wait on the same ready markers while that process lives."""

    def __init__(self, cache: Store, interp, log: Path, releases: list[str], claim: Path | None = None) -> None:
        self.cache, self.interp, self.proc, self.releases = cache, interp, None, releases
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL) if claim else None
        except FileExistsError:
            while not claim.stat().st_size:  # the owner is writing its process id
                time.sleep(0.1)
            self.pid = int(claim.read_text())
            return
        self.log = open(log, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.prefetch", str(cache.root), *releases],
                                     cwd=Path(__file__).resolve().parent.parent, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid
        if fd is not None:
            os.write(fd, str(self.pid).encode())
            os.close(fd)

    def running(self) -> bool:
        if self.proc is not None:
            before = _cpu()
            if self.proc.poll() is None:
                return True
            ASIDE[0] += _cpu() - before  # reaped just now: its CPU joined this process's children's
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return Path(f"/proc/{self.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"  # ended, not yet reaped

    def wait_for(self, ready: Path) -> None:
        while not ready.exists() and self.running():
            time.sleep(0.5)

    def layer(self) -> None:
        self.wait_for(self.cache.layer(envs.layer_key(self.interp)) / "layer.json")

    def release(self, version: str) -> None:
        if version in self.releases:
            self.wait_for(self.cache.index("pypi", version))

    def close(self) -> None:
        if self.proc is not None:
            while self.running():
                time.sleep(0.5)
            self.log.close()


@pytest.fixture(scope="session", autouse=True)
def prefetch(request, cache, interp, tmp_path_factory) -> Prefetch | None:
    """In a session of at least ``PREFETCH_FROM`` slow tests, the layer and the releases are fetched by
    tests/prefetch.py from the start (its log: the cache's logs/prefetch.log); else None: every release
    of ``SUITE_RELEASES`` where exhaustive tests run, the pinned ones (``tiers.INTEGRATION_RELEASES``)
    for the README's command. Under pytest-xdist one process serves all workers."""
    items = request.session.items
    if sum(1 for item in items if item.get_closest_marker("slow")) < PREFETCH_FROM:
        return None
    releases = SUITE_RELEASES if any(i.get_closest_marker("exhaustive") for i in items) else tiers.INTEGRATION_RELEASES
    claim = _run_dir(tmp_path_factory) / "prefetch.pid" if WORKER else None
    ahead = Prefetch(cache, interp, cache.log("prefetch.log"), releases, claim)
    request.addfinalizer(ahead.close)
    return ahead


@pytest.fixture(autouse=True)
def layer_ready(request, prefetch) -> None:
    """A slow test starts once the prefetched layer is there: none waits on the layer's build lock."""
    if prefetch and request.node.get_closest_marker("slow"):
        prefetch.layer()


@pytest.fixture(scope="session")
def release_tree(cache, prefetch):
    """Resolve (download once per session) a real sglang release."""
    trees: dict[str, sources.Tree] = {}

    def get(version: str) -> sources.Tree:
        if version not in trees:
            if prefetch:
                prefetch.release(version)
            trees[version] = sources.resolve(specs.PypiSpec(version=version), cache)
        return trees[version]

    return get


def probe_options(cache: Store, jobs: int = 2, **probe) -> pipeline.Options:
    """Options as a command builds them from the project's pins (so receipts observed here are the
    ones a later command in the session reuses), probing ``jobs`` trees at once."""
    p = pins.load()
    return pipeline.Options(cache=cache, probe=options.ProbeOptions(jobs=jobs, **probe), package_dir=p.package_dir,
                            pinned_sha256=p.pinned_sha256, pinned_commits=p.pinned_commits)


@pytest.fixture(scope="session")
def warm(cache, release_tree):
    """``warm(sources)``: every probe observed on each source, all in one ``probe`` call running two
    trees at once, into the session's receipts store. A module about to audit several trees one by
    one calls it first: each audit then reuses its receipts (the same bytes, source and probes), and
    the probe runs use both cores instead of one. Only an optimisation: a failure here is left to
    the command that meets it again, in its own words."""
    done: set[str] = set()

    def get(texts: list[str]) -> None:
        todo = [t for t in texts if t not in done]
        for text in todo:
            if text.startswith("pypi:sglang=="):
                release_tree(text.removeprefix("pypi:sglang=="))  # from the prefetch, when it runs
        done.update(todo)
        if todo:
            try:
                pipeline.probe_sources({t: list(catalog.PROBES) for t in todo}, probe_options(cache))
            except DiffprobeError as e:
                ui.warn(f"warming {', '.join(todo)} failed ({e}); each command probes its own")

    return get


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="session")
def upstream_repo(tmp_path_factory, release_tree) -> dict:
    """A repository laid out like upstream (package at python/sglang/) whose successive commits are
    the source of real releases (compiled modules left out, as in a real checkout). Served so that
    partial clones work: uploadpack.allowFilter and fetching blobs by id are allowed."""
    repo = tmp_path_factory.mktemp("upstream")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "fixture@diffprobe.invalid")
    git(repo, "config", "user.name", "fixture")
    git(repo, "config", "uploadpack.allowFilter", "true")
    git(repo, "config", "uploadpack.allowAnySHA1InWant", "true")
    (repo / "README.md").write_text("fixture\n")
    commits = {}
    for version in RELEASES:
        target = repo / "python" / "sglang"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(release_tree(version).root / "sglang", target, ignore=shutil.ignore_patterns("*.so"))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"sglang {version}")
        git(repo, "tag", f"v{version}")
        commits[version] = git(repo, "rev-parse", "HEAD")
    return {"path": repo, "commits": commits}
