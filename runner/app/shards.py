"""Which slice of a sweep this process probes: ``--shard I/N``, or ``--shard auto`` from the job
array that started it, so an existing distributed engine (a Kubernetes Indexed Job, a Slurm array, a
CI matrix) does the scheduling and ``diffprobe merge`` joins the slices."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from runner.errors import BadInput


@dataclass(frozen=True)
class Engine:
    name: str
    index: str  # variable holding this task's index
    count: str  # variable holding the number of tasks
    first: int  # the index of the first task (0 or 1)


# Checked in this order; the first whose index variable is set decides.
ENGINES = [
    # Kubernetes sets JOB_COMPLETION_INDEX; the completion count is not exposed, so the manifest
    # passes .spec.completions as JOB_COMPLETIONS (docs/kubernetes-indexed-job.yaml).
    Engine("Kubernetes Indexed Job", "JOB_COMPLETION_INDEX", "JOB_COMPLETIONS", 0),
    Engine("Slurm array", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", 0),  # offset by SLURM_ARRAY_TASK_MIN
    Engine("GitLab CI parallel", "CI_NODE_INDEX", "CI_NODE_TOTAL", 1),
    Engine("CircleCI parallelism", "CIRCLE_NODE_INDEX", "CIRCLE_NODE_TOTAL", 0),
    Engine("Buildkite parallelism", "BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT", 0),
    # A GitHub Actions matrix sets these from strategy.job-index / strategy.job-total
    # (docs/github-actions-sweep.yml); any other CI can do the same.
    Engine("CI matrix", "DIFFPROBE_SHARD_INDEX", "DIFFPROBE_SHARD_COUNT", 0),
]


def _int(env: Mapping[str, str], name: str, engine: str) -> int:
    value = env.get(name, "")
    if not re.fullmatch(r"\d{1,9}", value):
        raise BadInput(f"--shard auto ({engine}): ${name} is {value!r}, expected a whole number")
    return int(value)


def from_environment(env: Mapping[str, str]) -> tuple[int, int, str]:
    """(I, N, engine) with 1 <= I <= N, from the first job array whose variables are set."""
    for e in ENGINES:
        if e.index not in env:
            continue
        if e.count not in env:
            raise BadInput(f"--shard auto ({e.name}): ${e.index} is set but ${e.count} is not")
        index, count = _int(env, e.index, e.name) - e.first, _int(env, e.count, e.name)
        if e.index == "SLURM_ARRAY_TASK_ID":  # ids run from MIN in steps of STEP (--array=1-7:2)
            low = _int(env, "SLURM_ARRAY_TASK_MIN", e.name) if "SLURM_ARRAY_TASK_MIN" in env else 0
            step = _int(env, "SLURM_ARRAY_TASK_STEP", e.name) if "SLURM_ARRAY_TASK_STEP" in env else 1
            if step == 0 or (index - low) % step:
                raise BadInput(f"--shard auto ({e.name}): task id {env[e.index]} is not on the array's step {step}")
            index = (index - low) // step
        if not 0 <= index < count:
            raise BadInput(f"--shard auto ({e.name}): task {env[e.index]} is outside the {count} task(s) of the array")
        return index + 1, count, e.name
    names = ", ".join(f"${e.index}" for e in ENGINES)
    raise BadInput(f"--shard auto: not started by a job array (none of {names} is set); give --shard I/N")


def parse(text: str, env: Mapping[str, str]) -> tuple[int, int, str | None]:
    """``I/N`` or ``auto`` as (I, N, engine or None)."""
    if text == "auto":
        return from_environment(env)
    m = re.fullmatch(r"(\d{1,9})/(\d{1,9})", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise BadInput(f"--shard {text!r}: expected I/N with 1 <= I <= N, or auto")
    return int(m.group(1)), int(m.group(2)), None


def select(order: list[str], index: int, count: int) -> list[str]:
    """Every count-th source from the index-th: slices interleave, so each gets old and new trees."""
    return order[index - 1 :: count]
