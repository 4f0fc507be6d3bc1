"""Hand-made in upstream's style (not upstream's file): the prefill side records a health check's KV
checksum through a mock of the metadata buffers, written for the 0.5.22 era, where the last chunk
calls ``set_kv_checksum(req, value)``; 0.5.23 calls ``set_kv_checksum(req, digest, signature)``."""

import unittest
from types import SimpleNamespace
from unittest import mock

from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin


class FakePrefill(SchedulerDisaggregationPrefillMixin):
    def __init__(self):
        self.kv_checksum_computer = object()
        self.disagg_metadata_buffers = SimpleNamespace(set_kv_checksum=mock.Mock())


def health_check():
    return SimpleNamespace(rid="HEALTH_CHECK_7", bootstrap_room=7, origin_input_ids=[1])


def send_last_chunk(scheduler, req):
    with mock.patch.object(SchedulerDisaggregationPrefillMixin, "_send_kv_chunk", lambda *a, **k: None):
        scheduler.send_kv_chunk(req, last_chunk=True)


class TestHealthCheckChecksum(unittest.TestCase):
    def test_a_health_check_records_a_zero_checksum(self):
        scheduler, req = FakePrefill(), health_check()
        send_last_chunk(scheduler, req)
        scheduler.disagg_metadata_buffers.set_kv_checksum.assert_called_once_with(req, 0)

    def test_a_health_check_records_its_checksum_once(self):
        scheduler, req = FakePrefill(), health_check()
        send_last_chunk(scheduler, req)
        scheduler.disagg_metadata_buffers.set_kv_checksum.assert_called_once()

    def test_a_health_check_checksum_is_recorded_as_one_and_signed_zero(self):
        # written for 0.5.23's arity with a value no release records: on 0.5.23 the shape fits, and
        # the failure is the test's assertion
        scheduler, req = FakePrefill(), health_check()
        send_last_chunk(scheduler, req)
        scheduler.disagg_metadata_buffers.set_kv_checksum.assert_called_once_with(req, 1, 0)
