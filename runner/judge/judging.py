"""Every rule from what a case showed to what it means, in one vocabulary: a case's state, a case's
transition from base to head, a differential's verdict, and the status of a site, a fix or a
probe on one tree. Everything that shows a status (run, audit, sweep, merge, backport, report)
calls these; nothing else decides. Judged from observed behaviour only: an error or a timeout is
a harness gap, never a behaviour, and a case that could not run proves nothing.
"""

from __future__ import annotations

from typing import Iterable, Literal, Protocol

from pydantic import BaseModel

from probes import duties as probe_duties
from runner.judge.fixcode import FixCoverage
from runner.judge.observations import Case

# What one case showed: its classification when observed, else its outcome (absent: not run there).
State = Literal["bug", "clean", "error", "not_applicable", "timeout", "absent"]
Transition = Literal["bug -> clean", "clean -> clean", "bug -> bug", "clean -> bug", "inconclusive", "not comparable"]
# A differential: did the fix change base's behaviour into head's?
Verdict = Literal["fix observed", "fix not observed", "regression", "inconclusive"]
# One tree: a site, a fix, or one probe's cases. "regression": a guard case (a valid, re-entering or
# preempted request that must keep working) showed the bug signature; "clean": no bug case to
# judge, and the guards held (a guard-only probe).
Status = Literal["fixed", "not fixed", "regression", "inconclusive", "clean", "not applicable", "not probed"]
ORDER: list[Status] = ["regression", "not fixed", "inconclusive", "fixed", "clean", "not applicable", "not probed"]  # worst first


class CaseTransition(Protocol):
    """One case from base to head, as a differential records it (``runner.evidence.receipts``)."""

    case: str
    role: str
    base: str  # the case's state at base
    head: str
    transition: Transition


class _Probe(Protocol):
    fix: int | None


class Observed(Protocol):
    """What ``fixes`` reads of a receipt: the judge needs no more of the format than this."""

    probe: _Probe
    fix_code: FixCoverage | None
    cases: list[Case]


def state(case: Case | None) -> State:
    if case is None:
        return "absent"
    return case.classification if case.outcome == "observed" else case.outcome


def conclusive(shown: str) -> bool:
    """A state that says how the tree behaves (bug or clean), not that the case could not tell."""
    return shown in ("bug", "clean")


def alike(a: State, b: State) -> bool:
    """Two trees showed the same on one case: the same bug or clean, or both lack the API the case
    drives (not applicable on both sides is one observation: neither tree has that code). An error,
    a timeout or an absent case tells nothing, so it is never alike, not even with itself."""
    return a == b and (conclusive(a) or a == "not_applicable")


def transition(base: Case | None, head: Case | None) -> Transition:
    if base is None or head is None or "not_applicable" in (base.outcome, head.outcome):
        return "not comparable"
    if base.outcome != "observed" or head.outcome != "observed":
        return "inconclusive"
    return f"{base.classification} -> {head.classification}"  # type: ignore[return-value]


def verdict(cases: list[CaseTransition], not_comparable: str | None = None) -> tuple[Verdict, list[str]]:
    """SWE-bench-style grading over the case transitions.

    Regression: a guard case is a bug at head, or a bug case went clean -> bug. Inconclusive: base
    and head not comparable (``not_comparable`` says why: probe versions or judges differ), or any
    case errored or timed out on either side (a harness gap is never read as a behaviour). Fix
    observed: at least one bug case went bug -> clean, none stayed a bug.
    """
    if not_comparable:
        return "inconclusive", [f"base and head {not_comparable}: not comparable"]
    reasons: list[str] = []
    regressions = [c for c in cases if (c.role == "guard" and c.head == "bug") or c.transition == "clean -> bug"]
    if regressions:
        return "regression", [f"{c.case}: {c.base} at base, {c.head} at head ({c.role} case)" for c in regressions]
    unsure = [c for c in cases if c.transition == "inconclusive"]
    if unsure:
        return "inconclusive", [f"{c.case}: {c.base} at base, {c.head} at head" for c in unsure]
    for c in cases:
        if c.transition == "not comparable":
            reasons.append(f"{c.case}: not comparable ({c.base} at base, {c.head} at head); left out")
    bug_cases = [c for c in cases if c.role == "bug" and c.transition != "not comparable"]
    fixed = [c for c in bug_cases if c.transition == "bug -> clean"]
    still = [c for c in bug_cases if c.transition == "bug -> bug"]
    if fixed and not still:
        return "fix observed", reasons + [f"{c.case}: bug -> clean" for c in fixed]
    if still:
        reasons += [f"{c.case}: the bug signature is still observed at head" for c in still]
    elif not fixed:
        reasons.append("no bug case showed the bug signature at base: nothing for the fix to change")
    return "fix not observed", reasons


def status(cases: Iterable[Case]) -> Status:
    """One tree's status over some of its cases (a site's, a fix's, a probe's): a dropped guard is
    named first, then a bug signature, then a harness gap; a bug case observed clean is "fixed"."""
    return status_of([(c.role, state(c)) for c in cases])


def status_of(shown: list[tuple[str, State]]) -> Status:
    """``status`` over (role, state) pairs: what a report that keeps no effects can be judged by."""
    if not shown:
        return "not probed"
    if ("guard", "bug") in shown:
        return "regression"
    if ("bug", "bug") in shown:
        return "not fixed"
    if any(s in ("error", "timeout") for _, s in shown):
        return "inconclusive"
    if ("bug", "clean") in shown:
        return "fixed"
    if all(role == "guard" for role, _ in shown) and any(s == "clean" for _, s in shown):
        return "clean"
    return "not applicable"  # every bug case lacks the API it drives


def problems(cases: Iterable[Case]) -> list[tuple[Status, list[str]]]:
    """Each problem status with the sites it shows at, worst first: a dropped guard is named even
    when the bug is fixed."""
    cases = list(cases)
    found = [(word, sorted({c.site for c in cases if c.role == role and state(c) == "bug"}))
             for word, role in (("regression", "guard"), ("not fixed", "bug"))]
    return [(word, sites) for word, sites in found if sites]


def worst(statuses: list[Status]) -> Status:
    return min(statuses, key=ORDER.index) if statuses else "not applicable"


class SiteStatus(BaseModel):
    fix: int
    site: str
    status: Status
    cases: dict[str, str]  # case id -> its state (bug, clean, error, timeout, not_applicable)
    # where the fix's cases ran over more than one KV-transfer backend: the fix's one_way that is this site's (its
    # backend's own code and the shared code); None: all of the fix's
    one_way: list[str] | None = None


class Departed(BaseModel):
    """What a "fixed" rests on when the tree departs from its upstream baseline where the fix's cases
    ran (runner/evidence/departures.py): the same behaviour, observed on code upstream never had."""

    status: Literal["fixed on differing code"] = "fixed on differing code"
    baseline: str
    places: list[str]  # "file:line in function" of each changed place the fix's cases ran
    aware: list[str] = []  # changed places that can tell they are being probed (run or not: a tree can hide its own lines)
    at_import: list[str] = []  # changed module-level code of modules the fix's runs imported: it ran before every case
    renamed: list[str] = []  # changed places of modules whose code ran in the fix's cases under another file's name


class FixStatus(BaseModel):
    fix: int
    not_covered: list[str] = []  # file:line of each statement of the fix's code no case ran (fixed, with lines it does not rest on)
    one_way: list[str] = []  # each atomic condition of the fix's code no case saw both ways, unexplained ("condition X at f:l never false")
    conditions: list[int] | None = None  # [seen both ways or explained, all] atomic conditions of the fix's code; None: not measured
    status: Status
    sites: list[SiteStatus]
    bug_at: list[str] = []  # sites where a bug case showed the bug signature, whatever a guard showed beside it
    departed: Departed | None = None  # "fixed", on code that differs from the baseline where it was observed


def departed(fs: FixStatus, baseline: str, places: list[str], aware: list[str], *, at_import: list[str] = (),
             renamed: list[str] = ()) -> FixStatus:
    """``fs`` as it reads once its tree's departures are known: a "fixed" observed on changed places
    the fix's cases ran (recorded, at import, or in a module whose code ran renamed), or beside changed
    places that can tell they are probed, says so. Any other status stands as it is (the behaviour
    already says what is wrong)."""
    if fs.status != "fixed" or not (places or aware or at_import or renamed):
        return fs
    return fs.model_copy(update={"departed": Departed(baseline=baseline, places=places, aware=aware,
                                                      at_import=list(at_import), renamed=list(renamed))})


def on_conditions(status: Status, one_way: list[str]) -> Status:
    """A status as the conditions of the fix's code leave it: a "fixed" whose code has an atomic condition no case
    saw both ways (and no reason explains) is "inconclusive": the duties held only on the inputs the cases built,
    and an input that flips that condition was never tried. Any other status stands (the behaviour says more).
    Lines no case reaches qualify a "fixed" that stands (``covered``); a condition on such a line was never seen
    at all, so it already reads here."""
    return "inconclusive" if status == "fixed" and one_way else status


def shown(fs: FixStatus) -> str:
    """A fix's status in words, with what a "fixed" rests on: code that differs from its baseline where the
    cases ran, and statements of the fix's code no case reached (``covered``)."""
    word = covered(fs.status, fs.not_covered)
    if fs.departed is None:
        return word
    d = fs.departed

    def places(n: int) -> str:
        return f"{n} place{'s' if n != 1 else ''}"

    others = [p for p in d.aware if p not in d.places]
    parts = []
    if d.places:
        what = f"at {places(len(d.places))} the cases ran"
        if inside := len(d.aware) - len(others):
            what += f", {inside} of which can tell {'they are' if inside != 1 else 'it is'} being probed"
        parts.append(what)
    if others:
        parts.append(f"at {places(len(others))} not recorded as run that can tell they are being probed")
    if d.renamed:
        parts.append(f"at {places(len(d.renamed))} of modules whose code ran in the cases under another file's name")
    if d.at_import:
        parts.append(f"at {places(len(d.at_import))} of module-level code run at import")
    unreached = f"; {word.removeprefix('fixed, ')}" if word != fs.status else ""
    return f"fixed, on code that differs from {d.baseline} {', and '.join(parts)}: read them{unreached}"


def strict_fails(statuses: Iterable[FixStatus]) -> bool:
    """``--strict``: a verdict that rests on code differing from its baseline is not taken."""
    return any(fs.departed is not None for fs in statuses)


def fixes(receipts: list[Observed]) -> list[FixStatus]:
    """Per fix and site, from every probe case the receipts hold (one tree's receipts); the fix is
    the one each observation names (its probe's), sites in the order the probes report them. Each fix
    names the statements of its code no case ran and the atomic conditions no case saw both ways (a fix
    whose sites read "fixed" is "inconclusive" while one is left: ``on_conditions``)."""
    by_site: dict[tuple[int, str], list[Case]] = {}
    missed: dict[int, list[str]] = {}
    one_way: dict[int, list[str]] = {}
    counted: dict[int, list[int]] = {}
    measured: dict[int, list[FixCoverage]] = {}
    for receipt in receipts:
        if receipt.probe.fix is None:
            continue
        if receipt.fix_code is not None and receipt.fix_code.fix == receipt.probe.fix:
            missed.setdefault(receipt.probe.fix, []).extend(receipt.fix_code.not_covered())
            one_way.setdefault(receipt.probe.fix, []).extend(receipt.fix_code.one_way())
            measured.setdefault(receipt.probe.fix, []).append(receipt.fix_code)
            both, every = receipt.fix_code.both_ways()
            total = counted.setdefault(receipt.probe.fix, [0, 0])
            total[0], total[1] = total[0] + both, total[1] + every
        for case in receipt.cases:
            by_site.setdefault((receipt.probe.fix, case.site), []).append(case)
    out: dict[int, list[SiteStatus]] = {}
    bug_at: dict[int, list[str]] = {}
    over = {fix for fix, site in by_site if site_backend(site) != KV_BACKENDS[0]}  # fixes probed over other backends
    for (fix, site), cases in by_site.items():
        own = None if fix not in over else list(dict.fromkeys(
            said for cov in measured.get(fix, []) for said in cov.one_way(without=set(KV_BACKENDS) - {site_backend(site)})))
        out.setdefault(fix, []).append(SiteStatus(fix=fix, site=site, status=status(cases),
                                                  cases={c.id: state(c) for c in cases}, one_way=own))
        if any(c.role == "bug" and state(c) == "bug" for c in cases):
            bug_at.setdefault(fix, []).append(site)
    return [FixStatus(fix=f, status=on_conditions(worst([s.status for s in sites]), one_way.get(f, [])), sites=sites,
                      bug_at=bug_at.get(f, []), not_covered=sorted(set(missed.get(f, []))),
                      one_way=list(dict.fromkeys(one_way.get(f, []))), conditions=counted.get(f))
            for f, sites in sorted(out.items())]


def covered(word: str, not_covered: list[str]) -> str:
    """A status as it reads beside the statements of the fix's code no case ran: a "fixed" that some of them
    never ran under says how many (not plain "fixed"); any other status stands as it is."""
    if word == "fixed" and not_covered:
        n = len(not_covered)
        return f"fixed, with {n} line{'s' if n != 1 else ''} of the fix no case reaches"
    return word


# --- a line of trees: where each bug entered and where it left ----------------------------------


class Window(BaseModel):
    """One fix's bug along an ordered line of trees (a release line, a commit range), from behaviour
    only. The bug window runs from the first tree whose bug cases showed the bug signature up to,
    not including, the first tree after it where the fix's status is "fixed"; a tree after that
    which shows the bug again is named, never folded into the window. With no tree showing the bug,
    ``first_fixed`` is the first fixed tree and the window is unknown (the bug, if any, lies
    earlier than the line). ``site``: a configuration the later defences are probed under (the
    tree's defaults, or an option on), whose window this is; None: the fix's over all its sites."""

    fix: int
    site: str | None = None
    first_bug: str | None
    last_bug: str | None  # the last tree showing the bug before first_fixed (the window's last tree)
    first_fixed: str | None
    recurred: list[str]  # after first_fixed, showing the bug again: a fix that did not stay
    unjudged: list[str]  # from first_bug on, neither showing the bug nor fixed (harness gaps, missing API, not probed)


Phase = Literal["before", "window", "fixed"]


def window(fix: int, line: list[tuple[str, FixStatus | None]], site: str | None = None) -> Window:
    """The bug window of ``fix`` over ``line``: (source, that tree's status of the fix) in line order;
    with ``site``, of that site (a configuration) alone."""
    if site is not None:
        line = [(src, at_site(fs, site)) for src, fs in line]
        return window(fix, line).model_copy(update={"site": site})
    shows = [src for src, fs in line if fs is not None and fs.bug_at]
    first_bug = shows[0] if shows else None
    start = next((i for i, (src, _) in enumerate(line) if src == first_bug), 0)
    first_fixed = next((src for src, fs in line[start:] if fs is not None and fs.status == "fixed"), None)
    end = next((i for i, (src, _) in enumerate(line) if src == first_fixed), len(line))
    inside = [src for src, _ in line[start:end] if src in shows]
    return Window(fix=fix, first_bug=first_bug, last_bug=inside[-1] if inside else None, first_fixed=first_fixed,
                  recurred=[src for src, _ in line[end:] if src in shows],
                  unjudged=[src for src, fs in line[start:] if first_bug and src not in shows
                            and (fs is None or fs.status != "fixed")])


def at_site(fs: FixStatus | None, site: str) -> FixStatus | None:
    """``fs`` as one of its sites alone would read (None where the tree has no case there); the conditions of the
    fix's code are the fix's, whichever site's cases saw them."""
    found = next((s for s in fs.sites if s.site == site), None) if fs is not None else None
    if found is None:
        return None
    one_way = fs.one_way if found.one_way is None else found.one_way
    return FixStatus(fix=fs.fix, status=on_conditions(found.status, one_way), sites=[found],
                     bug_at=[site] if site in fs.bug_at else [], one_way=one_way)


def configured_sites(statuses: Iterable[FixStatus]) -> list[str]:
    """The configurations a fix's cases ran under on some tree, in the duty table's order: each has a
    bug window of its own (a defence off by default is in force only where its option is on)."""
    seen = {s.site for fs in statuses for s in fs.sites}
    return [c for c in CONFIGURATIONS if c in seen]


def phase(w: Window, order: list[str], source: str) -> Phase:
    """Where ``source`` lies against the window: before the bug was first seen, inside the window,
    or from the first fixed tree on."""
    i = order.index(source)
    if w.first_fixed is not None and i >= order.index(w.first_fixed):
        return "fixed"
    if w.first_bug is not None and i >= order.index(w.first_bug):
        return "window"
    return "before"


def line_status(st: Status, where: Phase) -> str:
    """A tree's status as it reads on a line: a bug case observed clean before the bug entered the
    line is "no bug observed" (there was nothing yet to fix), not "fixed"."""
    return "no bug observed" if st == "fixed" and where == "before" else st


def source_status(st: Status, tree: bool) -> str:
    """A status as it reads for what was observed: a model configuration or a live server has no code
    a fix changed, so it is never "fixed": it shows the bug or it does not."""
    return st if tree else {"fixed": "no bug observed", "not fixed": "bug observed"}.get(st, st)


# --- duties: every classification re-derived on the host ------------------------------------------
# A probe runs inside the tree's environment, where the tree's code could rewrite the probe's own
# verdicts. So the host judges again, from the recorded effects alone, with the probe's duty table
# (probes/duties.py: standard library only, it never imports SGLang).

CONFIGURATIONS = probe_duties.CONFIGURATIONS
OTHER_BACKENDS = probe_duties.OTHER_BACKENDS
KV_BACKENDS = ("mooncake", *OTHER_BACKENDS)  # the first: the backend a site that names none runs


def site_backend(site: str) -> str:
    """The KV-transfer backend a site's cases run (``<configuration>-<backend>``; Mooncake where it names none)."""
    return next((b for b in OTHER_BACKENDS if site.endswith(f"-{b}")), KV_BACKENDS[0])


def case_ids(probe: str) -> list[str]:
    """Every case a probe declares (its generated case space), in order; none for a probe without duties."""
    return list(probe_duties.CASES.get(probe, {}))


def rejudge(probe: str, case: Case) -> Case:
    """The case as the host judges it from its effects, with each declared duty held or failed. A
    reported classification its effects do not bear out makes the case an error of the tree's
    process ("Misjudged"), never a verdict. A case reported at a site or in a role its probe does not declare for it
    (a process moving a bug case out of the configuration a deployment runs) is such an error too, where declared."""
    place = probe_duties.PLACES.get(probe, {}).get(case.id)
    if place is not None and (case.site, case.role) != place:
        return _misjudged(case.model_copy(update={"site": place[0], "role": place[1]}),
                          f"reported at site {case.site} as a {case.role} case; its probe declares {place[0]}, {place[1]}")
    if case.outcome != "observed" or probe not in probe_duties.CASES:
        return case
    if case.id not in probe_duties.CASES[probe]:
        return _misjudged(case, f"{case.id} is not a case probe {probe} declares")
    held = probe_duties.judge(probe, case.id, case.effects or {})
    derived = probe_duties.classify(held)
    if derived != case.classification:
        failed = [d for d, ok in held.items() if not ok]
        return _misjudged(case, f"reported {case.classification}, but its effects show {derived}"
                                + (f" (failed: {', '.join(failed)})" if failed else ""))
    return case.model_copy(update={"duties": dict(held)})  # the case was validated when read; its duties are ours


def _misjudged(case: Case, message: str) -> Case:
    return Case.model_validate({**case.model_dump(mode="json"), "outcome": "error", "classification": "inconclusive",
                                "effects": None, "duties": None,
                                "error": {"type": "Misjudged", "message": message, "where": "process", "frame": None}})


def failed_duties(case: Case) -> list[str]:
    return [d for d, ok in (case.duties or {}).items() if not ok]


# --- mutation score: how strong is the evidence? ---------------------------------------------------

MutantStatus = Literal["killed", "survived", "equivalent", "not covered", "error"]


def mutant_status(probe: str, mutant: dict, held: set[str]) -> tuple[MutantStatus, str]:
    """What the cases made of one mutant of a fix's code, and why. Only the cases in ``held`` (clean
    on the tree unmutated) can tell a mutant: a case the tree already fails would "kill" every
    mutant. Not covered: no case ran a line of it (``reached_by`` empty), so nothing could tell it from
    the tree: it counts against the score. Killed: such a case judged on the host shows a failed duty, or
    the tree's own code raised or hung on it (a tree that fails there is not "fixed" either). Error: it
    could not be run, no case that held reaches it, or a double lacked what the mutant reached for (never
    a behaviour). Equivalent: the same byte-code, or declared with a reason."""
    key = probe_duties.mutant_key(mutant["function"], mutant["operator"], mutant["before"])
    if mutant.get("equivalent"):
        return "equivalent", mutant["equivalent"]
    if key in probe_duties.EQUIVALENT:
        return "equivalent", probe_duties.EQUIVALENT[key]
    if mutant.get("unappliable"):
        return "error", mutant["unappliable"]
    reached = mutant.get("reached_by", [])
    if not reached:
        return "not covered", probe_duties.EXPLAINED.get(key, "")
    if not held:
        return "error", "no case held on the tree unmutated: nothing can tell a mutant from it"
    if not held & set(reached):
        return "error", f"only cases that did not hold on the tree unmutated run it ({', '.join(reached)})"
    errors = []
    for raw in mutant.get("cases", []):
        case = rejudge(probe, Case.model_validate(raw))
        if case.id not in held:
            continue
        if case.outcome == "observed" and failed_duties(case):
            return "killed", f"{case.id}: {', '.join(failed_duties(case))}"
        if case.outcome == "timeout" or (case.error is not None and case.error.where == "sglang"):
            what = "hung" if case.outcome == "timeout" else f"raised {case.error.type}"
            return "killed", f"{case.id}: the tree's code {what}"
        if case.outcome != "observed":
            errors.append(f"{case.id}: {case.error.type if case.error else case.outcome}"
                          f"{f' ({case.error.where})' if case.error else ''}")
    if errors:
        return "error", "; ".join(errors)
    return "survived", probe_duties.EXPLAINED.get(key, "")


def unvaried(probe: str, mutant: dict, baseline: Iterable[Case]) -> str:
    """Why a survivor of a condition's mutant (``insert``, ``negate``, ``true``, ``false``) survived when it is an
    input no case varied: an inserted input no dimension of the probe's case space reads, or a condition on the
    mutant's line the cases (unmutated, ``baseline``) never saw both ways; else nothing. A diagnosis, not an
    explanation: such a survivor still counts as unexplained (the evidence has the gap it names)."""
    operator = mutant["operator"]
    if operator.startswith("insert:"):
        attribute = operator.split(":", 1)[1]
        space = probe_duties.SPACES.get(probe)
        read = {name for d in space.dimensions for name in d.reads} if space is not None else set()
        if attribute.rsplit(".", 1)[-1] not in read:
            return f"no case varies `{attribute}`: no dimension of the probe's case space reads it"
        return ""
    if operator not in ("true", "false", "negate"):
        return ""
    at = f"{mutant['file']}:{mutant['line']}:"
    seen: dict[str, set[bool]] = {}
    for case in baseline:
        for key, took in (case.conditions or {}).items():
            if key.startswith(at):
                seen.setdefault(key, set()).update(took)
    one_way = sorted(key for key, took in seen.items() if len(took) < 2)
    if one_way or not seen:
        return (f"no case drove the conditions at {mutant['file']}:{mutant['line']} both ways"
                + (f" ({', '.join(one_way)})" if one_way else " (none recorded)"))
    return ""


def status_with(probe: str, baseline: list[Case], changed: list[dict]) -> tuple[Status, list[str]]:
    """What a tree with a change reads, and why (``case: failed duties``, or what the tree's code did): the
    cases run on the changed tree (raw results, judged here) in place of their results unchanged; every
    other case as it ran unchanged (a case that never reached the changed code behaves the same). A case
    the changed tree's own code raised or hung on shows what it is meant to prevent, as a mutant's does."""
    again = {c.id: c for c in baseline}
    for raw in changed:
        case = rejudge(probe, Case.model_validate(raw))
        again[case.id] = case
    shown, why = [], []
    for c in again.values():
        broke = c.outcome == "timeout" or (c.error is not None and c.error.where == "sglang")
        shown.append((c.role, "bug" if broke else state(c)))
        if failed_duties(c):
            why.append(f"{c.id}: {', '.join(failed_duties(c))}")
        elif broke:
            why.append(f"{c.id}: the tree's code {'hung' if c.outcome == 'timeout' else 'raised ' + c.error.type}")
    return status_of(shown), why


class MutationScore(BaseModel):
    fix: int
    probe: str
    mutants: int
    killed: int
    survived: int
    equivalent: int
    not_covered: int = 0  # on a line no case runs: counted against the score like a survivor
    error: int
    baseline: Status  # the unmutated tree: a score means something only when it is "fixed"

    def strength(self) -> str:
        """The score as it reads beside a verdict: killed of scored (mutants less the equivalent).
        Only a fixed tree has a score: elsewhere the fix's duties do not hold to begin with."""
        scored = self.mutants - self.equivalent
        if self.baseline != "fixed":
            return f"not measured: the tree unmutated reads {self.baseline}"
        if not scored:
            return "no mutant to score"
        uncovered = f", {self.not_covered} on lines no case runs" if self.not_covered else ""
        return (f"{self.killed} of {scored} mutants of the fix's code paths detected ({100 * self.killed / scored:.1f}%)"
                f"{uncovered}")


def score_of(probe: str, fix: int, baseline: list[tuple[str, State]], statuses: list[MutantStatus]) -> MutationScore:
    """The score of a fix's mutants on one tree; ``baseline``: (role, state) of each case unmutated."""
    counts = {s.replace(" ", "_"): statuses.count(s) for s in ("killed", "survived", "equivalent", "not covered", "error")}
    return MutationScore(fix=fix, probe=probe, mutants=len(statuses), **counts, baseline=status_of(baseline))
