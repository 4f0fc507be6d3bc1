"""``diffprobe upstream-tests``: an upstream pytest file run against two trees, graded like SWE-bench.

Why: the published evidence also ran upstream unit tests, and its pre-fix "0/7" were 6
AttributeError and 1 ValueError raised on a test stub, not 7 failed assertions. A failing count
means nothing until it says which. So each side runs the file in its own tree's environment
(``probes/pytest_outcomes.py``: ``python -I``, scrubbed environment, private HOME, no network
where the OS allows, a deadline), every test and subtest gets an outcome, and every failure an
exception type, an origin (``stub``, ``test`` file, the tree's ``sglang``, ``other``) and whether
it was the test's own assertion.

Grading, per test or subtest id, as SWE-bench's harness does: passed = pytest's passed, xpassed or
xfailed; failed = failed or error (any phase), or killed at the deadline or by a crash while
running; *never ran* = skipped, not collected on that side (a collection error included), or not
reached before the deadline. ``fail-to-pass``, ``pass-to-pass``, ``pass-to-fail``, ``fail-to-fail``
need both sides to have run; anything else is ``never ran``, which is never counted as passed.
Exit 0 only when head collected, no test fails at head, no test that ran at base is missing at head,
and at least one test passed at head; 1 otherwise.

Receipts use the common case vocabulary (``docs/probe-contract.md``) and never call a harness gap
a behaviour. Each test or subtest is one case, role ``bug``: an upstream test exists to catch a
behaviour, and its signature is its own failed assertion.

| pytest | case outcome | classification | ``error.where`` |
|---|---|---|---|
| passed, xpassed, xfailed | observed, effects ``{"pytest": ...}`` | clean | |
| failed on the test's own assertion | observed, effects with ``exception`` | bug | |
| a test whose failed subtests all failed on assertions | observed | bug | |
| any other failure or error | error | inconclusive | stub -> ``double``, sglang -> ``sglang``, test/other -> ``setup`` |
| collection error (one case named after the file) | error | inconclusive | ``import`` |
| running when the process died | error | inconclusive | ``process`` |
| running at the deadline | timeout | inconclusive | |
| skipped, or not reached | not_applicable, ``missing`` says why | inconclusive | |
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.markup import escape
from rich.table import Table

from runner import errors, ui
from runner.commands import options, pipeline
from runner.evidence import bundle, catalog, pins, receipts
from runner.sandbox import execute
from runner.store import envs, sources, specs
from runner.errors import BadInput, Infrastructure
from runner.files import sha256_bytes, sha256_file
from runner.evidence.materials import rederive
from runner.evidence.observations import Case, CaseError, ImportResult
from runner.evidence.receipts import ProbeRef, Receipt

PROBE_ID, PLUGIN = catalog.UPSTREAM_TESTS
DEFAULT_TIMEOUT = 900
SIGNATURE = "the test's own assertion failed (AssertionError or pytest.fail from the test file, or a mock's assert_*)"
LIMITS = [
    "CPU only: an upstream test file run against pinned SGLang trees, not a served model; no GPU, no RDMA",
    "the test's own stubs and mocks stand in for SGLang's collaborators: a failure raised on a stub says the "
    "test fell through to it, not how SGLang behaves",
    "only the test file runs: conftest.py files and fixtures from its upstream directory are not used",
]

# --- what the plugin writes (diffprobe.pytest-outcomes/1) -------------------------------------

Origin = Literal["stub", "sglang", "test", "other"]
Status = Literal["passed", "failed", "never ran"]
Grade = Literal["fail-to-pass", "pass-to-pass", "pass-to-fail", "fail-to-fail", "never ran"]
PASSED = ("passed", "xpassed", "xfailed")
WHERE = {"stub": "double", "sglang": "sglang", "test": "setup", "other": "setup"}
_GRADE: dict[tuple[str, str], Grade] = {
    ("failed", "passed"): "fail-to-pass", ("passed", "passed"): "pass-to-pass",
    ("passed", "failed"): "pass-to-fail", ("failed", "failed"): "fail-to-fail",
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Raised(_Model):
    type: str
    message: str
    origin: Origin
    assertion: bool = Field(description="the test's own verdict failed, not code falling through")
    frame: str | None


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
    schema_: Literal["diffprobe.pytest-outcomes/1"] = Field(alias="schema")
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
    materials: dict[str, str]
    standins: list[str]


# --- the test file ---------------------------------------------------------------------------


@dataclass(frozen=True)
class UpstreamFile:
    name: str  # the file name pytest's node ids start with
    origin: str  # where it was read from
    data: bytes

    @property
    def key(self) -> str:
        return f"upstream/{self.name}"


def _checked(arg: str, name: str) -> None:
    """pytest collects a ``.py`` file; a ``conftest.py`` would be loaded as configuration instead."""
    if not name.endswith(".py") or name == "conftest.py":
        raise BadInput(f"--tests {arg}: expected a pytest file (*.py, not conftest.py)")


def _repo_path(path: str) -> str:
    if path.startswith(("/", "-")) or ".." in PurePosixPath(path).parts or "\\" in path:
        raise BadInput(f"--tests {path}: not a local file, nor a repository path such as test/unit/test_x.py")
    _checked(path, PurePosixPath(path).name)
    return path


def locate_tests(arg: str, head: str) -> Callable[[sources.Tree, pipeline.Options], UpstreamFile]:
    """Check ``--tests`` before anything is downloaded; return how to read it once head is resolved."""
    local = Path(arg)
    if local.is_file():
        _checked(arg, local.name)
        data = local.read_bytes()
        return lambda tree, opts: UpstreamFile(local.name, f"local:{local.resolve()}", data)
    path = _repo_path(arg)
    if specs.parse(head).kind != "git":
        raise BadInput(f"--tests {arg}: not a local file, and {head} has no git history to take it from; give a local file")

    def from_head(tree: sources.Tree, opts: pipeline.Options) -> UpstreamFile:
        ident = tree.identity
        data = sources.read_file(ident.repo, ident.commit, path, opts.cache)
        return UpstreamFile(PurePosixPath(path).name, f"git:{ident.commit}:{path}", data)

    return from_head


def probe_ref(test: UpstreamFile) -> ProbeRef:
    """Versioned by the test file's bytes and the plugin's (with the probe files it loads)."""
    files = {p.name: sha256_file(p) for p in catalog.probe_files(PROBE_ID)} | {test.key: sha256_bytes(test.data)}
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
        (tests_dir / test.name).write_bytes(test.data)
        argv = [str(environment.python), "-I", str(plugin), "--out", str(out), str(tests_dir / test.name)]
        with ui.step(f"pytest {test.name} on {name} {text}"):
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
    if run.code is None:
        ui.warn(f"{name}: pytest exceeded {timeout} s and was killed; unfinished tests are graded as such")
    return Side(name, text, tree, outcomes, run)


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


def kind_of(r: Result) -> str:
    """Never a bare "failed": the exception type and whether it was an assertion or where it came from."""
    if r.outcome in PASSED or r.outcome == "skipped":
        return r.outcome
    if r.exception is None:
        return "failed through its subtests"
    where = "assertion" if r.exception.assertion else r.exception.origin
    return f"{r.exception.type} ({where}{'' if r.phase == 'call' else f', in {r.phase}'})"


def entries(side: Side) -> list[Entry]:
    o = side.outcomes
    titles = {c.id: c.title for c in o.collected}
    got = []
    for r in o.results:
        status: Status = "passed" if r.outcome in PASSED else "never ran" if r.outcome == "skipped" else "failed"
        detail = r.reason if r.outcome in ("skipped", "xfailed") else r.exception.message if r.exception else None
        got.append(Entry(r.id, r.parent, titles.get(r.id), status, kind_of(r), detail, r))
    if not o.complete and o.running:
        kind = "timeout" if side.timed_out else "crashed"
        got.append(Entry(o.running, None, titles.get(o.running), "failed", kind, _how(side.run), None))
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
    got = [_collection_case(c, test) for c in side.outcomes.collection_errors]
    for e in listed:
        got.append(Case(id=e.id, site=test.name, role="bug", title=e.title or e.id, signature=SIGNATURE,
                        duration_ms=e.result.duration_ms if e.result else 0,
                        **_observation(e, failed_subtests.get(e.id, []))))
    return got


def _observation(e: Entry, failed_subtests: list[Result]) -> dict:
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
        return _error(_case_error(r.exception))
    fallen = [s.exception for s in failed_subtests if s.exception and not s.exception.assertion]
    if not fallen:
        effects = {"pytest": r.outcome, "failed_subtests": r.failed_subtests}
        return {"outcome": "observed", "classification": "bug", "effects": effects}
    first = _case_error(fallen[0])
    message = f"{len(fallen)} of {r.failed_subtests} failed subtests did not fail on an assertion; first: {first.message}"
    return _error(CaseError(type=first.type, message=message, where=first.where, frame=first.frame))


def _case_error(raised: Raised) -> CaseError:
    return CaseError(type=raised.type, message=raised.message, where=WHERE[raised.origin], frame=raised.frame)


def _error(error: CaseError) -> dict:
    return {"outcome": "error", "classification": "inconclusive", "error": error}


def _collection_error(c: CollectionError) -> CaseError:
    return CaseError(type=c.exception.type, message=c.exception.message, where="import", frame=c.exception.frame)


def _collection_case(c: CollectionError, test: UpstreamFile) -> Case:
    return Case(id=c.id, site=test.name, role="bug", title=f"collect {test.name}", signature=SIGNATURE,
                duration_ms=0, **_error(_collection_error(c)))


def receipt(side: Side, environment: envs.Env, test: UpstreamFile, probe: ProbeRef) -> Receipt:
    o = side.outcomes
    env = receipts.tree_environment(environment, python=o.python, implementation=o.implementation, platform=o.platform,
                                    standins_used=o.standins, isolation=side.run.isolation)
    imported = ImportResult(outcome="ok", duration_ms=0)
    if o.collection_errors:  # the test module did not import: the nearest thing to SGLang failing to import
        imported = ImportResult(outcome="error", duration_ms=0, error=_collection_error(o.collection_errors[0]))
    return receipts.make(probe, side.tree.identity, env, cases(side, test), started_at=side.run.started_at,
                         finished_at=side.run.finished_at, materials=rederive(side.tree.root, o.materials),
                         import_result=imported)


# --- grading ---------------------------------------------------------------------------------


class SideState(_Model):
    status: Status
    kind: str
    detail: str | None = None


class GradedTest(_Model):
    id: str
    parent: str | None
    base: SideState
    head: SideState
    grade: Grade


class SideSummary(_Model):
    source: str
    tests: dict[str, int] = Field(description="kind -> count, tests only (passed first)")
    subtests: dict[str, int]
    collection_errors: list[str] = Field(description="kind of each collection error")
    timed_out: bool


class Grading(_Model):
    counts: dict[Grade, int]
    tests: list[GradedTest]
    base: SideSummary
    head: SideSummary
    blockers: list[str] = Field(description="why the head does not pass the file; empty when it does")
    passed: bool


def _state(entry: Entry | None, side: Side) -> SideState:
    if entry is not None:
        return SideState(status=entry.status, kind=entry.kind, detail=entry.detail)
    why = "collection error" if side.outcomes.collection_errors else "not collected on this side"
    return SideState(status="never ran", kind="not collected", detail=why)


def _grade(base: SideState, head: SideState) -> Grade:
    return _GRADE.get((base.status, head.status), "never ran")


def _summary(side: Side, listed: list[Entry]) -> SideSummary:
    def count(rows: list[Entry]) -> dict[str, int]:
        c = Counter(e.kind for e in rows)
        return {"passed": c.pop("passed", 0), **dict(c.most_common())}

    return SideSummary(
        source=side.text, tests=count([e for e in listed if e.parent is None]),
        subtests=count([e for e in listed if e.parent is not None]),
        collection_errors=[kind_of_collection(c) for c in side.outcomes.collection_errors], timed_out=side.timed_out,
    )


def kind_of_collection(c: CollectionError) -> str:
    return f"{c.exception.type} ({c.exception.origin})"


def grade(base: Side, head: Side) -> Grading:
    b_entries, h_entries = entries(base), entries(head)
    b, h = {e.id: e for e in b_entries}, {e.id: e for e in h_entries}
    rows = []
    for test_id in dict.fromkeys([*h, *b]):
        ref = h.get(test_id) or b[test_id]
        bs, hs = _state(b.get(test_id), base), _state(h.get(test_id), head)
        rows.append(GradedTest(id=test_id, parent=ref.parent, base=bs, head=hs, grade=_grade(bs, hs)))
    blockers = [f"head: collection error {kind_of_collection(c)}: {c.exception.message}" for c in head.outcomes.collection_errors]
    blockers += [f"{r.id}: {r.head.kind} at head" for r in rows if r.head.status == "failed"]
    blockers += [f"{r.id}: ran at base ({r.base.kind}), never ran at head ({r.head.kind})"
                 for r in rows if r.base.status != "never ran" and r.head.status == "never ran"]
    if not any(r.head.status == "passed" for r in rows):
        blockers.append("no test passed at head")
    counts = Counter(r.grade for r in rows)
    return Grading(counts={g: counts.get(g, 0) for g in get_args(Grade)}, tests=rows, base=_summary(base, b_entries),
                   head=_summary(head, h_entries), blockers=blockers, passed=not blockers)


# --- the command -----------------------------------------------------------------------------

_GRADE_STYLE = {"fail-to-pass": "green", "pass-to-pass": "dim", "pass-to-fail": "bold red", "fail-to-fail": "red",
                "never ran": "yellow"}


def counts_line(summary: SideSummary) -> str:
    """``tests 0 passed, 6 AttributeError (stub); subtests ...``: failures always by type and origin."""
    def part(label: str, counts: dict[str, int]) -> str:
        return f"{label} " + ", ".join(f"{n} {kind}" for kind, n in counts.items())

    parts = [f"collection error: {', '.join(summary.collection_errors)}"] if summary.collection_errors else []
    parts.append(part("tests", summary.tests))
    if any(summary.subtests.values()):
        parts.append(part("subtests", summary.subtests))
    return "; ".join(parts) + ("; killed at the deadline" if summary.timed_out else "")


def show(grading: Grading, test: UpstreamFile) -> None:
    table = Table(title=escape(f"{test.origin}: {grading.base.source} -> {grading.head.source}"), title_justify="left")
    for column in ("test", "base", "head", "grade"):
        table.add_column(column)
    for row in grading.tests:
        name = f"  ↳ {row.id.removeprefix(row.parent).strip()}" if row.parent else row.id.split("::", 1)[-1]
        cells = [_cell(s) for s in (row.base, row.head)]
        table.add_row(escape(name), *cells, f"[{_GRADE_STYLE[row.grade]}]{row.grade}[/]")
    ui.out.print(table)
    for name, side in (("base", grading.base), ("head", grading.head)):
        ui.out.print(escape(f"{name} {side.source}: {counts_line(side)}"))
    ui.out.print("origins: (assertion) the test's own assertion failed; (stub) raised on a test stub or mock, the code "
                 "fell through to it; (test) raised by the test file; (sglang) raised in the tree's code", markup=False)
    ui.out.print("grading: " + ", ".join(f"{n} {g}" for g, n in grading.counts.items()) + " (never ran is never passed)",
                 markup=False)
    if grading.passed:
        ui.out.print("[green]every test that fails at base passes at head; nothing regressed[/]")
    for line in grading.blockers:
        ui.out.print(f"[red]✗[/] {escape(line)}")


def _cell(state: SideState) -> str:
    style = {"passed": "green", "failed": "red"}.get(state.status, "yellow")
    text = f"{state.kind}: {state.detail}" if state.kind == "skipped" and state.detail else state.kind
    return f"[{style}]{escape(text)}[/]"


def cmd_upstream_tests(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        raise BadInput(f"--timeout {args.timeout}: must be a positive number of seconds")
    signers = options.signers(args)
    read_tests = locate_tests(args.tests, args.head)
    opts = pipeline.options(args, pins.load(options.path(args.pins)), options.probe_of_env(args))
    started = execute.now()
    trees = {name: pipeline.resolve(text, opts) for name, text in (("base", args.base), ("head", args.head))}
    test = read_tests(trees["head"], opts)
    probe = probe_ref(test)
    interp = envs.interpreter(opts.probe.python)
    sides, got = {}, []
    for name, text in (("base", args.base), ("head", args.head)):
        environment = envs.env(trees[name], opts.cache, interp)
        for note in environment.stamp.notes:
            ui.warn(f"{text}: {note}")
        sides[name] = run_side(name, text, trees[name], environment, test, args.timeout, sandboxed=opts.sandboxed(trees[name]))
        got.append(receipt(sides[name], environment, test, probe))
    grading = grade(sides["base"], sides["head"])
    out = bundle.write(
        bundle.out_path(args.out, PROBE_ID), kind=PROBE_ID, created_at=started,
        receipts=list({bundle.receipt_name(r): r for r in got}.values()), differentials=[], pins_sha256=None, limits=LIMITS,
        extra={"tests": {"file": test.name, "from": test.origin, "sha256": sha256_bytes(test.data)},
               "base": args.base, "head": args.head, "grading": grading.model_dump(mode="json")},
        signers=signers,
    )
    show(grading, test)
    ui.out.print(f"bundle: {out}  (check with: diffprobe verify {out})", markup=False)
    return errors.OK if grading.passed else errors.DIFFERS


def register(sub) -> None:
    p = sub.add_parser("upstream-tests", help="run an upstream pytest file against base and head; grade it like SWE-bench")
    p.add_argument("--tests", required=True, metavar="PATH",
                   help="the test file's path in HEAD's git commit, or a local file (then used for both sides)")
    p.add_argument("--base", required=True, metavar="SOURCE", help="git+URL_OR_PATH@REV | pypi:sglang==VERSION | path:DIR")
    p.add_argument("--head", required=True, metavar="SOURCE")
    p.add_argument("--out", metavar="DIR", help="bundle directory to create (must not exist or be empty)")
    p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT, metavar="S",
                   help=f"seconds per side before pytest is killed (default {DEFAULT_TIMEOUT})")
    options.common(p)
    options.env_options(p)
    options.signing(p)
    p.set_defaults(func=cmd_upstream_tests)
