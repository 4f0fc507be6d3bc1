"""A test of another era on real releases (issue 40), with hand-made upstream-style files
(tests/commands/upstream_style): a held entry of the decode queue unpacked for the 0.5.21 era's four
fields against 0.5.22's five, and a mock's expected ``set_kv_checksum(req, 0)`` of the 0.5.22 era
against 0.5.23's ``set_kv_checksum(req, digest, signature)``, and a decode's ABORT handed to the
prefill as 0.5.21 sent it (four frames) against 0.5.22's producer (five, the generation last). Each is
"incompatible (test era)", with the call site and both sides; beside each, a failure through the same
code whose shape fits (a changed value, a changed behaviour, a message of the tree's own shape) stays
the tree's behaviour."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.app import upstream_layout
from runner.commands import upstream_tests
from runner.judge.pytest_records import INCOMPATIBLE
from runner.store import envs
from tests import tools

STYLE = Path(__file__).resolve().parent / "upstream_style"


def graded(name: str, path: str, versions: tuple[str, ...], cache, release_tree, interp, request):
    test = upstream_layout.build("--tests", path, f"local:{path}", (STYLE / f"{name}.py").read_bytes(), {})
    sides = {v: upstream_tests.run_side("head", f"pypi:sglang=={v}", release_tree(v),
                                        envs.env(release_tree(v), cache, interp), test, timeout=900,
                                        sandboxed=tools.sandboxed(request)) for v in versions}
    return {(b, h): upstream_tests.grade(sides[b], sides[h], test.declared) for b, h in zip(versions, versions[1:])}


def _rows(g):
    return {r.id.split("::")[-1]: r for r in g.tests}


@pytest.fixture(scope="module")
def held(cache, release_tree, interp, request):
    return graded("deferred_release_tuple", "test_deferred_release_tuple.py", ("0.5.21", "0.5.22", "0.5.23"),
                  cache, release_tree, interp, request)


def test_a_held_entry_unpacked_for_the_older_length_is_the_tests_era(held):
    rows = _rows(held["0.5.21", "0.5.22"])
    row = rows["test_a_held_entry_unpacks_into_its_four_fields"]
    assert (row.base.status, row.grade, row.cause) == ("passed", INCOMPATIBLE, "tuple arity")
    era = row.head.incompatible
    assert era.at == "test_deferred_release_tuple.py:29"
    assert era.test == "unpacks 4 names from DecodeTransferQueue._deferred_releases[…], a 5-tuple"
    assert era.tree.startswith("DecodeTransferQueue stores only 5-tuples in self._deferred_releases[…] "
                               "(sglang/srt/disaggregation/decode.py:")
    # indexing from the end reads the same field in both eras: nothing drifted
    assert rows["test_the_required_acknowledgements_are_the_last_field"].grade == "pass-to-pass"
    assert held["0.5.21", "0.5.22"].verdict == "inconclusive"


def test_a_changed_value_read_through_the_same_shape_stays_a_behaviour(held):
    """0.5.23 waits for no acknowledgement when the abort was never sent: the entry's shape is the
    same, its value is not, and the test's assertion says so."""
    rows = _rows(held["0.5.22", "0.5.23"])
    row = rows["test_a_request_never_notified_still_waits_for_every_rank"]
    assert (row.grade, row.cause, row.head.incompatible) == ("pass-to-fail", "assertion", None)
    assert rows["test_a_held_entry_unpacks_into_its_four_fields"].grade == INCOMPATIBLE
    assert held["0.5.22", "0.5.23"].verdict == "regression"


@pytest.fixture(scope="module")
def checksum(cache, release_tree, interp, request):
    return graded("checksum_mock_call", "test_checksum_mock_call.py", ("0.5.22", "0.5.23"),
                  cache, release_tree, interp, request)["0.5.22", "0.5.23"]


def test_a_mocks_expected_call_of_the_older_arity_is_the_tests_era(checksum):
    rows = _rows(checksum)
    row = rows["test_a_health_check_records_a_zero_checksum"]
    assert (row.base.status, row.grade, row.cause) == ("passed", INCOMPATIBLE, "call arity")
    era = row.head.incompatible
    assert era.at.startswith("sglang/srt/disaggregation/prefill.py:")
    assert era.test.startswith("expects scheduler.disagg_metadata_buffers.set_kv_checksum.assert_called_once_with(req, 0)"
                               " at test_checksum_mock_call.py:")
    assert era.tree == ("calls self.disagg_metadata_buffers.set_kv_checksum(req, digest, signature) in send_kv_chunk "
                        "(3 positional), never 2 positional")
    assert rows["test_a_health_check_records_its_checksum_once"].grade == "pass-to-pass"


def test_an_expected_call_of_the_trees_arity_with_another_value_stays_the_tests_assertion(checksum):
    """Written for 0.5.23's arity with a value no release records: of another era on 0.5.22 (whose
    call site makes two arguments), the test's own assertion on 0.5.23, where the shape fits."""
    row = _rows(checksum)["test_a_health_check_checksum_is_recorded_as_one_and_signed_zero"]
    assert (row.base.cause, row.head.cause, row.head.incompatible) == ("call arity", "assertion", None)
    assert row.base.incompatible.tree.endswith("(2 positional), never 3 positional")
    assert checksum.verdict == "fails at head" and not any("regression" in b for b in checksum.blockers)


@pytest.fixture(scope="module")
def abort(cache, release_tree, interp, request):
    versions = ("0.5.21", "0.5.22", "0.5.23")
    return {name: graded(name, f"test_{name}.py", versions, cache, release_tree, interp, request)
            for name in ("abort_message_of_its_day", "abort_message_generation")}


def test_a_peers_message_of_the_older_wire_format_is_the_tests_era(abort):
    """0.5.21's four-frame ABORT: acknowledged by 0.5.21, asking for nothing from 0.5.22 on (its
    producer builds five, the generation last): another era, not a regression."""
    rows = _rows(abort["abort_message_of_its_day"]["0.5.21", "0.5.22"])
    row = rows["test_a_concluded_room_is_acknowledged_at_once"]
    assert (row.base.status, row.grade, row.cause) == ("passed", INCOMPATIBLE, "message shape")
    era = row.head.incompatible
    assert era.at == "test_abort_message_of_its_day.py:32"
    assert era.test == ("hands mgr._handle_abort_notification(abort_message()) a b'ABORT' message of 4 frames built "
                        "at test_abort_message_of_its_day.py:26 (the test's files build it of 4 frames only)")
    assert era.tree.startswith("builds b'ABORT' messages of 5 frames only (sglang/srt/disaggregation/common/conn.py:")
    assert rows["test_another_tag_is_not_claimed"].grade == "pass-to-pass"
    assert abort["abort_message_of_its_day"]["0.5.21", "0.5.22"].verdict == "inconclusive"
    later = _rows(abort["abort_message_of_its_day"]["0.5.22", "0.5.23"])["test_a_concluded_room_is_acknowledged_at_once"]
    assert (later.grade, later.base.cause, later.head.cause) == (INCOMPATIBLE, "message shape", "message shape")


def test_a_peers_message_of_the_trees_own_shape_that_fails_stays_a_behaviour(abort):
    """0.5.22's five frames: acknowledged by 0.5.22 and 0.5.23, so the expectation that nothing is
    sent fails there by the test's assertion (a message of the tree's shape, compatible calls); on
    0.5.21, whose producer builds four, the five-frame message is the test's era."""
    g = abort["abort_message_generation"]
    rows = _rows(g["0.5.22", "0.5.23"])
    assert rows["test_a_concluded_room_is_acknowledged_at_once"].grade == "pass-to-pass"
    row = rows["test_a_concluded_room_is_never_acknowledged"]
    assert (row.grade, row.cause, row.head.incompatible) == ("fail-to-fail", "assertion", None)
    assert g["0.5.22", "0.5.23"].verdict == "fix missing"
    older = _rows(g["0.5.21", "0.5.22"])["test_a_concluded_room_is_never_acknowledged"]
    assert (older.grade, older.base.cause, older.head.cause) == (INCOMPATIBLE, "message shape", "assertion")
    assert older.base.incompatible.tree.startswith("builds b'ABORT' messages of 4 frames only (")
