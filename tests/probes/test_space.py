"""The case space (probes/space.py): cases generated from the dimensions the fix's code tells apart,
pruned to what the tree's code can reach, with stable readable ids and duties derived from the
dimensions (no SGLang: the spaces are pure data the host judges with)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probes import duties, duties_36988, duties_38935, space
from probes.space import Dimension, Rule, Space, Unreachable, Value

TOY = Space(
    probe="toy",
    dimensions=(
        Dimension("door", (Value("a", "door a"), Value("b", "door b")), core=True),
        Dimension("state", (Value("ok", "fine", label="", says="a valid request"),
                            Value("bad", "rejected", says="a rejected request"),
                            Value("gone", "retired earlier", implies={"holds": "none"})), core=True),
        Dimension("holds", (Value("kv", "its KV", label=""), Value("meta", "a buffer"), Value("none", "nothing")),
                  over={"state": ("bad",)}),
        Dimension("grammar", (Value("off", "no grammar", label=""), Value("on", "a grammar", label="grammar")),
                  over={"door": ("a",)}),
    ),
    unreachable=(Unreachable("a valid request holds its KV", {"state": ("ok",), "holds": ("meta", "none")}),),
    bug=({"state": ("bad", "gone")},),
    duties_by=(Rule({"state": ("bad",)}, ("retired", "streamed")), Rule({"state": ("ok",)}, ("kept",)),
               Rule({"grammar": ("on",)}, ("grammar-told", "kept")), Rule({"state": ("gone",)}, ("no-effect",))),
    aliases={"b-bad-meta": "legacy-id"},
)


def test_core_is_crossed_in_full_and_the_others_varied_where_they_are_read():
    ids = [TOY.case_id(p) for p in TOY.points()]
    assert ids == ["a", "a-grammar", "a-bad", "a-bad-meta", "a-bad-none", "a-bad-grammar", "a-gone-none", "a-gone-none-grammar",
                   "b", "b-bad", "legacy-id", "b-bad-none", "b-gone-none"]


def test_a_dimension_over_another_refines_its_value_only():
    """The metadata slot is read only where a buffer is held: varied on the variation holding one, never
    crossed with the variations of other dimensions (the grammar's)."""
    refined = Space(probe="refined", dimensions=(
        *TOY.dimensions, Dimension("slot", (Value("7", "slot 7", label=""), Value("0", "slot 0", label="slot-0")),
                                   over={"holds": ("meta",)})), aliases=TOY.aliases)
    ids = [refined.case_id(p) for p in refined.points()]
    assert [i for i in ids if "slot-0" in i] == ["a-bad-meta-slot-0", "b-bad-meta-slot-0"]
    assert set(ids) - {"a-bad-meta-slot-0", "b-bad-meta-slot-0"} == {TOY.case_id(p) for p in TOY.points()}


def test_implications_and_unreachable_rules_say_why_a_combination_is_left_out():
    point = TOY.point("a-gone-none")
    assert point["holds"] == "none"  # implied by the retired state
    assert TOY.complete({"door": "a", "state": "gone", "holds": "kv"}) == (None, "state=gone implies holds=none")
    assert TOY.complete({"door": "a", "state": "ok", "holds": "meta"})[1] == "a valid request holds its KV"


def test_duties_and_roles_follow_from_the_dimensions():
    assert TOY.duties(TOY.point("a-bad-grammar")) == ("retired", "streamed", "grammar-told", "kept")
    assert TOY.duties(TOY.point("a-grammar")) == ("kept", "grammar-told")
    assert TOY.role(TOY.point("b-gone-none")) == "bug" and TOY.role(TOY.point("b")) == "guard"
    assert TOY.duty_table()["legacy-id"] == ("retired", "streamed")


def test_two_cases_with_one_id_are_refused():
    with pytest.raises(AssertionError, match="share an id"):
        Space(probe="clash", dimensions=(
            Dimension("x", (Value("p", "p", label=""), Value("q", "q", label="")), core=True),))


def test_a_rule_naming_a_value_the_space_lacks_is_refused():
    with pytest.raises(AssertionError, match="no value"):
        Space(probe="typo", dimensions=(Dimension("x", (Value("p", "p"),), core=True),),
              duties_by=(Rule({"x": ("P",)}, ("d",)),))


# --- property: whatever the dimensions, the generated cases are the reachable combinations asked for ---


@st.composite
def spaces(draw):
    n = draw(st.integers(1, 4))
    dims = []
    for i in range(n):
        values = tuple(Value(f"v{j}", f"value {j}", label=f"d{i}v{j}" if j else "") for j in range(draw(st.integers(1, 3))))
        dims.append(Dimension(f"d{i}", values, core=i == 0 or draw(st.booleans())))
    core = [d for d in dims if d.core]
    overs = {d.name: draw(st.sampled_from([None, {core[0].name: (core[0].values[-1].name,)}])) for d in dims if not d.core}
    dims = [Dimension(d.name, d.values, core=d.core, over=overs.get(d.name)) for d in dims]
    rules = []
    if draw(st.booleans()) and len(dims) > 1:
        a, b = dims[0], dims[-1]
        rules.append(Unreachable("never together", {a.name: (a.values[0].name,), b.name: (b.values[-1].name,)}))
    return Space(probe="p", dimensions=tuple(dims), unreachable=tuple(rules))


@settings(max_examples=60, deadline=None)
@given(spaces())
def test_generated_points_are_complete_reachable_and_cover_the_core(sp):
    points = sp.points()
    names = {d.name for d in sp.dimensions}
    for p in points:
        assert set(p) == names
        assert not any(space.matches(r.when, p) for r in sp.unreachable)
    left = [explicit for explicit, _ in sp.left_out()]
    core = [d for d in sp.dimensions if d.core]
    for combo in itertools.product(*(d.values for d in core)):
        base = {d.name: v.name for d, v in zip(core, combo)}
        assert any(all(p[k] == v for k, v in base.items()) for p in points) or base in left or any(
            all(e.get(k) == v for k, v in base.items()) for e in left)
    # every value of every varied dimension shows up wherever it is read and reachable
    for dim in sp.dimensions:
        if dim.core:
            continue
        for value in dim.values[1:]:
            wanted = [b for b in (dict(zip([d.name for d in core], [v.name for v in c]))
                                  for c in itertools.product(*(d.values for d in core))) if space.matches(dim.over, b)]
            for base in wanted:
                full, _ = sp.complete({**base, dim.name: value.name})
                assert full is None or full in points
    assert len({sp.case_id(p) for p in points}) == len(points)


# --- the two probes' spaces ----------------------------------------------------------------------

@pytest.mark.parametrize("probe", sorted(duties.KEPT_IDS))
def test_todays_cases_keep_their_ids_and_duties(probe):
    table = duties.CASES[probe]
    assert set(duties.KEPT_IDS[probe]) <= set(table)
    assert table["aborted-final-result" if probe == "prefill-cleanup" else "prefill-door-rejected"] == (
        duties_36988.RETIRED_ONCE if probe == "prefill-cleanup" else duties_38935.REJECTED)


def test_both_doors_get_the_same_dimensions():
    """Every state of the request reaches both doors; only what one door's code alone reads (the decode
    door's prefill peer lookup) is varied at that door only, and it says so."""
    door_only = {d.name for d in duties.SPACES["admission"].dimensions if d.over and "door" in d.over}
    assert door_only == {"peer"}
    by_door: dict[str, set] = {"prefill": set(), "decode": set()}
    for p in duties.SPACES["admission"].points():
        by_door[p["door"]].add(tuple(sorted((k, v) for k, v in p.items() if k != "door" and k not in door_only)))
    assert by_door["prefill"] == by_door["decode"]


# Inputs found missing by testers: examples of classes the space must hold (never the list it is built from).
MISSED = {
    "prefill-cleanup": [
        {"abort": "retired", "grammar": "accepts"},  # a late result of a retired request carrying a grammar
        {"abort": "pending", "phase": "yielded", "bootstrap": "done"},  # aborted yielded chunk, bootstrap done
        {"abort": "none", "mask": "rejects"},  # the sampling-mask rejection path of the result loop
    ],
    "admission": [
        {"door": "decode", "entry": "reentry", "holds": "kv", "abort": "marked"},
        {"door": "decode", "entry": "reentry", "holds": "metadata", "abort": "marked"},
        {"door": "decode", "abort": "rejected", "session": "session"},
        {"door": "decode", "abort": "rejected", "session": "plain-session"},
    ],
}


@pytest.mark.parametrize("probe", sorted(MISSED))
def test_the_inputs_testers_found_missing_are_cases(probe):
    points = duties.SPACES[probe].points()
    for wanted in MISSED[probe]:
        assert any(all(p[k] == v for k, v in wanted.items()) for p in points), wanted


@pytest.mark.parametrize("probe", sorted(duties.SPACES))
def test_every_value_is_reached_by_a_case_and_says_how(probe):
    sp = duties.SPACES[probe]
    points = sp.points()
    for dim in sp.dimensions:
        assert dim.reads or dim.name in ("door",), f"{dim.name}: which names of the fix's code tell it apart?"
        for value in dim.values:
            assert value.how, (dim.name, value.name)
            assert any(p[dim.name] == value.name for p in points), f"{dim.name}={value.name} is in no case"
    for p in points:
        assert sp.duties(p), sp.case_id(p)
        assert sp.role(p) == "guard" or sp.role(p) == "bug"
