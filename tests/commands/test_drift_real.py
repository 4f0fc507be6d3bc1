"""``diffprobe drift`` from 0.5.22 to 0.5.23 (issue 44 item 3): the isolation defences 0.5.23 added are
listed, each with the statements no recorded case ran, whatever receipts of 0.5.23 the store holds
(none: every changed function is listed; the pinned probes': those whose every changed statement
ran drop out). Nothing is probed here."""

from __future__ import annotations

import re

import pytest

from runner import cli, errors

pytestmark = pytest.mark.slow

# The places issue 44 names, by the function 0.5.23 changed or added for each.
NAMED = {
    "cross-rank hold agreement": ["DecodeTransferQueue.pop_transferred", "all_reduce_flags"],
    "cross-rank release readiness": ["DecodeTransferQueue.resolve_deferred_releases"],
    "HiSparse host pages freed with the release": ["DecodeTransferQueue._release_request"],
    "checksum checked once, mismatches agreed": ["SchedulerDisaggregationDecodeMixin._verify_kv_checksums"],
    "restore after the in-flight forward": ["DecodePreallocQueue.resume_retracted_reqs"],
    "not idle with deferred releases": ["Scheduler.is_fully_idle"],
    "NIXL completion from the listener, not notifications": ["NixlKVManager._start_decode_listener_thread"],
    "Mori abort ack": ["MoriKVManager._arm_abort_ack"],
    "sends after a conclusion dropped": ["CommonKVSender.send"],
}


def test_the_defences_0_5_23_added_are_listed(release_tree, cache, capsys):
    release_tree("0.5.22"), release_tree("0.5.23")
    code = cli.main(["drift", "pypi:sglang==0.5.22", "pypi:sglang==0.5.23", "--all", "--cache-dir", str(cache.root)])
    out = capsys.readouterr().out
    assert code == errors.DIFFERS, out
    head = out.splitlines()[0]
    changed, unexplained = (int(n) for n in re.search(r": (\d+) function\(s\).*, (\d+) unexplained$", head).groups())
    listed = out.split("\nreached:\n")[0]
    assert unexplained == len(re.findall(r"^  sglang/", listed, re.M)) and changed >= unexplained > 50
    for what, functions in NAMED.items():
        for function in functions:
            assert re.search(rf"^  sglang/\S+:\d+ {re.escape(function)} \(", listed, re.M), (what, function)
    # a new function every statement of which the cases ran is reached, and said to be
    assert re.search(r"^  sglang/srt/disaggregation/utils.py:\d+ MetadataBuffers.clear_slot \(", out, re.M)
    print(head)
