"""Where diffprobe keeps what it fetched and built, and the shape of that store.

Every entry is content-addressed (by a digest of what it holds or of what built it) and appears
under its final name only once complete (``files.building_dir``), so a different tree under the
same name cannot poison a lookup and an interrupted build is never mistaken for a finished one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from runner.files import write_atomic
from runner.store.specs import local_path

ENV_VAR = "DIFFPROBE_CACHE"


def default_root() -> Path:
    if os.environ.get(ENV_VAR):
        return local_path(os.environ[ENV_VAR], f"${ENV_VAR}")
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "diffprobe"


@dataclass(frozen=True)
class Cache:
    root: Path

    @classmethod
    def at(cls, override: str | Path | None = None) -> "Cache":
        return cls(local_path(str(override), "--cache-dir") if override else default_root().resolve())

    def dir(self, *parts: str) -> Path:
        path = self.root.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path


M = TypeVar("M", bound=BaseModel)


def read_model(path: Path, model: type[M]) -> M | None:
    """A stamp or index file, or None when it is absent or does not parse (a corrupt entry)."""
    try:
        return model.model_validate(orjson.loads(path.read_bytes()))
    except (OSError, orjson.JSONDecodeError, ValidationError):
        return None


def write_model(path: Path, value: BaseModel) -> None:
    write_atomic(path, orjson.dumps(value.model_dump(mode="json"), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
