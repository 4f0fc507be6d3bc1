"""The tiers of tests/tiers.py: the exhaustive corpus's slices are a partition (no test in none, none
in two), the same on every machine, and every test the README's tier names exists."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import tiers


@given(st.dictionaries(st.text("abc/_.", min_size=1, max_size=8), st.floats(0, 1000), max_size=30),
       st.sets(st.text("abc/_.", min_size=1, max_size=8), max_size=30), st.integers(1, 6))
def test_a_cut_is_a_partition_and_near_balanced(costs, unlisted, n):
    modules = set(costs) | unlisted
    slices = tiers.cut(modules, n, costs)
    assert len(slices) == n
    dealt = [m for s in slices for m in s]
    assert sorted(dealt) == sorted(modules)  # every module in exactly one slice
    mean = sum(costs.values()) / len(costs) if costs else 1.0
    loads = [sum(costs.get(m, mean) for m in s) for s in slices]
    biggest = max((costs.get(m, mean) for m in modules), default=0.0)
    assert max(loads) - min(loads) <= biggest + 1e-6  # LPT: no slice exceeds another by more than one module
    assert tiers.cut(set(reversed(sorted(modules))), n, costs) == slices  # the order modules come in does not matter


@pytest.mark.parametrize("text", ["0/4", "5/4", "x", "1/", "/4", "-1/4", ""])
def test_a_bad_slice_is_refused(text):
    with pytest.raises(ValueError, match="expected 'all', 'commit' or K/N"):
        tiers.parse_slice(text)


def test_a_commit_slice_is_one_of_the_four():
    k, n = tiers.parse_slice("commit")
    assert n == tiers.SLICES and 1 <= k <= n


def _collected(*args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:randomly", *args],
                         cwd=tiers.ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert out.returncode in (0, 5), out.stdout[-2000:] + out.stderr[-2000:]
    return {line for line in out.stdout.splitlines() if "::" in line}


def test_the_slices_partition_the_exhaustive_corpus_and_the_readme_tier_names_real_tests():
    """On the real suite: the README's command and the exhaustive corpus together are the whole
    suite, without overlap; a slice collects exactly the tests of the modules ``cut`` deals it (so
    the slices, a partition of the modules, partition the tests); every name in ``INTEGRATION``
    selects at least one test."""
    everything, default, exhaustive = _collected("-m", ""), _collected(), _collected("-m", "exhaustive")
    assert exhaustive and default | exhaustive == everything and not default & exhaustive
    modules = {tiers.module_of(t) for t in exhaustive}
    for k, dealt in enumerate(tiers.cut(modules), 1):
        if k == 2:  # one slice through pytest (each costs a collection); the others by the same cut
            assert _collected("-m", "exhaustive", "--exhaustive-slice", f"{k}/{tiers.SLICES}") == \
                {t for t in exhaustive if tiers.module_of(t) in dealt}
        assert dealt
    for name in tiers.INTEGRATION:
        assert any(t == name or t.startswith((name + "::", name + "[")) for t in default), f"{name} names no test"
