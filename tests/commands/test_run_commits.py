"""`run --via commits` on a local repository whose commits are real release trees."""

from pathlib import Path

import pytest

from runner import cli
from runner.evidence import bundle
from tests.conftest import git

PINS = Path(__file__).resolve().parents[2] / "pins.toml"


@pytest.mark.slow
def test_run_via_commits_with_a_pr_head_only_under_refs_pull(upstream_repo, cache, tmp_path):
    repo, commits = upstream_repo["path"], upstream_repo["commits"]
    # A squash-merged PR's head lives only under refs/pull/N/head: put 0.5.21's tree there, on no branch.
    tree = git(repo, "rev-parse", f"{commits['0.5.21']}^{{tree}}")
    head = git(repo, "commit-tree", tree, "-p", commits["0.5.20"], "-m", "PR head")
    git(repo, "update-ref", "refs/pull/38935/head", head)
    pins = tmp_path / "pins.toml"
    text = PINS.read_text()
    text = text.replace('base = "17ba2c2e7c7b81f31a8a9e693e7435ab262c16b4"', f'base = "{commits["0.5.20"]}"')
    text = text.replace('head = "8f3d6944b76c428d884582cb6c82a39db1465360"', f'head = "{head[:10]}"')
    pins.write_text(text)
    out = tmp_path / "bundle"
    code = cli.main(["run", "--via", "commits", "--repo", str(repo), "--pr", "38935", "--pins", str(pins),
                     "--out", str(out), "--cache-dir", str(cache.root)])
    assert code == 0
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
