"""Hand-made in upstream's style (not upstream's file): the decode queue's held entries read as the
0.5.21 era stores them, (request, deadline, metadata index, required acknowledgements). 0.5.22 added
the start time: a 5-tuple. The queue is built by hand, as upstream's unit tests build it."""

import unittest
from types import SimpleNamespace

from sglang.srt.disaggregation.decode import DecodeTransferQueue


def held_queue():
    queue = DecodeTransferQueue.__new__(DecodeTransferQueue)
    queue.deferred_kv_release_timeout = 30.0
    queue.enable_host_receive = False
    queue._deferred_releases = []
    queue._is_host_destination = lambda decode_req: False
    return queue


def aborted_request():
    receiver = SimpleNamespace(bootstrap_infos=[object(), object()], abort_notified=True)
    return SimpleNamespace(kv_receiver=receiver, metadata_buffer_index=4, host_staged=False)


class TestHeldEntries(unittest.TestCase):
    def test_a_held_entry_unpacks_into_its_four_fields(self):
        queue = held_queue()
        queue._defer_release(aborted_request())
        request, deadline, index, required = queue._deferred_releases[0]
        self.assertEqual((index, required), (4, 2))

    def test_the_required_acknowledgements_are_the_last_field(self):
        queue = held_queue()
        queue._defer_release(aborted_request())
        self.assertEqual(queue._deferred_releases[0][-1], 2)

    def test_a_request_never_notified_still_waits_for_every_rank(self):
        # 0.5.23 waits for no acknowledgement when the receiver never sent the abort: a behaviour
        queue = held_queue()
        request = aborted_request()
        request.kv_receiver.abort_notified = False
        queue._defer_release(request)
        self.assertEqual(queue._deferred_releases[0][-1], 2)
