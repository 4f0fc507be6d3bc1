"""What a tree's process is started with: no PYTHON* variable, and string hashing randomised per run
(the interpreter runs ``-I``; a fixed seed would be a flag a tree could read to tell it is probed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runner.store import envs


def test_no_python_variable_reaches_a_tree_process():
    assert not [k for k in envs.scrubbed_env() if k.startswith("PYTHON")]


def test_string_hashing_differs_between_two_runs_as_a_tree_process_is_started():
    argv = [sys.executable, "-I", "-B", "-c", "print(hash('diffprobe'))"]
    seen = {subprocess.run(argv, env=envs.scrubbed_env(), capture_output=True, text=True, check=True).stdout
            for _ in range(3)}
    assert len(seen) > 1  # three equal 64-bit hashes by chance: never in practice


def test_a_tree_process_keeps_its_c_heap_on_huge_pages_where_the_kernel_allows():
    """``glibc.malloc.hugetlb=1``: a large allocation of the C library lands on transparent huge pages, which
    make each case's fork and exit cheaper (docs/performance.md); without it, none does (the control)."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as handle:
            if "[never]" in handle.read():
                pytest.skip("transparent huge pages are off on this machine")
    except OSError:
        pytest.skip("no transparent huge pages here")
    code = ("import ctypes; c = ctypes.CDLL(None); c.malloc.restype = ctypes.c_void_p; n = 64 << 20; "
            "ctypes.memset(c.malloc(n), 1, n); "
            "print(next(int(l.split()[1]) for l in open('/proc/self/smaps_rollup') if l.startswith('AnonHugePages:')))")
    argv = [sys.executable, "-I", "-B", "-c", code]
    with_tunable = int(subprocess.run(argv, env=envs.scrubbed_env(), capture_output=True, text=True, check=True).stdout)
    without = {k: v for k, v in envs.scrubbed_env().items() if k != "GLIBC_TUNABLES"}
    plain = int(subprocess.run(argv, env=without, capture_output=True, text=True, check=True).stdout)
    if plain >= 32 << 10:
        pytest.skip("this kernel puts every heap on huge pages (THP mode always): nothing to tell apart")
    assert with_tunable >= 32 << 10 > plain, (with_tunable, plain)
