"""The baseline chosen for git forks of real releases (runner/app/baseline.py): a vendor branch
off a release tag is read against that tag's commit; a fork that tags its own commit with a release's
name is read against the release it shares the most files with. Nothing is probed."""

from __future__ import annotations

import subprocess

import pytest

from runner.app import baseline, pipeline
from runner.evidence import pins
from runner.store import sources, specs
from tests import gitrepo
from tests.forks import SCHEDULER

pytestmark = pytest.mark.slow

VENDOR_LINE = ("logger = logging.getLogger(__name__)\n", 'logger = logging.getLogger(__name__)\nACME_METRICS = {"starts": 0}\n')


@pytest.fixture(scope="module")
def forked(upstream_repo, tmp_path_factory, release_tree):
    """The upstream fixture cloned, with a vendor branch off v0.5.20 (a changed scheduler line, no
    generated _version.py, as a checkout has) and a commit of it tagged v0.5.21 by the fork."""
    repo = tmp_path_factory.mktemp("fork") / "repo"
    subprocess.run(["git", "clone", "-q", str(upstream_repo["path"]), str(repo)], check=True)
    gitrepo.git(repo, "branch", "acme", upstream_repo["commits"]["0.5.20"])
    text = (release_tree("0.5.20").root / SCHEDULER).read_text()
    assert VENDOR_LINE[0] in text
    changed = {f"python/{SCHEDULER}": text.replace(VENDOR_LINE[0], VENDOR_LINE[1], 1).encode(),
               "python/sglang/_version.py": None}
    shas = gitrepo.build(repo, [gitrepo.Step("acme", files=changed, branch="acme"),
                                gitrepo.Step("forged", files={"python/sglang/acme.py": b"X = 1\n"}, branch="acme", tag="v0.5.21-acme")])
    return repo, upstream_repo["commits"], shas


def _chosen(repo, sha, cache):
    opts = pipeline.Options(cache=cache, pinned_sha256=pins.load().pinned_sha256)
    source = f"git+{repo}@{sha}"
    tree = sources.resolve(specs.parse(source), cache)
    chosen = baseline.of(tree, None, opts, source)
    return chosen, baseline.departures_of(source, tree, chosen, [])


def test_a_vendor_branch_is_read_against_the_release_commit_it_branched_from(forked, cache):
    repo, upstream, shas = forked
    chosen, record = _chosen(repo, shas["acme"], cache)
    assert (chosen.chosen, chosen.text) == ("ancestry", f"git+{repo}@{upstream['0.5.20']}")
    assert chosen.how.startswith("by ancestry: tag v0.5.20, 1 commit(s) before it; its tree agrees with pypi:sglang==0.5.20 (")
    assert [(f.path, f.change) for f in record.files] == [("sglang/_version.py", "removed"), (SCHEDULER, "changed")]
    assert [h.function for h in record.hunks()] == ["<module>"]
    print(record.line())


def test_a_release_tag_on_the_forks_own_commit_is_refused(forked, cache):
    repo, upstream, shas = forked
    gitrepo.git(repo, "tag", "-f", "v0.5.21", shas["forged"])  # the fork's commit under a release's name
    try:
        chosen, record = _chosen(repo, shas["forged"], cache)
    finally:
        gitrepo.git(repo, "tag", "-f", "v0.5.21", upstream["0.5.21"])
    assert (chosen.chosen, chosen.text) == ("shared", "pypi:sglang==0.5.20")
    assert "(its nearest release tag v0.5.21 is not pypi:sglang==0.5.21: " in chosen.how
    assert {(f.path, f.change) for f in record.files} >= {(SCHEDULER, "changed"), ("sglang/acme.py", "added")}
    print(record.line())

