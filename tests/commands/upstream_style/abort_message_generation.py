"""Hand-made in upstream's style (not upstream's file): a decode's ABORT as the 0.5.22 era sends it,
five frames (the generation last), handed to the prefill's NIXL manager, with one expectation no
release meets (a concluded room is never acknowledged): a message of the tree's own shape whose
failure is the tree's behaviour, against the test's assertion."""

import unittest

from sglang.srt.disaggregation.base.conn import KVPoll
from sglang.srt.disaggregation.nixl.conn import NixlKVManager


def prefill_manager():
    mgr = NixlKVManager.__new__(NixlKVManager)
    mgr.enable_deferred_decode_kv_release = True
    mgr._deferred_ack_targets = {}
    mgr._deferred_ack_poisoned_rooms = set()
    mgr._staging_outstanding = {}
    mgr.request_status = {11: KVPoll.Success}
    mgr.check_status = lambda room: mgr.request_status[room]
    mgr.sent = []
    mgr._send_abort_ack = lambda *args: mgr.sent.append(args)
    return mgr


def abort_message(room=11, generation=7):
    return [b"ABORT", str(room).encode("ascii"), b"10.0.0.3", b"6000", str(generation).encode("ascii")]


class TestConcludedRoom(unittest.TestCase):
    def test_a_concluded_room_is_acknowledged_at_once(self):
        mgr = prefill_manager()
        self.assertTrue(mgr._handle_abort_notification(abort_message()))
        self.assertEqual(len(mgr.sent), 1)

    def test_a_concluded_room_is_never_acknowledged(self):
        mgr = prefill_manager()
        self.assertTrue(mgr._handle_abort_notification(abort_message()))
        self.assertEqual(mgr.sent, [])
