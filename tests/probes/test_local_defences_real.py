"""The defences found in 0.5.23 with no upstream PR number (local ids, issue 44), by behaviour, on real releases and on
single changes of the real 0.5.23 wheel.

L3 (nixl-completion): a NIXL decode completes a transfer only once prefill reported every write of it landed (0.5.22
completed on one state component's notification while another was in flight), and a concluded sender's send is dropped.
L4 (handoff-slot): freeing a decode metadata slot zeroes its checksum row, so a request whose prefill wrote no digest
is not checked against the digest the slot's previous owner left. L5 (lifetime-hisparse): a HiSparse decode's host
pages, the transfer's destination, go back with the deferred release, not at failure time. Each reads "not fixed" on
0.5.22 and "fixed" on 0.5.23, naming the duty; each single-duty change of 0.5.23's code (``mutate --hunks``: one hunk,
every name still defined) reads "not fixed" (or "regression" where a guard breaks first), and each behaviour-preserving
one "fixed".
"""

from __future__ import annotations

import json

import pytest

from runner import cli
from runner.judge import judging
from tests import forks, helpers

pytestmark = pytest.mark.slow  # real releases, environments and SGLang imports

PROBES = {3: "nixl-completion", 4: "handoff-slot", 5: "lifetime-hisparse"}
CLEAR_SLOT = "sglang.srt.disaggregation.utils.MetadataBuffers.clear_slot"
QUEUE = "sglang.srt.disaggregation.decode.DecodeTransferQueue"
MIXIN = "sglang.srt.disaggregation.decode.SchedulerDisaggregationDecodeMixin"
PREFILL = "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin"
NIXL_WORKER = "sglang.srt.disaggregation.nixl.conn.NixlKVManager.transfer_worker"
SENDER_SEND = "sglang.srt.disaggregation.common.conn.CommonKVSender.send"
SETTLE = "                settled, any_failed = self._await_handles(handles, failure_seen=False)\n"
ERR_RAISES = ("                if any_failed:\n"
              "                    raise RuntimeError(f\"NIXL transfer encountered ERR room={room}\")\n")
DROPPED = "        if self.conclude_state in (KVPoll.Success, KVPoll.Failed):\n            return\n"
HISPARSE_FREE = ("        if self.scheduler.enable_hisparse:\n"
                 "            self.scheduler.hisparse_coordinator.request_finished(decode_req.req)\n")

# (probe, case) -> its state on 0.5.22, 0.5.23
WINDOWS = {
    # 0.5.22's decode completed on the first state component's notification; its sender enqueued after an abort
    ("nixl-completion", "state-in-flight"): ("bug", "clean"),
    ("nixl-completion", "state-in-flight-fails"): ("bug", "clean"),
    ("nixl-completion", "late-send-after-abort"): ("bug", "clean"),
    ("nixl-completion", "late-send-after-abort-without-deferred-release"): ("bug", "clean"),
    ("nixl-completion", "healthy"): ("clean", "clean"),
    ("nixl-completion", "healthy-two-chunks"): ("clean", "clean"),
    ("nixl-completion", "kv-in-flight-fails"): ("clean", "clean"),
    ("nixl-completion", "aux-in-flight"): ("clean", "clean"),
    ("nixl-completion", "late-send-after-success"): ("clean", "clean"),
    ("handoff-slot", "slot-reused-prefill-without-checksum-with-kv-checksum"): ("bug", "clean"),
    ("handoff-slot", "slot-reused-after-abort-prefill-without-checksum-with-kv-checksum"): ("bug", "clean"),
    ("handoff-slot", "slot-reused-short-handoff-with-kv-checksum"): ("clean", "clean"),  # still caught
    ("handoff-slot", "slot-reused-with-kv-checksum"): ("clean", "clean"),
    ("handoff-slot", "slot-reused"): ("clean", "clean"),
    # the digests past decode's cached prefix: a prefix another prefill instance computed no longer mismatches
    ("handoff-slot", "slot-reused-decode-prefix-from-another-prefill-with-kv-checksum"): ("bug", "clean"),
    ("lifetime-hisparse", "hisparse-abort-in-flight"): ("bug", "clean"),
    ("lifetime-hisparse", "hisparse-abort-in-flight-with-deferred-release"): ("bug", "clean"),
    ("lifetime-hisparse", "hisparse-abort-in-flight-without-deferred-release"): ("clean", "clean"),
    ("lifetime-hisparse", "plain-decode-abort-in-flight"): ("clean", "clean"),
    ("lifetime-hisparse", "hisparse-healthy-transfer"): ("clean", "clean"),
}

# fix -> hunk id -> (function, old, new, what 0.5.23 with it reads, the duty the reading must name: None for "fixed")
HUNKS = {
    3: {
        # the room concluded Success as soon as the last chunk's writes are posted, before they settle: decode then
        # completes with the KV pages' write in flight too, which 0.5.22 never did (a guard case reads it first)
        "success-before-settle": (NIXL_WORKER, SETTLE, "                if kv_chunk.is_last_chunk:\n"
                                  "                    self.conclude_transfer(bootstrap_room=room, status=KVPoll.Success)\n"
                                  + SETTLE, "regression", "nixl-no-success-before-landed"),
        # a write that ended in ERR no longer fails the batch: prefill concludes Success over it, also over a failed
        # KV write (a guard case: 0.5.22 waited for its notification)
        "err-ignored": (NIXL_WORKER, ERR_RAISES, "", "regression", "nixl-no-success-before-landed"),
        # a concluded sender's send goes on to the manager (0.5.22's NIXL sender after an abort)
        "late-send-enqueued": (SENDER_SEND, DROPPED, "", "not fixed", "nixl-late-send-dropped"),
        # behaviour-preserving: the same tests written another way
        "conclusions-reordered": (SENDER_SEND, DROPPED, DROPPED.replace("(KVPoll.Success, KVPoll.Failed)",
                                                                        "(KVPoll.Failed, KVPoll.Success)"), "fixed", None),
        "err-tested-as-bool": (NIXL_WORKER, ERR_RAISES, ERR_RAISES.replace("if any_failed:", "if bool(any_failed):"),
                               "fixed", None),
    },
    4: {
        "checksum-row-kept": (CLEAR_SLOT, "        if self.kv_checksum is not None:\n            self.kv_checksum[idx] = 0\n",
                              "", "not fixed", "slot-digest-not-inherited"),
        "commit-path-room-only": (f"{QUEUE}.pop_transferred", "            self.metadata_buffers.clear_slot(idx)\n",
                                  "            self.metadata_buffers.bootstrap_room[idx] = 0\n", "not fixed",
                                  "slot-digest-not-inherited"),
        "deferred-path-room-only": (f"{QUEUE}._do_release", "        self.metadata_buffers.clear_slot(idx)\n",
                                    "        self.metadata_buffers.bootstrap_room[idx] = 0\n", "not fixed",
                                    "slot-digest-not-inherited"),
        # either side digesting from the prompt's start again, past a prefix decode's cache holds
        "decode-digests-the-prefix": (f"{MIXIN}._verify_kv_checksums", "            start_idx = req.kv.cache_protected_len\n",
                                      "            start_idx = 0\n", "not fixed", "checksum-past-prefix"),
        "prefill-digests-the-prefix": (f"{PREFILL}.send_kv_chunk", "                start_idx = req.disagg_decode_prefix_len\n",
                                       "                start_idx = 0\n", "not fixed", "checksum-past-prefix"),
        # behaviour-preserving: the row zeroed another way
        "row-zeroed-in-place": (CLEAR_SLOT, "            self.kv_checksum[idx] = 0\n",
                                "            self.kv_checksum[idx].zero_()\n", "fixed", None),
        "row-zeroed-by-slice": (CLEAR_SLOT, "            self.kv_checksum[idx] = 0\n",
                                "            self.kv_checksum[idx, :] = 0\n", "fixed", None),
    },
    5: {
        # the free not moved into the release (a backport dropping it from pop_transferred only): the pages leak,
        # which the switched-off configuration's guard reads first
        "host-pages-not-released": (f"{QUEUE}._release_request", HISPARSE_FREE, "", "regression",
                                    "hisparse-host-freed-once"),
        "host-pages-released-only-without-deferral": (
            f"{QUEUE}._release_request", "        if self.scheduler.enable_hisparse:\n",
            "        if self.scheduler.enable_hisparse and not self.enable_deferred_kv_release:\n", "not fixed",
            "hisparse-host-freed-once"),
        # behaviour-preserving: the coordinator looked up first
        "coordinator-looked-up-first": (
            f"{QUEUE}._release_request", HISPARSE_FREE,
            "        coordinator = self.scheduler.hisparse_coordinator if self.scheduler.enable_hisparse else None\n"
            "        if coordinator is not None:\n            coordinator.request_finished(decode_req.req)\n",
            "fixed", None),
    },
}


@pytest.fixture(scope="module")
def released(cache, release_tree):
    """Both probes' receipts on 0.5.22 and 0.5.23: {(version, probe): receipt}."""
    for v in ("0.5.22", "0.5.23"):
        release_tree(v)
    return helpers.probed(cache, ("0.5.22", "0.5.23"), list(PROBES.values()), case_timeout=20)


def test_each_local_defence_reads_not_fixed_before_and_fixed_in_0_5_23(released):
    for (probe, case_id), expected in WINDOWS.items():
        shown = tuple(judging.state(released[(v, probe)].case(case_id)) for v in ("0.5.22", "0.5.23"))
        assert shown == expected, (probe, case_id, shown)
    for receipt in released.values():  # every case observed: a harness gap is never a verdict
        assert all(c.outcome == "observed" for c in receipt.cases), [(c.id, c.error) for c in receipt.cases if c.error]
    for fix, probe in PROBES.items():
        (before,) = judging.fixes([released[("0.5.22", probe)]])
        (after,) = judging.fixes([released[("0.5.23", probe)]])
        assert before.status == "not fixed" and after.status == "fixed", (fix, before, after)


def test_a_reused_slot_carried_the_previous_digest_before_the_fix(released):
    """0.5.22 aborted the healthy handoff with a checksum mismatch against the previous owner's digest; 0.5.23 admits
    it unverified and it is read."""
    case_id = "slot-reused-prefill-without-checksum-with-kv-checksum"
    before = released[("0.5.22", "handoff-slot")].case(case_id).effects
    after = released[("0.5.23", "handoff-slot")].case(case_id).effects
    assert before["previous"]["subject_slot"] == before["previous"]["slot"]  # the slot the tree freed, taken again
    assert before["request"]["finished"] and any("KV checksum mismatch" in r["message"] for r in before["log"])
    assert not after["request"]["finished"] and any("req-A" in b["runs"] for b in after["batches"])


def test_nixl_decode_completed_on_one_state_components_notification_before_the_fix(released):
    """0.5.22's decode answered Success while the second state component's write was in flight (every other write's
    notification had reached it), and also for one that then failed; 0.5.23's waited for prefill's Success, sent once
    every write settled, and ended Failed on the failure."""
    for case_id, last in (("state-in-flight", "Success"), ("state-in-flight-fails", "Success")):
        before = released[("0.5.22", "nixl-completion")].case(case_id).effects
        assert before["polls"][0] == {**before["polls"][0], "result": "Success", "unlanded": ["state 1"]}
        assert before["polls"][-1]["result"] == last and all(w["notified"] for w in before["writes"])
    after = released[("0.5.23", "nixl-completion")].case("state-in-flight").effects
    assert [p["result"] for p in after["polls"]] == ["WaitingForInput", "WaitingForInput", "Success"]
    assert not any(w["notified"] for w in after["writes"])  # no notification posted: decode reads none
    failed = released[("0.5.23", "nixl-completion")].case("state-in-flight-fails").effects
    assert failed["polls"][-1]["result"] == "Failed" and any(m["kind"] == "status" for m in failed["wire"])


def test_host_pages_went_back_while_the_write_could_land_before_the_fix(released):
    before = released[("0.5.22", "lifetime-hisparse")].case("hisparse-abort-in-flight").effects
    after = released[("0.5.23", "lifetime-hisparse")].case("hisparse-abort-in-flight").effects
    (rank,) = before["decode"]
    assert {w["how"] for w in rank["freed_while_writable"]} == {"hisparse request_finished"}
    assert {w["owner"] for w in rank["foreign_writes"]} == {"req-B"}
    (rank,) = after["decode"]
    assert not rank["freed_while_writable"] and not rank["foreign_writes"]


@pytest.fixture(scope="module")
def tried(tmp_path_factory, cache):
    return helpers.hunk_trials(tmp_path_factory, cache.root)


@pytest.mark.parametrize("fix", sorted(HUNKS))
def test_every_single_duty_hunk_reads_broken_and_every_equivalent_fixed(fix, tried):
    helpers.check_hunk_reads(tried("0.5.23", fix, HUNKS[fix]), HUNKS[fix])


NIXL_ACK = ("sglang/srt/disaggregation/nixl/conn.py",
            "        self.register_deferred_ack_target(room_to_be_aborted, ack_target)\n"
            "        self._maybe_ack_drained_abort(room_to_be_aborted)\n",
            "        self._send_abort_acks(room_to_be_aborted, {(ack_target.ip, ack_target.port): ack_target})\n")


def test_a_fork_that_breaks_only_nixls_half_of_the_drain_never_reads_plain_fixed(release_tree, cache, tmp_path):
    """NIXL acknowledging an ABORT at once, not after the drain, reads "not fixed" from behaviour: lifetime-drain's
    NIXL cases run NIXL's own ABORT handling and transfer worker, and where the ABORT meets a write in flight the
    acknowledgement goes out before the write lands (docs/fixed.md, "Which backend's half"). Mooncake's cases stay
    clean; the changed place is still named unreviewed."""
    fork = forks.make(release_tree("0.5.23").root, tmp_path / "nixl-acks-at-once", [NIXL_ACK])
    out = tmp_path / "audit"
    code = cli.main(["audit", f"path:{fork}", "--fix", "40645", "--out", str(out), "--cache-dir", str(cache.root)])
    [row] = json.loads((out / "bundle.json").read_text())["extra"]["rows"]
    [fix] = row["fixes"]
    assert code == 1 and row["on_unreviewed"] == [] and fix["status"] == "not fixed", (code, row)
    # NIXL's half has sites of its own: a Mooncake deployment is not judged on it (accept)
    assert fix["bug_at"] == ["default-nixl", "with-deferred-release-nixl"]
    assert [u.split(" ")[:3] for u in row["unreviewed"]] == [
        ["sglang/srt/disaggregation/nixl/conn.py:3352", "in", "NixlKVManager._handle_deferred_abort_ack"]]
    [receipt] = [json.loads(p.read_text()) for p in (out / "receipts").glob("*.json")]
    failed = {c["id"]: sorted(d for d, held in c["duties"].items() if not held)
              for c in receipt["cases"] if c["classification"] != "clean"}
    # a write then failing is acknowledged before it drained; one whose state NIXL cannot read (it lands later),
    # before it landed
    assert failed == {f"{case}{site}": [duty] for case, duty in (
        ("abort-in-flight-nixl", "lifetime-acked-after-drain"), ("prefill-clears-before-drain-nixl", "lifetime-acked-after-drain"),
        ("in-flight-nixl-write-fails", "lifetime-acked-after-drain"),
        ("in-flight-nixl-write-state-unreadable", "lifetime-no-ack-while-writing"),
        ("in-flight-prefill-concludes-late-nixl-write-state-unreadable", "lifetime-no-ack-while-writing"))
        for site in ("", "-with-deferred-release")}, failed

NIXL_SWITCH = ("sglang/srt/disaggregation/nixl/conn.py",
               "        if not self.enable_deferred_decode_kv_release:\n            return\n        ack_target",
               "        ack_target")


def test_a_prefill_that_ignores_its_own_switch_reads_not_fixed_where_only_decode_has_it_on(release_tree, cache, tmp_path):
    """NIXL's prefill registering and acknowledging an ABORT with its deferred release switched off: alike wherever
    both sides agree (a decode switched off sends no generation to acknowledge), told only by a fleet part-way through
    switching it on (decode on, prefill off), where decode then releases on an acknowledgement a prefill that keeps no
    drain promise sent (docs/fixed.md, ``decode-only-deferred-release``)."""
    fork = forks.make(release_tree("0.5.23").root, tmp_path / "nixl-ignores-switch", [NIXL_SWITCH])
    out = tmp_path / "audit"
    code = cli.main(["audit", f"path:{fork}", "--fix", "40645", "--out", str(out), "--cache-dir", str(cache.root)])
    [row] = json.loads((out / "bundle.json").read_text())["extra"]["rows"]
    [fix] = row["fixes"]
    assert code == 1 and fix["status"] == "not fixed" and fix["bug_at"] == ["decode-only-deferred-release-nixl"], row
    [receipt] = [json.loads(p.read_text()) for p in (out / "receipts").glob("*.json")]
    failed = {c["id"]: sorted(d for d, held in c["duties"].items() if not held)
              for c in receipt["cases"] if c["classification"] != "clean"}
    assert failed == {f"{case}-nixl-decode-only-with-deferred-release": ["lifetime-held-to-timeout-prefill-off"]
                      for case in ("in-flight", "nothing-in-flight")}, failed
