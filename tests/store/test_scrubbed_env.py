"""What a tree's process is started with: no PYTHON* variable, and string hashing randomised per run
(the interpreter runs ``-I``; a fixed seed would be a flag a tree could read to tell it is probed)."""

from __future__ import annotations

import subprocess
import sys

from runner.store import envs


def test_no_python_variable_reaches_a_tree_process():
    assert not [k for k in envs.scrubbed_env() if k.startswith("PYTHON")]


def test_string_hashing_differs_between_two_runs_as_a_tree_process_is_started():
    argv = [sys.executable, "-I", "-B", "-c", "print(hash('diffprobe'))"]
    seen = {subprocess.run(argv, env=envs.scrubbed_env(), capture_output=True, text=True, check=True).stdout
            for _ in range(3)}
    assert len(seen) > 1  # three equal 64-bit hashes by chance: never in practice
