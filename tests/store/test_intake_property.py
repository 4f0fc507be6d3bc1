"""Intake over generated layouts (hypothesis), fast, no SGLang.

An oracle written apart from intake says which layouts are legal (regular files and directories,
plain printable UTF-8 names, no two that a case-insensitive or normalizing file system would take
for one, honest sizes); intake must refuse exactly the others with one line,
and store exactly the legal ones' source files. Over what it stores: the digest is injective (two
layouts share a digest only if they store the same files with the same bytes), and everything
Python could import from the stored tree (every file reachable, following anything) is a regular
file the digest covers; no directory exists that no file needs (a namespace package the digest
could not see).
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tempfile
import unicodedata
import zipfile
from pathlib import Path

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from runner.errors import BAD_INPUT
from runner.files import dirhash1
from runner.store import intake, path, specs, trees
from runner.store.cache import Store
from runner.store.intake import Bounds, Entry, Refused

REG, DIR, LNK, FIFO = stat.S_IFREG | 0o644, stat.S_IFDIR | 0o755, stat.S_IFLNK | 0o777, stat.S_IFIFO | 0o644
PARTS = ["a", "A", "b", "a.py", "__init__.py", "x.pyc", "__pycache__", ".", "..", " ", "é", "e\u0301", "\n", "\r", "\t", "\\", "\x1b",
         "\u202e", "\u2028", "\x7f", "\x00"]


def _legal_part(part: str) -> bool:
    return part not in ("", ".", "..") and "\\" not in part and all(c.isprintable() for c in part)


def _twin_free(names) -> bool:
    """No two names (and the directories they imply) are one file on macOS or Windows: parts
    compared NFKC-normalized, case-folded, trailing dots and blanks dropped."""
    every = {"/".join(n.split("/")[:i]) for n in names for i in range(1, n.count("/") + 2)}
    fold = lambda n: "/".join(unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", p).casefold()).rstrip(". ")  # noqa: E731
                              for p in n.split("/"))
    return len({fold(n) for n in every}) == len(every)


def _bytecode(name: str) -> bool:
    return name.endswith((".pyc", ".pyo")) or "__pycache__" in name.split("/")[:-1]


part = st.lists(st.sampled_from(PARTS), min_size=1, max_size=3).map("".join)
names = st.lists(part, min_size=1, max_size=3).map("/".join)
content = st.binary(max_size=40)


# --- entry streams (any source: names and modes as bytes and ints, sizes possibly lying) --------

entries = st.lists(st.tuples(names, st.sampled_from([REG, REG, REG, DIR, LNK, FIFO, 0o160000]), content,
                             st.sampled_from([0, 0, 0, 1, -1])), max_size=8)


def _oracle(layout: list[tuple[str, int, bytes, int]]) -> dict[str, bytes] | None:
    """The files a legal layout stores, or None if it must be refused."""
    files, dirs = {}, set()
    for name, mode, data, lie in layout:
        if not all(_legal_part(p) for p in name.split("/")) or name in files or name in dirs:
            return None
        if mode == DIR:
            dirs.add(name)
        elif mode != REG or (lie and not _bytecode(name)):  # byte-code is never read
            return None
        else:
            files[name] = data
    for name in files:
        parts = name.split("/")
        if any("/".join(parts[:i]) in files for i in range(1, len(parts))):
            return None
    if not _twin_free([*files, *dirs]):
        return None
    return {n: d for n, d in files.items() if not _bytecode(n)}


def _as_the_oracle_says(expected, layout, take):
    """``take()``'s result where the oracle's ``expected`` is a layout's files, or None where it is None and
    ``take`` refused it in one line as bad input; anything else fails the test. Both generated tests judge so."""
    try:
        taken = take()
    except Refused as e:
        assert expected is None, f"refused a legal layout: {e.message}"
        assert e.exit_code == BAD_INPUT and "\n" not in e.message
        event("refused")
        return None
    assert expected is not None, f"took in an illegal layout: {layout!r}"
    event("taken in")
    return taken


def _stream(layout):
    """A link's target given only as a reader (as a wheel gives it): refused, like every other type
    but files and directories (links whose text the source gives: test_intake_links.py)."""
    return [Entry(name.encode("utf-8", "surrogatepass"), mode, len(data) + lie, (lambda d=data: io.BytesIO(d)) if mode == LNK else data)
            for name, mode, data, lie in layout]


def _digest(files: dict[str, bytes]) -> str:
    return dirhash1((f"sglang/{n}", hashlib.sha256(d).hexdigest()) for n, d in files.items())


@settings(max_examples=200, deadline=None)
@given(entries, entries)
@example([("a__pycache__/a", REG, b"", 1)], [])  # a directory merely named like __pycache__ is source
def test_intake_refuses_exactly_the_illegal_streams_and_its_digest_is_injective(a, b):
    got = []
    for layout in (a, b):
        expected = _oracle(layout)
        taken = _as_the_oracle_says(expected, layout, lambda: intake.take(_stream(layout), None, Bounds(), "gen"))
        if taken is None:
            continue
        assert dict((n, h) for n, h in taken.files) == {n: hashlib.sha256(d).hexdigest() for n, d in expected.items()}
        got.append((expected, dirhash1((f"sglang/{n}", h) for n, h in taken.files)))
    if len(got) == 2:
        (files_a, digest_a), (files_b, digest_b) = got
        assert (digest_a == digest_b) == (files_a == files_b)
        event("two taken in, same files" if files_a == files_b else "two taken in, different files")


legal_part = st.lists(st.sampled_from(["a", "b", " ", "é", ".py", "a  b", "0" * 64]), min_size=1, max_size=3).map("".join)
legal_files = st.dictionaries(st.lists(legal_part, min_size=1, max_size=3).map("/".join), content, min_size=1, max_size=6)


def _mutations(files: dict[str, bytes]):
    """Near misses of ``files``: each yields another tree that a line-based digest could confuse with it."""
    name, data = sorted(files.items())[0]
    rest = {n: d for n, d in files.items() if n != name}
    yield {**rest, name + " ": data}  # a longer name
    yield {**rest, name: data + b"\n"}  # one more byte
    yield {**rest, name.replace("/", " ", 1) if "/" in name else f"{name}/x": data}  # a directory boundary moved
    yield {**rest, name: hashlib.sha256(data).hexdigest().encode()}  # its content is its own hash's text
    if rest:
        other = sorted(rest)[0]
        yield {**{n: d for n, d in rest.items() if n != other}, name: rest[other], other: data}  # contents swapped
        yield rest  # one file fewer


@settings(max_examples=100, deadline=None)
@given(legal_files)
def test_two_trees_intake_takes_in_share_a_digest_only_if_they_are_the_same_files(files):
    def digest(tree: dict[str, bytes]) -> str | None:
        stream = [Entry(n.encode(), REG, len(d), d) for n, d in tree.items()]
        try:
            taken = intake.take(stream, None, Bounds(), "gen")
        except Refused:
            return None  # a file where another needs a directory: not a tree
        return dirhash1((f"sglang/{n}", h) for n, h in taken.files)

    first = digest(files)
    for other in _mutations(files):
        second = digest(other)
        if first is not None and second is not None:
            assert (first == second) == (files == other)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(legal_files)
def test_the_same_files_from_a_wheel_and_from_a_directory_are_the_same_tree(files):
    """One intake for every source: a package's bytes name one tree whichever way they came in."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files = {"__init__.py": b"", **files}
        if any("/".join(n.split("/")[:i]) in files for n in files for i in range(1, n.count("/") + 1)):
            return  # a file where another needs a directory: no directory can hold it
        if not _twin_free(files):
            return  # refused from either source (test_intake.py)
        for name, data in files.items():
            (tmp / "d" / "sglang" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / "d" / "sglang" / name).write_bytes(data)
        with zipfile.ZipFile(tmp / "w.whl", "w") as zf:
            for name, data in files.items():
                zf.writestr(f"sglang/{name}", data)
        cache = Store(tmp / "cache")
        from_dir = path.resolve(specs.PathSpec(dir=str(tmp / "d")), cache)
        with zipfile.ZipFile(tmp / "w.whl") as zf:
            from_wheel = trees.store(cache, intake.wheel(zf, "sglang"), where="w.whl")
        assert from_wheel.stamp.tree_digest == from_dir.identity.tree_digest == _digest(files)
        assert from_wheel.root == from_dir.root and from_wheel.files == from_dir.files


# --- directory layouts on disk: the path: source, end to end -----------------------------------

fs_part = st.lists(st.sampled_from([p for p in PARTS if p not in ("\x00", ".", "..")]), min_size=1, max_size=2).map("".join)
fs_layout = st.lists(st.tuples(st.lists(fs_part, min_size=1, max_size=3),
                               st.sampled_from(["file", "file", "file", "dir", "link-in", "link-out", "dirlink", "fifo", "hardlink"]),
                               content), max_size=7)


def _build(root: Path, layout, outside: Path) -> tuple[dict[str, bytes], dict[str, str]] | None:
    """Make the layout under ``root/sglang``; return what the oracle says is stored (None: refused):
    the files, and the links (name -> the file it leads to). A "link-in" is ``__init__.py`` beside
    it: taken in as a link when that is a file of the tree, refused otherwise (it dangles or chains)."""
    pkg = root / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_bytes(b"")
    made: dict[str, bytes | None] = {"__init__.py": b""}  # None: a directory
    links: dict[str, str] = {}
    legal = True
    for parts, kind, data in layout:
        name = "/".join(parts)
        if any(made.get("/".join(parts[:i]), None) is not None for i in range(1, len(parts))) or name in made:
            continue  # a parent is a file, or the name is taken: not a layout a file system can hold
        target = pkg.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        for i in range(1, len(parts)):
            made.setdefault("/".join(parts[:i]), None)
        if kind == "file":
            target.write_bytes(data)
            made[name] = data
            continue
        if kind == "dir":
            target.mkdir()
            made[name] = None
            continue
        {"link-in": lambda: os.symlink("__init__.py", target), "link-out": lambda: os.symlink(outside, target),
         "dirlink": lambda: os.symlink(outside.parent, target), "fifo": lambda: os.mkfifo(target),
         "hardlink": lambda: os.link(outside, target)}[kind]()
        made[name] = b"?"
        if kind == "link-in":
            links[name] = "/".join([*parts[:-1], "__init__.py"])
        else:
            legal = False
    files = {n: d for n, d in made.items() if d is not None and n not in links}
    if not legal or not all(_legal_part(p) for name in made for p in name.split("/")) or not _twin_free(made):
        return None
    if any(t not in files or _bytecode(t) for t in links.values()):
        return None
    return ({n: d for n, d in files.items() if not _bytecode(n)}, {n: t for n, t in links.items() if not _bytecode(n)})


def _reachable(root: Path) -> tuple[set[str], list[str]]:
    """Every file under ``root`` as Python would find it (links followed), and every directory with nothing below."""
    files, empty = set(), []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        rel = os.path.relpath(dirpath, root)
        files |= {os.path.normpath(os.path.join(rel, f)) for f in filenames}
        if not dirnames and not filenames:
            empty.append(rel)
    return files, empty


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fs_layout, fs_layout)
def test_a_directory_is_taken_in_exactly_as_the_oracle_says(a, b):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        secret = tmp / "host" / "secret.py"
        secret.parent.mkdir()
        secret.write_bytes(b"HOST-SECRET-7f3a")
        cache = Store(tmp / "cache")
        got = []
        for i, layout in enumerate((a, b)):
            expected = _build(tmp / f"t{i}", layout, secret)
            tree = _as_the_oracle_says(expected, layout, lambda: path.resolve(specs.PathSpec(dir=str(tmp / f"t{i}")), cache))
            if tree is None:
                continue
            files, links = expected
            stored = {f.removeprefix("sglang/"): (tree.root / f).read_bytes() for f in tree.files}
            assert stored == {**files, **{n: files[t] for n, t in links.items()}}
            assert tree.identity.tree_digest == dirhash1([*((f"sglang/{n}", hashlib.sha256(d).hexdigest()) for n, d in files.items()),
                                                          *((f"sglang/{n}", trees.link_line("__init__.py")) for n in links)])
            reachable, empty = _reachable(tree.root / "sglang")
            assert reachable == set(files) | set(links) and not empty  # what Python can import is what the digest covers
            assert all(stat.S_ISREG(os.lstat(tree.root / "sglang" / f).st_mode) for f in files)
            assert all(os.readlink(tree.root / "sglang" / n) == "__init__.py" for n in links)  # a link, to the stored copy
            got.append((expected, tree.identity.tree_digest))
        if len(got) == 2:
            (files_a, digest_a), (files_b, digest_b) = got
            assert (digest_a == digest_b) == (files_a == files_b)
        leaked = [p for p in (tmp / "cache").rglob("*") if p.is_file() and b"HOST-SECRET-7f3a" in p.read_bytes()]
        assert not leaked
