"""``diffprobe upstream-tests``: an upstream pytest file run against two trees, graded like SWE-bench.

Why: the published evidence also ran upstream unit tests, and its pre-fix "0/7" were 6
AttributeError and 1 ValueError raised on a test stub, not 7 failed assertions. A failing count
means nothing until it says which. So each side runs the file in its own tree's environment
(``probes/pytest_outcomes.py``: ``python -I``, scrubbed environment, private HOME, no network
where the OS allows, a deadline), every test and subtest gets an outcome, and every failure an
exception type, an origin (``stub``, ``test`` files, the tree's ``sglang``, ``environment``,
``other``) and whether it was the test's own assertion.

Grading, per test or subtest id, as SWE-bench's harness does where the tree is what is measured:
passed = pytest's passed, xpassed or xfailed; failed = failed or error (any phase), killed at the
deadline or by a crash while running, or not collected because the tree lacks what the file imports
or patches (``target missing``, resolved against the tree's source: runner/evidence/targets.py);
*never ran* = skipped, not collected for any other reason, or not reached before the deadline.
``fail-to-pass``, ``pass-to-pass``, ``pass-to-fail``, ``fail-to-fail`` need both sides graded;
anything else is ``never ran``, which is never counted as passed (README: where this differs from
SWE-bench's counts). Failing grades are split by cause (the test's own assertion, a missing target,
or the failure's origin), each row says why in words, and a test that falls through to its own
stand-ins, lacks a module or wants what the tree lacks at head is inconclusive, never a regression
nor a missing fix. Exit 0 only when head collected, no test fails at head, no test that ran at base is missing at
head, and at least one test passed at head; 1 otherwise; 3 when a module is missing from an
environment (the test is not at fault). Files and layout: ``upstream_layout``.

Receipts use the common case vocabulary (``docs/probe-contract.md``) and never call a harness gap
a behaviour. Each test or subtest is one case, role ``bug``: an upstream test exists to catch a
behaviour, and its signature is its own failed assertion.

| pytest | case outcome | classification | ``error.where`` |
|---|---|---|---|
| passed, xpassed, xfailed | observed, effects ``{"pytest": ...}`` | clean | |
| failed on the test's own assertion | observed, effects with ``exception`` | bug | |
| a test whose failed subtests all failed on assertions | observed | bug | |
| any other failure or error | error | inconclusive | stub -> ``double``, sglang -> ``sglang``, test/other -> ``setup``, target missing -> ``import`` |
| collection error (one case named after the file) | error | inconclusive | ``import`` |
| running when the process died | error | inconclusive | ``process`` |
| running at the deadline | timeout | inconclusive | |
| skipped, or not reached | not_applicable, ``missing`` says why | inconclusive | |
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable, get_args

from pydantic import ValidationError

from runner import errors, ui
from runner.commands import baseline, options, pipeline
from runner.evidence import bundle, catalog, departures, pins, receipts, targets
from runner.sandbox import execute
from runner.store import envs, intake, sources, specs
from runner.errors import BadInput, Infrastructure
from runner.files import sha256_bytes, sha256_file
from runner.evidence.materials import rederive
from runner.judge.observations import Case, CaseError, ImportResult
from runner.evidence.receipts import ProbeRef, Receipt
from runner.evidence.upstream import (NOT_BEHAVIOUR, Cause, CollectionError, Grade, GradedTest, Grading, Outcomes, PytestCount,
                                      Raised, Result, SideState, SideSummary, Status, UpstreamFileRecord, UpstreamTestsRecord)
from runner.commands import upstream_layout
from runner.commands.upstream_layout import UpstreamFile
from runner.views.grading import show

PROBE_ID, PLUGIN = catalog.UPSTREAM_TESTS
DEFAULT_TIMEOUT = 900
SIGNATURE = "the test's own assertion failed (AssertionError or pytest.fail from the test file, or a mock's assert_*)"
LIMITS = [
    "CPU only: an upstream test file run against pinned SGLang trees, not a served model; no GPU, no RDMA",
    "the test's own stubs and mocks stand in for SGLang's collaborators: a failure raised on a stub says the "
    "test fell through to it, not how SGLang behaves",
    "beside the test file only what upstream loads with it: from a git commit its conftest.py chain and the "
    "sibling modules it imports, at that commit; from a local file only what --with names",
]

# --- how outcomes are read (their formats and the grading's: runner/evidence/upstream.py) -----

PASSED = ("passed", "xpassed", "xfailed")
WHERE = {"stub": "double", "sglang": "sglang", "test": "setup", "other": "setup", "environment": "setup"}
_GRADE: dict[tuple[str, str], Grade] = {
    ("failed", "passed"): "fail-to-pass", ("passed", "passed"): "pass-to-pass",
    ("passed", "failed"): "pass-to-fail", ("failed", "failed"): "fail-to-fail",
}


# --- the test file ---------------------------------------------------------------------------


def _checked(arg: str, name: str) -> None:
    """pytest collects a ``.py`` file; a ``conftest.py`` would be loaded as configuration instead."""
    if not name.endswith(".py") or name == "conftest.py":
        raise BadInput(f"--tests {arg}: expected a pytest file (*.py, not conftest.py)")


def _repo_path(path: str) -> str:
    if path.startswith(("/", "-")) or ".." in PurePosixPath(path).parts or "\\" in path:
        raise BadInput(f"--tests {path}: not a local file, nor a repository path such as test/unit/test_x.py")
    _checked(path, PurePosixPath(path).name)
    return path


def locate_tests(arg: str, head: str, with_paths: list[str] = ()) -> Callable[[sources.Tree, pipeline.Options], UpstreamFile]:
    """Check ``--tests`` (and ``--with``) before anything is downloaded: a local file and its
    helpers must exist and parse. Return how to read the file once head is resolved."""
    local = Path(arg)
    if local.is_file():
        _checked(arg, local.name)
        test = upstream_layout.build(f"--tests {arg}", local.name, f"local:{local.resolve()}",
                                     upstream_layout.read_local(local.resolve(), f"--tests {arg}"),
                                     upstream_layout.local_helpers(local, list(with_paths)))
        return lambda tree, opts: test
    path = _repo_path(arg)
    if specs.parse(head).kind != "git":
        raise BadInput(f"--tests {arg}: not a local file, and {head} has no git history to take it from; give a local file")
    if with_paths:
        raise BadInput(f"--with: only for a local --tests file (from git, the test's directory comes at its commit)")

    def from_head(tree: sources.Tree, opts: pipeline.Options) -> UpstreamFile:
        ident = tree.identity

        def read(repo_path: str) -> bytes | None:
            try:
                return sources.read_file(ident.repo, ident.commit, repo_path, opts.cache, upstream_layout.MAX_FILE)
            except intake.Refused:  # there, but over the bound: never read as absent
                raise
            except BadInput:  # no such file at that commit
                return None

        data = sources.read_file(ident.repo, ident.commit, path, opts.cache, upstream_layout.MAX_FILE)
        return upstream_layout.build(f"--tests {arg}", path, f"git:{ident.commit}:{path}", data,
                                     upstream_layout.git_helpers(path, data, read))

    return from_head


def probe_ref(test: UpstreamFile) -> ProbeRef:
    """Versioned by the test's files (the file, its conftest.py files and helpers) and the
    plugin's (with the probe files it loads)."""
    files = catalog.probe_files(PROBE_ID)
    files |= {f"upstream/{path}": sha256_bytes(data) for path, data in test.files().items()}
    digest = sha256_bytes("".join(f"{sha}  {name}\n" for name, sha in sorted(files.items())).encode())
    return ProbeRef(id=PROBE_ID, fix=None, sha256=digest, files=files)


# --- one side --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    name: str  # base or head
    text: str  # the source as given
    tree: sources.Tree
    outcomes: Outcomes
    run: execute.Isolated
    lacking: dict[str, str] = field(default_factory=dict)  # a name the test wanted -> what of it the tree lacks

    @property
    def timed_out(self) -> bool:
        return self.run.code is None


def run_side(name: str, text: str, tree: sources.Tree, environment: envs.Env, test: UpstreamFile, timeout: int,
             sandboxed: bool = True) -> Side:
    """pytest on ``test`` in ``environment``, from a directory holding nothing but the file, so that
    nothing else is importable and no ini file or conftest.py from elsewhere applies; in the
    sandbox, that directory and a copy of the probes are read-only, the outcomes its one output."""
    with execute.run_dir() as work_dir:
        plugin = execute.probes_copy(work_dir) / PLUGIN
        tests_dir, out = work_dir / "tests", work_dir / "out" / "outcomes.json"
        tests_dir.mkdir()
        (tests_dir / "pytest.ini").write_text("[pytest]\n")  # makes this directory pytest's rootdir
        for path, data in test.files().items():
            (tests_dir / path).parent.mkdir(parents=True, exist_ok=True)
            (tests_dir / path).write_bytes(data)
        # -B: pytest writes no byte-code (its assertion rewriting included) into the shared layer, whose seal an
        # unsandboxed run would otherwise break (runner/store/envs.py); outcomes are the same.
        argv = [str(environment.python), "-I", "-B", str(plugin), "--out", str(out), "--root", str(tests_dir),
                str(tests_dir / test.path)]
        with ui.step(f"pytest {test.path} on {name} {text}"):
            run = execute.run_isolated(argv, work_dir=work_dir, cwd=tests_dir, timeout=timeout, sandboxed=sandboxed,
                                       read_only=[*environment.read_only, tests_dir, plugin.parent], hidden=environment.hidden)
        if not out.exists():
            raise Infrastructure(f"pytest did not start on {text} ({_how(run)})", detail=run.log_tail)
        try:
            outcomes = Outcomes.model_validate_json(execute.read_result(out))
        except ValidationError as e:
            raise Infrastructure(f"pytest outcomes from {text} break their format: {e.errors()[0]['msg']}") from None
    if outcomes.exit_status in (3, 4):  # pytest's internal and usage errors: nothing was tested
        raise Infrastructure(f"pytest failed on {text} (exit {outcomes.exit_status})", detail=run.log_tail)
    if not outcomes.complete and run.code is not None and outcomes.running is None:
        raise Infrastructure(f"pytest died on {text} outside any test ({_how(run)})", detail=run.log_tail)
    if missing := missing_modules(outcomes):
        raise Infrastructure(f"{text}: the environment lacks {', '.join(missing)}; the test file cannot be graded there "
                             f"(not the test's fault: a dependency that is not installed)")
    if run.code is None:
        ui.warn(f"{name}: pytest exceeded {timeout} s and was killed; unfinished tests are graded as such")
    return Side(name, text, tree, outcomes, run, lacking(outcomes, targets.Source(tree.root)))


def lacking(o: Outcomes, source: targets.Source) -> dict[str, str]:
    """Each name a failure says the test wanted, resolved against the tree's own source: those it
    certainly lacks (runner/evidence/targets.py), with the part that is missing."""
    raised = [c.exception for c in o.collection_errors] + [r.exception for r in o.results if r.exception]
    found = {r.wanted.name: source.lacks(r.wanted.name) for r in raised if r.wanted}
    return {name: missing for name, missing in found.items() if missing}


def missing_modules(o: Outcomes) -> list[str]:
    """Modules the environment lacks, each with where it was imported (origin ``environment``)."""
    raised = [c.exception for c in o.collection_errors] + [r.exception for r in o.results if r.exception]
    found = {f"module {r.module!r} (imported at {r.frame})": None for r in raised if r.origin == "environment"}
    return list(found)


def _how(run: execute.Isolated) -> str:
    if run.code is None:
        return "killed at its deadline"
    return f"killed by signal {-run.code}" if run.code < 0 else f"exit {run.code}"


# --- per test, per side ----------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One test or subtest on one side: its status for grading and the words that explain it."""

    id: str
    parent: str | None
    title: str | None
    status: Status
    kind: str  # "passed", "AttributeError (stub)", "skipped", "timeout", ...: what counts are made of
    detail: str | None  # skip reason or the exception's message
    result: Result | None
    cause: Cause | None = None  # why it failed, when it did


def kind_of(r: Result, lacks: dict[str, str] = {}) -> str:  # noqa: B006 (read only)
    """Never a bare "failed": the exception type and whether it was an assertion or where it came from."""
    if r.outcome in PASSED or r.outcome == "skipped":
        return r.outcome
    if r.exception is None:
        return "failed through its subtests"
    return f"{r.exception.type} ({cause_of(r.exception, lacks)}{'' if r.phase == 'call' else f', in {r.phase}'})"


def cause_of(raised: Raised, lacks: dict[str, str] = {}) -> Cause:  # noqa: B006 (read only)
    """The test's own assertion; the test's target missing from the tree (``lacks``: what the tree's
    source lacks of the names tests wanted); else where the exception came from."""
    if raised.assertion:
        return "assertion"
    return "target missing" if raised.wanted and raised.wanted.name in lacks else raised.origin


def missing_target(raised: Raised, lacks: dict[str, str]) -> str | None:
    """"the tree lacks X (how at where)" when the failure is the test's target missing."""
    if cause_of(raised, lacks) != "target missing":
        return None
    w = raised.wanted
    return f"the tree lacks {lacks[w.name]} ({w.how} of {w.name}" + (f" at {w.at})" if w.at else ")")


def _cause(r: Result, subtests: list[Result], lacks: dict[str, str]) -> Cause | None:
    """A failure's cause; a test that failed through its subtests fails for theirs: an
    assertion only if every failed subtest failed on one."""
    if r.outcome in PASSED or r.outcome == "skipped":
        return None
    if r.exception is not None:
        return cause_of(r.exception, lacks)
    causes = [cause_of(s.exception, lacks) for s in subtests if s.outcome == "failed" and s.exception]
    return next((c for c in causes if c != "assertion"), "assertion" if causes else "other")


def entries(side: Side) -> list[Entry]:
    o = side.outcomes
    titles = {c.id: c.title for c in o.collected}
    by_parent: dict[str, list[Result]] = {}
    for r in o.results:
        if r.parent:
            by_parent.setdefault(r.parent, []).append(r)
    got = []
    for r in o.results:
        status: Status = "passed" if r.outcome in PASSED else "never ran" if r.outcome == "skipped" else "failed"
        detail = r.reason if r.outcome in ("skipped", "xfailed") else \
            (missing_target(r.exception, side.lacking) or r.exception.message) if r.exception else None
        got.append(Entry(r.id, r.parent, titles.get(r.id), status, kind_of(r, side.lacking), detail, r,
                         _cause(r, by_parent.get(r.id, []), side.lacking)))
    if not o.complete and o.running:
        kind = "timeout" if side.timed_out else "crashed"
        got.append(Entry(o.running, None, titles.get(o.running), "failed", kind, _how(side.run), None,
                         "timeout" if side.timed_out else "crash"))
    done = {e.id for e in got}
    for c in o.collected:
        if c.id not in done:
            got.append(Entry(c.id, None, c.title, "never ran", "not reached", f"pytest stopped ({_how(side.run)})", None))
    return got


# --- receipts --------------------------------------------------------------------------------


def cases(side: Side, test: UpstreamFile) -> list[Case]:
    listed = entries(side)
    failed_subtests: dict[str, list[Result]] = {}
    for e in listed:
        if e.parent and e.result and e.result.outcome == "failed":
            failed_subtests.setdefault(e.parent, []).append(e.result)
    got = [_collection_case(c, test, side.lacking) for c in side.outcomes.collection_errors]
    for e in listed:
        got.append(Case(id=e.id, site=test.name, role="bug", title=e.title or e.id, signature=SIGNATURE,
                        duration_ms=e.result.duration_ms if e.result else 0,
                        **_observation(e, failed_subtests.get(e.id, []), side.lacking)))
    return got


def _observation(e: Entry, failed_subtests: list[Result], lacks: dict[str, str]) -> dict:
    """Outcome, classification and evidence of one entry (the mapping in the module docstring)."""
    r = e.result
    if r is None:
        if e.kind == "timeout":
            return {"outcome": "timeout", "classification": "inconclusive"}
        if e.kind == "crashed":
            return _error(CaseError(type="Crash", message=e.detail or "", where="process"))
        return {"outcome": "not_applicable", "classification": "inconclusive", "missing": f"not reached: {e.detail}"}
    if r.outcome in PASSED:
        return {"outcome": "observed", "classification": "clean", "effects": {"pytest": r.outcome}}
    if r.outcome == "skipped":
        return {"outcome": "not_applicable", "classification": "inconclusive", "missing": f"skipped: {r.reason}"}
    if r.exception is not None:
        if r.exception.assertion:
            effects = {"pytest": r.outcome, "phase": r.phase, "exception": r.exception.model_dump(mode="json")}
            return {"outcome": "observed", "classification": "bug", "effects": effects}
        return _error(_case_error(r.exception, lacks))
    fallen = [s.exception for s in failed_subtests if s.exception and not s.exception.assertion]
    if not fallen:
        effects = {"pytest": r.outcome, "failed_subtests": r.failed_subtests}
        return {"outcome": "observed", "classification": "bug", "effects": effects}
    first = _case_error(fallen[0], lacks)
    message = f"{len(fallen)} of {r.failed_subtests} failed subtests did not fail on an assertion; first: {first.message}"
    return _error(CaseError(type=first.type, message=message, where=first.where, frame=first.frame))


def _case_error(raised: Raised, lacks: dict[str, str]) -> CaseError:
    missing = missing_target(raised, lacks)
    return CaseError(type=raised.type, message=missing or raised.message, where="import" if missing else WHERE[raised.origin],
                     frame=raised.frame)


def _error(error: CaseError) -> dict:
    return {"outcome": "error", "classification": "inconclusive", "error": error}


def _collection_error(c: CollectionError, lacks: dict[str, str]) -> CaseError:
    return CaseError(type=c.exception.type, message=missing_target(c.exception, lacks) or c.exception.message,
                     where="import", frame=c.exception.frame)


def _collection_case(c: CollectionError, test: UpstreamFile, lacks: dict[str, str]) -> Case:
    return Case(id=c.id, site=test.name, role="bug", title=f"collect {test.name}", signature=SIGNATURE,
                duration_ms=0, **_error(_collection_error(c, lacks)))


def receipt(side: Side, environment: envs.Env, test: UpstreamFile, probe: ProbeRef) -> Receipt:
    o = side.outcomes
    env = receipts.tree_environment(environment, python=o.python, implementation=o.implementation, platform=o.platform,
                                    standins_used=o.standins, isolation=side.run.isolation)
    imported = ImportResult(outcome="ok", duration_ms=0)
    if o.collection_errors:  # the test module did not import: the nearest thing to SGLang failing to import
        imported = ImportResult(outcome="error", duration_ms=0, error=_collection_error(o.collection_errors[0], side.lacking))
    return receipts.make(probe, side.tree.identity, env, cases(side, test), started_at=side.run.started_at,
                         finished_at=side.run.finished_at, materials=rederive(side.tree, o.materials),
                         import_result=imported)


# --- grading ---------------------------------------------------------------------------------


def _state(entry: Entry | None, side: Side, declared: bool = False) -> SideState:
    """A test's state on one side. One the side did not collect never ran, unless the file did not
    collect because the tree lacks what it imports or patches: then it fails there, for that reason
    (SWE-bench counts a test missing from a side's results as failed; diffprobe only when the tree,
    not the environment or the file itself, is why)."""
    if entry is not None:
        return SideState(status=entry.status, kind=entry.kind, detail=entry.detail, cause=entry.cause)
    errors = side.outcomes.collection_errors
    if errors and all(missing_target(c.exception, side.lacking) for c in errors):
        return SideState(status="failed", kind=f"not collected: {kind_of_collection(errors[0], side.lacking)}",
                         detail=missing_target(errors[0].exception, side.lacking), cause="target missing")
    why = "collection error" if errors else "not collected on this side"
    return SideState(status="never ran", kind="not collected", detail=f"{why}{'; listed from its source' * declared}")


def _grade(base: SideState, head: SideState) -> Grade:
    return _GRADE.get((base.status, head.status), "never ran")


def _summary(side: Side, listed: list[Entry]) -> SideSummary:
    def count(rows: list[Entry]) -> dict[str, int]:
        c = Counter(e.kind for e in rows)
        return {"passed": c.pop("passed", 0), **dict(c.most_common())}

    return SideSummary(
        source=side.text, tests=count([e for e in listed if e.parent is None]),
        subtests=count([e for e in listed if e.parent is not None]),
        collection_errors=[kind_of_collection(c, side.lacking) for c in side.outcomes.collection_errors],
        timed_out=side.timed_out,
        pytest=pytest_count(side.outcomes),
    )


def pytest_count(o: Outcomes) -> PytestCount | None:
    """How pytest's own line relates to the records: its "failed" counts failed tests and failed
    subtests alike, its "passed" counts tests only (a unittest test whose subTest blocks failed is
    "passed" there, its failed subtests are in "failed"), errors are counted apart."""
    if not o.complete:
        return None
    tests = [r for r in o.results if r.parent is None]
    subtests = [r for r in o.results if r.parent is not None]
    failed_tests = sum(r.outcome == "failed" for r in tests)
    failed_subtests = sum(r.outcome == "failed" for r in subtests)
    passed_tests = sum(r.outcome == "passed" for r in tests)
    said = {word: int(n) for n, word in (part.split(" ", 1) for part in o.summary if part.split(" ", 1)[0].isdigit())}
    agrees = said.get("failed", 0) == failed_tests + failed_subtests and said.get("passed", 0) == passed_tests
    return PytestCount(line=o.summary, failed_tests=failed_tests, failed_subtests=failed_subtests,
                       passed_tests=passed_tests, passed_subtests=sum(r.outcome == "passed" for r in subtests),
                       agrees=agrees)


def kind_of_collection(c: CollectionError, lacks: dict[str, str] = {}) -> str:  # noqa: B006 (read only)
    return f"{c.exception.type} ({cause_of(c.exception, lacks)})"


def _covered(declared: str, ids: set[str]) -> bool:
    return declared in ids or any(i.startswith(declared + "[") for i in ids)


def grade(base: Side, head: Side, declared: tuple[str, ...] = ()) -> Grading:
    """Per test and subtest id. A test listed from the file's source that neither side collected
    never ran on either (a file that collects nowhere still shows its tests)."""
    b_entries, h_entries = entries(base), entries(head)
    b, h = {e.id: e for e in b_entries}, {e.id: e for e in h_entries}
    rows = []
    for test_id in dict.fromkeys([*h, *b]):
        ref = h.get(test_id) or b[test_id]
        rows.append(graded(test_id, ref.parent, _state(b.get(test_id), base), _state(h.get(test_id), head)))
    seen = {r.id for r in rows}
    for test_id in declared:
        if not _covered(test_id, seen):
            rows.append(graded(test_id, None, _state(None, base, True), _state(None, head, True)))
    head_errors = [(kind_of_collection(c, head.lacking), missing_target(c.exception, head.lacking) or c.exception.message,
                    cause_of(c.exception, head.lacking)) for c in head.outcomes.collection_errors]
    verdict, blockers = _verdict(rows, head_errors)
    counts = Counter(r.grade for r in rows)
    by_cause: dict[Grade, dict[str, int]] = {}
    for g in ("fail-to-pass", "pass-to-fail", "fail-to-fail"):
        split = Counter(r.cause or "other" for r in rows if r.grade == g)
        by_cause[g] = dict(split.most_common())
    return Grading(counts={g: counts.get(g, 0) for g in get_args(Grade)}, by_cause=by_cause, tests=rows,
                   base=_summary(base, b_entries), head=_summary(head, h_entries), verdict=verdict, blockers=blockers,
                   passed=not blockers)


def graded(test_id: str, parent: str | None, base: SideState, head: SideState) -> GradedTest:
    """One row: its grade, the failure it rests on, and the reason in words, each true of the two states."""
    g = _grade(base, head)
    cause = base.cause if g == "fail-to-pass" else head.cause
    return GradedTest(id=test_id, parent=parent, base=base, head=head, grade=g, cause=cause, reason=reason(g, base, head))


def _said(state: SideState) -> str:
    return f"{state.kind}: {state.detail}" if state.detail and state.status != "passed" else state.kind


def reason(g: Grade, base: SideState, head: SideState) -> str:
    if g == "fail-to-pass":
        return f"fails at base ({_said(base)}); passes at head"
    if g == "pass-to-pass":
        return "passes at base and at head"
    if g == "pass-to-fail":
        why = f"passes at base; fails at head ({_said(head)})"
        return why + (f": {NOT_BEHAVIOUR_WORDS[head.cause]}, not a regression" if head.cause in NOT_BEHAVIOUR else "")
    if g == "fail-to-fail":
        return f"fails at base ({_said(base)}) and at head ({_said(head)})"
    sides = [f"never ran at {name} ({_said(s)})" for name, s in (("base", base), ("head", head)) if s.status == "never ran"]
    return "; ".join(sides) + ": not compared"


# What a failure at head with a cause that is not the tree's behaviour says instead
NOT_BEHAVIOUR_WORDS = {"stub": "it fell through to the test's own stand-ins",
                       "environment": "the environment lacks a module",
                       "target missing": "the test asks for something this tree does not have (a test of another era)"}


def _ran(state: SideState) -> bool:
    """The test ran on that side (passed or failed running), as opposed to never ran or not collected."""
    return state.status != "never ran" and not state.kind.startswith("not collected")


def _verdict(rows: list[GradedTest], head_errors: list[tuple[str, str, Cause]]) -> tuple[str, list[str]]:
    """Why the head does not pass, each reason in the words its cause deserves: a test that fell
    through to its own stub, lacks a module or wants what the tree lacks at head says nothing about
    the tree -- it is inconclusive, never a regression nor a missing fix. ``head_errors``: the head's
    collection errors, (kind, detail, cause)."""
    blockers, found = [], set()
    for kind, detail, cause in head_errors:
        not_behaviour = cause in NOT_BEHAVIOUR
        blockers.append(f"head: the file does not collect: {kind}: {detail}"
                        + (f": {NOT_BEHAVIOUR_WORDS[cause]}, inconclusive" if not_behaviour else ""))
        found.add("inconclusive" if not_behaviour else "fails at head")
    for r in rows:
        if r.head.status == "failed":
            not_behaviour = r.head.cause in NOT_BEHAVIOUR
            words = NOT_BEHAVIOUR_WORDS.get(r.head.cause or "", "")
            if r.grade == "pass-to-fail":
                word = "inconclusive" if not_behaviour else "regression"
                blockers.append(f"{r.id}: passed at base, {r.head.kind} at head: "
                                + (f"{words}, not a regression" if not_behaviour else "regression"))
            elif r.grade == "fail-to-fail" and r.head.cause == "assertion":
                word = "fix missing"
                blockers.append(f"{r.id}: the test's assertion fails at base and at head: fix missing")
            else:
                word = "inconclusive" if not_behaviour else "fails at head"
                blockers.append(f"{r.id}: {r.head.kind} at head" + (f" ({words}: inconclusive)" if not_behaviour else ""))
            found.add(word)
    dropped = [r for r in rows if _ran(r.base) and r.head.status == "never ran"]
    blockers += [f"{r.id}: ran at base ({r.base.kind}), never ran at head ({r.head.kind}): not compared, inconclusive"
                 for r in dropped]
    if dropped:
        found.add("inconclusive")
    if not any(r.head.status == "passed" for r in rows):
        blockers.append("no test passed at head")
        found.add("inconclusive")
    order = ("regression", "fix missing", "fails at head", "inconclusive")
    return next((v for v in order if v in found), "passes"), blockers


def record(test: UpstreamFile, base: str, head: str, grading: Grading) -> UpstreamTestsRecord:
    """What the bundle records beside its receipts: the files graded, by digest, and the grading."""
    files = UpstreamFileRecord(file=test.name, path=test.path, from_=test.origin, sha256=sha256_bytes(test.data),
                               helpers={path: sha256_bytes(data) for path, data in test.helpers.items()},
                               declared=list(test.declared))
    return UpstreamTestsRecord(tests=files, base=base, head=head, grading=grading)


def cmd_upstream_tests(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        raise BadInput(f"--timeout {args.timeout}: must be a positive number of seconds")
    signers = options.signers(args)
    baseline.check_against(args.against)
    read_tests = locate_tests(args.tests, args.head, args.with_paths or [])
    opts = pipeline.options(args, pins.load(options.path(args.pins)), options.probe_of_env(args))
    torch = opts.probe.torch()  # a bad source fails before any download
    started = execute.now()
    trees = {name: pipeline.resolve(text, opts) for name, text in (("base", args.base), ("head", args.head))}
    test = read_tests(trees["head"], opts)
    probe = probe_ref(test)
    interp = envs.interpreter(opts.probe.python)
    sides, got = {}, []
    for name, text in (("base", args.base), ("head", args.head)):
        environment = envs.env(trees[name], opts.cache, interp, torch)
        for note in environment.stamp.notes:
            ui.warn(f"{text}: {note}")
        sides[name] = run_side(name, text, trees[name], environment, test, args.timeout, sandboxed=opts.sandboxed(trees[name]))
        got.append(receipt(sides[name], environment, test, probe))
    grading = grade(sides["base"], sides["head"], test.declared)
    # Each side against its baseline: pytest runs record no lines, so a changed place the tests
    # imported is never "not run" on their account, and --strict fails on any such place at head.
    records = {name: baseline.departures_of(text, trees[name], baseline.of(trees[name], args.against, opts), [r])
               for (name, text), r in zip((("base", args.base), ("head", args.head)), got)}
    for departed in records.values():
        baseline.say(departed)
    departed_head = [h for h in records["head"].hunks() if h.code]
    out = bundle.write(
        bundle.out_path(args.out, PROBE_ID), kind=PROBE_ID, created_at=started,
        receipts=list({bundle.receipt_name(r): r for r in got}.values()), differentials=[], pins_sha256=None, limits=LIMITS,
        extra=record(test, args.base, args.head, grading).model_dump(mode="json", by_alias=True),
        files={departures.file_name(bundle.label(trees[name].identity)): bundle.dump(r) for name, r in records.items()},
        signers=signers,
    )
    show(grading, f"{test.origin}: {grading.base.source} -> {grading.head.source}")
    ui.out.print(f"bundle: {out}  (check with: diffprobe verify {out})", markup=False)
    return errors.OK if grading.passed and not (args.strict and departed_head) else errors.DIFFERS


def register(sub) -> None:
    p = options.command(
        sub, "upstream-tests", "an upstream test file fails at base and passes at head",
        about="Runs an upstream pytest file against base and head and grades it like SWE-bench, naming why each test failed.",
        example="diffprobe upstream-tests --tests test/srt/test_disaggregation.py --base pypi:sglang==0.5.20 --head pypi:sglang==0.5.21",
        ok="graded as passed (fail-to-pass and pass-to-pass hold)", differs="not passed (each test's cause named), or --strict refused it")
    p.add_argument("--tests", required=True, metavar="PATH",
                   help="the test file's path in HEAD's git commit (its conftest.py chain and the sibling modules "
                        "it imports come with it), or a local file (then used for both sides)")
    p.add_argument("--with", dest="with_paths", action="append", metavar="PATH",
                   help="a local --tests file's conftest.py or helper module (a directory: a helper package), "
                        "placed beside it; repeatable")
    options.source(p, "--base", what="the tree before the fix", required=True)
    options.source(p, "--head", what="the tree with the fix", required=True)
    options.out(p, PROBE_ID)
    p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT, metavar="S",
                   help=f"seconds per side before pytest is killed (default {DEFAULT_TIMEOUT})")
    options.common(p)
    options.env_options(p)
    options.baseline(p)
    options.signing(p)
    p.set_defaults(func=cmd_upstream_tests)
