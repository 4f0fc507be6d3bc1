"""``diffprobe upstream-tests``: an upstream pytest file run against two trees, graded like SWE-bench.

Why: the published evidence also ran upstream unit tests, and its pre-fix "0/7" were 6
AttributeError and 1 ValueError raised on a test stub, not 7 failed assertions. A failing count
means nothing until it says which. So each side runs the file in its own tree's environment
(``probes/pytest_outcomes.py``: ``python -I``, scrubbed environment, private HOME, no network
where the OS allows, a deadline), every test and subtest gets an outcome, and every failure an
exception type, an origin (``stub``, ``test`` files, the tree's ``sglang``, ``environment``,
``other``) and whether it was the test's own assertion.

The grading is the judge's (runner/judge/upstream.py, a pure function of both sides' outcomes and
the code they ran as stored): per test or subtest id as SWE-bench grades, split by cause, a test of
another era than the tree "incompatible (test era)", and a stub fall-through, a missing module or
another era at head inconclusive, never a regression nor a missing fix. Exit 0 only when head
collected, no test fails at head, no test that ran at base is missing at head, and at least one test
passed at head; 1 otherwise; 3 when a module is missing from an environment (the test is not at
fault). Files and layout: ``upstream_layout``.

Receipts use the common case vocabulary (``docs/probe-contract.md``) and never call a harness gap
a behaviour. Each test or subtest is one case, role ``bug``: an upstream test exists to catch a
behaviour, and its signature is its own failed assertion.

| pytest | case outcome | classification | ``error.where`` |
|---|---|---|---|
| passed, xpassed, xfailed | observed, effects ``{"pytest": ...}`` | clean | |
| failed on the test's own assertion | observed, effects with ``exception`` | bug | |
| a test whose failed subtests all failed on assertions | observed | bug | |
| any other failure or error | error | inconclusive | stub -> ``double``, sglang -> ``sglang``, test/other -> ``setup``, target missing -> ``import``, another era's call or object -> ``setup`` |
| collection error (one case named after the file) | error | inconclusive | ``import`` |
| running when the process died | error | inconclusive | ``process`` |
| running at the deadline | timeout | inconclusive | |
| skipped, or not reached | not_applicable, ``missing`` says why | inconclusive | |
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

from pydantic import ValidationError

from runner import errors, fixids, ui
from runner.app import baseline, pipeline
from runner.commands import options
from runner.evidence import bundle, catalog, departures, pins, receipts
from runner.sandbox import execute
from runner.store import envs, intake, mirrors, sources, specs
from runner.errors import BadInput, Infrastructure
from runner.files import sha256_bytes
from runner.evidence.materials import rederive
from runner.judge.observations import Case, CaseError, ImportResult
from runner.evidence.receipts import ProbeRef, Receipt
from runner.evidence.upstream import EraRecord, UpstreamFileRecord, UpstreamTestsRecord
from runner.judge import targets
from runner.judge.pytest_records import CollectionError, Grading, Outcomes, Raised, Result
from runner.judge.upstream import PASSED, Entry, cause_of, detail_of, entries, grade
from runner.app import upstream_layout
from runner.app.upstream_layout import UpstreamFile
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

# A failure's cause -> where its case's error lies (docs/probe-contract.md's vocabulary)
WHERE = {"stub": "double", "sglang": "sglang", "test": "setup", "other": "setup", "environment": "setup",
         "target missing": "import", "signature mismatch": "setup", "attribute unset": "setup", "call arity": "setup",
         "tuple arity": "setup", "message shape": "setup"}


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
        raise BadInput("--with: only for a local --tests file (from git, the test's directory comes at its commit)")

    def from_head(tree: sources.Tree, opts: pipeline.Options) -> UpstreamFile:
        ident = tree.identity
        data = sources.read_file(ident.repo, ident.commit, path, opts.cache, upstream_layout.MAX_FILE)
        return upstream_layout.build(f"--tests {arg}", path, f"git:{ident.commit}:{path}", data, upstream_layout.git_helpers(
            path, data, lambda p: _read_or_none(ident.repo, ident.commit, p, opts)))

    return from_head


# --- the test file of each tree's era (--era) -----------------------------------------------------


@dataclass(frozen=True)
class Era:
    """The revision of the test file one side runs, and why that one."""

    commit: str
    test: UpstreamFile
    why: str


def sglang_imports(data: bytes) -> list[str]:
    """Every ``sglang`` module or name a file imports (``from sglang.x import y`` -> ``sglang.x.y``)."""
    found = []
    for node in ast.walk(ast.parse(data)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "sglang":
            found += [f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*"]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "sglang"]
    return list(dict.fromkeys(found))


def era_of(tree: sources.Tree, path: str, repo: str, cap: str, fix: tuple[int, str, str] | None,
           opts: pipeline.Options) -> Era:
    """The revision of ``path`` for ``tree``: the fix's head when the tree is the fix's base or head
    commit (``fix``: number, base, head as pinned), the tree's own when it is a commit that has the
    file, else the newest revision up to ``cap`` whose ``sglang`` imports the tree's source defines
    (runner/judge/targets.py); when none does, the oldest, naming the first name it lacks."""
    ident = tree.identity
    at = lambda commit: lambda p: _read_or_none(repo, commit, p, opts)  # noqa: E731
    if ident.kind == "git" and ident.commit:
        if fix and any(ident.commit.startswith(pinned) for pinned in fix[1:]):
            return _era(path, fix[2], at(fix[2]), f"the head of {fixids.label(fix[0])}: this tree is its pinned base or head")
        if _read_or_none(ident.repo, ident.commit, path, opts) is not None:
            return _era(path, ident.commit, lambda p: _read_or_none(ident.repo, ident.commit, p, opts), "the tree's own commit")
    mirror, top, _ = mirrors.resolve(repo, cap, opts.cache)
    revisions = mirror.lines("log", "--format=%H", top, "--", path)
    if not revisions:
        raise BadInput(f"--tests {path}: no revision of it up to {cap} in {repo}")
    source = targets.Source(tree.root)
    lacks = {}
    for commit in revisions:
        data = _read_or_none(repo, commit, path, opts)
        lacks[commit] = next((n for n in sglang_imports(data) if source.lacks(n)), None) if data is not None else "(unreadable)"
        if lacks[commit] is None:
            return _era(path, commit, at(commit), f"the newest revision up to {top[:12]} whose imports this tree defines")
    oldest = revisions[-1]
    return _era(path, oldest, at(oldest), f"no revision's imports this tree defines: the oldest, which lacks {lacks[oldest]}")


def _era(path: str, commit: str, read: Callable[[str], bytes | None], why: str) -> Era:
    data = read(path)
    if data is None:
        raise BadInput(f"--tests {path}: not in commit {commit[:12]}")
    test = upstream_layout.build(f"--tests {path}", path, f"git:{commit}:{path}", data, upstream_layout.git_helpers(path, data, read))
    return Era(commit, test, why)


def _read_or_none(repo: str, commit: str, path: str, opts: pipeline.Options) -> bytes | None:
    try:
        return sources.read_file(repo, commit, path, opts.cache, upstream_layout.MAX_FILE)
    except intake.Refused:  # there, but over the bound: never read as absent
        raise
    except BadInput:  # no such file at that commit
        return None


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
    code: targets.Code | None = None  # the tree's and the test's code as stored, for the judge

    @property
    def timed_out(self) -> bool:
        return self.run.code is None

    @property
    def how(self) -> str:
        return _how(self.run)


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
    return Side(name, text, tree, outcomes, run, targets.Code(targets.Source(tree.root), test.files()))


def missing_modules(o: Outcomes) -> list[str]:
    """Modules the environment lacks, each with where it was imported (origin ``environment``)."""
    raised = [c.exception for c in o.collection_errors] + [r.exception for r in o.results if r.exception]
    found = {f"module {r.module!r} (imported at {r.frame})": None for r in raised if r.origin == "environment"}
    return list(found)


def _how(run: execute.Isolated) -> str:
    if run.code is None:
        return "killed at its deadline"
    return f"killed by signal {-run.code}" if run.code < 0 else f"exit {run.code}"


# --- receipts --------------------------------------------------------------------------------


def cases(side: Side, test: UpstreamFile) -> list[Case]:
    listed = entries(side)
    failed_subtests: dict[str, list[Result]] = {}
    for e in listed:
        if e.parent and e.result and e.result.outcome == "failed":
            failed_subtests.setdefault(e.parent, []).append(e.result)
    got = [_collection_case(c, test, side.code) for c in side.outcomes.collection_errors]
    for e in listed:
        got.append(Case(id=e.id, site=test.name, role="bug", title=e.title or e.id, signature=SIGNATURE,
                        duration_ms=e.result.duration_ms if e.result else 0,
                        **_observation(e, failed_subtests.get(e.id, []), side.code)))
    return got


def _observation(e: Entry, failed_subtests: list[Result], code: targets.Code | None) -> dict:
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
        if cause_of(r.exception, code) == "assertion":
            effects = {"pytest": r.outcome, "phase": r.phase, "exception": r.exception.model_dump(mode="json")}
            return {"outcome": "observed", "classification": "bug", "effects": effects}
        return _error(_case_error(r.exception, code))
    fallen = [s.exception for s in failed_subtests if s.exception and cause_of(s.exception, code) != "assertion"]
    if not fallen:
        effects = {"pytest": r.outcome, "failed_subtests": r.failed_subtests}
        return {"outcome": "observed", "classification": "bug", "effects": effects}
    first = _case_error(fallen[0], code)
    message = f"{len(fallen)} of {r.failed_subtests} failed subtests did not fail on an assertion; first: {first.message}"
    return _error(CaseError(type=first.type, message=message, where=first.where, frame=first.frame))


def _case_error(raised: Raised, code: targets.Code | None) -> CaseError:
    return CaseError(type=raised.type, message=detail_of(raised, code), where=WHERE[cause_of(raised, code)],
                     frame=raised.frame)


def _error(error: CaseError) -> dict:
    return {"outcome": "error", "classification": "inconclusive", "error": error}


def _collection_error(c: CollectionError, code: targets.Code | None) -> CaseError:
    return CaseError(type=c.exception.type, message=detail_of(c.exception, code), where="import", frame=c.exception.frame)


def _collection_case(c: CollectionError, test: UpstreamFile, code: targets.Code | None) -> Case:
    return Case(id=c.id, site=test.name, role="bug", title=f"collect {test.name}", signature=SIGNATURE,
                duration_ms=0, **_error(_collection_error(c, code)))


def receipt(side: Side, environment: envs.Env, test: UpstreamFile, probe: ProbeRef) -> Receipt:
    o = side.outcomes
    env = receipts.tree_environment(environment, python=o.python, implementation=o.implementation, platform=o.platform,
                                    standins_used=o.standins, isolation=side.run.isolation)
    imported = ImportResult(outcome="ok", duration_ms=0)
    if o.collection_errors:  # the test module did not import: the nearest thing to SGLang failing to import
        imported = ImportResult(outcome="error", duration_ms=0, error=_collection_error(o.collection_errors[0], side.code))
    return receipts.make(probe, side.tree.identity, env, cases(side, test), started_at=side.run.started_at,
                         finished_at=side.run.finished_at, materials=rederive(side.tree, o.materials),
                         import_result=imported)


def record(test: UpstreamFile, base: str, head: str, grading: Grading,
           eras: dict[str, tuple[UpstreamFile, str]] | None = None) -> UpstreamTestsRecord:
    """What the bundle records beside its receipts: the files graded, by digest, and the grading;
    with --era, which revision graded which tree and why."""
    return UpstreamTestsRecord(tests=_file_record(test), base=base, head=head, grading=grading,
                               eras={name: EraRecord(tests=_file_record(t), why=why) for name, (t, why) in eras.items()}
                               if eras else None)


def _file_record(test: UpstreamFile) -> UpstreamFileRecord:
    return UpstreamFileRecord(file=test.name, path=test.path, from_=test.origin, sha256=sha256_bytes(test.data),
                              helpers={path: sha256_bytes(data) for path, data in test.helpers.items()},
                              declared=list(test.declared))


def _era_fix(args: argparse.Namespace, pinned: pins.Pins) -> tuple[int, str, str] | None:
    """--era's options checked before anything is downloaded; the fix's (number, base, head) for --fix."""
    if not args.era:
        if args.fix or args.repo:
            raise BadInput("--fix and --repo choose the test's revisions: only with --era")
        return None
    _repo_path(args.tests)
    if args.with_paths:
        raise BadInput("--with: only for a local --tests file (with --era, each revision brings its own directory)")
    if args.fix is None:
        return None
    fix = pinned.fix(args.fix)
    if not fix.has_commits:
        raise BadInput(f"--fix {args.fix}: pinned by its release bracket only, no head commit to take the test from")
    return args.fix, fix.base, fix.head


def cmd_upstream_tests(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        raise BadInput(f"--timeout {args.timeout}: must be a positive number of seconds")
    signers = options.signers(args)
    baseline.check_against(args.against)
    pinned = pins.load(options.path(args.pins))
    fix = _era_fix(args, pinned)
    read_tests = None if args.era else locate_tests(args.tests, args.head, args.with_paths or [])
    opts = options.resolved(args, pinned, options.probe_of_env(args))
    torch = opts.probe.torch
    started = execute.now()
    trees = {name: pipeline.resolve(text, opts) for name, text in (("base", args.base), ("head", args.head))}
    if args.era:
        repo = specs.check_git_url(args.repo) if args.repo else pinned.upstream
        head = trees["head"].identity
        cap = fix[2] if fix else head.commit if head.kind == "git" and head.commit else "HEAD"
        eras = {name: era_of(trees[name], args.tests, repo, cap, fix, opts) for name in ("base", "head")}
        tests = {name: era.test for name, era in eras.items()}
        for name, text in (("base", args.base), ("head", args.head)):
            ui.out.print(f"{name} {text}: graded by {tests[name].origin} ({eras[name].why})", markup=False)
    else:
        eras, test = None, read_tests(trees["head"], opts)
        tests = {"base": test, "head": test}
    interp = envs.interpreter(opts.probe.python)
    sides, got = {}, []
    for name, text in (("base", args.base), ("head", args.head)):
        environment = envs.env(trees[name], opts.cache, interp, torch)
        for note in environment.stamp.notes:
            ui.warn(f"{text}: {note}")
        sides[name] = run_side(name, text, trees[name], environment, tests[name], args.timeout,
                               sandboxed=opts.sandboxed(trees[name]))
        got.append(receipt(sides[name], environment, tests[name], probe_ref(tests[name])))
    test = tests["head"]
    declared = tuple(dict.fromkeys([*tests["base"].declared, *tests["head"].declared]))
    recorded = record(test, args.base, args.head, grade(sides["base"], sides["head"], declared),
                      {name: (tests[name], era.why) for name, era in eras.items()} if eras else None)
    grading = recorded.grading  # each side's source redacted as recorded
    # Each side against its baseline: pytest runs record no lines, so a changed place the tests
    # imported is never "not run" on their account, and --strict fails on any such place at head.
    records = {name: baseline.departures_of(text, trees[name], baseline.of(trees[name], args.against, opts, text), [r])
               for (name, text), r in zip((("base", args.base), ("head", args.head)), got)}
    for departed in records.values():
        baseline.say(departed)
    departed_head = [h for h in records["head"].hunks() if h.code]
    out = bundle.write(
        bundle.out_path(args.out, PROBE_ID), kind=PROBE_ID, created_at=started,
        receipts=list({bundle.receipt_name(r): r for r in got}.values()), differentials=[], pins_sha256=None, limits=LIMITS,
        extra=recorded.model_dump(mode="json", by_alias=True),
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
    p.add_argument("--era", action="store_true",
                   help="take the test file (a repository path) at the revision of each tree's era: a fix's head "
                        "for its base and head (--fix), a commit's own, else the newest revision whose sglang "
                        "imports the tree defines; says which revision graded which tree")
    p.add_argument("--fix", type=options.fix_id, metavar="N", help="with --era: the pinned fix whose head's test grades its base and head")
    p.add_argument("--repo", metavar="URL|PATH", help="with --era: the repository of the test's revisions "
                                                     "(default: the pinned upstream)")
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
