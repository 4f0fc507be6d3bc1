"""Per-duty windows and duty-level brackets (issue 40): a fix that lands in parts shows each part's
release, a duty that stopped holding is named, and a bracket is reproduced only by behaviour."""

from __future__ import annotations

from runner.judge import duty_windows
from runner.judge.observations import Case


def case(case_id: str, duties: dict[str, bool] | None, outcome: str = "observed") -> Case:
    if outcome != "observed":
        return Case(id=case_id, site="s", role="bug", title=case_id, signature="x", outcome=outcome, duration_ms=0,
                    classification="inconclusive", missing="m" if outcome == "not_applicable" else None,
                    **({"error": {"type": "E", "message": "m", "where": "sglang"}} if outcome == "error" else {}))
    return Case(id=case_id, site="s", role="bug", title=case_id, signature="x", outcome="observed", duration_ms=0,
                effects={}, duties=duties, classification="clean" if all(duties.values()) else "bug")


LINE = [  # a fix landing in two parts, and a duty that held, stopped, and holds again
    ("0.5.19", [case("peers", {"acked": False, "held": True}), case("cleared", {"acked": False})]),
    ("0.5.20", [case("peers", {"acked": False, "held": False}), case("cleared", {"acked": False})]),
    ("0.5.21", [case("peers", {"acked": True, "held": True}), case("cleared", {"acked": False}, "error")]),
    ("0.5.22", [case("peers", {"acked": True, "held": True}), case("cleared", {"acked": True})]),
]


def test_each_part_of_a_fix_gets_its_own_release():
    found = {(w.duty, tuple(w.cases)): w for w in duty_windows.windows(41402, LINE)}
    assert found["acked", ("peers",)].first_held == "0.5.21"
    cleared = found["acked", ("cleared",)]
    assert (cleared.first_failed, cleared.first_held) == ("0.5.19", "0.5.22")  # the error at 0.5.21 judges nothing
    stopped = found["held", ("peers",)]
    assert (stopped.held_before, stopped.first_failed, stopped.first_held) == ("0.5.19", "0.5.20", "0.5.21")


def test_cases_whose_windows_agree_are_one_window_and_a_duty_that_never_failed_has_none():
    line = [("a", [case("x", {"d": False, "never": True}), case("y", {"d": False})]),
            ("b", [case("x", {"d": True, "never": True}), case("y", {"d": True})]),
            ("c", [case("x", {"d": False, "never": True}), case("y", {"d": True})])]
    found = duty_windows.windows(1, line)
    assert [(w.duty, w.cases, w.first_held, w.recurred) for w in found] == [
        ("d", ["x"], "b", ["c"]), ("d", ["y"], "b", [])]


def test_a_bracket_is_reproduced_only_by_behaviour_on_both_trees():
    without, with_ = LINE[1][1], LINE[2][1]
    assert duty_windows.bracket(["acked"], ["peers"], without, with_) == []
    assert duty_windows.bracket(["acked"], ["peers"], LINE[2][1], LINE[3][1]) == [
        "acked already holds in peers on the tree without"]
    assert duty_windows.bracket(["acked"], ["cleared"], without, with_) == [
        "acked is judged by none of the named cases on the tree with"]  # an error reproduces nothing
    assert duty_windows.bracket(["acked"], ["cleared"], LINE[0][1], LINE[1][1]) == [
        "acked still fails in cleared on the tree with"]
