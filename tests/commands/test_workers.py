"""How many trees are probed at once: -j N as asked (bounded by memory, with a warning), and without
-j one per core the process may use, as memory allows."""

from __future__ import annotations

import builtins
import io
import os

import pytest

from runner.commands import pipeline


@pytest.fixture
def memory(monkeypatch):
    """``memory(gib)``: /proc/meminfo says this much is available."""
    real_open = builtins.open

    def set_to(gib: float) -> None:
        text = f"MemTotal: 99999999 kB\nMemAvailable: {int(gib * (1 << 20))} kB\n"
        monkeypatch.setattr(builtins, "open", lambda f, *a, **k: io.StringIO(text) if f == "/proc/meminfo" else real_open(f, *a, **k))

    return set_to


def test_without_j_one_worker_per_usable_core_as_memory_allows(memory, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    memory(24)
    assert pipeline.workers_for_memory(None) == 4
    memory(3.2)  # room for two 1.5 GiB probe processes
    assert pipeline.workers_for_memory(None) == 2
    memory(0.5)
    assert pipeline.workers_for_memory(None) == 1


def test_j_is_obeyed_up_to_what_memory_allows_and_says_so(memory, capsys):
    memory(24)
    assert pipeline.workers_for_memory(3) == 3
    memory(3.2)
    assert pipeline.workers_for_memory(5) == 2
    assert "-j 5 needs about 7 GiB; using 2 worker(s)" in capsys.readouterr().err
