"""The defences 0.5.23 added with no upstream PR number (local ids, issue 44) by behaviour, on the real releases
and on single-hunk mutants of 0.5.23: L1 (decode TP ranks agree on holding and releasing a failed transfer's
pages: lifetime-ranks) and L2 (no cache flush under held pages: lifetime-flush).

Each mutant edits one hunk of the real 0.5.23 function (``mutate --hunks``: swapped into the imported tree in a
forked child, run against every case reaching it) and must read "not fixed" (or "regression" for one that drops a
guard) naming the duty; a behaviour-preserving rewrite must stay "fixed".
"""

from __future__ import annotations

import pytest

from runner.judge import judging
from tests import helpers

pytestmark = pytest.mark.slow  # real releases, environments and SGLang imports

PROBES = ["lifetime-ranks", "lifetime-flush"]
Q = "sglang.srt.disaggregation.decode.DecodeTransferQueue"
IDLE = "sglang.srt.managers.scheduler.Scheduler.is_fully_idle"
PENDING = "            idle &= not self.disagg_decode_transfer_queue.has_pending_deferred_releases()\n"

# (probe, case) -> its state on 0.5.22, 0.5.23
WINDOWS = {
    ("lifetime-ranks", "peer-cannot-notify"): ("bug", "clean"),
    ("lifetime-ranks", "peer-cannot-notify-while-writing"): ("bug", "clean"),
    ("lifetime-ranks", "peer-ack-late"): ("bug", "clean"),
    ("lifetime-ranks", "peer-ack-lost-with-deferred-release"): ("bug", "clean"),
    ("lifetime-ranks", "both-acked"): ("clean", "clean"),  # every peer acknowledged (#41402): the ranks agree alone
    ("lifetime-ranks", "healthy-transfer"): ("clean", "clean"),
    ("lifetime-ranks", "peer-ack-late-without-deferred-release"): ("clean", "clean"),  # nothing held: released at once
    ("lifetime-flush", "flush-while-held"): ("bug", "clean"),
    ("lifetime-flush", "flush-when-idle"): ("clean", "clean"),
    ("lifetime-flush", "flush-while-held-without-deferred-release"): ("clean", "clean"),
}

# fix -> hunk id -> (function, old, new, what the tree with it reads, the duty the reading names; None: "fixed")
HUNKS = {
    1: {
        # the hold reduced by MIN: a rank that notified releases at once because its peer could not
        "hold-min": (f"{Q}.pop_transferred", "            op=torch.distributed.ReduceOp.MAX,\n",
                     "            op=torch.distributed.ReduceOp.MIN,\n", "not fixed", "lifetime-no-early-release"),
        # each rank's own hold: the ranks part, then reach different all-reduces (a server hangs there)
        "hold-local": (f"{Q}.pop_transferred", "        for (i, decode_req, _), hold in zip(failed, held):\n",
                       "        for (i, decode_req, hold), _ in zip(failed, held):\n", "not fixed", "lifetime-ranks-agree"),
        # each rank's own readiness
        "ready-local": (f"{Q}.resolve_deferred_releases", "        ready = all_reduce_flags(\n", "        _ = all_reduce_flags(\n",
                        "not fixed", "lifetime-ranks-agree"),
        # behaviour-preserving
        "hold-as-int": (f"{Q}.pop_transferred", "            flags=[hold for _, _, hold in failed],\n",
                        "            flags=[int(hold) for _, _, hold in failed],\n", "fixed", None),
        "ready-operands-swapped": (f"{Q}.resolve_deferred_releases", "                is_ready = is_drained or now >= deadline\n",
                                   "                is_ready = now >= deadline or is_drained\n", "fixed", None),
    },
    2: {
        "idle-ignores-deferred": (IDLE, "    " + PENDING, "", "not fixed", "lifetime-flush-refused-while-held"),
        "never-idle": (f"{Q}.has_pending_deferred_releases", "        return bool(self._deferred_releases)\n",
                       "        return True\n", "regression", "lifetime-flush-done-when-idle"),
        "idle-by-count": (IDLE, "    " + PENDING, "                idle &= self.disagg_decode_transfer_queue"
                          ".num_pending_deferred_releases() == 0\n", "fixed", None),
    },
}


@pytest.fixture(scope="module")
def released(cache, release_tree):
    """Both probes on 0.5.22 and 0.5.23: {(version, probe): receipt}."""
    for v in ("0.5.22", "0.5.23"):
        release_tree(v)
    return helpers.probed(cache, ("0.5.22", "0.5.23"), PROBES, case_timeout=30)


def test_each_local_defence_enters_the_release_line_in_0_5_23(released):
    for (probe, case_id), expected in WINDOWS.items():
        shown = tuple(judging.state(released[(v, probe)].case(case_id)) for v in ("0.5.22", "0.5.23"))
        assert shown == expected, (probe, case_id)
    for receipt in released.values():  # every case observed: a harness gap is never a verdict
        assert all(c.outcome == "observed" for c in receipt.cases), [(c.id, c.error) for c in receipt.cases if c.error]
        assert judging.status(receipt.cases) in ("fixed", "not fixed")


def test_one_rank_alone_releases_on_its_acknowledgement_before_0_5_23(released):
    """0.5.22: rank 0 releases on its acknowledgement, rank 1 at the timeout; 0.5.23 holds both to the timeout."""
    for version, same in (("0.5.22", False), ("0.5.23", True)):
        effects = released[(version, "lifetime-ranks")].case("peer-ack-late").effects
        times = [sorted({f["t"] for f in r["events"] if f["event"] == "free" and f["rid"] == "req-A"}) for r in effects["decode"]]
        assert (times[0] == times[1]) is same, (version, times)


@pytest.fixture(scope="module")
def tried(tmp_path_factory, cache):
    return helpers.hunk_trials(tmp_path_factory, cache.root)


@pytest.mark.parametrize("fix", sorted(HUNKS))
def test_every_single_duty_hunk_reads_broken_and_every_rewrite_fixed(fix, tried):
    helpers.check_hunk_reads(tried("0.5.23", f"L{fix}", HUNKS[fix]), HUNKS[fix])
