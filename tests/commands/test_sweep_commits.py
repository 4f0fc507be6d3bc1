"""Sweeps over a commit history in which most commits do not touch python/sglang: one probe run
per distinct tree, receipts reused across runs, one report row per commit, shards placed by each
job engine's own variables and merged."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from runner import cli
from runner.views.report import incident, matrix, verified
from runner.evidence import bundle
from runner.evidence.records import SweepRecord
from tests import gitrepo, helpers
from tests.gitrepo import Step

pytestmark = pytest.mark.slow

ONLY = helpers.fix_args()  # #36988 (first in 0.5.20) and #38935 (0.5.21) alone: two probe runs per tree, not seven


@pytest.fixture(scope="module")
def history(tmp_path_factory, release_tree) -> dict:
    """Seven commits, three trees: 0.5.19, two docs commits, 0.5.20, a docs commit, 0.5.21, a docs commit.
    The trees are the releases' own bytes: the receipts store keeps an entry per source, so a test on
    another worker probing the same release through PyPI neither serves nor replaces this history's."""
    roots = {v: release_tree(v).root for v in ("0.5.19", "0.5.20", "0.5.21")}
    steps = [Step("a19", package=roots["0.5.19"]), Step("b", files={"docs/x": b"1"}), Step("c", files={"docs/x": b"2"}),
             Step("d20", package=roots["0.5.20"]), Step("e", files={"docs/x": b"3"}),
             Step("f21", package=roots["0.5.21"]), Step("g", files={"docs/x": b"4"})]
    path = tmp_path_factory.mktemp("history")
    return {"path": path, "commits": gitrepo.build(path, steps)}


def _sweep(history, cache, out: Path, *extra: str) -> tuple[int, SweepRecord]:
    code = cli.main(["sweep", "--commits", f"{history['commits']['a19']}..main", "--repo", str(history["path"]),
                     "--cache-dir", str(cache.root), "--out", str(out), *ONLY, *extra])
    index, _, _ = bundle.load(out)
    return code, SweepRecord.model_validate(index.extra)


def _src(history, label: str) -> str:
    return f"git+{history['path']}@{history['commits'][label]}"


def test_one_probe_run_per_tree_one_row_per_commit_then_everything_reused(history, cache, tmp_path):
    code, first = _sweep(history, cache, tmp_path / "first", "--no-reuse")
    assert code == 0 and first.probe_runs == 3
    labels = ["a19", "b", "c", "d20", "e", "f21", "g"]
    assert [r.source for r in first.rows] == [_src(history, x) for x in labels]
    assert [r.same_tree_as for r in first.rows] == [None, _src(history, "a19"), _src(history, "a19"), None,
                                                    _src(history, "d20"), None, _src(history, "f21")]
    assert first.first_fixed == {36988: _src(history, "d20"), 38935: _src(history, "f21")}
    code, again = _sweep(history, cache, tmp_path / "again")
    assert code == 0 and again.probe_runs == 0 and all(r.reused for r in again.rows)
    assert [r.fixes for r in again.rows] == [r.fixes for r in first.rows]


def test_report_on_a_sweep_has_a_row_per_commit_and_its_first_fix_backs_the_steps(history, cache, tmp_path):
    _sweep(history, cache, tmp_path / "s")
    ev = verified.gather(tmp_path / "s")
    rows, _, _ = matrix.matrix(ev)
    assert len(rows) == 7
    same = {x: f"same tree as git-{history['commits'][x][:12]}" for x in ("a19", "d20", "f21")}
    for row, expected in zip(rows, [None, same["a19"], same["a19"], None, same["d20"], None, same["f21"]]):
        if expected:
            assert row.note == expected
        else:  # its own receipts, or reused ones observed through another source with the same tree
            assert row.note == "" or row.note.startswith("receipts observed via ")
    # the first-fix commit against the commit before it, one differential per fix
    assert {(f.judged.fix, f.judged.verdict) for f in ev.fixes} == {(36988, "fix observed"), (38935, "fix observed")}
    tree_of = {r.source: r.tree_digest for r in SweepRecord.model_validate(ev.index.extra).rows}
    heads = {f.judged.fix: f.judged.head[0].source.tree_digest for f in ev.fixes}
    assert heads == {36988: tree_of[_src(history, "d20")], 38935: tree_of[_src(history, "f21")]}
    levels = {f.step.number: f.level for f in (incident.assess(s, ev.fixes) for s in incident.STEPS)}
    assert levels[2] == levels[4] == "CPU differential"


def test_bisection_over_distinct_trees(history, cache, tmp_path):
    code, record = _sweep(history, cache, tmp_path / "b", "--bisect", "--no-reuse")
    assert code == 0
    assert record.first_fixed == {36988: _src(history, "d20"), 38935: _src(history, "f21")}
    assert record.probe_runs <= math.ceil(math.log2(3)) + 1


ENGINES = {
    "kubernetes": lambda i, n: {"JOB_COMPLETION_INDEX": str(i), "JOB_COMPLETIONS": str(n)},
    "slurm": lambda i, n: {"SLURM_ARRAY_TASK_ID": str(i + 1), "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": str(n)},
    "ci-matrix": lambda i, n: {"DIFFPROBE_SHARD_INDEX": str(i), "DIFFPROBE_SHARD_COUNT": str(n)},
}


def test_shards_from_each_engines_variables_merge_into_the_whole_sweep(history, cache, tmp_path, monkeypatch):
    """Three slices, each placed by another engine's own variables (their parsing, engine by engine, is
    tests/commands/test_shards.py's), merge into the whole sweep."""
    _, whole = _sweep(history, cache, tmp_path / "whole")
    shards = []
    for i, engine in enumerate(sorted(ENGINES)):
        with monkeypatch.context() as m:
            for k, v in ENGINES[engine](i, len(ENGINES)).items():
                m.setenv(k, v)
            _, part = _sweep(history, cache, tmp_path / f"shard{i}", "--shard", "auto")
        assert part.shard == f"{i + 1}/{len(ENGINES)}", engine
        shards.append(str(tmp_path / f"shard{i}"))
    assert cli.main(["merge", *shards, "--out", str(tmp_path / "merged")]) == 0
    index, _, diffs = bundle.load(tmp_path / "merged")
    merged = SweepRecord.model_validate(index.extra)
    assert [(r.source, r.fixes, r.same_tree_as) for r in merged.rows] == [(r.source, r.fixes, r.same_tree_as) for r in whole.rows]
    assert merged.first_fixed == whole.first_fixed and len(diffs) == 2
    assert bundle.verify(tmp_path / "merged") == []
