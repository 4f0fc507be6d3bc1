"""Mutants as probes/mutation.py makes them: operators, slices, filters, equivalence by byte-code,
and the patch into an already-imported function (on a hand-made module; real trees are in
test_single_duty_mutants.py)."""

from __future__ import annotations

import pytest

from probes import mutation
from tests.probes.hand_tree import load

SOURCE = '''
import logging
logger = logging.getLogger(__name__)


class Door:
    def add(self, req, queue):
        """Admit unless rejected."""
        if req.get("rejected") and not req.get("held"):
            self.retire(req)
            return
        logger.info("admitting %s", req)
        try:
            req["sender"] = self.sender(req)
        except ValueError:
            req["sender"] = None
        queue.append(req)

    def retire(self, req):
        req["retired"] = True

    def sender(self, req):
        if req.get("bad"):
            raise ValueError("bad")
        return "kv_sender"

    def release(self, req, cache):
        cache.append(dict(req, is_insert=False))
        if True:
            return True
'''


@pytest.fixture()
def door(tmp_path, monkeypatch):
    return load(tmp_path, monkeypatch, "fake_door", SOURCE)[1]


def _mutants(code):
    targets, missing = mutation.find(code)
    return targets, missing, mutation.generate(targets)


def test_operators_of_a_function(door):
    targets, missing, mutants = _mutants({"fake_door.Door.add": (), "fake_door.Door.gone": ()})
    assert missing == ["fake_door.Door.gone"] and [t.name for t in targets] == ["fake_door.Door.add"]
    kinds = {(m.operator, m.before) for _, m in mutants}
    assert ("delete", "self.retire(req)") in kinds and ("return", "self.retire(req)") in kinds
    assert ("true", "req.get('rejected')") in kinds and ("false", "not req.get('held')") in kinds
    assert any(op == "unguard" for op, _ in kinds)
    assert not any("logger" in before for _, before in kinds)  # logging is never mutated
    assert not any(before.startswith("'Admit") for _, before in kinds)  # nor the docstring


def test_a_patched_mutant_changes_the_imported_function_everywhere(door):
    targets, _, mutants = _mutants({"fake_door.Door.add": ()})
    target, retire_deleted = next((t, m) for t, m in mutants if m.operator == "delete" and m.before == "self.retire(req)")
    add = door.Door.add  # a reference taken before the patch, like ``from x import f``
    original = add.__code__
    try:
        mutation.apply(target, retire_deleted)
        req, queue = {"rejected": True}, []
        add(door.Door(), req, queue)
        assert "retired" not in req and queue == []
    finally:
        add.__code__ = original


def test_a_dropped_except_lets_the_failure_escape(door):
    targets, _, mutants = _mutants({"fake_door.Door.add": ()})
    target, unguarded = next((t, m) for t, m in mutants if m.operator == "unguard")
    original = door.Door.add.__code__
    try:
        mutation.apply(target, unguarded)
        with pytest.raises(ValueError):
            door.Door().add({"bad": True}, [])
    finally:
        door.Door.add.__code__ = original


def test_same_byte_code_is_equivalent_by_construction(door):
    _, _, mutants = _mutants({"fake_door.Door.release": ()})
    constant = [m for _, m in mutants if m.before == "True" and m.operator == "true"]
    assert not constant  # a condition that is already a constant is not mutated
    flips = [m for _, m in mutants if m.operator == "flip"]
    assert [m.after for m in flips] == ["is_insert=True", "return False"]


def test_a_slice_keeps_the_statements_naming_its_names_and_their_exits(door):
    targets, _, mutants = _mutants({"fake_door.Door.add": ("retire",)})
    befores = {m.before for _, m in mutants}
    assert "self.retire(req)" in befores and "return" in befores
    assert not any("queue.append" in b or "sender" in b for b in befores)


def test_every_statement_is_a_site_with_the_lines_it_spans(door):
    """Whether a case runs it or not: a site no case reaches is reported, never left out."""
    from probes import fixcode

    targets, _, mutants = _mutants({"fake_door.Door.add": ()})
    node = targets[0].node
    statements = fixcode.statements(node)
    deleted = {m.line for _, m in mutants if m.operator == "delete"}
    assert deleted == {s.lineno for s in statements if not mutation._telemetry(s)}
    guard = next(m for _, m in mutants if m.operator == "delete" and m.before.startswith("if req.get"))
    assert guard.spans == ((node.body[1].lineno, node.body[1].end_lineno),)  # the whole ``if``, its body included
    assert fixcode.reached(guard.spans[0], {guard.spans[0][1]}) and not fixcode.reached(guard.spans[0], {guard.spans[0][1] + 1})
    operand = next(m for _, m in mutants if m.operator == "true" and m.before == "not req.get('held')")
    assert operand.spans == guard.spans  # a condition's operand: the statement that evaluates it


def _hunk(door, old, new):
    targets, _ = mutation.find({"fake_door.Door.add": ()})
    [(target, mutant)] = mutation.hunk_mutants(targets, [{"id": "h", "function": "fake_door.Door.add", "old": old, "new": new}])
    return target.node, mutant


def test_a_hunk_is_judged_by_the_cases_that_ran_what_it_touches(door):
    node, mutant = _hunk(door, "            req[\"sender\"] = None\n", "            raise\n")
    handler = node.body[3].handlers[0].body[0]
    assert mutant.unappliable is None and mutant.spans == ((handler.lineno, handler.end_lineno),)
    node, header = _hunk(door, "        if req.get(\"rejected\")", "        if req.get(\"bad\")")
    assert header.spans == ((node.body[1].lineno, node.body[1].end_lineno),)  # the ``if`` whole


def test_a_hunk_that_reaches_further_is_judged_by_every_case_of_the_function(door):
    """A name assigned anywhere in a function is its own everywhere: such a change is not local."""
    node, scoped = _hunk(door, "        queue.append(req)\n", "        queue.append(req)\n        logger = None\n")
    assert scoped.spans == ((node.lineno, node.end_lineno),)
    node, twice = _hunk(door, "req", "request")
    assert twice.unappliable and "times" in twice.unappliable


GATE = '''
class Gate:
    def add(self, req, queue):
        if req.rejected and not req.held:
            req.retired = True
            return
        if req.priority is not None:
            queue.insert(0, req)
        queue.append(req)
'''


def test_conditions_are_negated_and_gain_a_condition_on_each_input_read(tmp_path, monkeypatch):
    """``negate`` turns each condition around; ``insert`` makes the first test of the fix's code depend on each
    attribute of an argument the function reads (not on a method it calls), one mutant per input."""
    _, module = load(tmp_path, monkeypatch, "fake_gate", GATE)
    targets, _, mutants = _mutants({"fake_gate.Gate.add": ()})
    made = {(m.operator, m.before, m.after) for _, m in mutants}
    assert ("negate", "req.rejected", "not req.rejected") in made
    assert ("negate", "req.priority is not None", "not req.priority is not None") in made
    inserted = sorted((op, after) for op, before, after in made if op.startswith("insert:"))
    assert inserted == [(f"insert:req.{a}", f"req.rejected and (not req.held) and (not req.{a})")
                        for a in ("held", "priority", "rejected")]
    target, priority = next((t, m) for t, m in mutants if m.operator == "insert:req.priority")
    original = module.Gate.add.__code__
    try:
        mutation.apply(target, priority)
        req = type("R", (), {"rejected": True, "held": False, "priority": 3, "retired": False})()
        module.Gate().add(req, [])
        assert req.retired is False  # a rejected request with a priority is no longer retired
    finally:
        module.Gate.add.__code__ = original
