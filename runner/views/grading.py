"""An upstream-tests grading as people read it: per test and subtest on both sides, failures by type
and origin, pytest's own count beside ours. The ``upstream-tests`` command and ``report`` both show
it (so it sits below both: a view reads no command); the grading is the judge's
(runner/judge/upstream.py), its record runner/evidence/upstream.py's."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from runner import ui
from runner.judge.pytest_records import INCOMPATIBLE, NOT_BEHAVIOUR, Grade, Grading, PytestCount, SideState, SideSummary

_GRADE_STYLE = {"fail-to-pass": "green", "pass-to-pass": "dim", "pass-to-fail": "bold red", "fail-to-fail": "red",
                "incompatible (test era)": "magenta", "never ran": "yellow"}
ORIGINS = ("origins: (assertion) the test's own assertion failed; (stub) raised on a test stub or mock, the code "
           "fell through to it; (test) raised by the test's files; (sglang) raised in the tree's code; "
           "(environment) a module the environment lacks; the test of another era (incompatible): (target missing) "
           "it imports, patches or reads a name the tree's source does not define, (signature mismatch) a call "
           "between its files and the tree that the callee's signature does not accept, (attribute unset) the tree "
           "read what its constructor sets from an object the test built without it, (call arity) a mock's expected "
           "call of a shape the tree's call site never makes, (tuple arity) a tuple of the tree's state unpacked or "
           "indexed for a length the tree's code never builds there, (message shape) a tagged message handed to the tree "
           "of a length none of the tree's producers of that tag builds")


def counts_line(summary: SideSummary) -> str:
    """``tests 0 passed, 6 AttributeError (stub); subtests ...``: failures always by type and origin."""
    def part(label: str, counts: dict[str, int]) -> str:
        return f"{label} " + ", ".join(f"{n} {kind}" for kind, n in counts.items())

    parts = [f"collection error: {', '.join(summary.collection_errors)}"] if summary.collection_errors else []
    parts.append(part("tests", summary.tests))
    if any(summary.subtests.values()):
        parts.append(part("subtests", summary.subtests))
    return "; ".join(parts) + ("; killed at the deadline" if summary.timed_out else "")


def pytest_line(count: PytestCount) -> str:
    """pytest's own count beside ours, so that neither reads as the other."""
    said = ", ".join(count.line) or "nothing"
    made = (f"its failed = {_n(count.failed_tests, 'test')} + {_n(count.failed_subtests, 'subtest')}; its passed = "
            f"{_n(count.passed_tests, 'test')} ({_n(count.passed_subtests, 'passed subtest')} graded here, not counted there)")
    return f"pytest's own count: {said} ({made})" + ("" if count.agrees else "; the records do NOT add up to it")


def _n(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def grading_line(grading: Grading) -> str:
    def grade_part(g: Grade, n: int) -> str:
        split = grading.by_cause.get(g)
        if not n or not split:
            return f"{n} {g}"
        words = ", ".join(f"{k} {c}" for c, k in split.items())
        note = ": not a regression" if g == "pass-to-fail" and set(split) <= set(NOT_BEHAVIOUR) else ""
        return f"{n} {g} ({words}{note})"

    parts = [grade_part(g, n) for g, n in grading.counts.items()]
    return "grading: " + ", ".join(parts) + " (never ran is never passed)"


def verdict_line(grading: Grading) -> str:
    """The verdict and what it rests on, every clause true of the grading's own rows: nothing is said
    about tests that failed at base when none did, nor about a fix when no test went fail-to-pass."""
    rows = grading.tests
    at_head = {s: sum(r.head.status == s for r in rows) for s in ("passed", "failed", "never ran")}
    failed_at_base = [r for r in rows if r.base.status == "failed"]
    never_at_base = sum(r.base.status == "never ran" for r in rows)
    counts = grading.counts
    clauses = [f"at head {at_head['passed']} passed, {at_head['failed']} failed, {at_head['never ran']} never ran",
               f"{counts.get('fail-to-pass', 0)} fail-to-pass, {counts.get('pass-to-pass', 0)} pass-to-pass"]
    if failed_at_base and all(r.head.status == "passed" for r in failed_at_base):
        clauses.append(f"every test that fails at base ({len(failed_at_base)}) passes at head")
    if not counts.get("fail-to-pass"):
        clauses.append("no test fails at base and passes at head: nothing here shows a fix")
    if not any(r.base.status == "passed" and r.head.status == "failed" for r in rows):
        clauses.append("none that passes at base fails at head")
    if counts.get(INCOMPATIBLE):
        clauses.append(f"{counts[INCOMPATIBLE]} incompatible (test era): the test and the tree are of different eras, not compared")
    if never_at_base:
        clauses.append(f"{never_at_base} never ran at base: not compared")
    verdict = grading.verdict or ("passes" if grading.passed else "does not pass")
    return f"verdict: {verdict} ({'; '.join(clauses)})"


def show(grading: Grading, title: str) -> None:
    table = Table(title=escape(title), title_justify="left")
    for column in ("test", "base", "head", "grade", "why"):
        table.add_column(column)
    for row in grading.tests:
        name = f"  ↳ {row.id.removeprefix(row.parent).strip()}" if row.parent else row.id.split("::", 1)[-1]
        cells = [_cell(s) for s in (row.base, row.head)]
        cause = f" ({row.cause})" if row.cause and row.grade != "pass-to-pass" else ""
        table.add_row(escape(name), *cells, f"[{_GRADE_STYLE[row.grade]}]{row.grade}{escape(cause)}[/]", escape(row.reason or ""))
    ui.out.print(table)
    for name, side in (("base", grading.base), ("head", grading.head)):
        ui.out.print(escape(f"{name} {side.source}: {counts_line(side)}"))
        if side.pytest:
            ui.out.print(escape(f"  {pytest_line(side.pytest)}"))
    ui.out.print(ORIGINS, markup=False)
    ui.out.print(grading_line(grading), markup=False)
    ui.out.print(f"[{'green' if grading.passed else 'red'}]{escape(verdict_line(grading))}[/]")
    for line in grading.blockers:
        ui.out.print(f"[red]✗[/] {escape(line)}")


def show_bundle(extra: dict) -> None:
    """``report`` on an upstream-tests bundle: the grading table, per test and subtest, with origins."""
    tests = extra.get("tests", {})
    grading = Grading.model_validate(extra["grading"])
    show(grading, f"{tests.get('from', tests.get('file', 'upstream tests'))}: {grading.base.source} -> {grading.head.source}")


def _cell(state: SideState) -> str:
    style = {"passed": "green", "failed": "red"}.get(state.status, "yellow")
    text = f"{state.kind}: {state.detail}" if state.kind in ("skipped", "not collected") and state.detail else state.kind
    return f"[{style}]{escape(text)}[/]"
