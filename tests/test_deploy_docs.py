"""The deployment examples in docs/deploy/ are what diffprobe accepts: their commands parse with
diffprobe's own parser, their shard counts agree, and each engine's variables place every source
in exactly one shard (pyyaml reads the manifests as Kubernetes and GitHub would)."""

from __future__ import annotations

import re
import shlex

import yaml

from runner import cli
from runner.app import shards
from tests.helpers import ROOT

DEPLOY = ROOT / "docs" / "deploy"


def _parse(argv: list[str]):
    return cli.build_parser().parse_args(argv)


def test_kubernetes_indexed_job_shards_and_merges():
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes-indexed-job.yaml").read_text()))
    claim = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
    sweep, merge = (next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == n)
                    for n in ("diffprobe-sweep", "diffprobe-merge"))
    spec = sweep["spec"]
    assert spec["completionMode"] == "Indexed" and "ReadWriteMany" in claim["spec"]["accessModes"]
    [container] = spec["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert int(env["JOB_COMPLETIONS"]) == spec["completions"]
    args = _parse(container["args"])
    assert args.shard == "auto" and args.cache_dir.startswith("/work/")
    # every pod index gets its own slice; together they are the whole sweep
    order = [f"s{i}" for i in range(11)]
    placed = [shards.select(order, *shards.parse("auto", {"JOB_COMPLETION_INDEX": str(i), **env})[:2])
              for i in range(spec["completions"])]
    assert sorted(s for part in placed for s in part) == sorted(order)
    for volumes in (sweep, merge):
        assert volumes["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    wait = merge["spec"]["template"]["spec"]["initContainers"][0]["command"][-1]
    assert f"-ge {spec['completions']} ]" in wait
    merge_cmd = merge["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    first = shlex.split(merge_cmd.split("&&")[0].replace("/work/shards/*", "a b"))
    assert _parse(first[1:]).func.__module__ == "runner.commands.merge"


def test_github_actions_matrix_shards_and_merges():
    flow = yaml.safe_load((DEPLOY / "github-actions-sweep.yml").read_text())
    sweep, merge = flow["jobs"]["sweep"], flow["jobs"]["merge"]
    assert merge["needs"] == "sweep"
    assert sweep["env"]["DIFFPROBE_SHARD_INDEX"] == "${{ strategy.job-index }}"
    assert sweep["env"]["DIFFPROBE_SHARD_COUNT"] == "${{ strategy.job-total }}"
    run = next(s["run"] for s in sweep["steps"] if "diffprobe sweep" in s.get("run", ""))
    argv = shlex.split(re.sub(r"\$\{\{[^}]*\}\}", "X", run.split("||")[0]))
    args = _parse(argv[1:])
    assert args.shard == "auto"
    total = len(sweep["strategy"]["matrix"]["shard"])
    order = [f"s{i}" for i in range(7)]
    placed = [shards.select(order, *shards.parse("auto", {"DIFFPROBE_SHARD_INDEX": str(i), "DIFFPROBE_SHARD_COUNT": str(total)})[:2])
              for i in range(total)]
    assert sorted(s for part in placed for s in part) == sorted(order)
    merged = next(s["run"] for s in merge["steps"] if "diffprobe merge" in s.get("run", ""))
    assert _parse(shlex.split(merged.split("&&")[0])[1:]).func.__module__ == "runner.commands.merge"


def test_slurm_array_shards_and_merges():
    script = (DEPLOY / "slurm-array.sh").read_text()
    low, high = map(int, re.search(r"^#SBATCH --array=(\d+)-(\d+)$", script, re.MULTILINE).groups())
    count = high - low + 1
    order = [f"s{i}" for i in range(9)]
    placed = [shards.select(order, *shards.parse("auto", {"SLURM_ARRAY_TASK_ID": str(i), "SLURM_ARRAY_TASK_MIN": str(low),
                                                          "SLURM_ARRAY_TASK_COUNT": str(count)})[:2])
              for i in range(low, high + 1)]
    assert sorted(s for part in placed for s in part) == sorted(order)
    sweep = next(line for line in script.splitlines() if line.startswith(".venv/bin/diffprobe sweep"))
    args = _parse(shlex.split(re.sub(r'"?\$\{?\w+[^ "]*"?', "X", sweep.split("||")[0]))[1:])
    assert args.shard == "auto"
    merge = re.search(r'--wrap="\.venv/bin/(diffprobe merge [^&]*)&&', script).group(1)
    assert _parse(shlex.split(re.sub(r"\$\w+", "X", merge))[1:]).func.__module__ == "runner.commands.merge"
