"""The decode ranks' process group of the lifetime scene (``probes.lifetime.Group``): where a case needs the server's
agreement between decode ranks (one rank holding pages only for its peer, #41023 on 0.5.23), every rank's step
runs in its own thread, one at a time in rank order, and each all-reduce returns the reduction over every rank.
No SGLang: the steps here are plain functions standing for a rank's pass over its transfer queue."""

from __future__ import annotations

import threading

import pytest

from probes.doubles import Journal
from probes.lifetime import Diverged, Group, group_reduce


def test_every_rank_gets_the_reduction_of_every_ranks_values_in_a_fixed_order():
    group, order = Group(Journal()), []

    def step(rank: int, values: list[int]):
        def run() -> None:
            order.append((rank, "starts", threading.get_ident() != main))
            order.append((rank, "max", group.all_reduce(values, "MAX")))
            order.append((rank, "min", group.all_reduce([v + rank for v in values], "MIN")))
        return run

    main = threading.get_ident()
    group.run([step(0, [1, 0]), step(1, [0, 3])])
    assert order == [(0, "starts", True), (1, "starts", True), (0, "max", [1, 3]), (1, "max", [1, 3]),
                     (0, "min", [1, 0]), (1, "min", [1, 0])]
    assert group.all_reduce([5], "MAX") == [5]  # outside a group step: the caller's own values


def test_a_ranks_error_is_raised_as_its_step_and_stops_the_others_without_a_gap():
    journal = Journal()
    group = Group(journal)

    def fails() -> None:
        raise ValueError("the tree's own failure")

    with pytest.raises(ValueError, match="the tree's own failure"):
        group.run([lambda: group.all_reduce([1], "MAX"), fails])
    assert journal.gaps == []


def test_ranks_that_reach_different_all_reduces_are_observed_diverging_and_stop_the_case():
    """A rank waiting in an all-reduce its peer never reaches, or ranks reducing different lengths: a server's ranks
    would wait there forever. The tree's behaviour, recorded, never a gap of the double."""
    journal = Journal()
    group = Group(journal)
    with pytest.raises(Diverged):
        group.run([lambda: group.all_reduce([1], "MAX"), lambda: None])
    with pytest.raises(Diverged):
        group.run([lambda: group.all_reduce([1], "MAX"), lambda: group.all_reduce([1, 2], "MIN")])
    assert journal.gaps == []
    assert group.diverged == [{"waiting": {"0": {"size": 1, "op": "MAX"}}, "done": [1]},
                              {"waiting": {"0": {"size": 1, "op": "MAX"}, "1": {"size": 2, "op": "MIN"}}, "done": []}]


def test_the_trees_reducers_answer_over_the_group_and_empty_flags_reduce_nothing():
    journal = Journal()
    utils = type("utils", (), {})()
    utils.all_reduce_flags = utils._all_reduce_polls = None
    group = Group(journal)
    group_reduce([utils], journal, group)
    got = []
    group.run([lambda: got.append((utils.all_reduce_flags(flags=[], group=None, op="MAX"),
                                   utils.all_reduce_flags(flags=[0, 1], group=None, op="ReduceOp.MAX"),
                                   utils._all_reduce_polls([4, 2], None))),
               lambda: got.append((utils.all_reduce_flags(flags=[], group=None, op="MAX"),
                                   utils.all_reduce_flags(flags=[1, 0], group=None, op="ReduceOp.MAX"),
                                   utils._all_reduce_polls([3, 4], None)))])
    assert got == [([], [1, 1], [3, 2])] * 2
