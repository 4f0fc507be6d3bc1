"""pins.toml: the upstream repository, the release artifacts, and the commits around each fix."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from runner import fixids
from runner.evidence import catalog
from runner.judge.judging import Verdict
from runner.store import specs
from runner.errors import BadInput

HEX_SHA = re.compile(r"^[0-9a-f]{7,40}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Release(_Strict):
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$", description="sha256 of the release wheel")


class Bracket(_Strict):
    without: str = Field(description="last release without the fix")
    with_: str = Field(alias="with", description="first release with the fix")


class DutyBracket(_Strict):
    """Part of a fix that came in another release than the whole: named duties in named cases."""

    title: str = Field(min_length=1, description="what this part of the fix does")
    duties: list[str] = Field(min_length=1, description="duty ids of the fix's probes")
    cases: list[str] = Field(min_length=1, description="case ids of the fix's probes: at 'without' every named duty "
                             "each judges fails, at 'with' every one holds")
    releases: Bracket


class Fix(_Strict):
    title: str = Field(min_length=1)
    summary: str = Field(min_length=1, description="one line on what it fixes")
    base: str | None = Field(None, description="PR base commit (full SHA, or a short one resolved when used); "
                             "absent for a defence pinned by its release bracket alone (found by sweeping releases)")
    head: str | None = Field(None, description="PR head commit (absent with base)")
    merge: str | None = Field(None, description="merge commit on the upstream branch")
    releases: Bracket
    probes: list[str] = Field(min_length=1, description="probe ids that witness the fix")
    sites: list[str] = Field(default_factory=list, description="the sites (for the later defences: configurations, "
                             "e.g. with-kv-checksum for an option off by default) whose cases the differential "
                             "compares; empty: every case")
    expect: Verdict = "fix observed"
    local: bool = Field(False, description="a local id (1-999, shown as L<n>): a defence found in a release with no "
                        "upstream pull request number known; false: the key is the upstream PR number (shown as #<n>)")
    duties: list[DutyBracket] = Field(default_factory=list, description="parts of the fix whose release bracket differs "
                                      "from the fix's (found on the release line: sweep, per duty)")

    @model_validator(mode="after")
    def _commits_together(self) -> "Fix":
        if (self.base is None) != (self.head is None):
            raise ValueError("base and head are pinned together, or neither")
        return self

    @property
    def has_commits(self) -> bool:
        return self.base is not None

    @field_validator("base", "head", "merge")
    @classmethod
    def _sha(cls, v: str | None) -> str | None:
        if v is not None and not HEX_SHA.match(v):
            raise ValueError(f"must be a lower-case hex commit SHA of 7 to 40 digits, got {v!r}")
        return v

    @field_validator("probes")
    @classmethod
    def _known_probes(cls, v: list[str]) -> list[str]:
        unknown = sorted(set(v) - set(catalog.PROBES))
        if unknown:
            raise ValueError(f"unknown probe {unknown[0]!r} (known: {', '.join(catalog.PROBES)})")
        return v


class Pins(_Strict):
    schema_version: Literal[1]
    upstream: str = Field(description="git URL or path of the upstream repository")
    package_dir: str = Field("python/sglang", description="the sglang package's path inside the repository")
    releases: dict[str, Release] = Field(default_factory=dict)
    fixes: dict[int, Fix] = Field(min_length=1)

    @field_validator("upstream")
    @classmethod
    def _safe_url(cls, v: str) -> str:
        try:
            return specs.check_git_url(v)
        except BadInput as e:
            raise ValueError(e.message) from None

    @field_validator("package_dir")
    @classmethod
    def _relative(cls, v: str) -> str:
        parts = Path(v).parts
        if Path(v).is_absolute() or ".." in parts or not parts or parts[-1] != specs.PACKAGE:
            raise ValueError(f"must be a relative path inside the repository ending in /{specs.PACKAGE}")
        return Path(v).as_posix()

    @model_validator(mode="after")
    def _local_ids(self) -> "Pins":
        for number, fix in self.fixes.items():
            if number < 1:
                raise ValueError(f"fixes.{number}: a fix id is a positive integer")
            if fix.local != fixids.is_local(number):
                raise ValueError(f"fixes.{number}: local = true exactly for ids 1-{fixids.LOCAL_LIMIT - 1} (a defence "
                                 f"with no upstream PR number); an upstream PR number is {fixids.LOCAL_LIMIT} or more")
        return self

    @model_validator(mode="after")
    def _releases_known(self) -> "Pins":
        for number, fix in self.fixes.items():
            brackets = [("releases", fix.releases), *((f"duties[{i}].releases", d.releases) for i, d in enumerate(fix.duties))]
            for where, bracket in brackets:
                for version in (bracket.without, bracket.with_):
                    if self.releases and version not in self.releases:
                        raise ValueError(f"fixes.{number}.{where}: {version} is not listed under [releases]")
        return self

    @property
    def pinned_commits(self) -> tuple[str, ...]:
        """Every commit pinned by its full SHA (a short one could be forged by a crafted commit)."""
        return tuple(sorted({sha for fix in self.fixes.values() for sha in (fix.base, fix.head, fix.merge)
                             if sha and len(sha) == 40}))

    @property
    def pinned_sha256(self) -> dict[str, str]:
        """release version -> the wheel digest a download must match"""
        return {v: r.sha256 for v, r in self.releases.items() if r.sha256}

    def fix(self, number: int) -> Fix:
        if number not in self.fixes:
            raise BadInput(f"unknown fix {fixids.label(number)} (pinned: {fixids.labels(sorted(self.fixes))})")
        return self.fixes[number]


def default_path() -> Path:
    """The project's own pins.toml (a source checkout) or the copy shipped inside the package."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package.parent / "pins.toml", package / "data" / "pins.toml"):
        if candidate.is_file():
            return candidate
    raise BadInput("no pins.toml found; pass --pins FILE")


def load(path: Path | None = None) -> Pins:
    path = path or default_path()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: cannot read: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{path}: not valid TOML: {e}") from None
    try:
        return Pins.model_validate(data)
    except ValidationError as e:
        raise BadInput(f"{path}: {describe(e)}") from None


def describe(error: ValidationError) -> str:
    """The first problem as ``key.path: what is wrong`` (one line, as the CLI promises)."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "missing":
        msg = "required key is missing"
    elif first["type"] == "extra_forbidden":
        msg = "unknown key"
    more = len(error.errors()) - 1
    return f"{where}: {msg}" + (f" (and {more} more problem{'s' * (more > 1)})" if more else "")
