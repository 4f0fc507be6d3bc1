"""What the judge of ``diffprobe upstream-tests`` reads and what it decides, as data: the outcomes its
pytest plugin writes inside a tree's environment (``probes/pytest_outcomes.py``,
``diffprobe.pytest-outcomes/5``), validated before the host believes a line of them, and the grading.
Here, in the judge, because the grading is a verdict: its rules (runner/judge/upstream.py) and their
vocabulary are the judge's identity. The bundle's record around them: runner/evidence/upstream.py."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Origin = Literal["stub", "sglang", "test", "environment", "other"]
Status = Literal["passed", "failed", "never ran"]
INCOMPATIBLE = "incompatible (test era)"
Grade = Literal["fail-to-pass", "pass-to-pass", "pass-to-fail", "fail-to-fail", "incompatible (test era)", "never ran"]
# Why a test or subtest failed: its own assertion, where the exception came from, or the test meeting
# an API it was not written for (decided on the host from the stored code: runner/judge/targets.py):
# "target missing": it named a module, class, function or attribute (by import, mock.patch or its own
# attribute access) that the tree's source does not define; "signature mismatch": a call between the
# test's files (the test, its fakes) and the tree whose arguments the callee's signature does not
# accept; "attribute unset": the tree read an attribute its own constructor sets from an instance the
# test built without it; "call arity": a mock's expected call of another shape than the tree's call
# site, as written, can ever make; "tuple arity": the test unpacked or indexed a tuple of the tree's
# state for another length than every tuple the tree's code builds there; "message shape": the test handed
# the tree a tagged multipart message of a length none of the tree's producers of that tag builds (a
# peer's message of another era's wire format).
Cause = Literal["assertion", "sglang", "stub", "environment", "test", "other", "timeout", "crash", "target missing",
                "signature mismatch", "attribute unset", "call arity", "tuple arity", "message shape"]
# The test and the tree are of different eras: such a failure grades "incompatible (test era)" on
# either side, never pass-to-fail, fail-to-pass or fail-to-fail.
ERA = ("target missing", "signature mismatch", "attribute unset", "call arity", "tuple arity", "message shape")
# Causes that say nothing about how the tree behaves: the test fell through to its own stand-ins, the
# environment lacks a module, or the test is of another era. Such a failure at head is inconclusive,
# never a regression or a missing fix.
NOT_BEHAVIOUR = ("stub", "environment", *ERA)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Wanted(_Model):
    """A name of the tree the test asked for and did not get (the host decides whether the tree lacks it)."""

    name: str = Field(description="dotted: sglang.x.y.name, or sglang.x.Class.attr")
    how: Literal["import", "mock.patch", "attribute"]
    at: str | None = Field(description="where the test asked for it: file:line in function")


class Frame(_Model):
    """One frame of a failure's traceback, as data: whose file, where under its owner's root."""

    owner: Literal["test", "sglang", "mock", "other"]
    path: str | None = Field(description="under the test directory (test) or the tree's root (sglang)")
    line: int
    function: str


class Place(_Model):
    owner: Literal["test", "sglang", "mock", "other"]
    path: str | None


class CallSite(Place):
    """The call expression's positions in its file (columns: UTF-8 byte offsets, as Python's)."""

    line: int
    end_line: int
    col: int
    end_col: int


class Callee(Place):
    line: int = Field(description="the first line of the function's code (its first decorator, if any)")
    qualname: str
    bound: bool = Field(description="a first argument is bound by the lookup (a method through an instance, a "
                                    "classmethod, a class's __init__)")


class CrossingCall(_Model):
    """The call a TypeError was raised at, when it crossed between the test's files and the tree."""

    caller: CallSite
    callee: Callee


class Unset(_Model):
    """An AttributeError on an instance of one of the tree's classes."""

    cls: str = Field(description="the tree's class, dotted")
    name: str
    has: list[str] | None = Field(None, description="the instance's own attribute names when it failed (None: no __dict__)")


class Shape(_Model):
    """A call's arguments as counted: positional ones and the keywords' names."""

    args: int
    keywords: list[str]


class MockCall(_Model):
    """A mock's assert_called_with (or assert_called_once_with) that failed on the last call's arguments."""

    expected: Shape = Field(description="what the test's assertion expects")
    actual: Shape = Field(description="the last call the mock received")
    spec: bool = Field(description="the mock has a signature (spec or autospec): it compares calls by binding")
    at: CallSite | None = Field(description="the test's assertion call")
    site: CallSite | None = Field(description="the call expression that made the last call (None: not known)")


class Unpacked(_Model):
    """A tuple unpacked or indexed in the test's own frame that had another length than it wanted."""

    how: Literal["unpack", "index"]
    at: CallSite | None = Field(description="the unpacking target or the subscript")
    wanted: int = Field(description="names unpacked (without a starred one), or the index + 1")
    starred: bool = Field(description="at least ``wanted`` would do (a starred target, or an index)")
    length: int
    value_cls: str | None = Field(description="the tree's tuple class (a NamedTuple) the value is an instance of")
    holder: str | None = Field(description="the tree's class whose instance attribute holds the tuple")
    attribute: str | None
    depth: int = Field(description="subscripts between that attribute and the tuple")


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
    frames: list[Frame] = Field(default_factory=list, description="innermost last (absent before pytest-outcomes/4)")
    call: CrossingCall | None = None
    unset: Unset | None = None
    mock_call: MockCall | None = Field(None, description="absent before pytest-outcomes/5")
    unpacked: Unpacked | None = Field(None, description="absent before pytest-outcomes/5")


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
    schema_: Literal["diffprobe.pytest-outcomes/3", "diffprobe.pytest-outcomes/4", "diffprobe.pytest-outcomes/5"] = \
        Field(alias="schema")
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


class Incompatibility(_Model):
    """Why a failure is the test's era, not the tree's behaviour: where, and both sides of it."""

    at: str = Field(description="the call site or the test's lookup: file:line")
    test: str = Field(description="what the test's side asks: the call as written, the name, the object built")
    tree: str = Field(description="what the tree's side has: the signature with its place, what the source lacks, "
                                  "the constructor that sets the attribute")


class SideState(_Model):
    status: Status
    kind: str
    detail: str | None = None
    cause: Cause | None = None
    incompatible: Incompatibility | None = None


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
    source: str = Field(description="the source as given (redacted where recorded: runner/evidence/upstream.py)")
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


