"""Links in a package: upstream's own layout taken in, hostile links refused (runner/store/intake.py).

Upstream's git tree holds one link, ``python/sglang/srt/mem_cache/cpp_radix_tree/.clang-format``
(mode 120000): to ``../../../../../sgl-kernel/.clang-format`` in v0.5.10..v0.5.16, out of the
package to a regular file of the repository, so left out and named, as the wheel leaves it out; to
``../../../kernels/aot/.clang-format`` from v0.5.17 on, inside the package, so stored as a link to
the stored copy and covered by the digest (both read in a public fork carrying upstream's tags).
Every other link is refused in one line naming it, exit 2, from a git commit and a directory alike,
and nothing is followed on the host.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from runner.errors import BAD_INPUT, BadInput
from runner.files import dirhash1
from runner.store import intake, path, sources, specs, trees
from runner.store.cache import Store
from tests import gitrepo
from tests.commands.test_bad_input import assert_one_error, cli
from tests.gitrepo import Step

PKG = "python/sglang"
CLANG = "srt/mem_cache/cpp_radix_tree/.clang-format"
UPSTREAM_TARGET = b"../../../../../sgl-kernel/.clang-format"  # as upstream's tree stores it (read with the search tools)
PACKAGE = {f"{PKG}/__init__.py": b"V = 1\n", f"{PKG}/srt/__init__.py": b"", f"{PKG}/srt/a.py": b"A = 1\n",
           f"{PKG}/srt/mem_cache/cpp_radix_tree/tree_v2.cpp": b"// c++\n"}
UPSTREAM = {**PACKAGE, f"{PKG}/{CLANG}": ("120000", UPSTREAM_TARGET), "sgl-kernel/.clang-format": b"BasedOnStyle: Google\n"}


def _git(repo: Path, files: dict, cache: Path) -> sources.Tree:
    commit = gitrepo.build(repo, [Step("one", files=files)])["one"]
    return sources.resolve(specs.parse(f"git+{repo}@{commit}"), Store.at(cache))


def _checkout(root: Path, files: dict) -> Path:
    """``files`` written as a checkout would (links as links)."""
    for name, data in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, tuple):
            os.symlink(os.fsdecode(data[1]), target)
        else:
            target.write_bytes(data)
    return root


def _stored(cache: Path) -> list[Path]:
    return list((cache / "trees").glob("h1*")) if (cache / "trees").exists() else []


# --- upstream's layout --------------------------------------------------------------------------


def test_upstreams_link_out_of_the_package_is_left_out_and_named_from_a_commit_and_a_checkout(tmp_path):
    """The same package from a commit, from a checkout of it, and without the link at all (as the
    wheel holds it): one tree digest; the link is named in what the source left out."""
    from_git = _git(tmp_path / "repo", UPSTREAM, tmp_path / "cache")
    named = f"sglang/{CLANG} -> {UPSTREAM_TARGET.decode()}"
    assert named in from_git.identity.left_out
    assert f"sglang/{CLANG}" not in from_git.files and not os.path.lexists(from_git.root / "sglang" / CLANG)
    checkout = _checkout(tmp_path / "checkout", UPSTREAM)
    from_dir = path.resolve(specs.PathSpec(dir=str(checkout)), Store.at(tmp_path / "cache2"))
    assert named in from_dir.identity.left_out
    bare = _checkout(tmp_path / "wheel-like", {n: d for n, d in PACKAGE.items()})
    plain = path.resolve(specs.PathSpec(dir=str(bare)), Store.at(tmp_path / "cache3"))
    assert from_git.identity.tree_digest == from_dir.identity.tree_digest == plain.identity.tree_digest


def test_upstreams_layout_from_v0_5_17_on_is_stored_as_a_link_to_the_stored_copy(tmp_path):
    target = b"../../../kernels/aot/.clang-format"
    tree = _git(tmp_path / "repo", {**PACKAGE, f"{PKG}/{CLANG}": ("120000", target),
                                    f"{PKG}/kernels/aot/.clang-format": b"BasedOnStyle: Google\n"}, tmp_path / "cache")
    stored = tree.root / "sglang" / CLANG
    assert os.readlink(stored) == target.decode() and stored.read_bytes() == b"BasedOnStyle: Google\n"
    assert tree.identity.left_out == () and f"sglang/{CLANG}" in tree.files


def test_upstreams_layout_resolves_on_the_command_line(tmp_path):
    repo = tmp_path / "repo"
    commit = gitrepo.build(repo, [Step("one", files=UPSTREAM, tag="v0.5.17")])["one"]
    proc = cli("resolve", f"git+{repo}@v0.5.17", "--cache-dir", str(tmp_path / "cache"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert commit in proc.stdout and "Traceback" not in proc.stderr


# --- hostile links: refused, one line, naming the link ------------------------------------------

HOSTILE = {
    "leaves-the-repository": ({f"{PKG}/{CLANG}": ("120000", b"../../../../../../../etc/passwd")}, "leaves the repository"),
    "absolute": ({f"{PKG}/{CLANG}": ("120000", b"/etc/passwd")}, "to an absolute path"),
    "dangling": ({f"{PKG}/{CLANG}": ("120000", b"../../../../../sgl-kernel/.nope")}, "does not exist"),
    "chain-out": ({f"{PKG}/{CLANG}": ("120000", UPSTREAM_TARGET),
                   "sgl-kernel/.clang-format": ("120000", b"../../../etc/passwd")}, "to another link"),
    "through-a-link": ({f"{PKG}/{CLANG}": ("120000", b"../../../../../k/.clang-format"), "k": ("120000", b"sgl-kernel"),
                        "sgl-kernel/.clang-format": b"x\n"}, "to another link"),
    "to-a-directory-out": ({f"{PKG}/{CLANG}": ("120000", b"../../../../../sgl-kernel"), "sgl-kernel/x": b""}, "to a directory"),
    "to-a-directory-in": ({f"{PKG}/srt/up": ("120000", b"..")}, "to a directory"),
    "loop": ({f"{PKG}/srt/b.py": ("120000", b"c.py"), f"{PKG}/srt/c.py": ("120000", b"b.py")}, "to another link"),
    "self": ({f"{PKG}/srt/b.py": ("120000", b"b.py")}, "to another link"),
    "out-under-an-imported-name": ({f"{PKG}/srt/b.py": ("120000", b"../../../other/b.py"), "other/b.py": b"EVIL = 1\n"},
                                   "under a name Python imports"),
    "out-and-back": ({f"{PKG}/srt/b.py": ("120000", b"../../sglang/srt/a.py")}, "leaves the package and comes back"),
    "trailing-slash": ({f"{PKG}/srt/b.py": ("120000", b"a.py/")}, "empty part"),
    "control-in-the-target": ({f"{PKG}/srt/b.py": ("120000", b"a\x1b[2J.py")}, "printable"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_link_in_a_commit_is_refused_in_one_line(tmp_path, case):
    files, why = HOSTILE[case]
    with pytest.raises(BadInput) as e:
        _git(tmp_path / "repo", {**PACKAGE, **files}, tmp_path / "cache")
    assert e.value.exit_code == BAD_INPUT and "\n" not in e.value.message and "\x1b" not in e.value.message
    assert why in e.value.message and "symbolic link" in e.value.message
    link = next(n for n, d in files.items() if isinstance(d, tuple) and n.startswith(PKG))
    assert f"'{link.removeprefix(PKG + '/')}'" in e.value.message
    assert not _stored(tmp_path / "cache")


@pytest.mark.parametrize("case", [c for c in HOSTILE if c != "control-in-the-target"])
def test_a_hostile_link_in_a_checkout_is_refused_in_one_line_and_never_followed(tmp_path, case):
    files, why = HOSTILE[case]
    checkout = _checkout(tmp_path / "checkout", {**PACKAGE, **files})
    with pytest.raises(BadInput) as e:
        path.resolve(specs.PathSpec(dir=str(checkout)), Store.at(tmp_path / "cache"))
    assert why in e.value.message and "\n" not in e.value.message
    assert not _stored(tmp_path / "cache")


def test_a_hostile_link_ends_the_command_with_exit_2_and_one_line(tmp_path):
    repo = tmp_path / "repo"
    gitrepo.build(repo, [Step("one", files={**PACKAGE, **HOSTILE["leaves-the-repository"][0]}, tag="v1")])
    assert_one_error(cli("resolve", f"git+{repo}@v1", "--cache-dir", str(tmp_path / "cache"), timeout=120), BAD_INPUT,
                     r"\.clang-format'.*leaves the repository")


def test_a_wheel_member_that_is_a_link_is_refused(tmp_path):
    import zipfile
    with zipfile.ZipFile(tmp_path / "w.whl", "w") as zf:
        zf.writestr("sglang/__init__.py", b"")
        info = zipfile.ZipInfo("sglang/b.py")
        info.create_system, info.external_attr = 3, (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, b"__init__.py")
    with zipfile.ZipFile(tmp_path / "w.whl") as zf, pytest.raises(BadInput, match="installers write it as a file"):
        trees.store(Store.at(tmp_path / "cache"), intake.wheel(zf, "sglang"), where="w.whl")


# --- a link inside the package: stored as a link, covered by the digest ------------------------


RECIPE = r"""
{ find sglang -type f ! -path '*/__pycache__/*' ! -name '*.py[co]' -print0 | xargs -0r sha256sum
  find sglang -type l ! -path '*/__pycache__/*' ! -name '*.py[co]' -print0 | while IFS= read -r -d '' l; do
    printf 'symlink:%s  %s\n' "$(printf '%s' "$(readlink -- "$l")" | sha256sum | cut -d' ' -f1)" "$l"; done
} | LC_ALL=C sort -t' ' -k3 | sha256sum | cut -d' ' -f1 | xxd -r -p | base64
"""


def test_a_link_inside_the_package_is_stored_as_a_link_to_the_stored_copy_and_digested(tmp_path):
    files = {**PACKAGE, f"{PKG}/srt/b.py": ("120000", b"a.py"), f"{PKG}/srt/sub/c.py": ("120000", b"../a.py")}
    tree = _git(tmp_path / "repo", files, tmp_path / "cache")
    for name, target in (("srt/b.py", "a.py"), ("srt/sub/c.py", "../a.py")):
        stored = tree.root / "sglang" / name
        assert os.readlink(stored) == target and stored.read_bytes() == b"A = 1\n"
        assert os.path.realpath(stored) == str((tree.root / "sglang" / "srt" / "a.py").resolve())
    assert "sglang/srt/b.py" in tree.files and tree.identity.files == 4  # regular files counted
    lines = [(f"sglang/{n.removeprefix(PKG + '/')}", hashlib.sha256(d).hexdigest()) for n, d in PACKAGE.items()]
    lines += [("sglang/srt/b.py", trees.link_line("a.py")), ("sglang/srt/sub/c.py", trees.link_line("../a.py"))]
    assert tree.identity.tree_digest == dirhash1(lines)
    recomputed = subprocess.run(["bash", "-c", RECIPE], cwd=tree.root, capture_output=True, text=True, check=True).stdout
    assert "h1:" + recomputed.strip() == tree.identity.tree_digest  # the recipe of docs/sources-and-intake.md
    # the same layout as a file holding the link's text is another tree
    as_text = _git(tmp_path / "repo2", {**files, f"{PKG}/srt/b.py": b"a.py", f"{PKG}/srt/sub/c.py": b"../a.py"}, tmp_path / "cache")
    assert as_text.identity.tree_digest != tree.identity.tree_digest
    # a stored link retargeted is damage: dropped on the next use, never served
    os.unlink(tree.root / "sglang" / "srt" / "b.py")
    os.symlink("__init__.py", tree.root / "sglang" / "srt" / "b.py")
    assert trees.load(Store.at(tmp_path / "cache"), tree.identity.tree_digest) is None


# --- generated: where a link leads, against the kernel ------------------------------------------

STEPS = ["..", ".", "a", "b.py", "d", "l", "x"]
link_target = st.one_of(st.sampled_from(["a", "b.py", "d/a", "../a", "../d/a", "../../a", "../../d/a", "../p/a", "./a", "l", "../l"]),
                        st.lists(st.sampled_from(STEPS), min_size=1, max_size=5).map("/".join))
PLACES = ["p/a", "p/d/a", "p/d/b.py", "p/b.py", "a", "d/a", "p/d/l", "p/l", "l", "p/d/x", "p/x"]
layout = st.tuples(st.lists(st.tuples(st.sampled_from(PLACES), st.sampled_from(["file", "dir"])), max_size=3),
                   st.lists(st.tuples(st.sampled_from(PLACES), link_target), min_size=1, max_size=2))


def _oracle(root: Path, name: str, target: str) -> str:
    """What the kernel makes of the link ``root/p/name``: "in" (a regular file of the package p, reached
    through real directories only, never above p on the way), "out" (a regular file of root outside p,
    the link's name not one Python imports), or "refused"."""
    if target.startswith("/") or "" in target.split("/"):
        return "refused"
    here = (root / "p" / name).parent
    depth = len(here.relative_to(root).parts)
    left = False
    for part in target.split("/"):
        if not os.path.isdir(here):  # a part is looked up only in a directory: 'a/..' with a a file fails (ENOTDIR)
            return "refused"
        depth += -1 if part == ".." else 0 if part == "." else 1
        if depth < 0:
            return "refused"
        left = left or depth < 1
        here = Path(os.path.normpath(here / part)) if part == ".." else here / part
        if part not in ("..", ".") and os.path.islink(here):
            return "refused"
    if not os.path.isfile(here) or os.path.islink(here) or target.endswith((".", "..")):
        return "refused"
    inside = Path(os.path.realpath(here)).is_relative_to(os.path.realpath(root / "p"))
    if inside:
        return "refused" if left else "in"
    return "refused" if name.endswith(".py") else "out"


def _layout(root: Path, entries) -> dict[str, str]:
    """The generated layout written under ``root`` (the package is ``root/p``); its links in ``p`` (name -> target)."""
    (root / "p").mkdir(parents=True)
    made: dict[str, str] = {"p": "dir", "p/d": "dir", "d": "dir"}
    for fixed in ("p/__init__.py", "p/a", "p/d/a", "a", "d/a"):  # targets a generated link often names
        (root / fixed).parent.mkdir(parents=True, exist_ok=True)
        (root / fixed).write_bytes(fixed.encode())
        made[fixed] = "file"
    others, generated_links = entries
    for where, kind, target in [(w, k, "") for w, k in others] + [(w, "link", t) for w, t in generated_links]:
        full = root / where
        if where in made or any(made.get("/".join(where.split("/")[:i]), "dir") != "dir" for i in range(1, where.count("/") + 1)):
            continue  # taken, or under a file or link: not a layout a file system holds
        full.parent.mkdir(parents=True, exist_ok=True)
        for i in range(1, where.count("/") + 1):
            made.setdefault("/".join(where.split("/")[:i]), "dir")
        if kind == "file":
            full.write_bytes(where.encode())
        elif kind == "dir":
            full.mkdir()
            (full / "f").write_bytes(b"F\n")  # never empty: an empty directory is another rule
            made[where + "/f"] = "file"
        else:
            os.symlink(target, full)
        made[where] = kind if kind != "link" else f"link:{target}"
    return {w.removeprefix("p/"): t.removeprefix("link:") for w, t in made.items() if t.startswith("link:") and w.startswith("p/")}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout)
@example(([], [("p/d/b.py", "a/../a")]))  # through a file, then up: ENOTDIR, refused (found in a run, 2026-12-04)
def test_a_checkout_with_generated_links_is_taken_in_as_the_kernel_resolves_it(entries):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        links = _layout(root, entries)
        verdicts = {n: _oracle(root, n, t) for n, t in links.items()}
        try:
            with intake.directory(root, "gen", ("p",)) as walked:
                taken = intake.take(walked, None, intake.Bounds(), "gen", intake.beside(root, ("p",)))
        except intake.Refused as e:
            assert "refused" in verdicts.values(), f"refused, the kernel says {verdicts}: {e.message}"
            assert "\n" not in e.message
            event("refused")
            return
        assert "refused" not in verdicts.values(), f"taken in, the kernel says {verdicts}"
        assert dict(taken.links) == {n: links[n] for n, v in verdicts.items() if v == "in"}
        assert dict(taken.out) == {n: links[n] for n, v in verdicts.items() if v == "out"}
        event(f"taken in: {len(taken.links)} in, {len(taken.out)} out")
        # stored, every link leads to the stored copy of the same file
        dest = Path(tmp) / "stored"
        with intake.directory(root, "gen", ("p",)) as walked:
            intake.take(walked, dest, intake.Bounds(), "gen", intake.beside(root, ("p",)))
        for n in dict(taken.links):
            real = Path(os.path.realpath(dest / n))
            assert real.is_relative_to(dest.resolve()) and real.is_file()
            assert real.read_bytes() == (root / "p" / n).read_bytes()
        assert not any(os.path.lexists(dest / n) for n in dict(taken.out))


# --- a real release's tree in upstream's layout --------------------------------------------------


@pytest.mark.slow
def test_a_commit_of_a_real_release_in_upstreams_layout_is_the_releases_tree(tmp_path, release_tree):
    """0.5.21's package committed as upstream lays it out (the .clang-format link, sgl-kernel/ beside
    python/): its git source resolves to the very tree of the same files read from a directory,
    the link named as left out; so an audit of the commit probes the bytes a release's audit does."""
    release = release_tree("0.5.21")
    package = tmp_path / "pkg"
    shutil.copytree(release.root, package, ignore=shutil.ignore_patterns("*.so"))
    repo = tmp_path / "repo"
    commit = gitrepo.build(repo, [Step("v0.5.21", package=package, tag="v0.5.21",
                                       files={f"{PKG}/{CLANG}": ("120000", UPSTREAM_TARGET),
                                              "sgl-kernel/.clang-format": b"BasedOnStyle: Google\n"})])["v0.5.21"]
    from_git = sources.resolve(specs.parse(f"git+{repo}@v0.5.21"), Store.at(tmp_path / "cache"))
    from_dir = path.resolve(specs.PathSpec(dir=str(package)), Store.at(tmp_path / "cache"))
    assert from_git.identity.commit == commit
    assert from_git.identity.tree_digest == from_dir.identity.tree_digest
    assert f"sglang/{CLANG} -> {UPSTREAM_TARGET.decode()}" in from_git.identity.left_out
    if not any(f.endswith(".so") for f in release.files):
        assert from_git.identity.tree_digest == release.identity.tree_digest


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout)
def test_a_commit_of_generated_links_is_the_tree_its_checkout_is(entries):
    """The same layout committed and checked out: one verdict, and one tree when taken in (git's
    trees stand in for the directory around the package)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        _layout(root, entries)
        for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@diffprobe.invalid", "commit", "-qm", "x"]):
            subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)

        def outcome(take) -> tuple[str, tuple[str, ...]]:
            try:
                return take()
            except BadInput:
                return "refused", ()

        def git_tree():
            tree = sources.resolve(specs.parse(f"git+{root}@HEAD"), Store.at(Path(tmp) / "c1"), package_dir="p")
            return tree.identity.tree_digest, tuple(sorted(tree.identity.left_out))

        def dir_tree():
            with intake.directory(root, "gen", ("p",)) as walked:
                stored = trees.store(Store.at(Path(tmp) / "c2"), walked, where="gen", around=intake.beside(root, ("p",)))
            return stored.stamp.tree_digest, tuple(sorted(stored.left_out))

        from_git, from_dir = outcome(git_tree), outcome(dir_tree)
        event(from_git[0] if from_git[0] == "refused" else "taken in")
        assert from_git == from_dir  # refused by both, or one tree with the same links left out
