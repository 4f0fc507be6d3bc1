"""Sweep rows as data: one row per source, same trees marked, per-site gaps fail the sweep."""

from __future__ import annotations

from runner import errors
from runner.app import survey
from runner.judge.judging import FixStatus, SiteStatus
from runner.evidence.records import Row


def _row(source: str, tree: str, *sites: tuple[str, str]) -> Row:
    status = "fixed" if all(s == "fixed" for _, s in sites) else next(s for _, s in sites if s != "fixed")
    return Row(source=source, label=source, tree_digest=tree, static=[],
               fixes=[FixStatus(fix=38935, status=status,
                                sites=[SiteStatus(fix=38935, site=site, status=s, cases={}) for site, s in sites])])


def test_a_fix_not_fixed_at_one_door_and_inconclusive_at_the_other_fails_the_sweep():
    """The issue's case: the matrix said "not fixed" and the sweep exited 0 with cases in error."""
    rows = [_row("a", "t1", ("prefill-door", "not fixed"), ("decode-door", "inconclusive"))]
    assert survey.exit_code(rows) == errors.DIFFERS
    assert survey.exit_code([_row("a", "t1", ("prefill-door", "not fixed"), ("decode-door", "fixed"))]) == errors.OK


def test_rows_of_one_tree_name_the_first_and_carry_no_receipts_of_their_own():
    probed = [survey.Probed(row=_row(s, t, ("prefill-door", "fixed")), receipts=[]) for s, t in
              [("c1", "t1"), ("c2", "t1"), ("c3", "t2"), ("c4", "t1")]]
    marked = survey.same_trees(probed)
    assert [p.row.source for p in marked] == ["c1", "c2", "c3", "c4"]
    assert [p.row.same_tree_as for p in marked] == [None, "c1", None, "c1"]
