"""audit, sweep (releases, commits, bisect, shards) and merge on real releases and forks of them."""

from pathlib import Path

import pytest

from runner import cli
from runner.evidence import bundle
from runner.commands.sweep import version_key
from runner.evidence.records import SweepRecord
from tests import forks, helpers
from tests.conftest import git

# ../shared/CPU-FEASIBILITY.md: which fix each release carries, by behaviour; the later defences' statuses
# over all their configurations (#39500's default configuration never checks the handoff)
_LATER = {
    "0.5.19": ("not fixed",) * 5,
    "0.5.20": ("not fixed",) * 5,
    # #40645 on 0.5.21: its NIXL worker skips a chunk whose metadata the clear dropped without acknowledging
    "0.5.21": ("not fixed", "not fixed", "fixed", "not fixed", "not fixed"),
    "0.5.22": ("not fixed", "fixed", "fixed", "fixed", "fixed"),
    "0.5.23": ("not fixed", "fixed", "fixed", "fixed", "fixed"),
}
# the defences 0.5.23 added with no upstream PR number (local ids, docs/fixed.md): L4 checks a checksum row
# the trees before 0.5.21 do not have, so there only its guards run ("clean")
_LOCAL = {
    v: {1: "fixed" if v == "0.5.23" else "not fixed", 2: "fixed" if v == "0.5.23" else "not fixed",
        4: "clean" if v < "0.5.21" else "fixed" if v == "0.5.23" else "not fixed",
        **{n: "fixed" if v == "0.5.23" else "not fixed" for n in (3, 5, 6)}}
    for v in _LATER
}
EXPECTED = {
    f"sglang-{v}": {36988: "not fixed" if v == "0.5.19" else "fixed", 38935: "fixed" if v >= "0.5.21" else "not fixed",
                    **dict(zip((39500, 40645, 41023, 41402, 41404), later)), **_LOCAL[v]}
    for v, later in _LATER.items()
}
FIRST_FIXED = {36988: "0.5.20", 38935: "0.5.21", 39500: None, 40645: "0.5.22", 41023: "0.5.21", 41402: "0.5.22",
               41404: "0.5.22", **dict.fromkeys((1, 2, 3, 4, 5, 6), "0.5.23")}


def _record(out: Path) -> SweepRecord:
    index, _, _ = bundle.load(out)
    return SweepRecord.model_validate(index.extra)


def _matrix(record: SweepRecord) -> dict:
    return {row.label: {f.fix: as_expected(f) for f in row.fixes} for row in record.rows}


def as_expected(fs) -> str:
    """A fix's status as EXPECTED reads it, from the duties: a "fixed" by its duties that condition evidence
    leaves "inconclusive" (a condition of its code no case saw both ways: issue 38) is compared as "fixed"
    only when the conditions it names are the reason (``one_way``) and every site's duties held (a configuration
    with the defence switched off has guards only: "clean")."""
    if fs.status == "inconclusive" and fs.one_way and all(site.status in ("fixed", "clean") for site in fs.sites):
        return "fixed"
    return fs.status


def test_version_order():
    assert sorted(["0.5.10", "0.5.9", "0.5.10.post1", "0.5.2"], key=version_key) == ["0.5.2", "0.5.9", "0.5.10", "0.5.10.post1"]


@pytest.mark.slow
def test_sweep_releases_in_two_shards_then_merge(tmp_path, cache):
    args = ["sweep", "--releases", "0.5.19..0.5.23", "--cache-dir", str(cache.root), "-j", "2"]
    for shard in ("1/2", "2/2"):
        assert cli.main([*args, "--shard", shard, "--out", str(tmp_path / shard.replace("/", "of"))]) == 0
    first = _record(tmp_path / "1of2")
    assert first.order == [f"pypi:sglang==0.5.{n}" for n in range(19, 24)]
    assert [r.label for r in first.rows] == ["sglang-0.5.19", "sglang-0.5.21", "sglang-0.5.23"]
    merged = tmp_path / "merged"
    assert cli.main(["merge", str(tmp_path / "1of2"), str(tmp_path / "2of2"), "--out", str(merged)]) == 0
    record = _record(merged)
    assert _matrix(record) == EXPECTED
    assert record.first_fixed == {n: v and f"pypi:sglang=={v}" for n, v in FIRST_FIXED.items()}
    # a defence off by default has a window of its own with its option on; on by default from 0.5.21
    by_config = {(w.fix, w.site): w.first_fixed for w in record.windows if w.site}
    assert by_config[(39500, "with-kv-checksum")] == "pypi:sglang==0.5.21"
    assert by_config[(39500, "default")] is None
    # on by default from 0.5.21, where its HiCache restore condition is now seen both ways (issue 38)
    assert by_config[(41023, "default")] == "pypi:sglang==0.5.21"
    assert [w.unjudged for w in record.windows if (w.fix, w.site) == (41023, None)] == [[]]
    assert bundle.verify(merged) == []
    static = {row.label: {f.id: (f.present, f.default) for f in row.static} for row in record.rows}
    assert static["sglang-0.5.19"]["kv-checksum"] == (False, None)
    assert static["sglang-0.5.21"]["kv-checksum"] == (True, "False")
    assert static["sglang-0.5.20"]["deferred-release"] == (True, "False")
    assert static["sglang-0.5.21"]["deferred-release"] == (True, "True")


@pytest.mark.slow
def test_merge_refuses_shards_of_different_sweeps(tmp_path, cache):
    a, b = tmp_path / "a", tmp_path / "b"
    assert cli.main(["sweep", "pypi:sglang==0.5.21", "--out", str(a), "--cache-dir", str(cache.root)]) == 0
    assert cli.main(["sweep", "pypi:sglang==0.5.22", "--out", str(b), "--cache-dir", str(cache.root)]) == 0
    assert cli.main(["merge", str(a), str(b), "--out", str(tmp_path / "m")]) == 2


@pytest.mark.slow
def test_bisect_finds_first_commits_in_fewer_runs(upstream_repo, cache, tmp_path):
    """Nine commits: 0.5.19's tree four times, 0.5.20's four times, then 0.5.21's."""
    repo, commits = upstream_repo["path"], upstream_repo["commits"]
    trees = [git(repo, "rev-parse", f"{commits[v]}^{{tree}}") for v in ("0.5.19", "0.5.20", "0.5.21")]
    parent, chain = commits["0.5.19"], [commits["0.5.19"]]
    for i, tree in enumerate([trees[0]] * 3 + [trees[1]] * 4 + [trees[2]]):
        parent = git(repo, "commit-tree", tree, "-p", parent, "-m", f"step {i}")
        chain.append(parent)
    git(repo, "update-ref", "refs/heads/bisect", parent)
    out = tmp_path / "b"
    code = cli.main(["sweep", "--commits", f"{chain[0][:12]}..bisect", "--repo", str(repo), "--bisect", "--no-reuse",
                     "--out", str(out), "--cache-dir", str(cache.root), *helpers.fix_args()])  # the two it checks
    assert code == 0
    record = _record(out)
    assert len(record.order) == 9
    assert {n: record.first_fixed[n] for n in (36988, 38935)} == {36988: f"git+{repo}@{chain[4]}",
                                                                  38935: f"git+{repo}@{chain[8]}"}
    assert record.probe_runs <= 3  # bisection over the 3 distinct trees: ceil(log2 3) + 1, not log2 of 9 commits


@pytest.mark.parametrize(
    "version, edits, expected, bugs",
    [
        ("0.5.21", forks.WITHOUT_PREFILL_GATE, {"prefill-door": "not fixed", "decode-door": "fixed", "prefill-result": "fixed"},
         forks.rejected_at("prefill")),
        ("0.5.21", forks.WITHOUT_DECODE_GATE, {"prefill-door": "fixed", "decode-door": "not fixed", "prefill-result": "fixed"},
         forks.rejected_at("decode")),
        ("0.5.21", forks.WITHOUT_GRAMMAR_CLEANUP, {"prefill-result": "not fixed"}, ["grammar-rejection"]),
    ],
    ids=["no-prefill-gate", "no-decode-gate", "no-grammar-cleanup"],
)
@pytest.mark.slow
def test_audit_of_a_fork_reports_exactly_the_removed_part(tmp_path, cache, release_tree, version, edits, expected, bugs):
    root = forks.make(release_tree(version).root, tmp_path / "fork", edits)
    out = tmp_path / "audit"
    code = cli.main(["audit", f"path:{root}", "--out", str(out), "--cache-dir", str(cache.root), *helpers.fix_args()])
    assert code == 1  # by the removed part alone: --fix leaves the later defences 0.5.21 lacks unprobed
    (row,) = _record(out).rows
    assert sorted(f.fix for f in row.fixes) == [36988, 38935]
    sites = {s.site: s for f in row.fixes for s in f.sites}
    assert {site: sites[site].status for site in expected} == expected
    assert sorted(c for s in sites.values() for c, shown in s.cases.items() if shown == "bug") == sorted(bugs)


@pytest.mark.slow
def test_audit_of_a_fixed_release_exits_0(tmp_path, cache):
    """0.5.23, the first release carrying every pinned fix (the local defences came with it)."""
    assert cli.main(["audit", "pypi:sglang==0.5.23", "--out", str(tmp_path / "a"), "--cache-dir", str(cache.root)]) == 0
