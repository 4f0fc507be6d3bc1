"""``run --mutate`` and ``mutate`` on real releases (issue #11): the score in the bundle measures the very
evidence the verdict rests on, a mutant the evidence does not catch is reported as a survivor, and a
tree without the fix gets no score."""

from __future__ import annotations

import re
import shutil

import orjson
import pytest

from probes import duties
from runner import cli
from runner.evidence import bundle, catalog, mutation
from runner.judge import judging
from tests import forks, helpers
from tests.conftest import git
from tests.records import checked

pytestmark = pytest.mark.slow  # real releases, environments and SGLang imports


def _report(out, name: str) -> mutation.Mutation:
    return mutation.Mutation.model_validate(orjson.loads((out / mutation.DIR / name).read_bytes()))


def test_run_mutate_scores_the_evidence_the_verdict_rests_on(release_tree, cache, tmp_path, capsys):
    release_tree("0.5.19"), release_tree("0.5.20")
    out = tmp_path / "bundle"
    assert cli.main(["run", "--pr", "36988", "--mutate", "--out", str(out), "--cache-dir", str(cache.root)]) == 0
    index, receipts, diffs = bundle.load(out)  # verified, mutation reports included
    (d,) = diffs.values()
    assert d.verdict == "fix observed"
    head = receipts[d.head[0].receipt]
    (score,) = checked(out)["scores"]
    assert score["source"] == "pypi:sglang==0.5.20" and score["fix"] == 36988
    m = _report(out, "sglang-0.5.20.prefill-cleanup.json")
    # The same bytes, the same probe, the same cases reading the same: the verdict's own evidence.
    assert m.tree_digest == head.source.tree_digest and m.probe_sha256 == head.probe.sha256
    assert {c.id: c.state for c in m.baseline} == {c.id: judging.state(c) for c in head.cases}
    assert m.score.baseline == judging.status(head.cases) == "fixed"
    assert mutation.counted(m) == m.score and m.score.model_dump(mode="json") | {"source": m.source} == score
    assert m.score.killed >= 95 * (m.score.mutants - m.score.equivalent) / 100
    capsys.readouterr()
    assert cli.main(["report", str(out), "--all"]) == 0
    shown = capsys.readouterr().out
    assert re.search(r"verdict: fix observed.*\n\s+evidence strength: \d+ of \d+ mutants", shown), shown


def test_a_mutant_the_evidence_does_not_catch_is_reported_as_a_survivor(release_tree, cache, tmp_path, monkeypatch, capsys):
    """Evidence weakened on purpose: no case of #36988 declares that the sender is told to abort. The
    mutant that drops ``sender.abort()`` then passes every case; it must stand in the report as an
    unexplained survivor, count against the score, and fail the command, never be hidden."""
    release_tree("0.5.20")
    dropped = "result-sender-aborted"
    weak = tmp_path / "probes"
    shutil.copytree(catalog.probes_dir(), weak, ignore=shutil.ignore_patterns("__pycache__"))
    text = (weak / "duties_36988.py").read_text()
    assert text.count(f'RETIRED_BEFORE_CACHE = ("{dropped}", ') == 1
    text = text.replace(f'RETIRED_BEFORE_CACHE = ("{dropped}", ', "RETIRED_BEFORE_CACHE = (")
    (weak / "duties_36988.py").write_text(text)
    monkeypatch.setattr(catalog, "probes_dir", lambda: weak)  # what the sandbox runs
    monkeypatch.setitem(duties.CASES, "prefill-cleanup",  # what the host judges with
                        {case: tuple(d for d in ds if d != dropped) for case, ds in duties.CASES["prefill-cleanup"].items()})
    out = tmp_path / "bundle"
    code = cli.main(["mutate", "pypi:sglang==0.5.20", "--fix", "36988", "--out", str(out), "--cache-dir", str(cache.root)])
    shown = capsys.readouterr().out
    assert code == 1
    m = _report(out, "sglang-0.5.20.prefill-cleanup.json")
    (survivor,) = [x for x in m.mutants if x.operator == "delete" and x.before == "sender.abort()"]
    assert survivor.status == "survived" and survivor.why == ""
    assert m.score.baseline == "fixed" and m.score.survived >= 1 and m.score.killed < m.score.mutants - m.score.equivalent
    assert f"{survivor.file}:{survivor.line}" in shown and "(not explained)" in shown
    index, _, _ = bundle.load(out)
    assert index.extra["scores"][0]["survived"] == m.score.survived


def test_a_tree_without_the_fix_gets_no_score(release_tree, cache, tmp_path, capsys):
    """0.5.20 predates #38935: its rejected cases fail unmutated, so they kill nothing; only the guards
    that hold there judge the mutants, and no percentage is claimed."""
    release_tree("0.5.20")
    out = tmp_path / "bundle"
    assert cli.main(["mutate", "pypi:sglang==0.5.20", "--fix", "38935", "--out", str(out), "--cache-dir", str(cache.root)]) == 1
    assert "evidence strength: not measured: the tree unmutated reads not fixed" in capsys.readouterr().out
    m = _report(out, "sglang-0.5.20.admission.json")
    assert checked(out)["scores"] == [m.score.model_dump(mode="json") | {"source": m.source}]
    held = {c.id for c in m.baseline if c.state == "clean"}
    assert held and all(c.role == "guard" for c in m.baseline if c.id in held)
    assert all(x.why.split(":")[0] in held for x in m.mutants if x.status == "killed")
    assert sorted(m.missing) == ["sglang.srt.disaggregation.utils.is_unadmitted_reject",
                                 "sglang.srt.managers.scheduler.Scheduler.retire_unadmitted_request"]


def test_run_via_commits_mutate_at_a_pr_head_that_releases_the_cache_its_own_way(upstream_repo, cache, tmp_path):
    """A PR head like #38935's (reachable only under refs/pull/N/head), whose retire path tells the
    tree cache itself rather than through 0.5.21's helper: fix observed, and its score measured there."""
    repo = tmp_path / "upstream"
    git(tmp_path, "clone", "-q", str(upstream_repo["path"]), str(repo))
    for key in ("uploadpack.allowFilter", "uploadpack.allowAnySHA1InWant"):
        git(repo, "config", key, "true")
    git(repo, "checkout", "-q", "-b", "pr", upstream_repo["commits"]["0.5.21"])
    scheduler = repo / "python" / "sglang" / "srt" / "managers" / "scheduler.py"
    text = scheduler.read_text()
    assert text.count(forks.RELEASE) == 1
    scheduler.write_text(text.replace(forks.RELEASE, forks.RELEASED_INLINE))
    git(repo, "-c", "user.email=f@diffprobe.invalid", "-c", "user.name=f", "commit", "-q", "-am", "PR head")
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "update-ref", "refs/pull/38935/head", head)
    git(repo, "checkout", "-q", "main")
    git(repo, "branch", "-q", "-D", "pr")  # the head is now only under refs/pull
    pins = helpers.pins_38935(tmp_path / "pins.toml", upstream_repo["commits"]["0.5.20"], head)
    out = tmp_path / "bundle"
    assert cli.main(["run", "--via", "commits", "--repo", str(repo), "--pr", "38935", "--mutate", "--pins", str(pins),
                     "--out", str(out), "--cache-dir", str(cache.root)]) == 0
    index, receipts, diffs = bundle.load(out)
    (d,) = diffs.values()
    assert d.verdict == "fix observed"
    head_receipt = receipts[d.head[0].receipt]
    assert head_receipt.source.commit == head
    (score,) = checked(out)["scores"]
    assert score["baseline"] == "fixed" and score["survived"] == 0, score
    m = _report(out, f"git-{head[:12]}.admission.json")
    assert m.tree_digest == head_receipt.source.tree_digest


def test_mutate_on_an_older_release_with_the_fix_backported(release_tree, cache, tmp_path):
    """0.5.20 with #38935 backported (both doors gated, the predicate and the retire path taken from
    0.5.21 at test time): mutate accepts the older base, reads it fixed unmutated and scores it."""
    root = forks.backport_38935(release_tree("0.5.20").root, release_tree("0.5.21").root, tmp_path / "backport")
    out = tmp_path / "bundle"
    assert cli.main(["mutate", f"path:{root}", "--fix", "38935", "--out", str(out), "--cache-dir", str(cache.root)]) == 0
    (name,) = [p.name for p in (out / mutation.DIR).iterdir()]
    m = _report(out, name)
    assert checked(out)["scores"] == [m.score.model_dump(mode="json") | {"source": m.source}]
    assert m.score.baseline == "fixed" and not m.missing
    assert m.score.survived == 0 and m.score.killed >= 95 * (m.score.mutants - m.score.equivalent) / 100
