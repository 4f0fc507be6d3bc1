"""Running code of a probed tree in an isolated process: the trust boundary between a fork and the host."""
