"""Two more drifts of a test of another era (issue 40): a tuple of the tree's state that gained a
field, unpacked or indexed by the test for its old length, and a mock's expected call written for
the old arity of the tree's call. Hand-made trees of two eras and one test file, the plugin under
the host's own pytest, the judge reading the stored code: each drift is "incompatible (test era)"
with its call site, and beside each a failure of the same look that is the tree's behaviour (the
same arity with another value, a tree storing tuples of two lengths, a call site that makes both
shapes, a mock with a signature) stays a behaviour. Real wheels: test_upstream_era_real.py."""

from __future__ import annotations

import textwrap

import pytest

from runner.judge import upstream as judge
from runner.judge.pytest_records import INCOMPATIBLE
from tests.commands.test_upstream_targets import run_plugin

OLD = {"sglang/srt/queue.py": """
    from typing import NamedTuple


    class Target(NamedTuple):
        ip: str
        port: int


    class Queue:
        def __init__(self):
            self.held = []
            self.targets = {}
            self.mixed = []

        def hold(self, req, deadline):
            self.held.append((req, deadline))

        def aim(self, room, ip, port):
            self.targets[room] = Target(ip, port)

        def mix(self, req):
            self.mixed.append((req, 0))

        def deadlines(self):
            return [deadline for _, deadline in self.held]

        def firsts(self):
            return [req for req, _ in self.mixed]


    class Sender:
        def __init__(self, buffers):
            self.buffers = buffers

        def send(self, req, digest):
            self.buffers.set_checksum(req, digest)

        def either(self, req, digest, signed):
            self.buffers.set_checksum(req, digest)

        def twice(self, req):
            self.buffers.set_checksum(req, 1)
"""}
# The newer era: held entries carry a start time, a target a generation, set_checksum a signature.
# And three behaviours with the old shapes kept: mix() stores a 3-tuple on one path only, twice()
# passes another value, either() calls with both arities depending on its argument.
NEW = {"sglang/srt/queue.py": """
    from typing import NamedTuple


    class Target(NamedTuple):
        ip: str
        port: int
        generation: int


    class Queue:
        def __init__(self):
            self.held = []
            self.targets = {}
            self.mixed = []

        def hold(self, req, deadline):
            self.held.append((req, 0.0, deadline))

        def aim(self, room, ip, port):
            self.targets[room] = Target(ip, port, 0)

        def mix(self, req):
            if req == "odd":
                self.mixed.append((req, 0, 1))
            else:
                self.mixed.append((req, 0))

        def deadlines(self):
            return [deadline for _, _, deadline in self.held]

        def firsts(self):
            return [req for req, _ in self.mixed]


    class Sender:
        def __init__(self, buffers):
            self.buffers = buffers

        def send(self, req, digest):
            self.buffers.set_checksum(req, digest, 0)

        def either(self, req, digest, signed):
            if signed:
                self.buffers.set_checksum(req, digest, 0)
            else:
                self.buffers.set_checksum(req, digest)

        def twice(self, req):
            self.buffers.set_checksum(req, 2)
"""}
TESTS = textwrap.dedent("""
    from unittest import mock

    from sglang.srt.queue import Queue, Sender


    def test_unpack_a_held_entry():
        q = Queue()
        q.hold("r", 5.0)
        req, deadline = q.held[0]
        assert deadline == 5.0


    def test_read_the_deadline_of_a_held_entry_as_the_newer_era_stores_it():
        q = Queue()
        q.hold("r", 5.0)
        assert q.held[0][2] == 5.0


    def test_unpack_a_target():
        q = Queue()
        q.aim(7, "10.0.0.1", 5000)
        ip, port = q.targets[7]
        assert port == 5000


    def test_unpack_an_odd_entry():
        q = Queue()
        q.mix("odd")
        req, zero = q.mixed[0]
        assert zero == 0


    def test_checksum_recorded():
        sender = Sender(mock.Mock())
        sender.send("r", 9)
        sender.buffers.set_checksum.assert_called_once_with("r", 9)


    def test_checksum_recorded_unsigned():
        sender = Sender(mock.Mock())
        sender.either("r", 9, True)
        sender.buffers.set_checksum.assert_called_once_with("r", 9)


    def test_checksum_value():
        sender = Sender(mock.Mock())
        sender.twice("r")
        sender.buffers.set_checksum.assert_called_once_with("r", 1)


    def test_checksum_by_a_mock_with_a_signature():
        buffers = mock.Mock()
        buffers.set_checksum = mock.Mock(spec=lambda req, digest, signature=0: None)
        Sender(buffers).send("r", 9)
        buffers.set_checksum.assert_called_once_with("r", 9)


    def test_checksum_by_fake_buffers():
        seen = []
        buffers = mock.Mock()
        buffers.set_checksum.side_effect = lambda *args: seen.append(args)
        Sender(buffers).send("r", 9)
        assert seen == [("r", 9)]


    def test_deadlines_of_entries_the_test_held():
        q = Queue()
        q.held.append(("r", 5.0))
        assert q.deadlines() == [5.0]


    def test_firsts_of_an_odd_entry():
        q = Queue()
        q.mix("odd")
        assert q.firsts() == ["odd"]


    def test_unpack_built_by_the_test():
        q = Queue()
        q.held.append(("r", 1.0, 2.0, 3))
        req, deadline = q.held[0]
""")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("arity")
    base = run_plugin(tmp, "old", OLD, {"test_arity.py": TESTS})
    head = run_plugin(tmp, "new", NEW, {"test_arity.py": TESTS})
    g = judge.grade(base, head)
    return {r.id.split("::")[1]: r for r in g.tests}, g


def test_the_file_passes_on_the_era_it_was_written_for_but_two(graded):
    rows, _ = graded
    assert {k for k, r in rows.items() if r.base.status != "passed"} == {
        "test_unpack_built_by_the_test", "test_read_the_deadline_of_a_held_entry_as_the_newer_era_stores_it"}


def test_a_tuple_that_gained_a_field_unpacked_by_the_test_is_incompatible(graded):
    rows, _ = graded
    row = rows["test_unpack_a_held_entry"]
    assert (row.grade, row.cause, row.head.kind) == (INCOMPATIBLE, "tuple arity", "ValueError (tuple arity)")
    era = row.head.incompatible
    assert era.at == "test_arity.py:10"
    assert era.test == "unpacks 2 names from Queue.held[…], a 3-tuple"
    assert era.tree == "Queue stores only 3-tuples in self.held[…] (sglang/srt/queue.py:18)"
    assert "neither a fix nor a regression" in row.reason


def test_the_trees_named_tuple_that_gained_a_field_unpacked_by_the_test_is_incompatible(graded):
    rows, _ = graded
    row = rows["test_unpack_a_target"]
    assert (row.grade, row.cause) == (INCOMPATIBLE, "tuple arity")
    assert row.head.incompatible.tree == "its Target is a NamedTuple of 3 fields (sglang/srt/queue.py:5)"
    assert row.head.incompatible.test == "unpacks 2 names from a Target, a 3-tuple"


def test_a_field_a_newer_era_added_indexed_on_an_older_tree_is_incompatible_there(graded):
    rows, _ = graded
    row = rows["test_read_the_deadline_of_a_held_entry_as_the_newer_era_stores_it"]
    assert (row.grade, row.cause, row.base.kind) == (INCOMPATIBLE, "tuple arity", "IndexError (tuple arity)")
    assert row.base.incompatible.test == "reads item 2 of Queue.held[…], a 2-tuple"
    assert row.base.incompatible.tree == "Queue stores only 2-tuples in self.held[…] (sglang/srt/queue.py:17)"


def test_a_mocks_expected_call_of_the_old_arity_is_incompatible_with_the_trees_call_site(graded):
    rows, _ = graded
    row = rows["test_checksum_recorded"]
    assert (row.grade, row.cause, row.head.kind) == (INCOMPATIBLE, "call arity", "AssertionError (call arity)")
    era = row.head.incompatible
    assert era.at == "sglang/srt/queue.py:41"  # the tree's call site
    assert era.test == ("expects sender.buffers.set_checksum.assert_called_once_with('r', 9) at test_arity.py:37 "
                        "(2 positional)")
    assert era.tree == "calls self.buffers.set_checksum(req, digest, 0) in send (3 positional), never 2 positional"


@pytest.mark.parametrize("name, cause", [
    ("test_unpack_an_odd_entry", "test"),  # the tree stores 2- and 3-tuples: its own code made the odd one
    ("test_checksum_recorded_unsigned", "assertion"),  # the function calls with both arities: the tree chose
    ("test_checksum_value", "assertion"),  # the same arity, another value
    ("test_checksum_by_fake_buffers", "assertion"),  # the test's own assertion on what its fake saw
])
def test_a_failure_the_trees_code_could_have_avoided_stays_a_behaviour(graded, name, cause):
    rows, _ = graded
    row = rows[name]
    assert (row.grade, row.cause, row.head.incompatible) == ("pass-to-fail", cause, None)


def test_the_tree_unpacking_a_tuple_the_test_built_for_the_old_length_is_incompatible(graded):
    rows, _ = graded
    row = rows["test_deadlines_of_entries_the_test_held"]
    assert (row.grade, row.cause, row.head.kind) == (INCOMPATIBLE, "tuple arity", "ValueError (tuple arity)")
    era = row.head.incompatible
    assert era.at == "sglang/srt/queue.py:30"  # the tree's unpacking, in its comprehension
    assert era.test == "stores a 2-tuple in Queue.held[…] at test_arity.py:69"
    assert era.tree == "builds only 3-tuples there (sglang/srt/queue.py:18) and unpacks 3 names"


def test_the_tree_unpacking_a_tuple_its_own_code_built_of_another_length_stays_the_trees(graded):
    rows, _ = graded
    row = rows["test_firsts_of_an_odd_entry"]
    assert (row.grade, row.cause, row.head.incompatible) == ("pass-to-fail", "sglang", None)


def test_a_mock_with_a_signature_compares_by_binding_and_is_not_told(graded):
    """A mock with a signature binds both calls before comparing them: (r, 9) and (r, 9, 0) bind
    differently, and the shape says nothing the binding did not; the failure stays the assertion."""
    rows, _ = graded
    row = rows["test_checksum_by_a_mock_with_a_signature"]
    assert (row.grade, row.cause, row.head.incompatible) == ("pass-to-fail", "assertion", None)


def test_a_tuple_the_test_built_itself_is_not_the_trees(graded):
    """The test appended a 4-tuple and unpacked 2: every tuple the tree builds there has the length
    the test... never saw; what failed is the test's own tuple (4 long), not one the tree builds."""
    rows, _ = graded
    row = rows["test_unpack_built_by_the_test"]
    assert row.grade == "fail-to-fail" and row.cause == "test" and row.head.incompatible is None


def test_the_verdict_is_a_regression_for_the_behaviours_only(graded):
    _, g = graded
    assert g.verdict == "regression"
    assert g.counts[INCOMPATIBLE] == 5 and g.counts["pass-to-fail"] == 6
