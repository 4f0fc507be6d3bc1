"""The baseline of a commit of upstream's main line (runner/app/baseline.py): upstream tags its releases on
release branches, so the nearest tag by ancestry can be far behind such a commit; the release it declares, or the
release sharing the most files, is taken when nearer in bytes. Nothing is probed."""

from __future__ import annotations

import pytest

from tests import gitrepo
from tests.commands.test_baseline_real import _chosen, forked  # noqa: F401 - the fixture, shared

pytestmark = pytest.mark.slow


def test_a_main_line_commit_is_read_against_the_release_it_declares_when_that_is_nearer_than_its_tag(forked, cache, release_tree):
    """Upstream tags releases on release branches: from a main-line commit the nearest tag by ancestry can be far
    behind (a real main commit of 2026-07-24 reached v0.5.6.post2, 7,928 commits back). The release the tree
    declares is taken when it shares more identical files, and the line names the tag it was preferred to."""
    repo, upstream, _ = forked
    gitrepo.git(repo, "branch", "-f", "mainline", upstream["0.5.19"])
    shas = gitrepo.build(repo, [gitrepo.Step("ahead", package=release_tree("0.5.21").root, branch="mainline")])
    chosen, record = _chosen(repo, shas["ahead"], cache)
    assert (chosen.chosen, chosen.text) == ("declared", "pypi:sglang==0.5.21")
    assert "(nearer in bytes than the nearest release tag by ancestry, v0.5.19: " in chosen.how
    assert record.identical or not [f for f in record.files if f.path.endswith(".py") and f.change == "changed"]


def test_a_main_line_commit_declaring_nothing_far_from_its_tag_is_read_against_the_release_sharing_most(forked, cache, release_tree):
    """A checkout declares no version (setuptools-scm writes it at build time): from a main-line commit whose
    nearest tag by ancestry shares fewer than half its files, the release sharing the most is looked for too."""
    repo, _, _ = forked
    shas = gitrepo.build(repo, [gitrepo.Step("old", package=release_tree("0.4.5").root, branch="old-line", tag="v0.4.5"),
                                gitrepo.Step("far", package=release_tree("0.5.21").root, branch="old-line",
                                             files={"python/sglang/_version.py": None})])
    chosen, _ = _chosen(repo, shas["far"], cache)
    assert (chosen.chosen, chosen.text, chosen.declared) == ("shared", "pypi:sglang==0.5.21", None)
    assert "(nearer in bytes than the nearest release tag by ancestry, v0.4.5: " in chosen.how
