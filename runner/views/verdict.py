"""The verdict screen of audit, sweep, run and backport: per fix one line (its status, the one reason
that decides it, the configuration it speaks of), a few lines of detail, where to read the rest, and
how the trees' code ran when that was not the sandbox.

Derived from what the judging already returns (judging.FixStatus, the receipts' cases and their
duties): nothing here decides a status. The one rule of its own is how a fix off by default reads
(``OFF_BY_DEFAULT``) and that a headline and an exit code read the same words (``carried``).
Text from a tree goes out as rich ``Text`` (never read as markup; ui's console escapes control
characters)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from rich.text import Text

from runner import errors, fixids, ui
from runner.evidence import pins
from runner.judge import judging
from runner.judge.observations import Case
from runner.evidence.receipts import Differential, Receipt
from runner.evidence.records import BackportRecord, DutyCheck, Reviewed, Row, SweepRecord
from runner.views import confinement, styles

# A defence behind an option that is off by default, observed fixed with its option on and not in the
# default configuration: the tree carries it, and a deployment has it only when it turns it on.
OFF_BY_DEFAULT = "fixed when enabled; off by default"
# A "fixed" that rests on reachable changed code no review accepted (records.Row.on_unreviewed): not carried.
UNREVIEWED = "fixed on unreviewed code"
BACKPORT_UNREVIEWED = "behaves like head on unreviewed code"
DEFAULT = "default"  # the configuration a deployment runs without setting anything (probes/duties.CONFIGURATIONS)
DETAIL = 3  # lines of detail per fix; the rest is in the report


def carried(word: str) -> bool:
    """A headline that says the tree carries the fix: "fixed" (qualified or not) or ``OFF_BY_DEFAULT``.
    Exit codes are read from these words, so a headline and its exit code never disagree."""
    return word == "fixed" or word.startswith("fixed,") or word == OFF_BY_DEFAULT


@dataclass(frozen=True)
class Line:
    fix: int
    word: str  # the headline status
    reason: str  # the one reason that decides it
    config: str  # the configuration(s) it speaks of
    detail: list[str] = field(default_factory=list)  # at most DETAIL, then how many more
    warn: list[str] = field(default_factory=list)  # shown whatever the limit: code that can tell it is probed
    what: str = ""  # what the line compares, when a screen has several lines of one fix (backport)

    @property
    def carried(self) -> bool:
        return carried(self.word)


def _duties(case: Case | None) -> str:
    failed = judging.failed_duties(case) if case is not None else []
    return f"failed {_compact(failed)}" if failed else ""


def _stopped(case: Case | None) -> str:
    """What stopped a case that could not run (its error), or nothing."""
    return f"{case.error.type}: {case.error.message}"[:160] if case is not None and case.error else ""


def _case_reason(case_id: str, state: str, case: Case | None) -> str:
    """Why one case reads as it does: the duty it failed, or what stopped it."""
    if state == "bug":
        return f"{case_id}: " + (_duties(case) or "shows the bug signature")
    if state in ("error", "timeout"):
        why = f" ({case.error.type}: {case.error.message})" if case is not None and case.error else ""
        return f"{case_id}: {state}{why}"[:200]
    if state == "not_applicable":
        return f"{case_id}: not applicable" + (f" ({case.missing})" if case is not None and case.missing else "")
    return f"{case_id}: {state}"


def decisive(status: str, sites: list[judging.SiteStatus], cases: dict[str, Case]) -> str:
    """The one reason ``status`` holds over ``sites``: the first case that decides it (judging.status_of's order)."""
    shown = [(cid, st, cases.get(cid)) for s in sites for cid, st in s.cases.items()]
    role = {cid: (c.role if c else None) for cid, _, c in shown}

    def first(states: Iterable[str], want_role: str | None = None) -> str | None:
        for cid, st, c in shown:
            if st in states and (want_role is None or role[cid] in (want_role, None)):
                return _case_reason(cid, st, c)
        return None

    if status == "regression":
        found = first(["bug"], "guard")
        return f"a guard case shows the bug: {found}" if found else "a guard case shows the bug"
    if status == "not fixed":
        return first(["bug"], "bug") or "a bug case shows the bug signature"
    if status == "inconclusive":
        return first(["error", "timeout"]) or "a case could not run"
    if status == "not applicable":
        return "every bug case lacks the API it drives" + (f"; {found}" if (found := first(["not_applicable"])) else "")
    if status == "not probed":
        return "no case of the fix ran"
    bugs = [cid for cid, st, c in shown if st == "clean" and role[cid] in ("bug", None)]
    guards = [cid for cid, st, c in shown if st == "clean" and role[cid] == "guard"]
    return f"{len(bugs)} bug case(s) ran clean, {len(guards)} guard case(s) held"


def _compact(paths: list[str], n: int = 3) -> str:
    return ", ".join(paths[:n]) + (f" and {len(paths) - n} more" if len(paths) > n else "")


def of_fix(fs: judging.FixStatus, cases: dict[str, Case], pinned: list[str] = ()) -> Line:
    """A fix's line on one tree. ``pinned``: the configurations its pin names (an option off by default,
    on): the headline speaks of them, every other configuration is a line of detail."""
    inside = [s for s in fs.sites if not pinned or s.site in pinned]
    outside = [s for s in fs.sites if s not in inside]
    if not inside:
        return Line(fs.fix, "not probed", f"no case ran in the configuration its pin names ({', '.join(pinned)})",
                    ", ".join(pinned))
    status = judging.on_conditions(judging.worst([s.status for s in inside]), fs.one_way)
    word = judging.shown(fs.model_copy(update={"status": status}))
    default = next((s for s in outside if s.site == DEFAULT), None)
    if status == "fixed" and default is not None and default.status != "fixed":
        word = OFF_BY_DEFAULT
    reason = decisive(status, inside, cases)
    one_way = status == "inconclusive" and judging.worst([s.status for s in inside]) == "fixed"
    if one_way:  # every case held: what is missing is an input that flips a condition of the fix's code
        reason = fs.one_way[0] + (f" (and {len(fs.one_way) - 1} more condition(s))" if len(fs.one_way) > 1 else "")
    if status == "fixed" and fs.not_covered:
        reason = f"{reason}; not reached: {_compact(fs.not_covered, 2)}"
    detail = [f"{s.site}: {s.status}, {decisive(s.status, [s], cases)}" for s in outside]
    if len(inside) > 1:  # several configurations behind one headline: each one's own word where it differs
        detail += [f"{s.site}: {s.status}, {decisive(s.status, [s], cases)}" for s in inside if s.status != status]
    if one_way:
        detail += fs.one_way[1:]
    failing = [cid for s in inside for cid, st in s.cases.items() if st == "bug"]
    if status in ("not fixed", "regression") and len(failing) > 1:
        detail.append(f"{len(failing) - 1} more case(s) show the bug: {_compact(failing[1:])}")
    warn: list[str] = []
    if d := fs.departed:
        detail += [f"ran on code that differs from {d.baseline}: {place}" for place in d.places]
        detail += [f"ran at import (module-level code): {place}" for place in d.at_import]
        warn += [f"can tell it is being probed: {place}" for place in d.aware]
        warn += [f"its module ran code under another file's name: {place}" for place in d.renamed]
    config = ", ".join(s.site for s in inside)
    return Line(fs.fix, word, reason, config, _capped(detail), warn)


def _capped(detail: list[str]) -> list[str]:
    return detail if len(detail) <= DETAIL else detail[:DETAIL] + [f"… {len(detail) - DETAIL} more line(s) in the report"]


def of_tree(fixes: list[judging.FixStatus], receipts: list[Receipt], pinned: dict[int, list[str]],
            row: Row | None = None) -> list[Line]:
    """Every fix's line on one tree (``pinned``: fix -> the configurations its pin names); a carried
    one that ``row`` says rests on unreviewed code reads ``UNREVIEWED``, naming the places."""
    cases = {(r.probe.fix, c.id): c for r in receipts for c in r.cases}
    lines = [of_fix(fs, {cid: c for (f, cid), c in cases.items() if f == fs.fix}, pinned.get(fs.fix, []))
             for fs in sorted(fixes, key=lambda fs: fixids.order(fs.fix))]
    return [unreviewed(line, row) if row is not None and line.fix in row.on_unreviewed and line.carried else line
            for line in lines]


def unreviewed(line: Line, row: Row) -> Line:
    """``line`` as "fixed on unreviewed code": why, what the fixed rested on ("on code that differs from
    X at N places the cases ran...", when it said so), and the places (rejected first), the first few."""
    rested = f"; {line.word.removeprefix('fixed, ')}" if line.word.startswith("fixed, ") else ""
    return Line(line.fix, UNREVIEWED, row.unreviewed_reason() + rested, line.config, _capped(_places(row)), line.warn,
                line.what)


def _places(standing: Reviewed) -> list[str]:
    return [f"rejected by a review: {p}" for p in standing.rejected] + [f"unreviewed: {p}" for p in standing.unreviewed]


def exit_code(lines: list[Line], accept_unreviewed: bool = False) -> int:
    """0 when every headline says the tree carries the fix; 4 when every one does or reads
    ``UNREVIEWED`` (0 with ``accept_unreviewed``); else 1. Read from the words, so a headline and
    its exit code never disagree."""
    if not all(line.carried or line.word == UNREVIEWED for line in lines):
        return errors.DIFFERS
    return errors.UNREVIEWED if any(line.word == UNREVIEWED for line in lines) and not accept_unreviewed else errors.OK


def of_record(kind: str, extra: dict, receipts: Iterable[Receipt]) -> tuple[str, list[Line]] | None:
    """An audit's or a sweep's bundle: its newest tree and every fix's line there (the pins' configurations:
    the bundle records none of its own), for report's summary; None for other bundles."""
    if kind not in ("audit", "sweep") or not extra.get("rows"):
        return None
    newest = SweepRecord.model_validate(extra).rows[-1]
    mine = [r for r in receipts if r.source.tree_digest == newest.tree_digest]
    return newest.label, of_tree(newest.fixes, mine, {n: f.sites for n, f in pins.load().fixes.items()}, newest)


def of_backport_bundle(kind: str, extra: dict, receipts: Iterable[Receipt]) -> Line | None:
    """A backport bundle's line against head, for report (the same words as backport's screen)."""
    if kind != "backport":
        return None
    record = BackportRecord.model_validate(extra)
    return of_backport(record, {c.id: c for r in receipts if r.probe.fix == record.pr for c in r.cases})


def of_differential(d: Differential, receipts: dict[str, Receipt], what: str = "") -> Line:
    """A differential's line (run, backport): its verdict against the pin, and the case that decides it."""
    word = d.verdict + ("" if d.expected is None else " (as pinned)" if d.as_expected else f" (pinned: {d.expected})")
    head = {c.id: c for s in d.head for c in receipts[s.receipt].cases} if receipts else {}
    base = {c.id: c for s in d.base for c in receipts[s.receipt].cases} if receipts else {}
    deciding = {
        "fix observed": lambda c: c.transition == "bug -> clean",
        "fix not observed": lambda c: c.role == "bug" and c.transition == "bug -> bug",
        "regression": lambda c: (c.role == "guard" and c.head == "bug") or c.transition == "clean -> bug",
        "inconclusive": lambda c: c.transition == "inconclusive",
    }[d.verdict]
    found = [c for c in d.cases if deciding(c)]
    trees = f"{d.base[0].source.source} -> {d.head[0].source.source}: " if d.base and d.head else ""
    if d.verdict == "fix observed":
        guards = sum(c.role == "guard" and c.head == "clean" for c in d.cases)
        return Line(d.fix, word, f"{trees}{len(found)} bug case(s) went bug -> clean, none stayed a bug; {guards} guard "
                                 f"case(s) held", ", ".join(d.sites or sorted({c.site for c in d.cases})), what=what)
    if found:
        c = found[0]
        side = base if d.verdict == "inconclusive" and c.base not in ("bug", "clean") else head
        why = _duties(side.get(c.case)) if c.head == "bug" or c.transition == "clean -> bug" else ""
        if d.verdict == "inconclusive":
            why = _stopped(side.get(c.case))
        reason = f"{trees}{c.case}: {c.base} -> {c.head}" + (f" ({why})" if why else "")
        more = len(found) - 1
    else:
        reason, more = (d.reasons[0] if d.reasons else "no case decides it"), 0
    detail = [f"{more} more case(s) alike: {_compact([c.case for c in found[1:]])}"] if more else []
    return Line(d.fix, word, reason, ", ".join(d.sites or sorted({c.site for c in d.cases})), detail, what=what)


def of_backport(record: BackportRecord, cases: dict[str, Case]) -> Line:
    """The backport against head: the first case where they differ and the duty the backport failed there."""
    differ = [r for r in record.rows if not r.same]
    sites = sorted({cases[r.case].site for r in record.rows if r.case in cases})
    word = "behaves like head" if record.behaves_like_head else "does not behave like head"
    if record.behaves_like_head and record.on_unreviewed:
        word = BACKPORT_UNREVIEWED
    if differ:
        r = differ[0]
        why = _duties(cases.get(r.case)) if r.backport == "bug" else _stopped(cases.get(r.case))
        reason = f"{r.case}: backport {r.backport}, head {r.head}" + (f" ({why})" if why else "")
    elif record.behaves_like_head:
        observed = sum(judging.conclusive(r.head) for r in record.rows)
        reason = f"alike on all {len(record.rows)} case(s), {observed} of them observed"
    else:
        reason = "no case was observed on head: cases neither tree could run prove nothing"
    detail = [f"{len(differ) - 1} more case(s) differ: {_compact([r.case for r in differ[1:]])}"] if len(differ) > 1 else []
    if word == BACKPORT_UNREVIEWED:
        reason, detail = f"{reason}; {record.unreviewed_reason()}", _capped(_places(record))
    return Line(record.pr, word, reason, ", ".join(sites), detail, what="backport vs head:")


def style(word: str) -> str:
    if word in ("behaves like head", "does not behave like head"):
        return "green" if word == "behaves like head" else "red"
    if word in (UNREVIEWED, BACKPORT_UNREVIEWED):
        return "bold red"
    return "yellow" if word == OFF_BY_DEFAULT else styles.VERDICT.get(word.split(" (")[0]) or styles.status(word)


def show_duty_check(check: DutyCheck) -> None:
    """A duty-level bracket of pins.toml (part of a fix in an earlier release), as a run found it."""
    head = f"{fixids.label(check.fix)} part: {check.title}: {check.without} -> {check.with_}"
    if check.as_pinned:
        ui.out.print(Text.assemble(("as pinned ", "green"), head))
        return
    ui.out.print(Text.assemble(("NOT as pinned ", "red"), head))
    for why in check.why:
        ui.out.print(Text(f"  {why}"))


def show(lines: list[Line], receipts: Iterable[Receipt] = (), rest: str | None = None) -> None:
    """Print the screen: the confinement warning first (it qualifies every line), then each fix."""
    o = ui.out
    if loose := confinement.warning(receipts):
        o.print(Text(f"WARNING: {loose}", style="bold red"))
    for line in lines:
        o.print(Text.assemble((f"{fixids.label(line.fix)} ", "bold"), f"{line.what} " if line.what else "", (line.word, style(line.word)),
                              f"  {line.reason}",
                              (f"  [{line.config}]", "dim")))
        for text in line.detail:
            o.print(Text(f"    {text}"))
        for text in line.warn:
            o.print(Text(f"    {text}", style="bold red"))
    if rest:
        o.print(Text(rest, style="dim"))


def read_more(bundle: Path) -> str:
    """Where the rest of the screen is: every case, duty and side effect."""
    return f"every case, duty and side effect: diffprobe report {bundle} --fix N  (or --all; --html FILE for one page)"
