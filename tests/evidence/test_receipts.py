import hashlib
import json

import orjson
import pytest

from runner.evidence import receipts
from tests.helpers import PROBE, case, receipt


def test_digest_is_recomputable_without_diffprobe():
    r = receipt("0.5.20", [case("rejected", bug=True, title="naïve ✓ \u0001 quote\" slash/")])
    raw = json.loads(orjson.dumps(r.model_dump(mode="json")))
    claimed = raw.pop("digest")
    text = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert hashlib.sha256(text).hexdigest() == claimed


def test_any_change_changes_the_digest():
    a = receipt("0.5.20", [case("rejected", bug=True)])
    b = receipt("0.5.20", [case("rejected", bug=False)])
    assert a.digest != b.digest and a.observation_digest != b.observation_digest


def test_observation_digest_ignores_times_and_durations():
    a = receipt("0.5.20", [case("rejected", bug=True)])
    b = receipts.make(PROBE, a.source, a.environment, [case("rejected", bug=True, duration_ms=999)],
                      started_at="2027-01-01T00:00:00Z", finished_at="2027-01-01T00:00:09Z")
    assert a.observation_digest == b.observation_digest and a.digest != b.digest


def test_floats_are_refused():
    with pytest.raises(ValueError, match="floats"):
        case("rejected", effects={"latency": 0.5})


class _Real(float):  # numpy's float64 is one
    pass


@pytest.mark.parametrize("value, where", [
    ({"a": [1, "x", None, True, {"b": [2, 0.5]}], "c": 1.5}, "effects.a[4].b[1]"),  # the first in order, not the last walked
    ([[True], {"k": _Real(1)}], "effects[1].k"),
    (0.0, "effects"),
])
def test_a_float_anywhere_is_refused_where_it_is_first(value, where):
    from runner.judge.observations import reject_floats
    with pytest.raises(ValueError, match=f"^{where.replace('[', '[[]')}: floats"):
        reject_floats(value)
    assert reject_floats({"a": [1, "x", None, True, {"b": [False]}]}) == {"a": [1, "x", None, True, {"b": [False]}]}


@pytest.mark.parametrize("outcome", ["error", "not_applicable", "timeout"])
def test_only_observed_cases_are_classified(outcome):
    with pytest.raises(ValueError):
        case("x", outcome=outcome, classification="clean")
    assert case("x", outcome=outcome).classification == "inconclusive"


def _diff(base_cases, head_cases, probe_head=PROBE):
    base, head = receipt("0.5.20", base_cases), receipt("0.5.21", head_cases, probe_head)
    return receipts.differential(38935, "t", ["admission"], [("b.json", base)], [("h.json", head)], "fix observed")


def test_fix_observed():
    d = _diff([case("rejected", bug=True), case("valid", role="guard")], [case("rejected"), case("valid", role="guard")])
    assert d.verdict == "fix observed" and d.as_expected
    assert [c.transition for c in d.cases] == ["bug -> clean", "clean -> clean"]


def test_fix_not_observed_when_the_bug_remains():
    d = _diff([case("rejected", bug=True)], [case("rejected", bug=True)])
    assert d.verdict == "fix not observed" and d.as_expected is False


def test_fix_not_observed_when_base_never_showed_the_bug():
    d = _diff([case("rejected")], [case("rejected")])
    assert d.verdict == "fix not observed"
    assert "nothing for the fix to change" in d.reasons[0]


def test_retiring_everything_is_a_regression():
    """A head that 'fixes' by retiring every request drops the valid one: the verdict says so."""
    d = _diff([case("rejected", bug=True), case("valid", role="guard")],
              [case("rejected"), case("valid", role="guard", bug=True)])
    assert d.verdict == "regression"
    assert "valid" in d.reasons[0]


def test_harness_errors_make_it_inconclusive_never_a_fix():
    """The published pre-fix 0/7 were AttributeErrors from a stub: not evidence of a bug."""
    d = _diff([case("rejected", outcome="error")], [case("rejected")])
    assert d.verdict == "inconclusive"
    assert d.cases[0].transition == "inconclusive" and d.cases[0].base == "error"


def test_not_applicable_cases_are_left_out_and_said_so():
    d = _diff([case("rejected", bug=True), case("mamba", outcome="not_applicable")], [case("rejected"), case("mamba")])
    assert d.verdict == "fix observed"
    assert any("mamba: not comparable" in r for r in d.reasons)


def test_different_probe_versions_are_not_comparable():
    other = PROBE.model_copy(update={"sha256": "e" * 64})
    d = _diff([case("rejected", bug=True)], [case("rejected")], probe_head=other)
    assert d.verdict == "inconclusive" and "not comparable" in d.reasons[0]
