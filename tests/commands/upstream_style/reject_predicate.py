"""``is_unadmitted_reject`` tells a request rejected at intake from one that re-enters its queue.

Written by diffprobe in the style of SGLang's own unit tests. It imports the predicate at module
level, as upstream's tests do, so a tree without it does not collect this file at all.
"""

import unittest

from door_stubs import TOO_LONG, make_req

from sglang.srt.disaggregation.utils import is_unadmitted_reject
from sglang.test.test_utils import CustomTestCase


class TestUnadmittedReject(CustomTestCase):
    def test_rejected_at_intake(self):
        req = make_req()
        req.set_finish_with_abort(TOO_LONG)
        self.assertTrue(is_unadmitted_reject(req))

    def test_not_rejected(self):
        self.assertFalse(is_unadmitted_reject(make_req(prompt_len=16)))

    def test_reentering_request_is_not_unadmitted(self):
        for marker in ("is_retracted", "metadata_buffer_index"):
            with self.subTest(marker=marker):
                req = make_req()
                req.set_finish_with_abort(TOO_LONG)
                if marker == "is_retracted":
                    req.is_retracted = True
                else:
                    req.metadata_buffer_index = 3
                self.assertFalse(is_unadmitted_reject(req))


if __name__ == "__main__":
    unittest.main()
