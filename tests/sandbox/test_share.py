"""How much of the machine probing takes (runner/sandbox/share.py): trees at once x cases at once
in each stays within the usable cores, -j is obeyed as far as memory allows (and says so), and
every harness with its case processes fits the memory available and one run's memory limit."""

from __future__ import annotations

import builtins
import io
import os

import pytest

from runner.sandbox import share

GiB = 1 << 30


@pytest.fixture
def machine(monkeypatch):
    """``machine(cores, gib)``: this process may use ``cores`` cores and /proc/meminfo says ``gib`` is available."""
    real_open = builtins.open

    def set_to(cores: int, gib: float) -> None:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
        monkeypatch.setattr(share, "_quota", lambda: None)
        text = f"MemTotal: 99999999 kB\nMemAvailable: {int(gib * (1 << 20))} kB\n"
        monkeypatch.setattr(builtins, "open", lambda f, *a, **k: io.StringIO(text) if f == "/proc/meminfo" else real_open(f, *a, **k))

    return set_to


def test_without_j_one_tree_per_usable_core_as_memory_allows_never_more_than_there_are_trees(machine):
    machine(4, 24)
    assert share.of(9).trees == 4
    assert share.of(3).trees == 3
    machine(4, 3.2)  # room for two 1.5 GiB harnesses
    assert share.of(9).trees == 2
    machine(4, 0.5)
    assert share.of(9).trees == 1


def test_j_is_obeyed_up_to_what_memory_allows_and_says_so(machine):
    machine(2, 24)
    assert share.of(9, 3) == share.Share(3, 1)
    machine(2, 3.2)
    assert share.of(9, 5) == share.Share(2, 1, "-j 5 needs about 7 GiB; using 2 worker(s)")


@pytest.mark.parametrize("cores", [1, 2, 3, 4, 8])
def test_trees_at_once_times_cases_at_once_never_exceeds_the_cores(machine, cores):
    """The rule in one line: a tree probed alone gets every core, two trees on two cores one each;
    only -j asking for more trees than cores goes past them (one case at a time in each)."""
    machine(cores, 64)
    for trees in range(1, 10):
        for requested in (None, *range(1, cores + 1)):
            portion = share.of(trees, requested)
            assert portion.trees * portion.cases <= cores and portion.cases >= 1
            assert portion.trees * portion.cases > cores - portion.trees  # no core left idle a tree could use
    assert share.of(1) == share.Share(1, cores)


def test_case_processes_fit_the_memory_left_to_each_tree_and_the_runs_memory_limit(machine, monkeypatch):
    machine(8, 1.5 + 2 * 0.25 + 0.1)  # one harness and two case processes
    assert share.of(1) == share.Share(1, 2)
    machine(8, 64)
    monkeypatch.setenv("DIFFPROBE_LIMITS", "memory=2G")  # one run's cgroup holds a harness and its children
    assert share.of(1).cases == 2
    monkeypatch.setenv("DIFFPROBE_LIMITS", "memory=1G")
    assert share.of(1).cases == 1


@pytest.mark.parametrize("membership, files, quota", [
    ("0::/job\n", {"job/cpu.max": "150000 100000\n"}, 1.5),      # cgroup v2
    ("0::/job\n", {"job/cpu.max": "max 100000\n"}, None),
    ("4:cpu,cpuacct:/job\n", {"cpu,cpuacct/job/cpu.cfs_quota_us": "100000\n", "cpu,cpuacct/job/cpu.cfs_period_us": "100000\n"}, 1.0),
    ("4:cpu,cpuacct:/job\n", {"cpu,cpuacct/job/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/job/cpu.cfs_period_us": "100000\n"}, None),
    ("4:memory:/job\n", {}, None),
], ids=["v2", "v2-max", "v1", "v1-unlimited", "no-cpu-controller"])
def test_a_cgroup_cpu_quota_bounds_the_usable_cores(tmp_path, membership, files, quota, monkeypatch):
    (tmp_path / "cgroup").write_text(membership)
    for name, text in files.items():
        (tmp_path / "fs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / name).write_text(text)
    assert share._quota(tmp_path / "cgroup", tmp_path / "fs") == quota
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(share, "_quota", lambda: quota)
    assert share.cores() == (int(quota) if quota else 4)
