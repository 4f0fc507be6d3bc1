"""The upstream baseline an audited tree is compared with, and the departure record it gives.

A release audited from PyPI is its own baseline. ``--against SOURCE`` names one. Otherwise it is
chosen from the tree's bytes, since a baseline that is not the tree's true base floods the review
(a real vendor fork reads 70 hunks against its true base, over a thousand against a neighbour):
- a git source whose history carries upstream's release tags: the nearest such tag by ancestry,
  taken only if the tagged tree agrees with that release on PyPI file by file (tags are the
  repository's word: a fork can tag its own commit ``v0.5.21``), unless the release chosen by
  shared files (below) shares more identical files with the tree, looked for when the tree declares
  another release than the tag's or shares fewer than half its files with the tag (upstream tags its
  releases on release branches, so from a commit of its main line the nearest tag by ancestry can be
  thousands of commits back);
- else the release sharing the most identical files with the tree, climbing from the version the
  tree declares (``sglang/version.py``, read from the stored bytes, never run; a wheel's version is
  in the generated ``_version.py`` it imports; a local segment such as ``+vendor.3`` is dropped), or
  from the newest pinned release, to its neighbours while they share more, at most ``CLIMB``
  releases (their file digests are kept in the store: runner/store/pypi.py).
The record says how it was chosen; a tree that shares fewer than half its files with every release
compared has no baseline (its review would be the whole tree).
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape

from runner import errors, ui
from runner.app import pipeline
from runner.evidence import departures
from runner.evidence.departures import Departures
from runner.evidence.receipts import Receipt
from runner.store import mirrors, pypi, sources, specs

DECLARING = ("sglang/version.py", "sglang/_version.py")
MAX_BYTES = 64 << 10
_RELEASE = re.compile(r"[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?")


CLIMB = 6  # releases whose files are compared with a tree's, at most, per choice


@dataclass(frozen=True)
class Baseline:
    text: str | None  # the baseline's source; None: there is none
    chosen: str  # "declared", "against", "ancestry" or "shared"
    declared: str | None
    tree: sources.Tree | None
    unavailable: str | None = None
    how: str | None = None  # how it was chosen, in words (the record's line says it)
    unvouched: frozenset[str] = frozenset()  # the baseline tree's modules its release lacks: read as the tree's own
    same: int = 0  # files identical in the tree and the baseline
    total: int = 0  # the tree's files
    tag: str | None = None  # the release tag chosen by ancestry


def declared_version(root: Path) -> str | None:
    """The version the tree declares: a module-level ``__version__ = "..."`` in ``sglang/version.py``,
    else in ``sglang/_version.py`` (a fallback inside ``try``/``except`` is not a declaration)."""
    for rel in DECLARING:
        path = root / rel
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
            continue
        try:
            module = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in module.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            value = getattr(node, "value", None)
            if (any(isinstance(t, ast.Name) and t.id == "__version__" for t in targets)
                    and isinstance(value, ast.Constant) and isinstance(value.value, str)):
                return value.value[:100]
    return None


def check_against(text: str | None) -> None:
    """``--against``, refused (one line, exit 2) before any work when it is not a source."""
    if text is not None:
        specs.parse(text)


def of(tree: sources.Tree, against: str | None, opts: pipeline.Options, source: str | None = None) -> Baseline:
    """The baseline of ``tree`` (``source``: its source text, for a git tree's repository; else its
    identity's): ``against`` when given (a failure to resolve it is the user's error), else chosen
    from its bytes (a failure is said, and the audit goes on)."""
    declared = declared_version(tree.root)
    if against:
        return Baseline(against, "against", declared, pipeline.resolve(against, opts), how="given with --against")
    release = declared.split("+", 1)[0] if declared else None
    if release and tree.identity.kind == "pypi" and tree.identity.version == release:
        return Baseline(f"pypi:{specs.PACKAGE}=={release}", "declared", declared, tree, how="by the version it declares")
    refused = None
    start = release if release and _RELEASE.fullmatch(release) else None
    if tree.identity.kind == "git":
        chosen, refused = _by_ancestry(tree, declared, opts, source or tree.identity.source)
        if chosen is not None:
            far = chosen.same * 2 < chosen.total
            if (start is None or chosen.tag == f"v{start}") and not far:
                return chosen
            nearer = _by_shared_files(tree, declared, start, opts, None)
            if nearer.text is None or nearer.same <= chosen.same:
                return chosen
            return dataclasses.replace(nearer, how=f"{nearer.how} (nearer in bytes than the nearest release tag by "
                                                   f"ancestry, {chosen.tag}: {chosen.same} files identical)")
    return _by_shared_files(tree, declared, start, opts, refused)


def _by_ancestry(tree: sources.Tree, declared: str | None, opts: pipeline.Options, source: str) -> tuple[Baseline | None, str]:
    """The nearest release tag by ancestry, if its tree agrees with the release: every Python file of
    the release (its generated ``_version.py`` aside) is in the tagged tree, byte for byte, and no
    file both hold differs. Files only in the tag (a checkout's kernel sources) stay the baseline's;
    modules only in the tag are read as the tree's own. Else why not, in words."""
    url = specs.parse(source).url
    found = mirrors.release_tags(sources.resolve_commit(url, tree.identity.commit, opts.cache)[0], tree.identity.commit,
                                 lambda v: bool(_RELEASE.fullmatch(v)))
    if found is None:
        return None, "no release tag is reachable from its commit"
    tag, sha, count = found
    version = tag[1:]
    try:
        release = pypi.release_files(version, opts.cache, opts.pinned_sha256.get(version), opts.bounds)
    except errors.DiffprobeError as e:
        return None, f"its nearest release tag {tag}: pypi:{specs.PACKAGE}=={version} could not be had ({errors.one_line(str(e))[:120]})"
    text = str(specs.GitSpec(url=url, rev=sha))
    try:
        tagged = pipeline.resolve(text, opts)
    except errors.DiffprobeError as e:
        return None, f"its nearest release tag {tag}: its tree could not be read ({errors.one_line(str(e))[:120]})"
    files = pypi.file_digests(tagged.root)
    differ = [p for p in release if p in files and files[p] != release[p]]
    lacking = [p for p in release if p.endswith(".py") and p != "sglang/_version.py" and p not in files]
    if differ or lacking:
        odd = (differ or lacking)[0]
        return None, (f"its nearest release tag {tag} is not pypi:{specs.PACKAGE}=={version}: {len(differ)} file(s) differ, "
                      f"{len(lacking)} module(s) missing (first: {odd})")
    same = sum(1 for p in release if files.get(p) == release[p])
    unvouched = frozenset(p for p in files if p not in release and p.endswith((".py", *departures.COMPILED)))
    how = (f"by ancestry: tag {tag}, {count} commit(s) before it; its tree agrees with pypi:{specs.PACKAGE}=={version} "
           f"({same} files identical" + (f"; {len(unvouched)} module(s) only in the tag read as the tree's own" if unvouched else "")
           + ")")
    mine = pypi.file_digests(tree.root)
    shared = sum(1 for p, d in mine.items() if files.get(p) == d)
    return Baseline(text, "ancestry", declared, tagged, how=how, unvouched=unvouched, same=shared, total=len(mine), tag=tag), ""


def nearest(mine: dict[str, str], releases: list[str], start: str, digests: Callable[[str], dict[str, str] | None],
            limit: int = CLIMB) -> tuple[str, int] | None:
    """The release sharing the most identical files with ``mine`` (path -> sha256), climbing from
    ``start`` to a neighbour while it shares as many or more (of equals, the nearer one wins), after at most
    ``limit`` releases; None when none shares a file. ``digests`` gives a release's files, None
    when it cannot be had (stepped over)."""
    def shared(i: int) -> int:
        theirs = digests(releases[i])
        return -1 if theirs is None else sum(1 for p, d in mine.items() if theirs.get(p) == d)

    first = cur = releases.index(start)
    scores = {cur: shared(cur)}

    def step(d: int) -> int | None:  # the next unread release from the current one, past those that cannot be had
        j = cur + d
        while 0 <= j < len(releases) and scores.get(j) == -1:
            j += d
        return j if 0 <= j < len(releases) and j not in scores else None

    while scores[cur] < len(mine) and len(scores) < limit:
        around = [j for j in (step(-1), step(1)) if j is not None][: limit - len(scores)]
        if not around:
            break
        scores |= {j: shared(j) for j in around}
        top = max(around, key=lambda j: scores[j])
        if scores[top] >= scores[cur]:  # on, along a plateau too
            cur = top
        elif all(scores[j] >= 0 for j in around):
            break
    best = max(scores, key=lambda j: (scores[j], -abs(j - first)))
    return (releases[best], scores[best]) if scores[best] > 0 else None


def _by_shared_files(tree: sources.Tree, declared: str | None, start: str | None, opts: pipeline.Options,
                     refused: str | None) -> Baseline:
    """The nearest release by the share of identical files (see ``nearest``)."""
    def digests(version: str) -> dict[str, str] | None:
        try:
            return pypi.release_files(version, opts.cache, opts.pinned_sha256.get(version), opts.bounds)
        except errors.DiffprobeError:
            return None

    mine = pypi.file_digests(tree.root)
    if start is not None and (theirs := digests(start)) is not None and all(theirs.get(p) == d for p, d in mine.items()):
        return Baseline(f"pypi:{specs.PACKAGE}=={start}", "declared", declared, pipeline.resolve(f"pypi:{specs.PACKAGE}=={start}", opts),
                        how="by the version it declares", same=len(mine))
    pinned = sorted(opts.pinned_sha256, key=pypi.version_key)
    try:
        listed = [v for v in pypi.listed(opts.cache) if _RELEASE.fullmatch(v)]
    except errors.DiffprobeError:
        listed = pinned  # offline: the pinned release line
    if start is not None and start not in listed:
        listed = sorted({*listed, start}, key=pypi.version_key)
    begin = start or (pinned[-1] if pinned and pinned[-1] in listed else listed[-1] if listed else None)
    found = nearest(mine, listed, begin, digests) if begin else None
    why = f" ({refused})" if refused else ""
    if found is None or found[1] * 2 < len(mine):
        said = f"declares version {declared!r}, and " if declared else ""
        return Baseline(None, "shared", declared, None, f"it {said}shares fewer than half its files with every release "
                                                        f"compared{why}; give --against SOURCE")
    version, same = found
    text = f"pypi:{specs.PACKAGE}=={version}"
    chosen = "declared" if version == start else "shared"
    how = (f"by the version it declares, {same} of {len(mine)} files identical" if chosen == "declared" else
           f"by shared files: {same} of {len(mine)} identical" + (f", though it declares {declared}" if declared else "") + why)
    return Baseline(text, chosen, declared, pipeline.resolve(text, opts), how=how, same=same)


def departures_of(source: str, tree: sources.Tree, baseline: Baseline, receipts: list[Receipt]) -> Departures:
    digest = tree.identity.tree_digest
    if baseline.tree is None:
        return Departures(source=source, tree_digest=digest, baseline=baseline.text, baseline_digest=None, chosen=baseline.chosen,
                          declared=baseline.declared, unavailable=baseline.unavailable, identical=False, how=baseline.how)
    return departures.compare(source, digest, tree.root, baseline.text or "", baseline.tree.identity.tree_digest,
                              baseline.tree.root, baseline.chosen, baseline.declared, receipts, how=baseline.how,
                              unvouched=baseline.unvouched)


def say(record: Departures) -> None:
    """One line on the terminal: identical, no baseline, or how far it departs."""
    ui.err.print(escape(errors.printable(record.line())))
