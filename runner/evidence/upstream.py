"""The file formats of ``diffprobe upstream-tests``: what its pytest plugin writes inside a tree's
environment (``probes/pytest_outcomes.py``, ``diffprobe.pytest-outcomes/3``), validated here before
the host believes a line of it, as the probes' observations are; and what its bundles record beside
their receipts (``bundle.json`` ``extra``: the test files and the grading). Models only: the rules
that grade live with the command (``runner/commands/upstream_tests.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from runner.errors import Redacted

Origin = Literal["stub", "sglang", "test", "environment", "other"]
Status = Literal["passed", "failed", "never ran"]
Grade = Literal["fail-to-pass", "pass-to-pass", "pass-to-fail", "fail-to-fail", "never ran"]
# Why a test or subtest failed: its own assertion, where the exception came from, or "target missing":
# the test named a module, class, function or attribute (by import, mock.patch or its own attribute
# access) that the tree's source does not define (decided on the host: runner/evidence/targets.py)
Cause = Literal["assertion", "sglang", "stub", "environment", "test", "other", "timeout", "crash", "target missing"]
# Causes that say nothing about how the tree behaves: the test fell through to its own stand-ins, the
# environment lacks a module, or the test asks for something this tree does not have (a test of
# another era). Such a failure at head is inconclusive, never a regression or a missing fix.
NOT_BEHAVIOUR = ("stub", "environment", "target missing")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Wanted(_Model):
    """A name of the tree the test asked for and did not get (the host decides whether the tree lacks it)."""

    name: str = Field(description="dotted: sglang.x.y.name, or sglang.x.Class.attr")
    how: Literal["import", "mock.patch", "attribute"]
    at: str | None = Field(description="where the test asked for it: file:line in function")


class Raised(_Model):
    type: str
    message: str
    origin: Origin
    assertion: bool = Field(description="the test's own verdict failed, not code falling through")
    frame: str | None
    module: str | None = Field(None, description="origin environment: the module that cannot be imported")
    raised_as: str | None = Field(None, description="what pytest shows when the failure was re-raised as another "
                                                     "exception (CustomTestCase's retry wrapper)")
    wanted: Wanted | None = Field(None, description="what of the tree the test itself asked for, when that is what failed")


class Result(_Model):
    id: str
    parent: str | None
    outcome: Literal["passed", "failed", "error", "skipped", "xfailed", "xpassed"]
    phase: Literal["setup", "call", "teardown"] | None
    exception: Raised | None
    reason: str | None
    failed_subtests: int
    duration_ms: int


class Collected(_Model):
    id: str
    title: str | None


class CollectionError(_Model):
    id: str
    exception: Raised


class Outcomes(_Model):
    schema_: Literal["diffprobe.pytest-outcomes/3"] = Field(alias="schema")
    python: str
    implementation: str
    platform: str
    pytest: str
    sglang_root: str | None
    complete: bool
    exit_status: int | None
    collected: list[Collected]
    collection_errors: list[CollectionError]
    running: str | None
    results: list[Result]
    summary: list[str] = Field(description="pytest's own last line, as it prints it: '3 failed', '5 passed', ...")
    materials: dict[str, str]
    standins: list[str]


# --- what an upstream-tests bundle records (bundle.json extra) ---------------------------------


class SideState(_Model):
    status: Status
    kind: str
    detail: str | None = None
    cause: Cause | None = None


class GradedTest(_Model):
    id: str
    parent: str | None
    base: SideState
    head: SideState
    grade: Grade
    cause: Cause | None = Field(None, description="the failure the grade rests on: at base for fail-to-pass, "
                                                  "at head otherwise")
    reason: str | None = Field(None, description="the grade in words, from the two sides' states "
                                                 "(absent in bundles written before reasons were stated)")


class PytestCount(_Model):
    """pytest's own last line for one side, and what it is made of in diffprobe's records."""

    line: list[str] = Field(description="as pytest printed it: '3 failed', '5 passed', ...")
    failed_tests: int
    failed_subtests: int
    passed_tests: int
    passed_subtests: int = Field(description="graded here; pytest's line leaves them out at default verbosity")
    agrees: bool = Field(description="the records add up to pytest's own failed and passed counts")


class SideSummary(_Model):
    source: Redacted
    tests: dict[str, int] = Field(description="kind -> count, tests only (passed first)")
    subtests: dict[str, int]
    collection_errors: list[str] = Field(description="kind of each collection error")
    timed_out: bool
    pytest: PytestCount | None = None


class Grading(_Model):
    counts: dict[Grade, int]
    by_cause: dict[Grade, dict[str, int]] = Field(default_factory=dict, description="failing grades split by cause")
    tests: list[GradedTest]
    base: SideSummary
    head: SideSummary
    verdict: Literal["passes", "regression", "fix missing", "fails at head", "inconclusive"] | None = Field(
        None, description="absent in bundles written before verdicts were graded by cause")
    blockers: list[str] = Field(description="why the head does not pass the file; empty when it does")
    passed: bool


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


class UpstreamTestsRecord(_Model):
    """What an upstream-tests bundle adds in ``bundle.json`` ``extra``."""

    tests: UpstreamFileRecord
    base: str = Field(description="the base source as given")
    head: str = Field(description="the head source as given")
    grading: Grading
