"""--shard auto under each engine's environment variables (the values those engines set)."""

import pytest

from runner.app import shards
from runner.errors import BadInput

ORDER = [f"s{i}" for i in range(10)]


@pytest.mark.parametrize("env, expected", [
    ({"JOB_COMPLETION_INDEX": "0", "JOB_COMPLETIONS": "3"}, (1, 3, "Kubernetes Indexed Job")),
    ({"JOB_COMPLETION_INDEX": "2", "JOB_COMPLETIONS": "3"}, (3, 3, "Kubernetes Indexed Job")),
    ({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0"}, (1, 4, "Slurm array")),
    # sbatch --array=1-4: ids 1..4
    ({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "4"}, (4, 4, "Slurm array")),
    # sbatch --array=10-16:3: ids 10, 13, 16
    ({"SLURM_ARRAY_TASK_ID": "13", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "10", "SLURM_ARRAY_TASK_STEP": "3"}, (2, 3, "Slurm array")),
    ({"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "2"}, (1, 2, "GitLab CI parallel")),
    ({"CIRCLE_NODE_INDEX": "1", "CIRCLE_NODE_TOTAL": "2"}, (2, 2, "CircleCI parallelism")),
    ({"BUILDKITE_PARALLEL_JOB": "0", "BUILDKITE_PARALLEL_JOB_COUNT": "5"}, (1, 5, "Buildkite parallelism")),
    ({"DIFFPROBE_SHARD_INDEX": "3", "DIFFPROBE_SHARD_COUNT": "4"}, (4, 4, "CI matrix")),
])
def test_auto_reads_the_engines_variables(env, expected):
    assert shards.parse("auto", {"PATH": "/bin", **env}) == expected


@pytest.mark.parametrize("env, culprit", [
    ({}, "not started by a job array"),
    ({"JOB_COMPLETION_INDEX": "1"}, "JOB_COMPLETIONS is not"),
    ({"JOB_COMPLETION_INDEX": "3", "JOB_COMPLETIONS": "3"}, "outside the 3 task"),
    ({"SLURM_ARRAY_TASK_ID": "x", "SLURM_ARRAY_TASK_COUNT": "2"}, "expected a whole number"),
    ({"SLURM_ARRAY_TASK_ID": "11", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "10", "SLURM_ARRAY_TASK_STEP": "3"}, "step 3"),
    ({"CI_NODE_INDEX": "0", "CI_NODE_TOTAL": "2"}, "outside"),
])
def test_auto_refuses_what_it_cannot_place(env, culprit):
    with pytest.raises(BadInput, match=culprit):
        shards.parse("auto", env)


def test_every_source_is_in_exactly_one_shard_whatever_the_engine():
    for env_of in (lambda i, n: {"JOB_COMPLETION_INDEX": str(i), "JOB_COMPLETIONS": str(n)},
                   lambda i, n: {"SLURM_ARRAY_TASK_ID": str(i + 1), "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": str(n)},
                   lambda i, n: {"DIFFPROBE_SHARD_INDEX": str(i), "DIFFPROBE_SHARD_COUNT": str(n)}):
        for n in (1, 3, 4, 12):
            slices = [shards.select(ORDER, *shards.parse("auto", env_of(i, n))[:2]) for i in range(n)]
            assert sorted(s for part in slices for s in part) == sorted(ORDER)


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/0", "a/b", "1-2", ""])
def test_explicit_shard_is_checked(text):
    with pytest.raises(BadInput):
        shards.parse(text, {})
