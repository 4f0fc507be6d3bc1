"""Where a git source's objects come from: read in place from a local repository, or from one
blobless partial clone per remote repository; either way without git's lazy fetch.

A source needs one commit, the trees down to its package directory and the blobs under it,
nothing else. A local repository (a path or ``file://``) is read where it is: its refs name
commits, its object directory is an alternate of a small repository in the cache, and nothing of
it is copied; a blobless or partial clone, or a snapshot whose history lacks blobs outside the
package, works as well as a full clone. Objects it lacks are fetched from its promisor remote
into the cache's repository, once, by id, and only those; without one, the missing object is
named. A remote repository gets a blobless clone (upstream's history is over 1 GB) and the same
fetch by id.

Why not let git fetch on demand: in a partial clone a lazy fetch asks for objects with no
negotiation, so resolving one new commit resends its whole history (commits and trees), and
`git archive SHA -- python/sglang` fetches every missing blob of the commit, not of the path
(git 2.39). Here every transfer is explicit and git runs with ``GIT_NO_LAZY_FETCH=1`` (honoured
since git 2.36 at least), so a gap is an error, never a silent download. Objects are hashed as
they are read (gitobjects.py): read in place, a damaged or forged object is refused.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import subprocess
import threading
from collections import deque
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Callable
from urllib.parse import unquote

import git
from pydantic import BaseModel, ConfigDict

from runner.errors import BadInput, Infrastructure
from runner.files import building_dir, sha256_bytes
from runner.store import gitdir, gitobjects, intake
from runner.store.cache import GIT_DEADLINE, Store
from runner.store.notices import QUIET, Advance, Notices
from runner.store.gitobjects import LINK, SUBMODULE, TREE

GIT_ENV = {
    "GIT_TERMINAL_PROMPT": "0",  # never hang on a credential prompt
    "GIT_ALLOW_PROTOCOL": "file:git:http:https:ssh",  # no ext::, fd:: or other command transports
    "GIT_PROTOCOL_FROM_USER": "0",
    # no configuration but the repository's own (checked first: gitdir.py) and diffprobe's -c options
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TEMPLATE_DIR": "",  # git init copies no template (hooks, info/exclude) into the cache's repositories
    "GIT_NO_LAZY_FETCH": "1",  # a missing object is an error; every fetch below is explicit
    "GIT_NO_REPLACE_OBJECTS": "1",  # refs/replace/ of a repository read in place substitute nothing
}
# the caller's variables that point git at another repository or object store
_LOCATING = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES",
             "GIT_INDEX_FILE", "GIT_NAMESPACE", "GIT_SHALLOW_FILE", "GIT_GRAFT_FILE", "GIT_REPLACE_REF_BASE")
GIT_OPTS = ["-c", "protocol.ext.allow=never", "-c", "gc.auto=0", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
            "-c", "credential.helper=", "-c", "core.sshCommand=ssh", "-c", "core.askPass="]
# Seconds any one git process may take: reading a local repository takes well under one; a fetch
# of a package's blobs from a remote takes minutes (the store's git_deadline, DIFFPROBE_GIT_TIMEOUT
# at the command's entry, raises both; the local one is capped at this).
LOCAL_DEADLINE = 120
# The promisor remotes of a local partial clone diffprobe may fetch from: only those the user names
# (whitespace-separated URLs), never one a repository's configuration names by itself.
PROMISORS_ENV = "DIFFPROBE_GIT_PROMISORS"
FULL_SHA = re.compile(r"[0-9a-f]{40}")
_HEADS_TAGS = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"]
_BY_ID = ["-c", "fetch.negotiationAlgorithm=noop", "fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
          "--recurse-submodules=no", "--filter=blob:none", "--stdin", "origin"]  # objects by id, nothing riding along


class RemoteState(BaseModel):
    """Which state of the remote a name was resolved against: ``main`` means what the remote said
    at ``read_at``, and a receipt of it is only as current as that."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    ref: str | None  # the ref the name denotes (refs/heads/main); None for main~2 or a short SHA
    refs_sha256: str  # over the remote's heads and tags ("<sha> <ref>" lines, sorted) just fetched
    read_at: str


@dataclass(frozen=True)
class Mirror:
    """The cache's repository for one source repository. For a local source, ``source`` is that
    repository's git dir (its refs name commits) and ``objects`` its object directory, read in
    place as an alternate: the cache's repository holds only what was fetched from its promisor."""

    path: Path
    url: str  # canonical spelling (canonical_url)
    source: Path | None = None
    objects: Path | None = None
    object_dir: Path | None = None  # another repository's object directory, used in place of this one's (view)
    # from the store it lives in: how long a fetch may take, and where its fetches are said
    deadline: int = field(default=GIT_DEADLINE, compare=False)
    notices: Notices = field(default=QUIET, compare=False, repr=False)

    def run(self, *args: str, stdin: bytes | None = None) -> bytes:
        argv = ["git", *GIT_OPTS, "--git-dir", str(self.path), *args]
        env = _env()
        if self.objects is not None:
            env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = _alternate(self.objects)
            if (self.objects.parent / "shallow").is_file():  # a shallow clone: its history ends where it says
                env["GIT_SHALLOW_FILE"] = str(self.objects.parent / "shallow")
        if self.object_dir is not None:
            env["GIT_OBJECT_DIRECTORY"] = str(self.object_dir)
        deadline = self.deadline if "fetch" in args else min(self.deadline, LOCAL_DEADLINE)
        proc = _started(argv, env, stdin=subprocess.PIPE)
        try:  # no terminal: stdin is the input or nothing
            out, err = proc.communicate(stdin or b"", timeout=deadline)
        except subprocess.TimeoutExpired:
            raise Infrastructure(f"git source {self.url}: a git process did not finish within {deadline} s "
                                 "(DIFFPROBE_GIT_TIMEOUT raises it)") from None
        finally:
            _end(proc)
        proc = subprocess.CompletedProcess(argv, proc.returncode, out, err)
        if proc.returncode:
            raise git.exc.GitCommandError(argv, proc.returncode, proc.stderr.decode(errors="replace"))
        return proc.stdout

    def text(self, *args: str, stdin: str | None = None) -> str:
        return self.run(*args, stdin=stdin.encode() if stdin is not None else None).decode()

    def lines(self, *args: str) -> list[str]:
        return self.text(*args).splitlines()

    def names(self) -> Mirror:
        """Where the source's refs are read: the local repository itself, else the mirror's copy."""
        return replace(self, path=self.source, source=None, objects=None) if self.source is not None else self

    def view(self) -> Mirror:
        """The same objects seen from a repository with no promisor remote, where a missing object
        is reported as missing (in a partial clone, git 2.39 tries to fetch it and, with lazy
        fetch off, dies; and a filtered fetch writes the promisor back into the config)."""
        view = self.path / "diffprobe-view"
        if not (view / "HEAD").exists():
            with building_dir(view) as scratch:
                Mirror(scratch, self.url).run("init", "--quiet", "--bare")
        return replace(self, path=view, source=None, object_dir=self.path / "objects")


def _alternate(path: Path) -> str:
    """One entry of GIT_ALTERNATE_OBJECT_DIRECTORIES: quoted (C-style) if it holds the separator."""
    text = str(path)
    if ":" not in text and not text.startswith('"'):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


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


def _started(argv: list[str], env: dict[str, str], stdin: int) -> subprocess.Popen:
    """A git process in a process group of its own, so that its deadline ends its helpers too
    (``git fetch`` runs ``git-remote-https``, which holds the pipes: killing git alone would leave
    diffprobe waiting on them)."""
    return subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)


def _end(proc: subprocess.Popen) -> None:
    """Unless it was reaped after finishing, kill the process's group (its id is still its own: the
    unreaped process holds it) and reap it."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def _env() -> dict[str, str]:
    """Every git process's environment: the caller's, less what would point git elsewhere, plus GIT_ENV."""
    return {k: v for k, v in os.environ.items() if k not in _LOCATING} | GIT_ENV


_PROGRESS = re.compile(r"([A-Za-z][A-Za-z ]*):\s+\d+% \((\d+)/(\d+)\)")


def _clone(url: str, dest: Path, advance: Advance, deadline: int) -> None:
    """``git clone --bare --filter=blob:none`` of a remote, its progress shown, within ``deadline``
    (killed past it); a failure is one line with git's own reason."""
    argv = ["git", *GIT_OPTS, "clone", "--quiet", "--progress", "--bare", "--filter=blob:none", "--", url, str(dest)]
    proc = _started(argv, _env(), stdin=subprocess.DEVNULL)
    timer = threading.Timer(deadline, _end, (proc,))
    timer.start()
    said: deque[str] = deque(maxlen=50)

    def line(raw: bytes) -> None:
        text = raw.decode(errors="replace").strip()
        if shown := _PROGRESS.search(text):
            advance(shown.group(1), int(shown.group(2)), int(shown.group(3)))
        elif text:
            said.append(text)

    try:
        pending = b""
        while chunk := proc.stderr.read1(1 << 16):  # git redraws its progress with carriage returns
            *done, pending = re.split(rb"[\r\n]", pending + chunk)
            for raw in done:
                line(raw)
        line(pending)
        code = proc.wait()
    finally:
        timer.cancel()
        _end(proc)
    if code:
        fatal = [ln.split("fatal:", 1)[1].strip() for ln in said if "fatal:" in ln]
        reason = fatal[0] if fatal else f"killed after {deadline} s (DIFFPROBE_GIT_TIMEOUT raises it)" if code < 0 else f"git exit {code}"
        raise Infrastructure(f"git source {url}: cannot clone: {reason}")


def _local_repository(path: str) -> tuple[Path, Path]:
    """The git dir and object directory of the repository at ``path`` (a work tree, a linked work
    tree or a bare repository), checked before git reads a byte of it (gitdir.py), then asked of
    git itself; never searched for above ``path``."""
    found = gitdir.check(Path(path), path)
    if found is None:
        raise BadInput(f"git source {path}: no git repository there")
    try:
        objects = Mirror(found.git_dir, path).text("rev-parse", "--path-format=absolute", "--git-path", "objects").strip()
    except git.exc.GitCommandError as e:
        raise BadInput(f"git source {path}: git cannot read the repository there "
                       f"({((e.stderr or '').strip().splitlines() or ['?'])[-1]})") from None
    return found.git_dir, Path(objects)


def _configured(m: Mirror, key: str) -> bool:
    try:
        m.run("config", "--local", "--get", key)
        return True
    except git.exc.GitCommandError:
        return False


def mirror(url: str, cache: Store) -> Mirror:
    """The cache's repository for ``url`` (made on first use), one per canonical URL: for a local
    repository an empty partial repository reading it in place, else a blobless bare clone."""
    canonical = canonical_url(url)
    path = cache.mirror(canonical)
    told = {"deadline": cache.git_deadline, "notices": cache.notices}
    source, objects = _local_repository(canonical) if canonical.startswith("/") else (None, None)
    if path.exists():
        try:
            git.Repo(path)
            if source is None or not _configured(Mirror(path, canonical), "remote.origin.url"):
                return Mirror(path, canonical, source, objects, **told)
            shutil.rmtree(path)  # a clone of a local repository, made before it was read in place
        except git.exc.GitError:
            cache.notices.warn(f"git mirror {path} is damaged; making it again")
            shutil.rmtree(path)
    if source is not None:
        with building_dir(path) as scratch:
            made = Mirror(scratch, canonical)
            made.run("init", "--quiet", "--bare")
            # fetches by id come from the source's promisor, named for each fetch (remote.origin.url)
            for key, value in [("core.repositoryformatversion", "1"), ("extensions.partialClone", "origin"),
                               ("remote.origin.promisor", "true"), ("remote.origin.partialclonefilter", "blob:none")]:
                made.run("config", key, value)
        return Mirror(path, canonical, source, objects, **told)
    with building_dir(path) as scratch, cache.notices.step(f"clone {canonical} (blobless)") as advance:
        _clone(_clone_url(canonical), scratch, advance, cache.git_deadline)
    return Mirror(path, canonical, **told)


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


def _remote_state(names: Mirror, rev: str, sha: str | None) -> RemoteState:
    listing = names.text("for-each-ref", "--format=%(objectname) %(refname)", "refs/heads", "refs/tags")
    named = names.text("rev-parse", "--symbolic-full-name", rev).strip() if sha else ""
    return RemoteState(ref=named or None, refs_sha256=sha256_bytes("\n".join(sorted(listing.splitlines())).encode()),
                       read_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))


def resolve(url: str, rev: str, cache: Store, ref: str | None = None) -> tuple[Mirror, str, RemoteState | None]:
    """Full SHA of ``rev``. A local repository's names are read from it as it is now (every ref
    and object of it is there: ``ref`` adds nothing). For a remote one, a full SHA is immutable:
    fetched (negotiated) only when absent, and kept under ``refs/diffprobe/commits/`` so later
    negotiations count it; any other name is resolved only after fetching the remote's heads and
    tags (and ``ref``, the source's ref outside them, if it names one). The state read is returned
    for names other than a full SHA."""
    m = mirror(url, cache)
    if m.source is not None:
        sha = _commit(m.names(), rev)
        state = None if FULL_SHA.fullmatch(rev) else _remote_state(m.names(), rev, sha)
    elif FULL_SHA.fullmatch(rev):
        sha = _commit(m, rev)
        if sha is None:
            with m.notices.step(f"fetch {rev[:12]} from {m.url}"):
                try:
                    _fetch(m, [f"+{rev}:refs/diffprobe/commits/{rev}"])
                except git.exc.GitCommandError:  # the server refuses wants by id: fetch its refs instead
                    _fetch_or_fail(m, _refspecs(ref))
            sha = _commit(m, rev)
        state = None
    else:
        with m.notices.step(f"fetch {m.url}"):
            _fetch_or_fail(m, _refspecs(ref), prune=True)
        sha = _commit(m, rev)
        state = _remote_state(m, rev, sha)
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


def release_tags(m: Mirror, sha: str, is_release: Callable[[str], bool], tries: int = 20) -> tuple[str, str, int] | None:
    """The nearest tag reachable from ``sha`` whose name is a release (``v0.5.17``; a vendor's own
    tags and names that are not releases are skipped), as (tag, its commit, commits between), read
    with ``git describe`` where the source's refs are. Tags are the repository's word: the caller
    checks the tagged tree against the release before taking it as upstream's."""
    names = m.names()
    skipped: list[str] = []
    for _ in range(tries):
        try:
            found = names.text("describe", "--tags", "--long", "--match", "v[0-9]*",
                               *(f"--exclude={t}" for t in skipped), "--end-of-options", sha).strip()
        except git.exc.GitCommandError:  # no such tag reachable (or history cut short)
            return None
        tag, count, _ = found.rsplit("-", 2)
        if is_release(tag[1:]):
            return tag, names.text("rev-parse", "--verify", "--end-of-options", f"refs/tags/{tag}^{{commit}}").strip(), int(count)
        skipped.append(tag)
    return None


# --- objects: exactly those a package needs, each hashed as it is read ----------------------------


# A commit larger than this is not one diffprobe reads (its message would be the rest); every tree
# read is bounded by the entries a package may hold (``_tree_bound``): git stores objects
# compressed, so a tree of millions of entries or a commit of a gigabyte fit in a small repository.
COMMIT_BYTES = 1 << 20


@dataclass(frozen=True)
class GitFile:
    """One entry under a package directory other than a directory: a blob (file, link) or a
    submodule. ``size`` is known before any byte is read (None for a submodule)."""

    path: bytes  # relative to the package directory, '/'-separated, as git spells the names
    mode: str  # as git stores it (gitobjects.Entry.mode)
    oid: str
    size: int | None


def _absolute(url: str, base: str) -> str:
    """A remote URL as git reads it in the repository at ``base``: a relative path is relative to it."""
    return url if url.startswith("/") or "://" in url or re.match(r"[^/]*:", url) else os.path.join(base, url)


def _promisors(m: Mirror) -> tuple[list[str], list[str]]:
    """Where objects the mirror lacks can be fetched from: a remote repository itself (the URL the
    user typed), or those of a local repository's promisor remotes (a partial clone's origin) that
    the user named in ``DIFFPROBE_GIT_PROMISORS``; and the promisors it names that the user did not
    (never contacted: a repository's configuration is its author's text)."""
    if m.source is None:
        return [m.url], []
    try:
        config = m.names().lines("config", "--local", "--no-includes", "--get-regexp",
                                 r"^(remote\..*\.(promisor|url)|extensions\.partialclone)$")
    except git.exc.GitCommandError:  # none of these keys: not a partial clone
        return [], []
    values = [line.partition(" ")[::2] for line in config]
    promised = {key[len("remote."):-len(".promisor")] for key, value in values if key.endswith(".promisor") and value == "true"}
    promised |= {value for key, value in values if key == "extensions.partialclone"}
    named = [_clone_url(canonical_url(_absolute(value, m.url))) for key, value in values
             if key.endswith(".url") and key[len("remote."):-len(".url")] in promised]
    allowed = {_clone_url(canonical_url(u)) for u in os.environ.get(PROMISORS_ENV, "").split()}
    return [u for u in named if u in allowed], [u for u in named if u not in allowed]


def _unavailable(m: Mirror, missing: list[str], names: dict[str, str], why: str) -> BadInput:
    first = missing[0]
    more = f" (and {len(missing) - 1} more objects)" if len(missing) > 1 else ""
    return BadInput(f"git source {m.url}: {names.get(first, 'object')} ({first}){more} cannot be had: {why}")


def _present(m: Mirror, oids: list[str]) -> dict[str, tuple[str, int]]:
    out = m.view().text("cat-file", "--batch-check=%(objectname) %(objecttype) %(objectsize)", stdin="".join(f"{o}\n" for o in oids))
    return {parts[0]: (parts[1], int(parts[2])) for parts in (ln.split() for ln in out.splitlines()) if len(parts) == 3}


def _ensure(m: Mirror, oids: list[str], names: dict[str, str]) -> dict[str, tuple[str, int]]:
    """Type and size of each of ``oids``; those the mirror lacks are fetched first, in one request
    by id, from where they can be had (see _promisors), and the fetch is said. ``names`` (oid ->
    what it is, e.g. its path) words the one line for an object that cannot be had."""
    found = _present(m, oids)
    missing = [o for o in dict.fromkeys(oids) if o not in found]
    if not missing:
        return found
    origins, unnamed = _promisors(m)
    if not origins and unnamed:
        raise _unavailable(m, missing, names, f"it is not in the repository, and its promisor remote {unnamed[0]} is not "
                                              f"one you named (set {PROMISORS_ENV}={unnamed[0]} to fetch from it)")
    if not origins:
        raise _unavailable(m, missing, names, "it is not in the repository, which has no promisor remote to fetch it from")
    failed = ""
    for origin in origins:
        said = f"fetch {len(missing)} objects from {m.url}" if m.source is None else \
            f"fetch {len(missing)} objects {m.url} lacks from its promisor {origin}"
        with m.notices.step(said):
            try:
                m.run(*([] if m.source is None else ["-c", f"remote.origin.url={origin}"]), *_BY_ID,
                      stdin="".join(f"{o}\n" for o in missing).encode())
            except git.exc.GitCommandError as e:
                failed = ((e.stderr or "").strip().splitlines() or [f"git exit {e.status}"])[-1]
        found |= _present(m, missing)
        missing = [o for o in missing if o not in found]
        if not missing:
            return found
    raise _unavailable(m, missing, names, f"the fetch from {origins[-1]} did not bring it ({failed or 'not sent'})")


def _tree_bound(max_entries: int) -> int:
    """The most bytes a tree of ``max_entries`` entries takes: mode, blank, a 255-byte name, NUL, a
    SHA-256 id each."""
    return max_entries * (6 + 1 + 255 + 1 + 32)


def _read(m: Mirror, oids: list[str], names: dict[str, str] | None, *, fetch: bool = True,
          limit: int | None = None) -> dict[str, tuple[str, bytes]]:
    """The objects' bodies in one ``cat-file --batch``, each hashed against its id; those the
    mirror lacks are fetched first (``_ensure``), or with ``fetch=False`` left out. With
    ``limit``, an object larger than that is refused, named, before its body is read."""
    def batch(wanted: list[str]) -> dict[str, tuple[str, bytes]]:
        if limit is not None:
            big = next(((o, size) for o, (_, size) in _present(m, wanted).items() if size > limit), None)
            if big:
                what = (names or {}).get(big[0], "object")
                raise BadInput(f"git source {m.url}: {what} ({big[0]}) is {big[1]} bytes, over the {limit} a source may "
                               "hold there: refused (raise --max-files for larger trees)")
        out = m.view().run("cat-file", "--batch", stdin="".join(f"{o}\n" for o in wanted).encode())
        return gitobjects.parse_batch(out, f"git source {m.url}")

    read = batch(oids)
    missing = [o for o in dict.fromkeys(oids) if o not in read]
    if missing and fetch:
        _ensure(m, missing, names or {})
        read |= batch(missing)
    return read


def _lookup(m: Mirror, shas: list[str], path: str) -> list[gitobjects.Entry | None]:
    """The entry at ``path`` in each commit (None where absent, or where the mirror lacks the
    commit: fetching a commit by id would resend its history): one verified step per path
    component for all commits at once, reading no tree beside the path."""
    commits = _read(m, shas, {sha: f"the commit {sha[:12]}" for sha in shas}, fetch=False, limit=COMMIT_BYTES)
    current: list[str | None] = []
    for sha in shas:
        kind, body = commits.get(sha, ("commit", None))
        if kind != "commit":
            raise BadInput(f"git source {m.url}: {sha} is a {kind}, not a commit")
        current.append(gitobjects.commit_tree(body, sha) if body is not None else None)
    found: list[gitobjects.Entry | None] = [None] * len(shas)
    parts = PurePosixPath(path).parts
    for depth, part in enumerate(parts):
        trees = sorted({t for t in current if t})
        read = _read(m, trees, {t: f"the tree {'/'.join(parts[:depth]) or '/'}" for t in trees},
                     limit=_tree_bound(intake.Bounds.files))
        for i, tree in enumerate(current):
            entries = gitobjects.tree_entries(read[tree][1], tree) if tree and read[tree][0] == "tree" else []
            found[i] = next((e for e in entries if e.name == part.encode()), None)
            current[i] = found[i].oid if found[i] and found[i].mode == TREE else None
    return found


def package_trees(m: Mirror, shas: list[str], package_dir: str) -> list[str | None]:
    """The git tree id of ``package_dir`` in each commit (None where absent): equal ids are equal
    bytes, so commits that did not touch the package are known without reading it."""
    if not shas:
        return []
    return [e.oid if e and e.mode == TREE else None for e in _lookup(m, shas, package_dir)]


def _shown(where: str, path: bytes) -> str:
    return f"{where}/{path.decode(errors='backslashreplace')}".rstrip("/")


def package_files(m: Mirror, tree: str, where: str, bounds: intake.Bounds = intake.Bounds()) -> list[GitFile]:
    """Every entry under the package tree ``tree``, sorted by path: its trees read level by level
    (one verified ``cat-file --batch`` each), then the blobs the mirror lacks fetched at once, so
    each entry's size is known before a byte of it is read. Within intake's ``bounds``, each
    refused as soon as it is passed, before more is read: more entries than ``bounds.files`` (a
    tree can name one subtree many times over), more levels than ``bounds.depth`` (a chain of
    trees is read one process per level), a tree object larger than those entries could take
    (compressed, a tree of millions of entries is small). ``where`` names the package in errors."""
    files: list[GitFile] = []
    level = [(tree, b"")]
    depth = 0
    while level:
        depth += 1
        if depth > bounds.depth:
            raise BadInput(f"{where}: refused: {_shown(where, level[0][1])!r} is more than {bounds.depth} levels deep")
        read = _read(m, sorted({oid for oid, _ in level}), {oid: _shown(where, prefix) for oid, prefix in level},
                     limit=_tree_bound(bounds.files))
        if odd := next((oid for oid, (kind, _) in read.items() if kind != "tree"), None):
            raise BadInput(f"{where}: {odd} is named as a directory but is a {read[odd][0]}")
        parsed = {oid: gitobjects.tree_entries(body, oid) for oid, (_, body) in read.items()}
        nxt: list[tuple[str, bytes]] = []
        for oid, prefix in level:
            for e in parsed[oid]:
                if e.mode == TREE:
                    nxt.append((e.oid, prefix + e.name + b"/"))
                else:
                    files.append(GitFile(prefix + e.name, e.mode, e.oid, None))
            if len(files) + len(nxt) > bounds.files:
                raise BadInput(f"{where}: refused: more than {bounds.files} files and directories (raise it with --max-files)")
        level = nxt
    blobs = [f.oid for f in files if f.mode != SUBMODULE]
    sizes = _ensure(m, blobs, {f.oid: _shown(where, f.path) for f in files})
    return sorted((f if f.mode == SUBMODULE else GitFile(f.path, f.mode, f.oid, sizes[f.oid][1]) for f in files),
                  key=lambda f: f.path)


def entries(m: Mirror, tree: str, where: str, bounds: intake.Bounds = intake.Bounds()) -> list[intake.Entry]:
    """The package under ``tree`` as intake takes it in (runner/store/intake.py): names and modes
    as git stores them, sizes known; a link's target text (its blob, at most ``intake.NAME_BYTES``:
    a longer one is refused unread) read at once, since intake checks where it leads before
    reading anything else; the other blobs are read, each hashed against its id, in one
    ``cat-file --batch`` when intake first asks for bytes, after every entry passed its rules
    and bounds (so a submodule is refused before anything is read)."""
    files = package_files(m, tree, where, bounds)
    links = [f for f in files if f.mode == LINK]
    if long := next((f for f in links if (f.size or 0) > intake.NAME_BYTES), None):
        raise intake.refuse(where, long.path, f"a symbolic link whose target is {long.size} bytes, over the bound of "
                                              f"{intake.NAME_BYTES}")
    targets = read_blobs(m, sorted({f.oid for f in links})) if links else {}
    blobs: dict[str, bytes] = {}

    def opener(oid: str) -> Callable[[], BinaryIO]:
        def open_() -> BinaryIO:
            if not blobs:
                blobs.update(read_blobs(m, sorted({f.oid for f in files if f.size is not None and f.mode != LINK})))
            return io.BytesIO(blobs[oid])
        return open_

    return [intake.Entry(f.path, int(f.mode, 8), f.size or 0,
                         targets[f.oid] if f.mode == LINK else opener(f.oid) if f.size is not None else None)
            for f in files]


def around(m: Mirror, sha: str, package_dir: str) -> intake.Around:
    """The commit ``sha`` around its package directory, for links that leave the package: each path
    asked about is looked up in the commit's trees (each hashed against its id), never in a
    checkout; a blob there is never read."""
    kinds = {TREE: "dir", LINK: "link", SUBMODULE: "a submodule"}

    def kind(parts: tuple[str, ...]) -> str | None:
        found = _lookup(m, [sha], "/".join(parts))[0]
        return None if found is None else kinds.get(found.mode, "file")
    return intake.Around(tuple(PurePosixPath(package_dir).parts), kind)


def read_blobs(m: Mirror, oids: list[str]) -> dict[str, bytes]:
    """Every blob in one ``cat-file --batch``, each hashed against its id (fetched first if absent)."""
    read = _read(m, oids, None)
    for oid, (kind, _) in read.items():
        if kind != "blob":
            raise BadInput(f"git source {m.url}: {oid} is a {kind}, expected a blob")
    return {oid: body for oid, (_, body) in read.items()}


def read_file(m: Mirror, sha: str, path: str, limit: int) -> bytes:
    """The exact bytes of ``path`` in commit ``sha``: one blob, fetched if the mirror lacks it, its
    size read first: one larger than ``limit`` is refused (``intake.Refused``) unread."""
    entry = _lookup(m, [sha], path)[0]
    if entry is None or entry.mode in (TREE, SUBMODULE):
        raise BadInput(f"commit {sha}: no file {path} in its tree")
    size = _ensure(m, [entry.oid], {entry.oid: path})[entry.oid][1]
    if size > limit:
        raise intake.refuse(f"commit {sha[:12]}", path, f"{size} bytes, over the bound of {limit} for one file")
    return read_blobs(m, [entry.oid])[entry.oid]


def diff(m: Mirror, base: str, head: str, package_dir: str) -> bytes:
    """``git diff --binary base head -- package_dir``, with both trees' blobs fetched first."""
    for sha, tree in zip((base, head), package_trees(m, [base, head], package_dir)):
        if tree:
            package_files(m, tree, f"commit {sha[:12]}: {package_dir}")
    try:
        return m.run("diff", "--binary", "--no-color", "--no-ext-diff", "--no-renames", base, head, "--", package_dir)
    except git.exc.GitCommandError as e:
        raise Infrastructure(f"git diff {base[:12]}..{head[:12]} failed: {e.stderr.strip()[-200:]}") from None
