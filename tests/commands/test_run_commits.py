"""`run --via commits` on a local repository whose commits are real release trees."""

import pytest

from runner import cli
from runner.evidence import bundle
from tests import helpers
from tests.conftest import git
from tests.records import checked


@pytest.mark.slow
def test_run_via_commits_with_a_pr_head_only_under_refs_pull(upstream_repo, cache, tmp_path):
    repo, commits = upstream_repo["path"], upstream_repo["commits"]
    # A squash-merged PR's head lives only under refs/pull/N/head: put 0.5.21's tree there, on no branch.
    tree = git(repo, "rev-parse", f"{commits['0.5.21']}^{{tree}}")
    head = git(repo, "commit-tree", tree, "-p", commits["0.5.20"], "-m", "PR head")
    git(repo, "update-ref", "refs/pull/38935/head", head)
    pins = helpers.pins_38935(tmp_path / "pins.toml", commits["0.5.20"], head[:10])
    out = tmp_path / "bundle"
    code = cli.main(["run", "--via", "commits", "--repo", str(repo), "--pr", "38935", "--pins", str(pins),
                     "--out", str(out), "--cache-dir", str(cache.root)])
    assert code == 0
    assert checked(out) == {"via": "commits", "fixes": [38935], "repo": str(repo)}
    _, receipts, diffs = bundle.load(out)
    (d,) = diffs.values()
    assert d.verdict == "fix observed"
    assert d.base[0].source.commit == commits["0.5.20"]
    assert d.head[0].source.commit == head and d.head[0].source.rev == head[:10]  # short SHA recorded in full


def test_unreachable_upstream_is_one_line_exit_3(tmp_path, cache, capsys):
    code = cli.main(["run", "--via", "commits", "--repo", "https://nonexistent.invalid/sglang.git", "--pr", "38935",
                     "--out", str(tmp_path / "b"), "--cache-dir", str(cache.root)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3
    assert err[-1].startswith("diffprobe: error: git source https://nonexistent.invalid/sglang.git: cannot clone")
    assert not (tmp_path / "b").exists()
