"""The grading of ``diffprobe upstream-tests``: one upstream pytest file's outcomes on two trees,
graded per test and subtest id as SWE-bench's harness does where the tree is what is measured, and
a pure function of what each side recorded (``pytest_records.Outcomes``) and of the code it ran as
stored (``targets.Code``): nothing here runs, reads a bundle or prints.

passed = pytest's passed, xpassed or xfailed; failed = failed or error (any phase), killed at the
deadline or by a crash while running, or not collected because the tree lacks what the file imports
or patches; *never ran* = skipped, not collected for any other reason, or not reached before the
deadline. ``fail-to-pass``, ``pass-to-pass``, ``pass-to-fail``, ``fail-to-fail`` need both sides
graded; anything else is ``never ran``, never counted as passed. Failing grades are split by cause.

Why "incompatible (test era)": upstream's tests build the tree's objects by hand and fake its
collaborators for the API of their day. Run against another release, their own code meets an API it
was not written for -- a call between the test's files and the tree whose arguments the callee does
not accept, an attribute the tree's constructor sets on an object the test built without it, a name
the tree does not define, a mock's expected call of a shape the tree's call site never makes, a tuple
of the tree's state unpacked or indexed for a length the tree's code never builds there -- and that
failure says which era the test is of, not how the tree behaves. It is decided from the traceback's structure and the stored code (the call as written, the
callee's signature, the constructor's statements), never from the message's wording, and such a
row is neither pass-to-fail nor fail-to-pass nor fail-to-fail. A failure on the tree's side of a
call whose signature fits stays the behaviour it shows.
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass
from typing import Protocol, get_args

from runner.judge.pytest_records import (ERA, INCOMPATIBLE, NOT_BEHAVIOUR, Cause, CollectionError, Grade, GradedTest,
                                         Frame, Grading, Incompatibility, MockCall, Outcomes, PytestCount, Raised, Result, Shape,
                                         SideState, SideSummary, Status, Unpacked)
from runner.judge.targets import Built, Code

PASSED = ("passed", "xpassed", "xfailed")
_GRADE: dict[tuple[str, str], Grade] = {
    ("failed", "passed"): "fail-to-pass", ("passed", "passed"): "pass-to-pass",
    ("passed", "failed"): "pass-to-fail", ("failed", "failed"): "fail-to-fail",
}
CLIP = 160  # characters of a call or a signature shown


class SideRun(Protocol):
    """What the judge reads of one side's run."""

    name: str  # base or head
    text: str  # the source as given
    outcomes: Outcomes
    code: Code | None  # the tree's and the test's code as stored; None: nothing read (no failure is of another era)

    @property
    def timed_out(self) -> bool: ...

    @property
    def how(self) -> str: ...  # how pytest ended: "exit 1", "killed at its deadline", ...


# --- why one failure happened -----------------------------------------------------------------


def incompatibility(raised: Raised, code: Code | None) -> tuple[Cause, Incompatibility] | None:
    """The failure as the test's era meeting the tree's API, with both sides of it; None when it is not.
    Of the test's own assertions only a mock's expected call can be of another era: its shape is one
    the tree's call site never makes."""
    if code is None:
        return None
    if raised.mock_call and (found := _call_arity(raised.mock_call, code)):
        return "call arity", found
    if not raised.assertion and (found := _api(raised, code)):
        return found
    if raised.origin not in ("stub", "environment") and (found := _message_shape(raised, code)):
        return "message shape", found
    return None


def _api(raised: Raised, code: Code) -> tuple[Cause, Incompatibility] | None:
    if raised.wanted and (missing := code.tree.lacks(raised.wanted.name)):
        w = raised.wanted
        return "target missing", Incompatibility(at=w.at or "?", test=f"{w.how} of {w.name}", tree=f"the tree lacks {missing}")
    if raised.call and (found := _mismatch(raised, code)):
        return "signature mismatch", found
    if raised.unset and (found := code.constructor_sets(raised.unset.cls, raised.unset.name, raised.unset.has)):
        (where, proof), u = found, raised.unset
        at = next((f for f in reversed(raised.frames) if f.owner == "test"), None)
        built = f", lacking {u.name}" + (f" and {proof}, which the constructor always sets" if proof else "")
        return "attribute unset", Incompatibility(
            at=f"{at.path}:{at.line} in {at.function}" if at else "?",
            test=f"a {u.cls.rsplit('.', 1)[-1]} built without its constructor{built}",
            tree=f"its constructor sets self.{u.name} ({where})")
    if raised.unpacked and (found := _tuple_arity(raised.unpacked, code, raised.frames)):
        return "tuple arity", found
    return None


def _message_shape(raised: Raised, code: Code) -> Incompatibility | None:
    """The test handed the tree a message (a multipart display led by a bytes tag, as upstream's tests
    hand-build a peer's ``[b"ABORT", room, ip, port]``) whose length none of the tree's own producers
    of that tag builds, and the test's files never build one of a length the tree's producers do: the
    test speaks the wire format of another era, and what the tree does with it says nothing of how the
    tree answers its own peers. Only messages handed, in the failing test function up to the line it
    failed at, to a function of a module that names the tag (the tree's handler, not the test's own);
    a producer the source leaves open (a starred element, an extension by a non-display) is "cannot
    tell". A message of the tree's own shape, or a test that builds that shape elsewhere (a legacy
    message on purpose), keeps the failure's cause."""
    test = next((f for f in raised.frames if f.owner == "test" and f.path), None)
    if test is None:
        return None
    for fed in code.fed(test.path, test.function, test.line):
        callee = _callee_name(fed.call.func)
        if isinstance(fed, Built):
            if (found := _built_shape(fed, callee, code)) is not None:
                return found
            continue
        built, handlers, names = code.tree.messages.of(fed.tag)
        if not built or callee not in handlers or code.test_defines(callee):
            continue
        lengths = sorted({n for n, _ in built})
        if fed.length in lengths:
            continue
        known = code.test_lengths(fed.tag, names)
        if set(known) & set(lengths):
            continue
        tag = _clip(repr(fed.tag))
        return Incompatibility(
            at=f"{test.path}:{fed.call.lineno}",
            test=f"hands {_clip(ast.unparse(fed.call))} a {tag} message of {fed.length} frames built at {fed.built} "
                 f"(the test's files build it of {_or(sorted(known))} frames only)",
            tree=f"builds {tag} messages of {_or(lengths)} frames only ({_places(built)})")
    return None


def _built_shape(fed: Built, callee: str | None, code: Code) -> Incompatibility | None:
    """A message the tree's own builder made from fewer or more arguments than every sender of the
    tree gives it, handed to a function of the tree, and built nowhere in the test's files as the
    senders build it: the fields of another era."""
    found = code.tree.messages.senders(fed.cls, fed.method)
    if not found or not found[0] or callee not in found[1] or code.test_defines(callee):
        return None
    senders = found[0]
    counts = sorted({n for n, _ in senders})
    known = code.test_builds(fed.cls, fed.method)
    if fed.arguments in counts or set(known) & set(counts):
        return None
    return Incompatibility(
        at=f"{fed.built.rsplit(':', 1)[0]}:{fed.call.lineno}",
        test=f"hands {_clip(ast.unparse(fed.call))} a message the tree's {fed.cls}.{fed.method}() built from {fed.arguments} "
             f"arguments at {fed.built} (the test's files build it from {_or(sorted(known))} only)",
        tree=f"builds it from {_or(counts)} arguments only ({_places(senders)})")


def _or(lengths: list[int]) -> str:
    return " or ".join(map(str, lengths))


def _shape(call: ast.Call) -> Shape | None:
    """A call expression's shape as written; None when it spreads ``*args`` or ``**kwargs``."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    return Shape(args=len(call.args), keywords=sorted(k.arg for k in call.keywords))


def _said_shape(shape: Shape) -> str:
    keywords = f" and {', '.join(shape.keywords)} by keyword" if shape.keywords else ""
    return f"{shape.args} positional{keywords}"


def _callee_name(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _call_arity(m: MockCall, code: Code) -> Incompatibility | None:
    """A mock's expected call of a shape the tree's call site, as the stored tree writes it, never
    makes: the site made the mock's last call, its arguments have the shape the mock received, and
    no call of the same name in the same function of the tree could make the expected shape. The
    same shape with other values, a mock with a signature, a call site not the tree's or a spread
    argument is not told (the failure keeps its cause)."""
    site = m.site
    if m.spec or site is None or site.owner != "sglang" or m.expected == m.actual:
        return None
    call = code.call("sglang", site.path, site.line, site.end_line, site.col, site.end_col)
    if call is None or _shape(call) != m.actual or (name := _callee_name(call.func)) is None:
        return None
    scope = code.enclosing("sglang", site.path, call)
    for other in ast.walk(scope) if scope is not None else ():
        if isinstance(other, ast.Call) and other is not call and _callee_name(other.func) == name and \
                _shape(other) in (None, m.expected):
            return None  # another call of that name here could make the expected shape: cannot tell
    asserted = code.call("test", m.at.path, m.at.line, m.at.end_line, m.at.col, m.at.end_col) if m.at else None
    expects = f"{_clip(ast.unparse(asserted))} at {m.at.path}:{m.at.line}" if asserted is not None and m.at else \
        "its mock's expected call"
    where = f" in {scope.name}" if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else ""
    return Incompatibility(at=f"{site.path}:{site.line}", test=f"expects {expects} ({_said_shape(m.expected)})",
                           tree=f"calls {_clip(ast.unparse(call))}{where} ({_said_shape(m.actual)}), never "
                                f"{_said_shape(m.expected)}")


def _tuple_arity(u: Unpacked, code: Code, frames: list[Frame] = ()) -> Incompatibility | None:
    """A tuple of the tree's state of another length than wanted, where the tree's code fixes the
    length: unpacked or indexed by the test, the tree's NamedTuple class has that many fields, or
    every tuple the holder's class (and its bases) stores into that attribute is a display of that
    length; unpacked by the tree, every tuple the tree's code stores there has the length it unpacks,
    and the test's files store a tuple display of the length found. Whatever the code leaves open
    (a store of another shape, none found) is not told."""
    fits = u.length >= u.wanted if u.starred else u.length == u.wanted
    if fits or u.at is None:
        return None
    at = f"{u.at.path}:{u.at.line}"
    if u.at.owner == "sglang":
        test = next((f for f in reversed(frames) if f.owner == "test" and f.path), None)
        return _tree_unpacks_the_tests_tuple(u, code, at, (test.path, test.line) if test else None)
    if u.value_cls:
        found = code.tree.named_tuple(u.value_cls)
        if found is None or found[0] != u.length:
            return None
        tree = f"its {u.value_cls.rsplit('.', 1)[-1]} is a NamedTuple of {u.length} fields ({found[1]})"
        of = f"a {u.value_cls.rsplit('.', 1)[-1]}"
    elif u.holder and u.attribute:
        built = code.tree.tuples_stored(u.holder, u.attribute, u.depth)
        if not built or any(n != u.length for n, _ in built):
            return None
        owner = u.holder.rsplit(".", 1)[-1]
        tree = f"{owner} stores only {u.length}-tuples in self.{u.attribute}{'[…]' * u.depth} ({_places(built)})"
        of = f"{owner}.{u.attribute}{'[…]' * u.depth}"
    else:
        return None
    wants = f"unpacks {u.wanted}{' or more' if u.starred else ''} names from" if u.how == "unpack" else \
        f"reads item {u.wanted - 1} of"
    return Incompatibility(at=at, test=f"{wants} {of}, a {u.length}-tuple", tree=tree)


def _places(built: list[tuple[int, str]]) -> str:
    return ", ".join(dict.fromkeys(at for _, at in built))


def _tree_unpacks_the_tests_tuple(u: Unpacked, code: Code, at: str, near: tuple[str, int] | None) -> Incompatibility | None:
    if u.how != "unpack" or u.starred or not (u.holder and u.attribute):
        return None
    built = code.tree.tuples_stored(u.holder, u.attribute, u.depth)
    if not built or any(n != u.wanted for n, _ in built):
        return None
    stored = code.test_stores(u.attribute, u.depth, u.length, near)
    if stored is None:
        return None
    owner = u.holder.rsplit(".", 1)[-1]
    held = f"{owner}.{u.attribute}{'[…]' * u.depth}"
    return Incompatibility(at=at, test=f"stores a {u.length}-tuple in {held} at {stored}",
                           tree=f"builds only {u.wanted}-tuples there ({_places(built)}) and unpacks {u.wanted} names")


def _mismatch(raised: Raised, code: Code) -> Incompatibility | None:
    """A crossing call whose arguments, as the stored caller writes them, the stored callee's
    parameters do not accept (None when they do, or the code cannot tell)."""
    site, callee = raised.call.caller, raised.call.callee
    call = code.call(site.owner, site.path, site.line, site.end_line, site.col, site.end_col)
    function = code.function(callee.owner, callee.path, callee.line, callee.qualname)
    if call is None or function is None or accepts(function.args, call, callee.bound) is not False:
        return None
    written = _clip(ast.unparse(call))
    name = "lambda" if isinstance(function, ast.Lambda) else f"def {function.name}"
    signature = _clip(f"{name}({ast.unparse(function.args)}) at {callee.path}:{function.lineno}")
    sides = {site.owner: f"calls {written}", callee.owner: signature}
    return Incompatibility(at=f"{site.path}:{site.line}", test=sides["test"], tree=sides["sglang"])


def accepts(params: ast.arguments, call: ast.Call, bound: bool) -> bool | None:
    """Whether a call's arguments bind to ``params`` as Python binds them (``bound``: the first
    parameter is taken by the lookup); None when the call spreads ``*args`` or ``**kwargs``."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    positional = [*params.posonlyargs, *params.args]
    defaults = len(params.defaults)
    optional = {p.arg for p in positional[len(positional) - defaults:]} if defaults else set()
    if bound:
        if not positional and params.vararg is None:
            return False
        positional = positional[1:]
    only = {p.arg for p in params.posonlyargs}
    if len(call.args) > len(positional) and params.vararg is None:
        return False
    filled = {p.arg for p in positional[:len(call.args)]}
    by_name = {p.arg for p in positional} - only | {p.arg for p in params.kwonlyargs}
    for keyword in (k.arg for k in call.keywords):
        if keyword in filled or (keyword not in by_name and params.kwarg is None):
            return False
        filled.add(keyword)
    required = {p.arg for p in positional} - optional
    required |= {p.arg for p, default in zip(params.kwonlyargs, params.kw_defaults) if default is None}
    return required <= filled


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= CLIP else text[:CLIP - 1] + "…"


def cause_of(raised: Raised, code: Code | None = None) -> Cause:
    """The test meeting another era's API; the test's own assertion; else where it came from."""
    found = incompatibility(raised, code)
    if found:
        return found[0]
    return "assertion" if raised.assertion else raised.origin


def _era(raised: Raised | None, code: Code | None) -> Incompatibility | None:
    found = incompatibility(raised, code) if raised else None
    return found[1] if found else None


def missing_target(raised: Raised, code: Code | None) -> str | None:
    """"the tree lacks X (how at where)" when the failure is the test's target missing."""
    found = incompatibility(raised, code)
    if not found or found[0] != "target missing":
        return None
    w = raised.wanted
    return f"{found[1].tree} ({w.how} of {w.name}" + (f" at {w.at})" if w.at else ")")


def detail_of(raised: Raised, code: Code | None) -> str:
    """The failure in words: for another era's API, where and both sides; else the exception's message."""
    found = incompatibility(raised, code)
    if found is None:
        return raised.message
    if found[0] == "target missing":
        return missing_target(raised, code) or raised.message
    era = found[1]
    return f"at {era.at}: the test {era.test}; the tree {era.tree}" \
        if found[0] in ("signature mismatch", "call arity", "tuple arity", "message shape") else f"at {era.at}: {era.test}; {era.tree}"


def kind_of(r: Result, code: Code | None = None) -> str:
    """Never a bare "failed": the exception type and whether it was an assertion or where it came from."""
    if r.outcome in PASSED or r.outcome == "skipped":
        return r.outcome
    if r.exception is None:
        return "failed through its subtests"
    return f"{r.exception.type} ({cause_of(r.exception, code)}{'' if r.phase == 'call' else f', in {r.phase}'})"


def kind_of_collection(c: CollectionError, code: Code | None = None) -> str:
    return f"{c.exception.type} ({cause_of(c.exception, code)})"


def _cause(r: Result, subtests: list[Result], code: Code | None) -> tuple[Cause | None, Incompatibility | None]:
    """A failure's cause; a test that failed through its subtests fails for theirs: an assertion
    only if every failed subtest failed on one."""
    if r.outcome in PASSED or r.outcome == "skipped":
        return None, None
    if r.exception is not None:
        return cause_of(r.exception, code), _era(r.exception, code)
    failed = [s.exception for s in subtests if s.outcome == "failed" and s.exception]
    causes = [cause_of(e, code) for e in failed]
    cause = next((c for c in causes if c != "assertion"), "assertion" if causes else "other")
    return cause, next((_era(e, code) for e, c in zip(failed, causes) if c == cause and c in ERA), None)


# --- per test, per side -------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One test or subtest on one side: its status for grading and the words that explain it."""

    id: str
    parent: str | None
    title: str | None
    status: Status
    kind: str  # "passed", "AttributeError (stub)", "skipped", "timeout", ...: what counts are made of
    detail: str | None  # skip reason or the failure in words
    result: Result | None
    cause: Cause | None = None  # why it failed, when it did
    incompatible: Incompatibility | None = None


def entries(side: SideRun) -> list[Entry]:
    o = side.outcomes
    titles = {c.id: c.title for c in o.collected}
    by_parent: dict[str, list[Result]] = {}
    for r in o.results:
        if r.parent:
            by_parent.setdefault(r.parent, []).append(r)
    got = []
    for r in o.results:
        status: Status = "passed" if r.outcome in PASSED else "never ran" if r.outcome == "skipped" else "failed"
        detail = r.reason if r.outcome in ("skipped", "xfailed") else detail_of(r.exception, side.code) if r.exception else None
        got.append(Entry(r.id, r.parent, titles.get(r.id), status, kind_of(r, side.code), detail, r,
                         *_cause(r, by_parent.get(r.id, []), side.code)))
    if not o.complete and o.running:
        kind = "timeout" if side.timed_out else "crashed"
        got.append(Entry(o.running, None, titles.get(o.running), "failed", kind, side.how, None,
                         "timeout" if side.timed_out else "crash"))
    done = {e.id for e in got}
    for c in o.collected:
        if c.id not in done:
            got.append(Entry(c.id, None, c.title, "never ran", "not reached", f"pytest stopped ({side.how})", None))
    return got


def _state(entry: Entry | None, side: SideRun, declared: bool = False) -> SideState:
    """A test's state on one side. One the side did not collect never ran, unless the file did not
    collect because the tree lacks what it imports or patches: then it fails there, for that reason
    (SWE-bench counts a test missing from a side's results as failed; diffprobe only when the tree,
    not the environment or the file itself, is why), and the grade says the test is of another era."""
    if entry is not None:
        return SideState(status=entry.status, kind=entry.kind, detail=entry.detail, cause=entry.cause,
                         incompatible=entry.incompatible)
    errors = side.outcomes.collection_errors
    if errors and all(missing_target(c.exception, side.code) for c in errors):
        return SideState(status="failed", kind=f"not collected: {kind_of_collection(errors[0], side.code)}",
                         detail=missing_target(errors[0].exception, side.code), cause="target missing",
                         incompatible=_era(errors[0].exception, side.code))
    why = "collection error" if errors else "not collected on this side"
    return SideState(status="never ran", kind="not collected", detail=f"{why}{'; listed from its source' * declared}")


def _grade(base: SideState, head: SideState) -> Grade:
    g = _GRADE.get((base.status, head.status), "never ran")
    era = g in ("fail-to-pass", "pass-to-fail", "fail-to-fail") and (base.cause in ERA or head.cause in ERA)
    return INCOMPATIBLE if era else g


def _summary(side: SideRun, listed: list[Entry]) -> SideSummary:
    def count(rows: list[Entry]) -> dict[str, int]:
        c = Counter(e.kind for e in rows)
        return {"passed": c.pop("passed", 0), **dict(c.most_common())}

    return SideSummary(
        source=side.text, tests=count([e for e in listed if e.parent is None]),
        subtests=count([e for e in listed if e.parent is not None]),
        collection_errors=[kind_of_collection(c, side.code) for c in side.outcomes.collection_errors],
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


def _covered(declared: str, ids: set[str]) -> bool:
    return declared in ids or any(i.startswith(declared + "[") for i in ids)


def grade(base: SideRun, head: SideRun, declared: tuple[str, ...] = ()) -> Grading:
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
    head_errors = [(kind_of_collection(c, head.code), detail_of(c.exception, head.code), cause_of(c.exception, head.code))
                   for c in head.outcomes.collection_errors]
    verdict, blockers = _verdict(rows, head_errors)
    counts = Counter(r.grade for r in rows)
    by_cause: dict[Grade, dict[str, int]] = {}
    for g in ("fail-to-pass", "pass-to-fail", "fail-to-fail", INCOMPATIBLE):
        split = Counter(r.cause or "other" for r in rows if r.grade == g)
        by_cause[g] = dict(split.most_common())
    return Grading(counts={g: counts.get(g, 0) for g in get_args(Grade)}, by_cause=by_cause, tests=rows,
                   base=_summary(base, b_entries), head=_summary(head, h_entries), verdict=verdict, blockers=blockers,
                   passed=not blockers)


def graded(test_id: str, parent: str | None, base: SideState, head: SideState) -> GradedTest:
    """One row: its grade, the failure it rests on, and the reason in words, each true of the two states."""
    g = _grade(base, head)
    if g == INCOMPATIBLE:
        cause = head.cause if head.cause in ERA else base.cause
    else:
        cause = base.cause if g == "fail-to-pass" else head.cause
    return GradedTest(id=test_id, parent=parent, base=base, head=head, grade=g, cause=cause, reason=reason(g, base, head))


def _said(state: SideState) -> str:
    return f"{state.kind}: {state.detail}" if state.detail and state.status != "passed" else state.kind


def reason(g: Grade, base: SideState, head: SideState) -> str:
    if g == "never ran":
        sides = [f"never ran at {name} ({_said(s)})" for name, s in (("base", base), ("head", head)) if s.status == "never ran"]
        return "; ".join(sides) + ": not compared"
    said = {"fail-to-pass": f"fails at base ({_said(base)}); passes at head", "pass-to-pass": "passes at base and at head",
            "pass-to-fail": f"passes at base; fails at head ({_said(head)})",
            "fail-to-fail": f"fails at base ({_said(base)}) and at head ({_said(head)})"}[_GRADE[base.status, head.status]]
    if g == INCOMPATIBLE:
        return f"{said}: {_ERA_WORDS} where it failed, neither a fix nor a regression"
    return said + (f": {NOT_BEHAVIOUR_WORDS[head.cause]}, not a regression"
                   if g == "pass-to-fail" and head.cause in NOT_BEHAVIOUR else "")


# What a failure at head with a cause that is not the tree's behaviour says instead
_ERA_WORDS = "the test is of another era than this tree (incompatible)"
NOT_BEHAVIOUR_WORDS = {"stub": "it fell through to the test's own stand-ins",
                       "environment": "the environment lacks a module",
                       **{cause: _ERA_WORDS for cause in ERA}}


def _ran(state: SideState) -> bool:
    """The test ran on that side (passed or failed running), as opposed to never ran or not collected."""
    return state.status != "never ran" and not state.kind.startswith("not collected")


def _verdict(rows: list[GradedTest], head_errors: list[tuple[str, str, Cause]]) -> tuple[str, list[str]]:
    """Why the head does not pass, each reason in the words its cause deserves: a test that fell
    through to its own stub, lacks a module or is of another era at head says nothing about the
    tree -- it is inconclusive, never a regression nor a missing fix. ``head_errors``: the head's
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
