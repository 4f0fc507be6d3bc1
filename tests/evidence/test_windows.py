"""Bug windows along a line of trees (judging.window): where a bug entered the line, where it left,
and any tree after the fix that shows it again, from the trees' statuses alone."""

from __future__ import annotations

import pytest

from runner.judge import judging
from runner.judge.judging import FixStatus, SiteStatus
from runner.evidence.records import Row, windows
from tests.helpers import case


def fs(status: str, bug: bool | None = None) -> FixStatus:
    """A fix's status on one tree; a bug case shows the bug where the status says so unless told."""
    bug = status == "not fixed" if bug is None else bug
    return FixStatus(fix=1, status=status, sites=[SiteStatus(fix=1, site="door", status=status, cases={})],
                     bug_at=["door"] if bug else [])


def line(*statuses) -> list[tuple[str, FixStatus | None]]:
    return [(f"r{i}", s if s is None or isinstance(s, FixStatus) else fs(s)) for i, s in enumerate(statuses)]


def test_clean_before_the_bug_entered_is_not_the_fix():
    """The rejection path changed over time: early trees can run the bug cases clean. The first
    fixed tree is the first after the bug was seen, and those early trees read "no bug observed"."""
    ln = line("fixed", "fixed", "not fixed", "not fixed", "fixed", "fixed")
    w = judging.window(1, ln)
    assert (w.first_bug, w.last_bug, w.first_fixed, w.recurred, w.unjudged) == ("r2", "r3", "r4", [], [])
    order = [s for s, _ in ln]
    assert [judging.phase(w, order, s) for s in order] == ["before"] * 2 + ["window"] * 2 + ["fixed"] * 2
    assert [judging.line_status(f.status, judging.phase(w, order, s)) for s, f in ln] == [
        "no bug observed", "no bug observed", "not fixed", "not fixed", "fixed", "fixed"]


def test_a_bug_after_the_first_fixed_tree_is_named_not_folded_into_the_window():
    w = judging.window(1, line("not fixed", "fixed", "not fixed", "fixed"))
    assert (w.first_bug, w.last_bug, w.first_fixed, w.recurred) == ("r0", "r0", "r1", ["r2"])


def test_gaps_inside_the_window_are_named_and_never_end_it():
    w = judging.window(1, line("not applicable", "not fixed", "inconclusive", None, "not fixed", "fixed", "not applicable"))
    assert (w.first_bug, w.last_bug, w.first_fixed) == ("r1", "r4", "r5")
    assert w.unjudged == ["r2", "r3", "r6"]


def test_a_guard_dropped_beside_the_bug_still_shows_the_bug():
    """"regression" outranks "not fixed" in a tree's status; the window reads the bug cases."""
    w = judging.window(1, line(fs("regression", bug=True), fs("regression", bug=False), "fixed"))
    assert (w.first_bug, w.last_bug, w.first_fixed) == ("r0", "r0", "r2") and w.unjudged == ["r1"]


@pytest.mark.parametrize("statuses, first_fixed", [(("not applicable", "fixed", "fixed"), "r1"),
                                                   (("not applicable", "inconclusive"), None)])
def test_no_tree_showing_the_bug_leaves_the_window_unknown(statuses, first_fixed):
    w = judging.window(1, line(*statuses))
    assert (w.first_bug, w.last_bug, w.first_fixed, w.recurred, w.unjudged) == (None, None, first_fixed, [], [])


def test_never_fixed_within_the_line():
    w = judging.window(1, line("fixed", "not fixed", "not fixed"))
    assert (w.first_bug, w.last_bug, w.first_fixed) == ("r1", "r2", None)


def test_fixes_record_where_bug_cases_showed_the_bug():
    from tests.helpers import receipt

    r = receipt("0.5.20", [case("a", bug=True), case("b", role="guard", bug=True),
                           case("c", site="decode-door"), case("d", role="guard", site="other", bug=True)])
    [f] = judging.fixes([r])
    assert f.status == "regression" and f.bug_at == ["prefill-door"]


def test_records_give_one_window_per_fix_in_row_order():
    def row(src, *fixes):
        return Row(source=src, label=src, tree_digest=src, static=[], fixes=list(fixes))

    a = fs("not fixed").model_copy(update={"fix": 7})
    rows = [row("x", fs("not fixed"), a), row("y", fs("fixed"), a), row("z", fs("fixed"))]
    ws = windows(rows)
    assert [(w.fix, w.first_bug, w.first_fixed) for w in ws] == [(1, "x", "y"), (7, "x", None)]
    assert ws[1].unjudged == ["z"]  # not probed there
