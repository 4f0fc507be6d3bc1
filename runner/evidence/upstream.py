"""What an ``upstream-tests`` bundle records beside its receipts (``bundle.json`` ``extra``): the test
files and the judge's grading (runner/judge/pytest_records.py, with what the plugin writes). The
sources it names are redacted here, as every recorded source is, when made and when read."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from runner.errors import redact
from runner.judge.pytest_records import Grading


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UpstreamFileRecord(_Model):
    """The test file graded, and the files upstream loads with it, by digest."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    file: str
    path: str = Field(description="its path under the directory pytest ran in (test ids start with it)")
    from_: str = Field(alias="from", description="where it was read: git:COMMIT:PATH or local:PATH")
    sha256: str
    helpers: dict[str, str] = Field(default_factory=dict, description="its conftest.py chain and helper modules: "
                                                                      "path -> sha256")
    declared: list[str] = Field(default_factory=list, description="test ids read from its source")


class EraRecord(_Model):
    """With ``--era``: the revision of the test file one tree was graded by, and why that one."""

    tests: UpstreamFileRecord
    why: str


class UpstreamTestsRecord(_Model):
    """What an upstream-tests bundle adds in ``bundle.json`` ``extra``."""

    tests: UpstreamFileRecord
    base: str = Field(description="the base source as given")
    head: str = Field(description="the head source as given")
    grading: Grading
    eras: dict[Literal["base", "head"], EraRecord] | None = Field(
        None, description="with --era only, absent without: the revision that graded each tree")

    @model_serializer(mode="wrap")
    def _eras_absent(self, handler) -> dict:
        """Without --era a bundle has no ``eras`` key (not null), as it always had."""
        dumped = handler(self)
        if self.eras is None:
            del dumped["eras"]
        return dumped

    @model_validator(mode="after")
    def _redacted(self) -> "UpstreamTestsRecord":
        """The grading names each side's source as given: redacted like base and head."""
        sides = {name: side.model_copy(update={"source": redact(side.source)})
                 for name, side in (("base", self.grading.base), ("head", self.grading.head))}
        object.__setattr__(self, "grading", self.grading.model_copy(update=sides))
        return self
