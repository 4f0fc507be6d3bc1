"""Git mirrors: one blobless partial clone per repository, read without git's lazy fetch.

Why not let git fetch on demand: in a partial clone a lazy fetch asks for objects with no
negotiation, so resolving one new commit resends its whole history (commits and trees), and
`git archive SHA -- python/sglang` fetches every missing blob of the commit, not of the path
(git 2.39). Here every transfer is explicit — a negotiated fetch for refs and commits, one batched
fetch of the package's missing blobs — and git runs with ``GIT_NO_LAZY_FETCH=1`` (honoured since
git 2.36 at least), so a gap is an error, never a silent download.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from urllib.parse import unquote

import git
from pydantic import BaseModel, ConfigDict

from runner import ui
from runner.errors import BadInput, Infrastructure
from runner.files import building_dir, sha256_bytes
from runner.store.cache import Store

GIT_ENV = {
    "GIT_TERMINAL_PROMPT": "0",  # never hang on a credential prompt
    "GIT_ALLOW_PROTOCOL": "file:git:http:https:ssh",  # no ext::, fd:: or other command transports
    "GIT_PROTOCOL_FROM_USER": "0",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_NO_LAZY_FETCH": "1",  # a missing object is an error; every fetch below is explicit
}
GIT_OPTS = ["-c", "protocol.ext.allow=never", "-c", "gc.auto=0", "-c", "core.hooksPath=/dev/null"]
FULL_SHA = re.compile(r"[0-9a-f]{40}")
_HEADS_TAGS = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"]


class RemoteState(BaseModel):
    """Which state of the remote a name was resolved against: ``main`` means what the remote said
    at ``read_at``, and a receipt of it is only as current as that."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    ref: str | None  # the ref the name denotes (refs/heads/main); None for main~2 or a short SHA
    refs_sha256: str  # over the remote's heads and tags ("<sha> <ref>" lines, sorted) just fetched
    read_at: str


@dataclass(frozen=True)
class Mirror:
    path: Path
    url: str  # canonical spelling (canonical_url)

    def run(self, *args: str, stdin: bytes | None = None) -> bytes:
        argv = ["git", *GIT_OPTS, "--git-dir", str(self.path), *args]
        proc = subprocess.run(argv, input=stdin, capture_output=True, env={**os.environ, **GIT_ENV})
        if proc.returncode:
            raise git.exc.GitCommandError(argv, proc.returncode, proc.stderr.decode(errors="replace"))
        return proc.stdout

    def text(self, *args: str, stdin: str | None = None) -> str:
        return self.run(*args, stdin=stdin.encode() if stdin is not None else None).decode()

    def lines(self, *args: str) -> list[str]:
        return self.text(*args).splitlines()


def canonical_url(url: str) -> str:
    """One spelling per repository, so one mirror: ``/repo``, ``/repo/``, ``/repo/.git``,
    ``file:///repo`` and ``file://localhost/repo`` are the same local repository; other URLs lose
    trailing slashes and the case of their host."""
    if url.startswith("file://"):
        host, _, path = url[len("file://"):].partition("/")
        if host not in ("", "localhost"):
            raise BadInput(f"git source {url!r}: file:// URLs name a local repository (file:///path)")
        url = "/" + unquote(path)
    if url.startswith("/"):
        path = Path(url).resolve()
        return str(path.parent if path.name == ".git" else path)
    scheme, sep, rest = url.partition("://")
    if not sep:  # scp-like user@host:path
        return url.rstrip("/")
    authority, slash, path = rest.partition("/")
    user, at, host = authority.rpartition("@")
    return f"{scheme.lower()}://{user}{at}{host.lower()}{slash}{path.rstrip('/')}"


def _clone_url(url: str) -> str:
    """Local paths go through file:// so that git honours --filter (a plain path copies everything)."""
    return Path(url).as_uri() if url.startswith("/") else url


class _CloneProgress(git.RemoteProgress):
    def __init__(self, advance):
        super().__init__()
        self._advance = advance

    def update(self, op_code, cur_count, max_count=None, message=""):
        self._advance(message or None, int(cur_count), int(max_count) if max_count else None)


def mirror(url: str, cache: Store) -> Mirror:
    """The blobless bare mirror of ``url`` (cloned on first use), one per canonical URL."""
    canonical = canonical_url(url)
    path = cache.mirror(canonical)
    if path.exists():
        try:
            git.Repo(path)
            return Mirror(path, canonical)
        except git.exc.GitError:
            ui.warn(f"git mirror {path} is damaged; cloning again")
            shutil.rmtree(path)
    local = canonical.startswith("/")
    with building_dir(path) as scratch, ui.step(f"clone {canonical} (blobless)") as advance:
        progress = _CloneProgress(advance)
        try:
            git.Repo.clone_from(_clone_url(canonical), scratch, bare=True, progress=progress, env=GIT_ENV,
                                multi_options=["--filter=blob:none"])
        except git.exc.GitCommandError as e:
            lines = progress.error_lines + progress.other_lines + str(e).splitlines()
            fatal = [ln.split("fatal:", 1)[1].strip() for ln in lines if "fatal:" in ln]
            reason = fatal[0] if fatal else f"git exit {e.status}"
            raise (BadInput if local else Infrastructure)(f"git source {canonical}: cannot clone: {reason}") from None
    return Mirror(path, canonical)


def _commit(m: Mirror, rev: str) -> str | None:
    try:
        return m.text("rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}").strip()
    except git.exc.GitCommandError:
        return None


def _fetch(m: Mirror, refspecs: list[str], *, prune: bool = False) -> None:
    """A negotiated fetch: the server learns what the mirror has and sends only what is new."""
    m.run("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--recurse-submodules=no", "--filter=blob:none",
          *(["--prune"] if prune else []), "origin", *refspecs)


def _refspecs(ref: str | None) -> list[str]:
    return [*_HEADS_TAGS, *([f"+{ref}:refs/diffprobe/{ref.removeprefix('refs/')}"] if ref else [])]


def resolve(url: str, rev: str, cache: Store, ref: str | None = None) -> tuple[Mirror, str, RemoteState | None]:
    """Full SHA of ``rev``. A full SHA is immutable: fetched (negotiated) only when absent, and
    kept under ``refs/diffprobe/commits/`` so later negotiations count it. Any other name is
    resolved only after fetching the remote's heads and tags (and ``ref``, the source's ref
    outside them, if it names one), and the state read is returned."""
    m = mirror(url, cache)
    if FULL_SHA.fullmatch(rev):
        sha = _commit(m, rev)
        if sha is None:
            with ui.step(f"fetch {rev[:12]} from {m.url}"):
                try:
                    _fetch(m, [f"+{rev}:refs/diffprobe/commits/{rev}"])
                except git.exc.GitCommandError:  # the server refuses wants by id: fetch its refs instead
                    _fetch_or_fail(m, _refspecs(ref))
            sha = _commit(m, rev)
        state = None
    else:
        with ui.step(f"fetch {m.url}"):
            _fetch_or_fail(m, _refspecs(ref), prune=True)
        sha = _commit(m, rev)
        listing = m.text("for-each-ref", "--format=%(objectname) %(refname)", "refs/heads", "refs/tags")
        named = m.text("rev-parse", "--symbolic-full-name", rev).strip() if sha else ""
        state = RemoteState(ref=named or None, refs_sha256=sha256_bytes("\n".join(sorted(listing.splitlines())).encode()),
                            read_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    if sha is None:
        raise BadInput(f"git source {m.url}: revision {rev!r} does not resolve to a commit")
    return m, sha, state


def _fetch_or_fail(m: Mirror, refspecs: list[str], *, prune: bool = False) -> None:
    try:
        _fetch(m, refspecs, prune=prune)
    except git.exc.GitCommandError as e:
        if "couldn't find remote ref" in (e.stderr or ""):  # the source's ref (refs/pull/N/head) is gone
            _fetch(m, _HEADS_TAGS, prune=prune)
            return
        raise Infrastructure(f"git source {m.url}: fetch failed: {(e.stderr or '').strip().splitlines()[-1:]}") from None


def is_ancestor(m: Mirror, older: str, newer: str) -> bool:
    try:
        m.run("merge-base", "--is-ancestor", older, newer)
        return True
    except git.exc.GitCommandError as e:
        if e.status == 1:
            return False
        raise Infrastructure(f"git merge-base {older[:12]} {newer[:12]} failed: {e.stderr.strip()[-200:]}") from None


def package_trees(m: Mirror, shas: list[str], package_dir: str) -> list[str | None]:
    """The git tree id of ``package_dir`` in each commit (None where absent), in one call: equal
    ids are equal bytes, so commits that did not touch the package are known without reading it."""
    if not shas:
        return []
    out = m.text("cat-file", "--batch-check=%(objectname) %(objecttype)", stdin="".join(f"{s}:{package_dir}\n" for s in shas))
    return [parts[0] if len(parts) == 2 and parts[1] == "tree" else None for parts in (ln.split() for ln in out.splitlines())]


def _ensure_blobs(m: Mirror, trees: list[str], only: set[str] | None = None) -> None:
    """Fetch, in one request, the blobs under ``trees`` (or just ``only`` of them) that the mirror
    lacks, and nothing else. (rev-list reports what is missing without fetching it.)"""
    listed = m.lines("rev-list", "--objects", "--missing=print", *trees)
    missing = [line[1:] for line in listed if line.startswith("?") and (only is None or line[1:] in only)]
    if missing:
        with ui.step(f"fetch {len(missing)} files from {m.url}"):
            # blobs have no history to negotiate; name them by id, filtered so nothing else rides along
            m.run("-c", "fetch.negotiationAlgorithm=noop", "fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
                  "--recurse-submodules=no", "--filter=blob:none", "--stdin", "origin", stdin="\n".join(missing).encode() + b"\n")


def _read_blobs(m: Mirror, oids: list[str]) -> dict[str, bytes]:
    """Every blob in one ``cat-file --batch``."""
    out = m.run("cat-file", "--batch", stdin="".join(f"{o}\n" for o in oids).encode())
    blobs, pos = {}, 0
    while pos < len(out):
        end = out.index(b"\n", pos)
        oid, kind, size = out[pos:end].decode().split()
        if kind != "blob":
            raise Infrastructure(f"git cat-file: {oid} is a {kind}, expected a blob")
        blobs[oid] = out[end + 1 : end + 1 + int(size)]
        pos = end + 1 + int(size) + 1
    return blobs


def _safe_rel(path: str, where: str) -> PurePosixPath:
    rel = PurePosixPath(path)
    if rel.is_absolute() or any(part in ("", ".", "..", ".git") for part in rel.parts):
        raise BadInput(f"{where}: refusing the path {path!r}")
    return rel


def materialise(m: Mirror, sha: str, package_dir: str, dest: Path) -> None:
    """Write ``package_dir`` of commit ``sha`` to ``dest``: ``ls-tree -r`` for the entries, one
    batched fetch for the blobs the mirror lacks, one ``cat-file --batch`` for their bytes."""
    tree = package_trees(m, [sha], package_dir)[0]
    if tree is None:
        raise BadInput(f"commit {sha}: no {package_dir} in its tree")
    entries = [e.split("\t", 1) for e in m.text("ls-tree", "-r", "-z", tree).split("\0") if e]
    files = [(meta.split()[0], meta.split()[2], _safe_rel(path, f"commit {sha}")) for meta, path in entries
             if meta.split()[1] == "blob"]  # submodules (commit entries) have no bytes here
    _ensure_blobs(m, [tree])
    blobs = _read_blobs(m, sorted({oid for _, oid, _ in files}))
    for mode, oid, rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if mode == "120000":
            link = blobs[oid].decode(errors="replace")
            if link.startswith("/") or os.path.normpath(os.path.join(str(rel.parent), link)).startswith(".."):
                raise BadInput(f"commit {sha}: symlink {package_dir}/{rel} points outside the package")
            os.symlink(link, target)
        else:
            target.write_bytes(blobs[oid])
            if mode == "100755":
                target.chmod(0o755)


def read_file(m: Mirror, sha: str, path: str) -> bytes:
    """The exact bytes of ``path`` in commit ``sha``: one blob, fetched if the mirror lacks it."""
    entries = [e for e in m.text("ls-tree", "-z", "--full-tree", sha, "--", path).split("\0") if e]
    if len(entries) != 1 or entries[0].split()[1] != "blob" or entries[0].split("\t", 1)[1] != path:
        raise BadInput(f"commit {sha}: no file {path} in its tree")
    oid = entries[0].split()[2]
    parent = str(PurePosixPath(path).parent)
    _ensure_blobs(m, [m.text("rev-parse", "--verify", f"{sha}:{'' if parent == '.' else parent}").strip()], only={oid})
    return _read_blobs(m, [oid])[oid]


def diff(m: Mirror, base: str, head: str, package_dir: str) -> bytes:
    """``git diff --binary base head -- package_dir``, with both trees' blobs fetched first."""
    _ensure_blobs(m, [t for t in package_trees(m, [base, head], package_dir) if t])
    try:
        return m.run("diff", "--binary", "--no-color", "--no-ext-diff", "--no-renames", base, head, "--", package_dir)
    except git.exc.GitCommandError as e:
        raise Infrastructure(f"git diff {base[:12]}..{head[:12]} failed: {e.stderr.strip()[-200:]}") from None
