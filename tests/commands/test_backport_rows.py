"""backport's row rule on states alone: what counts as behaving like head (runner/commands/backport.py)."""

import pytest

from runner.commands.backport import behaves_like_head
from runner.judge import judging
from runner.evidence.records import BackportRow


def _row(backport: str, head: str) -> BackportRow:
    return BackportRow(probe="admission", case="c", backport=backport, head=head, same=judging.alike(backport, head))


@pytest.mark.parametrize("a, b, alike", [
    ("clean", "clean", True), ("bug", "bug", True), ("not_applicable", "not_applicable", True),
    ("bug", "clean", False), ("not_applicable", "clean", False), ("clean", "not_applicable", False),
    ("error", "error", False), ("timeout", "timeout", False), ("absent", "absent", False), ("error", "clean", False),
])
def test_alike_is_the_same_observation_never_a_harness_gap(a, b, alike):
    assert judging.alike(a, b) is alike


def test_cases_neither_tree_can_run_do_not_make_a_difference():
    assert behaves_like_head([_row("clean", "clean"), _row("not_applicable", "not_applicable")])
    assert not behaves_like_head([_row("clean", "clean"), _row("not_applicable", "clean")])
    assert not behaves_like_head([_row("clean", "clean"), _row("error", "error")])


def test_nothing_observed_is_not_behaving_like_head():
    assert not behaves_like_head([_row("not_applicable", "not_applicable")])
    assert not behaves_like_head([])
