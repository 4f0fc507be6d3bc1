"""Duties as data: every declared duty is judged, one failed duty makes the case a bug, and effects
that cannot show a duty never count as showing it (``probes/duties.py`` is pure: no SGLang)."""

from __future__ import annotations

import copy

import pytest

from probes import admission, duties, duties_38935, prefill_cleanup

REJECTION = {"type": "abort", "message": "too long", "status_code": 400, "err_type": "BadRequestError"}


def _request(**fields):
    state = {"rid": "rejected", "finished": False, "to_finish": None, "finished_reason": None,
             "pending_bootstrap": False, "metadata_buffer_index": -1, "holds_kv": False, "holds_mamba": False,
             "has_kv_sender": False, "holds_backup": False, "output_ids": []}
    return {**state, **fields}


RETIRED_AT_DOOR = {
    "before": _request(),
    "queues": {"bootstrap": []},
    "kv_endpoints": [],
    "kv_calls": [],
    "retired": ["rejected"],
    "tree_cache_calls": [{"call": "finish", "args": [{"CacheRequestHandle": {"rid": "rejected", "attempt_id": 0}},
                                                     "CacheRequestOutcome.ABORT"], "kwargs": {}}],
    "cache_release": True, "beam_groups": True,
    "beam_retired": ["rejected"],
    "streamed": [[{"rid": "rejected", "finished_reason": REJECTION}]],
    "request": _request(finished=True, finished_reason=REJECTION),
}

# One change of the effects per duty of a rejected request: each must fail exactly that duty.
BREAKS = {
    "door-not-queued": lambda e: e["queues"].update(bootstrap=["rejected"]),
    "door-no-kv-endpoint": lambda e: e["kv_endpoints"].append({"name": "kv_sender#1"}),
    "door-no-bootstrap": lambda e: e["request"].update(pending_bootstrap=True),
    "door-no-metadata-buffer": lambda e: e["request"].update(metadata_buffer_index=3),
    "door-retired-by-tree": lambda e: e.update(retired=[]),
    "door-finished-rejected": lambda e: e["request"].update(finished_reason={**REJECTION, "status_code": 503}),
    "door-streamed-once": lambda e: e["streamed"].append([{"rid": "rejected", "finished_reason": REJECTION}]),
    "door-beam-retired": lambda e: e.update(beam_retired=[]),
    "door-cache-released": lambda e: e["tree_cache_calls"].append(e["tree_cache_calls"][0]),
    "door-returns": lambda e: e.update(escaped={"type": "Absent", "message": "m", "frame": "f"}),
}


def test_every_duty_of_a_retired_rejection_holds():
    held = duties.judge("admission", "prefill-door-rejected", RETIRED_AT_DOOR)
    assert list(held) == list(duties_38935.REJECTED) and all(held.values())
    assert duties.classify(held) == "clean"


@pytest.mark.parametrize("duty", sorted(BREAKS))
def test_one_broken_duty_makes_the_case_a_bug_and_is_named(duty):
    effects = copy.deepcopy(RETIRED_AT_DOOR)
    BREAKS[duty](effects)
    held = duties.judge("admission", "prefill-door-rejected", effects)
    assert [d for d, ok in held.items() if not ok] == [duty]
    assert duties.classify(held) == "bug"


@pytest.mark.parametrize("finish", [
    {"call": "finish", "args": [{"CacheRequestHandle": {"rid": "rejected", "attempt_id": 0}}, "CacheRequestOutcome.SUCCESS"],
     "kwargs": {}},
    {"call": "finish", "args": [{"CacheRequestHandle": {"rid": "other", "attempt_id": 0}}, "CacheRequestOutcome.ABORT"],
     "kwargs": {}},
])
def test_the_cache_must_hear_this_request_ended_aborted(finish):
    effects = copy.deepcopy(RETIRED_AT_DOOR) | {"tree_cache_calls": [finish]}
    held = duties.judge("admission", "prefill-door-rejected", effects)
    assert [d for d, ok in held.items() if not ok] == ["door-cache-released"]


def test_the_cache_release_is_read_at_the_cache_whatever_helper_made_it():
    """0.5.21 reaches ``tree_cache.finish`` through ``Scheduler._release_aborted_request``; a retire path
    that calls it itself (keywords included) keeps the same duty."""
    effects = copy.deepcopy(RETIRED_AT_DOOR) | {"tree_cache_calls": [
        {"call": "finish", "args": [], "kwargs": {"handle": {"CacheRequestHandle": {"rid": "rejected", "attempt_id": 0}},
                                                  "outcome": "CacheRequestOutcome.ABORT"}}]}
    assert all(duties.judge("admission", "prefill-door-rejected", effects).values())


def test_beam_duty_follows_whether_the_tree_has_beam_groups():
    """Before 0.5.19 no request has a beam group: nothing to retire, and retiring one is not expected;
    with beam groups, the rejected request's must be retired."""
    without = copy.deepcopy(RETIRED_AT_DOOR) | {"beam_groups": False, "beam_retired": []}
    assert all(duties.judge("admission", "prefill-door-rejected", without).values())
    for effects in (RETIRED_AT_DOOR | {"beam_retired": []}, without | {"beam_retired": ["rejected"]}):
        held = duties.judge("admission", "prefill-door-rejected", effects)
        assert [d for d, ok in held.items() if not ok] == ["door-beam-retired"]


def test_cache_duty_follows_whether_the_tree_has_an_abort_release():
    """Before 0.5.2 nothing a request registers with the cache has an abort release: none is expected."""
    without = copy.deepcopy(RETIRED_AT_DOOR) | {"cache_release": False, "tree_cache_calls": []}
    assert all(duties.judge("admission", "prefill-door-rejected", without).values())
    told = RETIRED_AT_DOOR["tree_cache_calls"]
    for effects in (RETIRED_AT_DOOR | {"tree_cache_calls": []}, without | {"tree_cache_calls": told}):
        held = duties.judge("admission", "prefill-door-rejected", effects)
        assert [d for d, ok in held.items() if not ok] == ["door-cache-released"]


def test_before_the_cache_had_outcomes_the_hicache_abort_release_is_the_cache_release():
    """0.5.2 .. 0.5.19: a faithful backport releases the request's HiCache storage state through the tree
    cache's ``release_aborted_request``; once for this request holds, twice or for another does not."""
    once = {"call": "release_aborted_request", "args": ["rejected"], "kwargs": {}}
    assert all(duties.judge("admission", "prefill-door-rejected", RETIRED_AT_DOOR | {"tree_cache_calls": [once]}).values())
    other = once | {"args": ["other"]}
    for calls in ([once, once], [other]):
        held = duties.judge("admission", "prefill-door-rejected", RETIRED_AT_DOOR | {"tree_cache_calls": calls})
        assert [d for d, ok in held.items() if not ok] == ["door-cache-released"]


def test_effects_that_cannot_show_a_duty_fail_it():
    held = duties.judge("admission", "prefill-door-rejected", {"request": {"rid": "rejected"}})
    assert [d for d, ok in held.items() if ok] == ["door-returns"]  # only "nothing escaped" can be read


def test_every_case_of_every_probe_declares_its_duties():
    for probe in (admission.PROBE, prefill_cleanup.PROBE):
        assert {c.id for c in probe.cases} == set(duties.CASES[probe.id])
        for case in probe.cases:
            assert case.duties == duties.declared(probe.id, case.id)
            assert {duties.FIX_OF[d] for d in case.duties} == {probe.fix}
    # every duty is checked by some case
    checked = {d for cases in duties.CASES.values() for ds in cases.values() for d in ds}
    assert checked == set(duties.DUTIES)


def test_a_timeout_release_logged_for_another_room_is_not_the_subjects():
    """A neighbour held to its own timeout logs its release by timeout; the subject, released on its
    acknowledgement, did not time out: its record is not the neighbour's. Its own room's record still counts."""
    from probes.duties_lifetime import timeout_recorded

    def effects(room):
        return {"subject": "req-A", "timeout": 30, "others": {"req-N": 4243},
                "steps": [{"seq": 1, "t": 0, "step": "bootstrapped", "rid": "req-A"}],
                "decode": [{"events": [{"event": "free", "rid": "req-A", "t": 0, "pages": [4]}]}],
                "log": [{"seq": 9, "message": f"Deferred KV release for room {room} timed out after 30.0s; releasing"}]}

    assert timeout_recorded(effects(4243))
    assert not timeout_recorded(effects(4242))
    assert not timeout_recorded(effects(42430))  # a room the record names only as a prefix is not the neighbour's


def test_a_failed_write_still_running_is_never_acknowledged_as_drained():
    """The rank whose failed write landed late must not have acknowledged the drain before it landed; another
    rank's acknowledgement is its own; effects with no such write cannot show the duty."""
    from probes.duties_41404 import no_ack_while_writing

    def effects(*acks, landed=True):
        return {"steps": [{"seq": 1, "step": "bootstrapped", "rid": "req-A"},
                          *([{"seq": 10, "step": "failed write lands", "write": "aux", "rank": 0}] if landed else [])],
                "wire": [{"seq": seq, "kind": "ABORT_ACK", "from": f"prefill{rank}"} for rank, seq in acks],
                "subject": "req-A"}

    assert no_ack_while_writing(effects())
    assert no_ack_while_writing(effects((0, 11), (1, 5)))
    assert not no_ack_while_writing(effects((0, 5)))
    assert not no_ack_while_writing(effects(landed=False))
