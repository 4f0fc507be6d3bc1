"""Where diffprobe keeps what it fetched and built: one Store object owns every path in it.

Every entry is content-addressed (by a digest of what it holds or of what built it) and appears
under its final name only once complete (``files.building_dir``), so a different tree under the
same name cannot poison a lookup and an interrupted build is never mistaken for a finished one.
Builds of one entry are serialised across processes by a file lock (``Store.lock``), so two runs
never build the same layer twice; each use of an entry marks it used (``Store.used``), which is
what ``diffprobe gc`` evicts by.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from runner.files import digest_name, sha256_bytes, write_atomic
from runner.store.notices import QUIET, Notices
from runner.store.specs import local_path

ENV_VAR = "DIFFPROBE_CACHE"
GIT_DEADLINE = 1800  # seconds for a git fetch or clone from a remote (the command may name another: DIFFPROBE_GIT_TIMEOUT)
USED = ".last-used"  # an entry's marker file; its mtime is when the entry was last used
# The kinds of entry, each a directory of the store: what ``gc`` may evict, in this order on a tie.
KINDS = ("results", "backports", "envs", "bytecode", "trees", "downloads", "git", "layers")


def default_root() -> Path:
    if os.environ.get(ENV_VAR):
        return local_path(os.environ[ENV_VAR], f"${ENV_VAR}")
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "diffprobe"


@dataclass(frozen=True)
class Store:
    """``root`` is the store; the rest is how the command that made it wants it to work: where its
    notices go (it never prints) and how long a git fetch may take."""

    root: Path
    notices: Notices = field(default=QUIET, compare=False, repr=False)
    git_deadline: int = field(default=GIT_DEADLINE, compare=False)

    @classmethod
    def at(cls, override: str | Path | None = None, *, notices: Notices = QUIET, git_deadline: int = GIT_DEADLINE) -> "Store":
        return cls(local_path(str(override), "--cache-dir") if override else default_root().resolve(), notices, git_deadline)

    def dir(self, *parts: str) -> Path:
        """``root/parts...``, its parent created. Callers use the named entries below."""
        path = self.root.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    # --- the entries, each spelled here only ----------------------------------------------------

    def trees(self) -> Path:
        """Where stored trees live (and their scratch directories, on the same file system)."""
        return self.dir("trees", "")

    def tree(self, digest: str) -> Path:
        return self.dir("trees", digest_name(digest))

    def index(self, kind: str, key: str) -> Path:
        """A small pointer file: what a source resolved to (``kind``: pypi, git, git-tree)."""
        return self.dir("index", kind, f"{key}.json")

    def download(self, name: str) -> Path:
        return self.dir("downloads", name)

    def mirror(self, url: str) -> Path:
        """One bare git mirror per repository URL."""
        return self.dir("git", sha256_bytes(url.encode())[:24] + ".git")

    def layer(self, key: str) -> Path:
        return self.dir("layers", key)

    def env(self, key: str) -> Path:
        return self.dir("envs", key)

    def bytecode(self, interpreter: str) -> Path:
        """One interpreter's byte-code store (runner/store/bytecode.py), shared by all its
        environments: the unit ``gc`` evicts."""
        path = self.dir("bytecode", interpreter)
        path.mkdir(exist_ok=True)
        return path

    def pyc(self, interpreter: str, source_sha256: str) -> Path:
        """The entry of that store for a module whose source has this sha256."""
        return self.root / "bytecode" / interpreter / f"{source_sha256}.pyc"

    def backport(self, name: str) -> Path:
        return self.dir("backports", name)

    def results(self, name: str) -> Path:
        """The receipts store's entry for one tree in one environment (runner/evidence/results.py)."""
        return self.dir("results", name)

    def log(self, name: str) -> Path:
        return self.dir("logs", name)

    # --- concurrency and use ---------------------------------------------------------------------

    @contextmanager
    def lock(self, entry: Path) -> Iterator[None]:
        """Hold the build lock of ``entry`` (another process building it makes this wait)."""
        path = self.dir("locks", f"{entry.parent.name}-{entry.name}.lock")
        with open(path, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.notices.warn(f"waiting for another diffprobe process building {entry}")
                fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def busy(self, entry: Path) -> bool:
        """Whether some process holds ``entry``'s build lock right now."""
        path = self.root / "locks" / f"{entry.parent.name}-{entry.name}.lock"
        if not path.exists():
            return False
        with open(path, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
        return False

    def used(self, entry: Path) -> None:
        """Mark ``entry`` as just used (least recently used entries are evicted first)."""
        try:
            (entry / USED).touch()
        except OSError:
            pass  # a read-only store still works; it only cannot rank its entries


M = TypeVar("M", bound=BaseModel)


def read_model(path: Path, model: type[M]) -> M | None:
    """A stamp or index file, or None when it is absent or does not parse (a corrupt entry)."""
    try:
        return model.model_validate(orjson.loads(path.read_bytes()))
    except (OSError, orjson.JSONDecodeError, ValidationError):
        return None


def write_model(path: Path, value: BaseModel) -> None:
    write_atomic(path, orjson.dumps(value.model_dump(mode="json"), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))

