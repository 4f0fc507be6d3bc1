"""A test of a module that imports a GPU kernel library at module level (``flashinfer``, which
the CPU dependency layer leaves out on purpose): the environment lacks it, the test is not at fault.

Written by diffprobe in the style of SGLang's own unit tests.
"""

import unittest

from sglang.srt.speculative import uno_utils
from sglang.test.test_utils import CustomTestCase


class TestUnoUtils(CustomTestCase):
    def test_module_has_helpers(self):
        self.assertTrue(callable(getattr(uno_utils, "__getattr__", callable)))


if __name__ == "__main__":
    unittest.main()
