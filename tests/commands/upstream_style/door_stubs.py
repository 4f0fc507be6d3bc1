"""Stand-ins for the scheduler and the prefill queue, shared by the door tests (a sibling helper
module, as upstream keeps them beside its tests)."""

from array import array
from types import SimpleNamespace
from unittest.mock import MagicMock

from sglang.srt.managers.schedule_batch import Req
from sglang.srt.sampling.sampling_params import SamplingParams

TOO_LONG = "Input length (900 tokens) exceeds the maximum allowed length (512 tokens)."


class RecordingSender:
    """Counts the senders a queue asks for; a rejected request must never get one."""

    def __init__(self):
        self.created = []

    def __call__(self, req, num_kv_heads):
        self.created.append(req.rid)
        return True


def make_req(prompt_len=900, rid="door"):
    req = Req(
        rid=rid,
        origin_input_text="",
        origin_input_ids=array("q", range(prompt_len)),
        sampling_params=SamplingParams(max_new_tokens=4),
    )
    req.time_stats.trace_ctx = MagicMock()
    return req


def make_scheduler(**extra):
    return SimpleNamespace(retire_unadmitted_request=MagicMock(), output_streamer=MagicMock(), **extra)


def prefill_queue(sched, sender=None):
    q = SimpleNamespace(scheduler=sched, queue=[])
    if sender is not None:
        q.create_sender = sender
    return q
