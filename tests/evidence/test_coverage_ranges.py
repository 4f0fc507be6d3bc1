"""The host's reading of per-case coverage (runner/judge/coverage.py) and its place in receipts."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st
from pydantic import ValidationError

from runner.evidence import receipts
from runner.judge import coverage
from tests import helpers

lines_sets = st.sets(st.integers(min_value=1, max_value=300))


@given(lines_sets, lines_sets)
def test_range_arithmetic_matches_set_arithmetic(a, b):
    ra, rb = coverage.ranges(a), coverage.ranges(b)
    assert coverage.expand(coverage.intersect(ra, rb)) == a & b
    assert coverage.overlaps(ra, rb) == bool(a & b)
    assert coverage.count(ra) == len(a)
    assert coverage.union([{"f": ra}, None, {"f": rb}]) == ({"f": coverage.ranges(a | b)} if a | b else {})


@given(st.lists(st.tuples(st.integers(1, 200), st.integers(0, 20))))
def test_merge_makes_any_ranges_canonical(pairs):
    spans = [[start, start + length] for start, length in pairs]
    merged = coverage.merge(spans)
    assert coverage.expand(merged) == coverage.expand(spans)
    assert coverage.canonical(merged) == bool(spans)


def test_which_cases_ran_some_lines():
    cases = [helpers.case("a", lines={"sglang/x.py": [[10, 20]]}), helpers.case("b", lines={"sglang/x.py": [[30, 31]]}),
             helpers.case("c", lines={}), helpers.case("d", outcome="error"), helpers.case("e", outcome="not_applicable")]
    assert coverage.cases_running(cases, "sglang/x.py", [[20, 30]]) == ["a", "b"]
    assert coverage.cases_running(cases, "sglang/x.py", [[21, 29]]) == []
    assert coverage.cases_running(cases, "sglang/y.py", [[1, 100]]) == []
    assert coverage.lines_run(cases) == {"sglang/x.py": [[10, 20], [30, 31]]}
    assert coverage.unrecorded(cases) == ["d"]  # ran something, unknown what; "e" ran nothing of the tree


@pytest.mark.parametrize("lines", [{"sglang/x.py": [[2, 1]]}, {"sglang/x.py": [[1, 2], [3, 4]]}, {"/etc/passwd": [[1, 1]]},
                                   {"sglang/../x.py": [[1, 1]]}, {"sglang/x.py": []}])
def test_a_case_with_lines_outside_the_format_is_refused(lines):
    with pytest.raises(ValidationError):
        helpers.case("a", lines=lines)


def test_receipts_seal_the_lines_but_a_repeat_need_not_reproduce_them():
    one = helpers.receipt("0.5.21", [helpers.case("a", lines={"sglang/x.py": [[1, 3]]})])
    two = helpers.receipt("0.5.21", [helpers.case("a", lines={"sglang/x.py": [[1, 4]]})])
    assert one.cases[0].lines == {"sglang/x.py": [(1, 3)]}
    assert one.digest != two.digest and one.observation_digest == two.observation_digest
    raw = one.model_dump(mode="json")
    assert raw["cases"][0]["lines"] == {"sglang/x.py": [[1, 3]]} and receipts.seal(raw) == one.digest
