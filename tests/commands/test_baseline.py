"""Which baseline a tree is compared with (runner/app/baseline.py), on hand-made path: trees."""

from __future__ import annotations

import hashlib

import pytest

from runner import errors
from runner.app import baseline, pipeline
from runner.store import pypi, sources, specs
from runner.store.cache import Store
from tests import gitrepo

WHEEL_STYLE = ("try:\n    from sglang._version import __version__\nexcept ImportError:\n"
               "    __version__ = '0.0.0.dev0'\n")


def _tree(tmp_path, name: str, files: dict[str, str]) -> sources.Tree:
    root = tmp_path / name
    for rel, text in {"sglang/__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return sources.resolve(specs.parse(f"path:{root}"), Store.at(tmp_path / "cache"))


@pytest.mark.parametrize("files, declared", [
    ({"sglang/version.py": '__version__ = "0.5.21"\n'}, "0.5.21"),
    ({"sglang/version.py": WHEEL_STYLE, "sglang/_version.py": "__version__ = version = '0.5.20'\n"}, "0.5.20"),
    ({"sglang/version.py": WHEEL_STYLE}, None),  # a git checkout: only the fallback, which is no declaration
    ({"sglang/version.py": "__version__ = compute()\n"}, None),
    ({}, None),
])
def test_the_declared_version_is_read_never_run(tmp_path, files, declared):
    assert baseline.declared_version(_tree(tmp_path, "t", files).root) == declared


RELEASES = {  # hand-made "releases": version -> files
    "0.5.20": {"sglang/__init__.py": "", "sglang/srt/door.py": "def admit(req):\n    return True\n", "sglang/srt/pool.py": "SIZE = 1\n",
               "sglang/_version.py": "__version__ = '0.5.20'\n"},
    "0.5.21": {"sglang/__init__.py": "", "sglang/srt/door.py": "def admit(req):\n    return not req.rejected\n", "sglang/srt/pool.py": "SIZE = 1\n",
               "sglang/srt/extra.py": "X = 2\n", "sglang/_version.py": "__version__ = '0.5.21'\n"},
    "0.5.22": {"sglang/__init__.py": "", "sglang/srt/door.py": "def admit(req):\n    return not req.rejected\n", "sglang/srt/pool.py": "SIZE = 2\n",
               "sglang/srt/extra.py": "X = 3\n", "sglang/_version.py": "__version__ = '0.5.22'\n"},
}


@pytest.fixture
def releases(tmp_path, monkeypatch):
    """The hand-made releases in place of the package index: its listing, each release's file
    digests and its tree (``pypi:sglang==V`` resolves to a path: tree of it); the versions whose
    files were read, in order."""
    read: list[str] = []
    roots = {v: _tree(tmp_path, f"release-{v}", files) for v, files in RELEASES.items()}
    real = pipeline.resolve

    def files(version, cache, pinned, bounds=None):
        read.append(version)
        if version not in roots:
            raise errors.BadInput(f"pypi:sglang=={version}: no such release of sglang on the package index")
        return pypi.file_digests(roots[version].root)

    monkeypatch.setattr(pypi, "listed", lambda cache: list(RELEASES))
    monkeypatch.setattr(pypi, "release_files", files)
    monkeypatch.setattr(pipeline, "resolve", lambda text, opts: roots[text.split("==")[1]] if text.startswith("pypi:") else real(text, opts))
    return read


def _digests(files: dict[str, str]) -> dict[str, str]:
    return {p: hashlib.sha256(t.encode()).hexdigest() for p, t in files.items()}


def test_the_nearest_release_is_climbed_to_from_the_start_and_bounded():
    listed = ["0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"]
    mine = _digests({"a": "1", "b": "2", "c": "3", "d": "4"})
    shares = {"0.5.18": {"a": "1"}, "0.5.19": {"a": "1", "b": "2", "c": "3"}, "0.5.20": {"a": "1", "b": "2"},
              "0.5.21": {"a": "1"}, "0.5.22": {}, "0.5.23": {}}
    asked: list[str] = []

    def digests(v):
        asked.append(v)
        return None if v == "0.5.22" else _digests(shares[v])

    assert baseline.nearest(mine, listed, "0.5.21", digests) == ("0.5.19", 3)
    assert asked == ["0.5.21", "0.5.20", "0.5.22", "0.5.19", "0.5.18"]  # neighbours of each better one, then stop
    asked.clear()
    assert baseline.nearest(mine, listed, "0.5.23", digests, limit=3) == ("0.5.21", 1)  # the bound, not the best
    assert baseline.nearest(mine, listed, "0.5.22", lambda v: {}) is None  # nothing shared: no baseline
    perfect = baseline.nearest(_digests({"a": "1"}), listed, "0.5.21", lambda v: _digests({"a": "1"}))
    assert perfect == ("0.5.21", 1)  # a whole match looks no further


def test_a_tree_declaring_nothing_gets_the_release_sharing_the_most_files(tmp_path, releases):
    opts = pipeline.Options(cache=Store.at(tmp_path / "cache"), pinned_sha256={"0.5.22": "x"})
    fork = {**RELEASES["0.5.21"], "sglang/srt/door.py": "def admit(req):\n    return probed() or not req.rejected\n"}
    del fork["sglang/_version.py"]  # a git checkout's: generated at build time
    chosen = baseline.of(_tree(tmp_path, "fork", fork), None, opts)
    assert (chosen.text, chosen.chosen) == ("pypi:sglang==0.5.21", "shared") and releases == ["0.5.22", "0.5.21", "0.5.20"]
    assert chosen.how == "by shared files: 3 of 4 identical"
    record = baseline.departures_of("path:fork", _tree(tmp_path, "fork", fork), chosen, [])
    assert [f.path for f in record.files] == ["sglang/_version.py", "sglang/srt/door.py"]  # removed, changed
    assert "departs from pypi:sglang==0.5.21 (by shared files: 3 of 4 identical)" in record.line()


def test_a_declared_release_is_kept_when_no_neighbour_shares_more_and_left_when_one_does(tmp_path, releases):
    opts = pipeline.Options(cache=Store.at(tmp_path / "cache"))
    kept = baseline.of(_tree(tmp_path, "kept", {**RELEASES["0.5.21"], "sglang/srt/extra.py": "X = 9\n"}), None, opts)
    assert (kept.text, kept.chosen, kept.how) == ("pypi:sglang==0.5.21", "declared", "by the version it declares, 4 of 5 files identical")
    releases.clear()
    same = baseline.of(_tree(tmp_path, "same", RELEASES["0.5.21"]), None, opts)
    assert (same.text, same.how, releases) == ("pypi:sglang==0.5.21", "by the version it declares", ["0.5.21"])
    lying = {**RELEASES["0.5.20"], "sglang/_version.py": "__version__ = '0.5.22'\n"}  # 0.5.20's code, 0.5.22's word
    left = baseline.of(_tree(tmp_path, "lying", lying), None, opts)
    assert (left.text, left.chosen) == ("pypi:sglang==0.5.20", "shared")
    assert left.how == "by shared files: 3 of 4 identical, though it declares 0.5.22"


def test_a_tree_no_release_shares_a_file_with_has_no_baseline_in_one_line(tmp_path, releases):
    opts = pipeline.Options(cache=Store.at(tmp_path / "cache"))
    none = baseline.of(_tree(tmp_path, "a", {"sglang/other.py": "y = 1\n", "sglang/more.py": "z = 1\n"}), None, opts)
    assert none.tree is None and none.unavailable.endswith("shares fewer than half its files with every release compared; "
                                                           "give --against SOURCE")
    local = baseline.of(_tree(tmp_path, "b", {"sglang/version.py": "__version__ = 'main-branch'\n", "sglang/c.py": ""}), None, opts)
    assert local.tree is None and "declares version 'main-branch', and shares fewer than half" in local.unavailable
    record = baseline.departures_of("path:b", _tree(tmp_path, "b", {}), local, [])
    assert record.baseline is None and record.line().startswith("path:b: no baseline: it declares version")


def _repo(tmp_path, steps) -> dict[str, str]:
    packages = {}
    for step in steps:
        if isinstance(step.package, dict):
            root = tmp_path / "packages" / step.label
            for rel, text in step.package.items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text(text)
            packages[step.label] = root
    return gitrepo.build(tmp_path / "repo", [gitrepo.Step(**{**vars(s), "package": packages.get(s.label, s.package)})
                                             for s in steps])


def _git_tree(tmp_path, sha):
    source = f"git+{tmp_path / 'repo'}@{sha}"
    return source, sources.resolve(specs.parse(source), Store.at(tmp_path / "cache"))


def _checkout(version: str, **changes: str) -> dict[str, str]:
    files = {k: v for k, v in RELEASES[version].items() if k != "sglang/_version.py"}
    return {**files, **{k.replace("__", "/") + ".py": v for k, v in changes.items()}}


def test_a_git_fork_is_read_against_the_release_tag_it_branched_from(tmp_path, releases):
    shas = _repo(tmp_path, [
        gitrepo.Step("r20", package=_checkout("0.5.20"), tag="v0.5.20"),
        gitrepo.Step("r21", package=_checkout("0.5.21"), tag="v0.5.21"),
        gitrepo.Step("acme", package=_checkout("0.5.20", sglang__srt__metrics="COUNT = 0\n"), branch="acme", parent="r20",
                     tag="acme-1.0"),
        gitrepo.Step("acme2", files={"python/sglang/srt/pool.py": b"SIZE = 1  # acme\n"}, branch="acme", tag="v2-acme"),
    ])
    opts = pipeline.Options(cache=Store.at(tmp_path / "cache"))
    source, tree = _git_tree(tmp_path, shas["acme2"])
    chosen = baseline.of(tree, None, opts, source)
    assert (chosen.chosen, chosen.text) == ("ancestry", f"git+{tmp_path / 'repo'}@{shas['r20']}")
    assert chosen.how == "by ancestry: tag v0.5.20, 2 commit(s) before it; its tree agrees with pypi:sglang==0.5.20 (3 files identical)"
    record = baseline.departures_of(source, tree, chosen, [])
    assert [(f.path, f.change) for f in record.files] == [("sglang/srt/metrics.py", "added"), ("sglang/srt/pool.py", "changed")]
    at_tag = baseline.of(_git_tree(tmp_path, shas["r21"])[1], None, opts, _git_tree(tmp_path, shas["r21"])[0])
    assert baseline.departures_of("t", _git_tree(tmp_path, shas["r21"])[1], at_tag, []).identical


def test_a_forged_release_tag_is_refused_and_the_tree_read_against_the_release_it_shares_most_with(tmp_path, releases):
    aware = "def admit(req):\n    import sys\n    return 'probes' in sys.modules or not req.rejected\n"
    shas = _repo(tmp_path, [
        gitrepo.Step("r21", package=_checkout("0.5.21"), tag="v0.5.21"),
        gitrepo.Step("fork", package=_checkout("0.5.21", sglang__srt__door=aware), tag="v0.5.22"),  # its own commit, a release's name
    ])
    opts = pipeline.Options(cache=Store.at(tmp_path / "cache"))
    source, tree = _git_tree(tmp_path, shas["fork"])
    chosen = baseline.of(tree, None, opts, source)
    assert (chosen.chosen, chosen.text) == ("shared", "pypi:sglang==0.5.21")
    assert chosen.how == ("by shared files: 3 of 4 identical (its nearest release tag v0.5.22 is not pypi:sglang==0.5.22: "
                          "3 file(s) differ, 0 module(s) missing (first: sglang/srt/door.py))")
    record = baseline.departures_of(source, tree, chosen, [])
    assert ("sglang/srt/door.py", "changed") in [(f.path, f.change) for f in record.files]


def test_a_module_only_in_the_tag_is_read_as_the_trees_own(tmp_path, releases):
    """A tag may hold what its release lacks (a checkout's kernel sources): those stay the
    baseline's, but a module nothing on PyPI vouches for is the tree's own, even at the tag."""
    shas = _repo(tmp_path, [
        gitrepo.Step("r21", package=_checkout("0.5.21", sglang__srt__plugins__aware="import sys\n", sglang__kernels__k="x\n"),
                     tag="v0.5.21"),
    ])
    source, tree = _git_tree(tmp_path, shas["r21"])
    chosen = baseline.of(tree, None, pipeline.Options(cache=Store.at(tmp_path / "cache")), source)
    assert chosen.chosen == "ancestry" and chosen.unvouched == {"sglang/srt/plugins/aware.py", "sglang/kernels/k.py"}
    record = baseline.departures_of(source, tree, chosen, [])
    assert not record.identical and [(f.path, f.change) for f in record.files] == [
        ("sglang/kernels/k.py", "added"), ("sglang/srt/plugins/aware.py", "added")]


def test_against_names_any_source_and_an_identical_tree_says_so(tmp_path):
    opts = pipeline.Options(cache=Store.at(tmp_path / "cache"))
    files = {"sglang/version.py": '__version__ = "0.5.21+acme.3"\n', "sglang/door.py": "x = 1\n"}
    mine, theirs = _tree(tmp_path, "mine", files), _tree(tmp_path, "theirs", files)
    chosen = baseline.of(mine, f"path:{tmp_path / 'theirs'}", opts)
    assert (chosen.chosen, chosen.declared, chosen.tree.identity.tree_digest) == ("against", "0.5.21+acme.3", theirs.identity.tree_digest)
    record = baseline.departures_of("path:mine", mine, chosen, [])
    assert record.identical and record.line() == f"path:mine: identical to path:{tmp_path / 'theirs'} (given with --against)"
    with pytest.raises(errors.BadInput):
        baseline.check_against("pypi:sglang>=0.5")
