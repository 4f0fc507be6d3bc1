"""L6 (lifetime-restore) on real releases and on single changes of the real 0.5.23 wheel.

A retracted request resumed while a finished request's forward is still in flight is given the page that forward
writes; 0.5.23's scheduling stream waits for the forward stream before the restore, so the restored KV is the
request's own. 0.5.22 reads "not fixed" (the forward's write lands on the restored page), 0.5.23 "fixed"; each
single-duty change of 0.5.23's ``resume_retracted_reqs`` (``mutate --hunks``) reads broken naming its duty, and each
behaviour-preserving one "fixed".
"""

from __future__ import annotations

import pytest

from runner.judge import judging
from tests import helpers

pytestmark = pytest.mark.slow  # real releases, environments and SGLang imports

PROBE = "lifetime-restore"
RESUME = "sglang.srt.disaggregation.decode.DecodePreallocQueue.resume_retracted_reqs"
IF = "            if self.scheduler.enable_overlap:\n"
WAIT = ("                self.scheduler.schedule_stream.wait_stream(\n"
        "                    self.scheduler.forward_stream\n"
        "                )\n")
BLOCK = (IF + "                # A request that finished last step can still have its forward in\n"
         "                # flight, writing slots this request was just given.\n" + WAIT)
RESTORE = ("            restore_kv_cache(\n"
           "                req,\n"
           "                self.tree_cache,\n"
           "                self.req_to_token_pool,\n"
           "                self.token_to_kv_pool_allocator,\n"
           "                get_disagg().disaggregation_decode_retraction_backup,\n"
           "            )\n")

# case -> its state on 0.5.22, 0.5.23
WINDOWS = {
    "forward-in-flight": ("bug", "clean"),
    "forward-in-flight-cpu-tensor-backup": ("clean", "clean"),  # the pool's own copy synchronizes the device
    "nothing-in-flight": ("clean", "clean"),
    "nothing-in-flight-cpu-tensor-backup": ("clean", "clean"),
    "without-overlap-nothing-in-flight": ("clean", "clean"),
    "without-overlap-nothing-in-flight-cpu-tensor-backup": ("clean", "clean"),
}

# hunk id -> (function, old, new, what 0.5.23 with it reads, the duty the reading must name: None for "fixed")
HUNKS = {
    "no-wait": (RESUME, BLOCK, "", "not fixed", "restore-after-forward"),
    "wait-only-without-overlap": (RESUME, IF, "            if not self.scheduler.enable_overlap:\n", "not fixed",
                                  "restore-after-forward"),
    "forward-waits-for-schedule": (RESUME, WAIT, "                self.scheduler.forward_stream.wait_stream(\n"
                                   "                    self.scheduler.schedule_stream\n"
                                   "                )\n", "not fixed", "restore-after-forward"),
    "wait-after-restore": (RESUME, BLOCK + RESTORE, RESTORE + BLOCK, "not fixed", "restore-after-forward"),
    # no restore at all: no copy to order, the pages keep what they held (the finished request's KV): every case
    "restore-dropped": (RESUME, RESTORE, "", "regression", "restore-own-kv"),
    # resumed but still marked retracted: every case
    "still-marked-retracted": (RESUME, "            req.is_retracted = False\n", "", "regression", "restore-resumed"),
    # behaviour-preserving: waiting without overlap too (the forward runs on the scheduling stream), or by an event
    "wait-always": (RESUME, IF, "            if True:\n", "fixed", None),
    "wait-by-event": (RESUME, WAIT, "                self.scheduler.schedule_stream.wait_event(\n"
                      "                    self.scheduler.forward_stream.record_event()\n"
                      "                )\n", "fixed", None),
}


@pytest.fixture(scope="module")
def released(cache, release_tree):
    """The probe's receipts on 0.5.22 and 0.5.23: {(version, probe): receipt}."""
    for v in ("0.5.22", "0.5.23"):
        release_tree(v)
    return helpers.probed(cache, ("0.5.22", "0.5.23"), [PROBE], case_timeout=20)


def test_reads_not_fixed_on_0_5_22_and_fixed_on_0_5_23(released):
    for case_id, expected in WINDOWS.items():
        shown = tuple(judging.state(released[(v, PROBE)].case(case_id)) for v in ("0.5.22", "0.5.23"))
        assert shown == expected, (case_id, shown)
    for receipt in released.values():  # every case observed: a harness gap is never a verdict
        assert all(c.outcome == "observed" for c in receipt.cases), [(c.id, c.error) for c in receipt.cases if c.error]
    (before,) = judging.fixes([released[("0.5.22", PROBE)]])
    (after,) = judging.fixes([released[("0.5.23", PROBE)]])
    assert before.status == "not fixed" and after.status == "fixed", (before, after)


def test_the_forward_landed_on_the_restored_page_before_the_fix(released):
    """0.5.22: the restore's copy lands first and the finished request's forward overwrites the page it was given;
    0.5.23: the scheduling stream waits for the forward stream, the forward lands first."""
    def order(effects: dict) -> list[str]:
        return [x["label"] for x in effects["device"] if x["event"] == "lands" and x["label"] != "device-to-host copy"]

    before = released[("0.5.22", PROBE)].case("forward-in-flight").effects
    after = released[("0.5.23", PROBE)].case("forward-in-flight").effects
    (page,) = before["in_flight"]
    assert page in before["request"]["slots"]  # the resumed request was given the page the forward writes
    assert order(before) == ["host-to-device copy", "forward (req-F's next token)"]
    assert {p["holds"] for p in before["pages"] if p["slot"] == page} == {"req-F (forward in flight)[0]"}
    assert not any(x["event"] == "wait_stream" for x in before["device"])
    assert order(after) == ["forward (req-F's next token)", "host-to-device copy"]
    assert {"event": "wait_stream", "stream": "schedule", "on": "forward"}.items() <= next(
        x for x in after["device"] if x["event"] == "wait_stream").items()


@pytest.fixture(scope="module")
def tried(tmp_path_factory, cache):
    return helpers.hunk_trials(tmp_path_factory, cache.root)


def test_every_single_duty_hunk_reads_broken_and_every_equivalent_fixed(tried):
    helpers.check_hunk_reads(tried("0.5.23", 6, HUNKS), HUNKS)
