"""``diffprobe drift`` from 0.5.22 to 0.5.23 (issue 44 item 3): the isolation defences 0.5.23 added are
listed, each with the statements no recorded case ran, whatever receipts of 0.5.23 the store holds
(none: every changed function is listed; the pinned probes': those whose every changed statement
ran drop out). Nothing is probed here."""

from __future__ import annotations

import re

import pytest

from runner import cli, errors
from runner.evidence import drift
from tests.helpers import EVIDENCE

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


# Named places whose changed statements the issue-44 probes run but for a branch no case builds: declared (reviewed) for
# the rest, the reason naming the local defence that probes them.
PARTLY = {"DecodeTransferQueue.pop_transferred": "L1", "DecodeTransferQueue.resolve_deferred_releases": "L1",
          "SchedulerDisaggregationDecodeMixin._verify_kv_checksums": "L4", "CommonKVSender.send": "L3",
          "NixlKVManager._start_decode_listener_thread": "L3"}
# Named places no CPU environment can build (Mori's module needs ROCm's mori library): declared, the reason saying so.
UNBUILDABLE = {"MoriKVManager._arm_abort_ack": "mori library"}


def test_the_defences_0_5_23_added_are_listed(release_tree, cache, capsys):
    """Each is listed as unexplained until an issue-44 probe runs every changed statement of it, then it reads
    reached (probe named); declared only where a probe runs it but for a branch no case builds, the reason naming
    that probe, or where no CPU environment can build it, the reason saying why."""
    release_tree("0.5.22"), release_tree("0.5.23")
    code = cli.main(["drift", "pypi:sglang==0.5.22", "pypi:sglang==0.5.23", "--all", "--cache-dir", str(cache.root)])
    out = capsys.readouterr().out
    head = out.splitlines()[0]
    changed, unexplained = (int(n) for n in re.search(r": (\d+) function\(s\).*, (\d+) unexplained$", head).groups())
    listed = out.split("\nnot probed, by decision")[0].split("\nreached:\n")[0]
    declared = out.split("\nnot probed, by decision")[1].split("\nreached:\n")[0] if "\nnot probed" in out else ""
    reached = out.split("\nreached:\n")[1]
    reasons = {place.partition(":")[2]: u.reason for place, (_, u) in drift.load(None).reviewed().items()}
    assert unexplained == len(re.findall(r"^  sglang/", listed, re.M)) and changed >= unexplained
    assert code == (errors.DIFFERS if unexplained else errors.OK), out
    for what, functions in NAMED.items():
        for function in functions:
            seen = rf"^  sglang/\S+:\d+ {re.escape(function)} \("
            said, why = re.search(seen + r".*", declared, re.M), PARTLY.get(function) or UNBUILDABLE.get(function)
            assert (re.search(seen, listed, re.M) or re.search(seen + r".*probe ", reached, re.M)
                    or (said and why and said.group(0).endswith(reasons[function]) and why in reasons[function])), \
                (what, function)
    # a new function every statement of which the cases ran is reached, and said to be
    assert re.search(r"^  sglang/srt/disaggregation/utils.py:\d+ MetadataBuffers.clear_slot \(", out, re.M)
    print(head)


D, M = "sglang/srt/disaggregation/", "sglang/srt/mem_cache/"
U = M + "allocator/unified_hybrid_swa.py:"
# Changed functions of 0.5.23 read in both trees and declared deliberately not probed (runner/data/isolation.toml,
# [[unprobed]]; docs/drift.md's tables say what changed in each and why it is not probed here): isolation changes no
# probe scene builds, and the issue-44 places a probe runs but for branches no case builds.
REVIEWED = {
    # partly reached: the reason says what the statements no case runs do
    D + "checksum.py:state_indices_for_request",  # SWA/DSA/MiniMax state digests past decode's prefix
    D + "decode.py:DecodeTransferQueue._commit_transfer_to_req",  # unrun: a logprob row
    D + "decode.py:DecodeTransferQueue.pop_transferred",  # L1; unrun: the commit-abort branch
    D + "decode.py:DecodeTransferQueue.resolve_deferred_releases",  # L1; unrun: host-staged destinations
    D + "decode.py:SchedulerDisaggregationDecodeMixin._verify_kv_checksums",  # L4; unrun: the test-only injector
    # isolation changes no scene builds
    D + "prefill.py:SchedulerDisaggregationPrefillMixin.event_loop_overlap_disagg_prefill",  # the WAR barrier deferred
    D + "prefill.py:SchedulerDisaggregationPrefillMixin.maybe_send_cached_prefix_chunk",  # no early send during a load-back
    D + "prefill.py:SchedulerDisaggregationPrefillMixin._send_kv_chunk",  # suffix-only DSA/MiniMax pages, indices event
    "sglang/srt/managers/hisparse_coordinator.py:HiSparseCoordinator._eager_backup_previous_token",  # DSV4 token backup
    U + "UnifiedSWAAllocatorBase.free_swa_segment", U + "UnifiedSWAAllocatorBase._free_swa_page_reps",
    U + "UnifiedSWAAllocatorBase.free_full_segment", U + "UnifiedSWAAllocatorBase.free_segment",
    U + "UnifiedSWAAllocatorBase._release_page_reps", U + "UnifiedSWAAllocatorBase.free_group_end",
    U + "UnifiedMambaSWATokenToKVPoolAllocator.flush_deferred_full_frees",  # no tombstone filter on SWA frees
    U + "UnifiedSWATokenToKVPoolAllocator.evict_to_free_tokens", U + "UnifiedMambaSWATokenToKVPoolAllocator.evict_to_free_tokens",
    U + "UnifiedMambaSWATokenToKVPoolAllocator.ensure_capacity",  # eviction and page moves for allocation rewritten
    M + "memory_pool.py:HybridReqToTokenPool.set_mamba_ping_pong_slot",
    M + "memory_pool.py:HybridReqToTokenPool.free_mamba_cache",  # ping-pong slots freed by flags
    # the places L3 (nixl-completion) and L6 (lifetime-restore) were built for, where their cases leave statements unrun
    D + "common/conn.py:CommonKVSender.send",  # L3; unrun: a skipped chunk's early return
    D + "mooncake/conn.py:MooncakeKVSender.send",  # one line handing the chunk to CommonKVSender.send
    D + "common/conn.py:CommonKVSender._poll_with_status",  # a status-less room and a bootstrap timeout conclude
    D + "common/conn.py:CommonKVSender.clear", D + "common/conn.py:CommonKVReceiver._clear",  # cleared before polling
    D + "mooncake/conn.py:MooncakeKVManager.transfer_worker",  # waits on the page-indices CUDA event
    D + "mori/conn.py:MoriKVManager._mark_transfer_quiescent", D + "mori/conn.py:MoriKVManager._poison_failed_transfer",
    D + "mori/conn.py:MoriKVManager._drain_transfer_statuses", D + "mori/conn.py:MoriKVManager._arm_abort_ack",  # ROCm only
    D + "nixl/conn.py:NixlKVManager._start_decode_listener_thread",  # L3; unrun: CHUNK_READY (staging)
    D + "nixl/conn.py:NixlKVManager.transfer_worker",  # L3; unrun: staging, DCP, mixed and sliced write paths
    D + "decode.py:DecodePreallocQueue.pop_preallocated",  # the L3 span promised; DSA/MiniMax suffix payloads
    D + "decode_hicache_mixin.py:DecodeHiCachePreallocMixin._start_hicache_prefetch",  # a declined prefetch
    D + "decode_hicache_mixin.py:DecodeHiCacheTransferMixin._try_hicache_queue_load_back",
    D + "decode_hicache_mixin.py:DecodeHiCacheTransferMixin._process_hicache_local_restores",  # ready on the load event
}
PLACE = re.compile(r"^  (sglang/\S+?):\d+ (\S+) \(", re.M)


def _sections(out: str) -> tuple[set[str], set[str], set[str]]:
    """The places drift --all lists as unexplained, as not probed by decision, and as reached."""
    rest, _, reached = out.partition("\nreached:\n")
    listed, _, declared = rest.partition("\nnot probed, by decision")
    return tuple({f"{f}:{n}" for f, n in PLACE.findall(part)} for part in (listed, declared, reached))


def test_nothing_is_unexplained_from_0_5_22_to_0_5_23(release_tree, cache, capsys):
    """Issue 44's done-when: with the committed release line's receipts of 0.5.23, every function of the isolation
    modules that 0.5.22 -> 0.5.23 changed is reached whole by a probe case or declared not probed for the bytes read."""
    release_tree("0.5.22"), release_tree("0.5.23")
    # coverage from the committed release line's receipts of 0.5.23, not from whatever a test cache holds
    code = cli.main(["drift", "pypi:sglang==0.5.22", "pypi:sglang==0.5.23", "--all", "--cache-dir", str(cache.root),
                     "--receipts", str(EVIDENCE / "release-line-20261201")])
    out = capsys.readouterr().out
    listed, declared, reached = _sections(out)
    assert listed == set() and code == errors.OK, out
    assert REVIEWED <= declared and not REVIEWED & reached, out
    assert "reviewed version differs" not in out and "did not change here" not in out


def test_a_reviewed_function_changed_by_one_byte_is_unexplained_again(release_tree):
    """Each declaration holds for the bytes read only: one byte more at the end of the function's last line (the same
    parse) and it is no longer declared, its old reason kept beside it."""
    old_root, new_root = release_tree("0.5.22").root, release_tree("0.5.23").root
    catalog = drift.load(None)
    reviewed = catalog.reviewed()

    def entry(rel: str, name: str, new: bytes) -> drift.Entry:
        found = drift.changed({rel: (old_root / rel).read_bytes()}, {rel: new}, catalog)
        return next(e for e in drift.reached(found, {}, {}, catalog) if e.function == name)

    for place in sorted(REVIEWED):
        rel, _, name = place.partition(":")
        reason = reviewed[place][1].reason
        new = (new_root / rel).read_bytes()
        assert entry(rel, name, new).unprobed == reason, place
        lines = new.splitlines(keepends=True)
        last = drift.functions(new)[name].lines[1] - 1
        lines[last] = lines[last].rstrip(b"\n") + b" \n"
        again = entry(rel, name, b"".join(lines))
        assert again.unprobed is None and again.reviewed_other.reason == reason, place
