"""A test of another era than the tree, told apart from a regression (issue 40): the plugin under the
host's own pytest against two hand-made trees, an older one the test file was written for and a
newer one whose API drifted (an added parameter, a changed callback arity, a constructor setting
what the test's hand-built object lacks), and the judge reading the stored code on the host. Beside
them, failures through compatible calls (the tree raising, a failed assertion, an attribute no
constructor sets) stay behaviour: a regression. The real releases: test_upstream_era_real.py."""

from __future__ import annotations

import ast
import textwrap

import pytest

from runner.judge import upstream as judge
from runner.judge.pytest_records import INCOMPATIBLE
from runner.views import grading
from tests.commands.test_upstream_targets import run_plugin

BASE = {"sglang/srt/pd.py": """
    class Manager:
        def __init__(self, peers):
            self.peers = list(peers)
            self.acks = {}
            self._send = self._send_ack

        def note_abort_ack(self, room, rank, generation=0):
            self.acks.setdefault(room, set()).add(rank)

        def is_safe(self, room, required):
            return len(self.acks.get(room, ())) >= required

        def drain(self, room):
            for peer in self.peers:
                self._send(peer, room)

        def _send_ack(self, peer, room):
            return None

        def pending(self):
            return len(self.acks)

        def size(self, n):
            return n

        def lookup(self):
            return None


    def release(pages, *, deferred):
        return pages


    class Router:
        def __init__(self, peers):
            self.peers = list(peers)
            if peers:
                self.primary = peers[0]

        def first(self):
            return None
"""}
# The newer era: note_abort_ack needs the generation; the ack callback takes one more argument;
# pending() reads what the constructor sets. And three behaviours that changed with compatible
# calls: release raises, is_safe counts acks of one rank twice, size() fails inside the tree, and
# lookup() reads an attribute only warm() sets.
HEAD = {"sglang/srt/pd.py": """
    class Manager:
        def __init__(self, peers):
            self.peers = list(peers)
            self.acks = {}
            self._send = self._send_ack

        def note_abort_ack(self, room, rank, generation):
            self.acks.setdefault(room, []).append(rank)

        def is_safe(self, room, required):
            return len(self.acks.get(room, ())) >= required

        def drain(self, room):
            for peer in self.peers:
                self._send(peer, room, 0)

        def _send_ack(self, peer, room, generation):
            return None

        def pending(self):
            return len(self.peers)

        def size(self, n):
            return int(None) + n

        def warm(self):
            self.cache = {}

        def lookup(self):
            return self.cache


    def release(pages, *, deferred):
        if deferred:
            raise ValueError("pages released while a write may land")
        return pages


    class Router:
        def __init__(self, peers):
            self.peers = list(peers)
            if peers:
                self.primary = peers[0]

        def first(self):
            return self.primary
"""}
TESTS = textwrap.dedent("""
    from sglang.srt.pd import Manager, Router, release


    def hand_built():
        manager = Manager.__new__(Manager)
        manager.acks = {}
        return manager


    def test_ack_without_generation():
        manager = hand_built()
        manager.note_abort_ack(1, 0)
        assert manager.is_safe(1, 1)


    def test_fake_ack_callback():
        manager = Manager([1])
        manager._send = lambda peer, room: None
        manager.drain(5)


    def test_hand_built_manager_has_nothing_pending():
        assert hand_built().pending() == 0


    def test_deferred_release_keeps_pages():
        assert release([1], deferred=True) == [1]


    def test_one_rank_acknowledging_twice_is_not_two_peers():
        manager = Manager([1, 2])
        manager.note_abort_ack(1, 0, 0)
        manager.note_abort_ack(1, 0, 0)
        assert not manager.is_safe(1, 2)


    def test_size():
        assert Manager([]).size(3) == 3


    def test_lookup_before_warming():
        assert Manager([]).lookup() is None


    def test_hand_built_router_has_no_first():
        assert Router.__new__(Router).first() is None


    def test_router_without_peers_has_no_first():
        assert Router([]).first() is None
""")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("era")
    base = run_plugin(tmp, "base", BASE, {"test_era.py": TESTS})
    head = run_plugin(tmp, "head", HEAD, {"test_era.py": TESTS})
    g = judge.grade(base, head)
    return {r.id.split("::")[1]: r for r in g.tests}, g, head


def test_every_test_passes_on_the_era_it_was_written_for(graded):
    rows, _, _ = graded
    assert {r.base.status for r in rows.values()} == {"passed"}


def test_a_call_from_the_test_missing_a_parameter_the_tree_added_is_incompatible(graded):
    rows, _, _ = graded
    row = rows["test_ack_without_generation"]
    assert (row.grade, row.cause, row.head.kind) == (INCOMPATIBLE, "signature mismatch", "TypeError (signature mismatch)")
    era = row.head.incompatible
    assert era.at == "test_era.py:13"
    assert era.test == "calls manager.note_abort_ack(1, 0)"
    assert era.tree == "def note_abort_ack(self, room, rank, generation) at sglang/srt/pd.py:8"
    assert "neither a fix nor a regression" in row.reason


def test_the_tree_calling_the_tests_fake_with_another_arity_is_incompatible(graded):
    rows, _, _ = graded
    row = rows["test_fake_ack_callback"]
    assert (row.grade, row.cause) == (INCOMPATIBLE, "signature mismatch")
    assert row.head.incompatible.at == "sglang/srt/pd.py:16"  # the call site is the tree's
    assert row.head.incompatible.test == "lambda(peer, room) at test_era.py:19"
    assert row.head.incompatible.tree == "calls self._send(peer, room, 0)"


def test_a_hand_built_object_lacking_what_the_constructor_sets_is_incompatible(graded):
    rows, _, _ = graded
    row = rows["test_hand_built_manager_has_nothing_pending"]
    assert (row.grade, row.cause, row.head.kind) == (INCOMPATIBLE, "attribute unset", "AttributeError (attribute unset)")
    assert row.head.incompatible.tree == "its constructor sets self.peers (sglang/srt/pd.py:4 in Manager.__init__)"
    assert row.head.incompatible.test == "a Manager built without its constructor, lacking peers"


def test_an_attribute_the_constructor_sets_only_sometimes_is_another_era_only_on_an_object_it_never_built(graded):
    """The instance lacks ``peers``, which the constructor always sets: no constructor built it, so
    lacking ``primary`` (set only with peers) is the test's era; a constructed Router without peers
    lacks it too, and that is the tree's behaviour."""
    rows, _, _ = graded
    row = rows["test_hand_built_router_has_no_first"]
    assert (row.grade, row.cause) == (INCOMPATIBLE, "attribute unset")
    assert row.head.incompatible.test == "a Router built without its constructor, lacking primary and peers, which the constructor always sets"
    built = rows["test_router_without_peers_has_no_first"]
    assert (built.grade, built.cause, built.head.incompatible) == ("pass-to-fail", "sglang", None)


@pytest.mark.parametrize("name, cause", [
    ("test_deferred_release_keeps_pages", "sglang"),  # compatible call, the tree raises
    ("test_one_rank_acknowledging_twice_is_not_two_peers", "assertion"),  # compatible calls, the test's assertion
    ("test_size", "sglang"),  # a TypeError inside the tree, not at the crossing call
    ("test_lookup_before_warming", "sglang"),  # an attribute no constructor sets, on a built object
])
def test_a_failure_through_compatible_calls_stays_a_behaviour(graded, name, cause):
    rows, _, _ = graded
    row = rows[name]
    assert (row.grade, row.cause, row.head.incompatible) == ("pass-to-fail", cause, None)


def test_the_verdict_is_a_regression_for_the_behaviours_only(graded):
    _, g, _ = graded
    assert g.verdict == "regression"
    assert g.counts["pass-to-fail"] == 5 and g.counts[INCOMPATIBLE] == 4
    era = [b for b in g.blockers if "another era" in b]
    assert len(era) == 4 and all("regression" not in b for b in era)
    assert "4 incompatible (test era)" in grading.verdict_line(g)


def test_without_the_stored_code_nothing_is_told_to_be_of_another_era(graded):
    """The plugin records facts; only the host's reading of the stored code decides."""
    _, _, head = graded
    raised = next(r.exception for r in head.outcomes.results if r.id.endswith("test_ack_without_generation"))
    assert raised.call is not None and judge.cause_of(raised, None) == "test"


def _accepts(signature: str, call: str, bound: bool = False):
    params = ast.parse(f"def f({signature}): pass").body[0].args
    return judge.accepts(params, ast.parse(call, mode="eval").body, bound)


@pytest.mark.parametrize("signature, call, bound, expected", [
    ("self, room, rank", "m.f(1, 2)", True, True),
    ("self, room, rank, generation", "m.f(1, 2)", True, False),  # a missing positional
    ("room, rank", "f(1, 2, 3)", False, False),  # one too many
    ("room, *rest", "f(1, 2, 3)", False, True),
    ("room, *, deferred", "f(1, deferred=True)", False, True),
    ("room, *, deferred", "f(1, True)", False, False),  # keyword-only given by position
    ("room, *, deferred", "f(1)", False, False),  # keyword-only without default
    ("room, /, rank", "f(room=1, rank=2)", False, False),  # positional-only by name
    ("room, **kw", "f(1, other=2)", False, True),
    ("room", "f(1, room=1)", False, False),  # twice
    ("room", "f(*args)", False, None),  # spread: cannot tell
    ("", "m.f()", True, False),  # a bound call of a function without parameters
])
def test_arguments_bind_as_python_binds_them(signature, call, bound, expected):
    assert _accepts(signature, call, bound) is expected
