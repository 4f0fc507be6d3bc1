"""A request rejected at intake is retired at the prefill door: no sender, no queue slot.

Written by diffprobe in the style of SGLang's own unit tests (CustomTestCase, SimpleNamespace
stand-ins, subTest, MagicMock); the tree's ``PrefillBootstrapQueue.add`` runs on a stand-in queue.
"""

import unittest
from unittest.mock import MagicMock

import torch

from door_stubs import TOO_LONG, RecordingSender, make_req, make_scheduler, prefill_queue

from sglang.srt.disaggregation.prefill import PrefillBootstrapQueue
from sglang.srt.managers.schedule_batch import FINISH_ABORT
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.utils.common import make_layers
from sglang.test.test_utils import CustomTestCase


class _BareScheduler:
    """A scheduler of the releases before the door checks: nothing to retire with."""


class TestPrefillDoor(CustomTestCase):
    def test_rejection_is_pending_not_finished(self):
        req = make_req()
        req.set_finish_with_abort(TOO_LONG)
        self.assertIsInstance(req.to_finish, FINISH_ABORT)
        self.assertFalse(req.finished())
        self.assertEqual(len(req.origin_input_ids), 1)

    def test_rejected_request_is_retired_at_the_door(self):
        for variant in ("mock sender", "recording sender", "no sender"):
            with self.subTest(variant=variant):
                req = make_req()
                req.set_finish_with_abort(TOO_LONG)
                sched = make_scheduler()
                sender = {"mock sender": MagicMock(return_value=True), "recording sender": RecordingSender(),
                          "no sender": None}[variant]
                q = prefill_queue(sched, sender)
                PrefillBootstrapQueue.add(q, req, 8)
                if variant == "mock sender":
                    sender.assert_not_called()
                elif variant == "recording sender":
                    self.assertEqual(sender.created, [])
                self.assertEqual(q.queue, [])
                sched.retire_unadmitted_request.assert_called_once_with(req)

    def test_valid_request_is_admitted(self):
        req = make_req(prompt_len=16)
        sched = make_scheduler()
        q = prefill_queue(sched, MagicMock(return_value=True))
        PrefillBootstrapQueue.add(q, req, 8)
        self.assertEqual(q.queue, [req])
        sched.retire_unadmitted_request.assert_not_called()

    def test_door_of_old_releases_sends_rejected_requests(self):
        """Pins what the door did before it retired anything; its scheduler stand-in has no
        retirement, so a door that retires falls through to the stand-in."""
        req = make_req()
        req.set_finish_with_abort(TOO_LONG)
        q = prefill_queue(_BareScheduler(), MagicMock(return_value=True))
        PrefillBootstrapQueue.add(q, req, 8)
        self.assertEqual(q.queue, [req])


class TestTreeRaises(CustomTestCase):
    def test_sampling_params_accept_top_p_above_one(self):
        SamplingParams(top_p=2.0).verify(vocab_size=32000)

    def test_layers_split_over_more_ranks_than_layers(self):
        for pp_size in (1, 4):
            with self.subTest(pp_size=pp_size):
                make_layers(2, lambda idx, prefix: torch.nn.Identity(), pp_rank=0, pp_size=pp_size)


if __name__ == "__main__":
    unittest.main()
