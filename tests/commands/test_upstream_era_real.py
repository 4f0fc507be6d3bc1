"""A test of another era on real releases (issue 40), with hand-made upstream-style files
(tests/commands/upstream_style): a held entry of the decode queue unpacked for the 0.5.21 era's four
fields against 0.5.22's five, and a mock's expected ``set_kv_checksum(req, 0)`` of the 0.5.22 era
against 0.5.23's ``set_kv_checksum(req, digest, signature)``. Both are "incompatible (test era)",
with the call site and both sides; beside each, a failure through the same code whose shape fits (a
changed value, a changed behaviour) stays the tree's behaviour."""

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
