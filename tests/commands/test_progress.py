"""The progress line a probe run prints counts cases as the receipt does."""

from __future__ import annotations

from runner.commands import pipeline
from tests.helpers import case, receipt


def test_not_applicable_cases_are_counted_by_that_name_not_as_inconclusive():
    r = receipt("0.5.21", [case("a", bug=True), case("b"), case("c", outcome="not_applicable"),
                           case("d", outcome="not_applicable"), case("e", outcome="error")])
    assert pipeline.tally(r) == "1 bug, 1 clean, 2 not applicable, 1 inconclusive"
    assert pipeline.tally(receipt("0.5.21", [case("a"), case("b", outcome="timeout")])) == "0 bug, 1 clean, 1 inconclusive"
