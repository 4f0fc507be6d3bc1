"""The prefill result path's collaborators, patched by name as upstream's tests patch them.

Written by diffprobe in the style of SGLang's own unit tests. ``maybe_cache_unfinished_req`` is a
module-level helper of ``sglang.srt.disaggregation.prefill`` up to 0.5.21; later releases moved the
logic elsewhere, so a test that patches it by that name asks a later tree for something it lacks.
The stand-in scheduler below fits neither release: both read attributes it does not have.
"""

import unittest
from types import SimpleNamespace
from unittest.mock import patch

from sglang.srt.disaggregation import prefill
from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin
from sglang.test.test_utils import CustomTestCase


class TestPrefillCollaborators(CustomTestCase):
    def test_unfinished_cache_helper_can_be_stubbed(self):
        with patch("sglang.srt.disaggregation.prefill.maybe_cache_unfinished_req") as cache:
            self.assertIs(prefill.maybe_cache_unfinished_req, cache)

    def test_release_helper_can_be_stubbed(self):
        with patch("sglang.srt.disaggregation.prefill.release_kv_cache") as release:
            self.assertIs(prefill.release_kv_cache, release)

    def test_an_empty_batch_result_is_processed_without_side_effects(self):
        scheduler = SimpleNamespace()  # too thin for either release's result path
        batch = SimpleNamespace(reqs=[], spec_info=None, prefill_stats=None, dp_cooperation_info=None)
        SchedulerDisaggregationPrefillMixin.process_batch_result_disagg_prefill(scheduler, batch, SimpleNamespace())
        self.assertEqual(batch.reqs, [])


if __name__ == "__main__":
    unittest.main()
