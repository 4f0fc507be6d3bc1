"""The duty table of L6 (0.5.23, no upstream PR number known): a retracted request's KV is restored only after the
forward pass still in flight.

Under overlap scheduling a request that finished last step can still have its forward in flight, writing its next
token's KV into a page it was given; its pages go back as it finishes, and a retracted request resumed in the same
pass (``DecodePreallocQueue.resume_retracted_reqs``) can be given that page. The restore of its KV is a host-to-device
copy on the HiCache copy stream, ordered after the work recorded on the scheduling stream. From 0.5.23, with overlap
on, the scheduling stream waits for the forward stream before each restore (``schedule_stream.wait_stream
(forward_stream)``), so the copy lands after the forward's write; before it the write could land on the restored KV.

Rows are duties (id, what must hold, the check over a case's recorded effects); the case space (``SPACE``)
says which cases check which duties; ``FIX_CODE`` names the code the fix changed (what ``mutate`` mutates).
Standard library only: the host judges with it too.
"""

from __future__ import annotations

from . import space
from .effects import Duty, Effects

DECODE = "sglang.srt.disaggregation.decode"
RESTORE = "host-to-device copy"


def _landed(e: Effects) -> list[dict]:
    return [x for x in e["device"] if x["event"] == "lands"]


def restored_after_forward(e: Effects) -> bool:
    """Every page the forward in flight wrote, where the restore also copied KV into it, took the forward's write
    first: in the device's recorded order, the forward's write landed before the restore's copy (a case with no
    forward in flight passes: nothing to order)."""
    launched = {x["op"]: set(x["slots"]) for x in e["device"] if x["event"] == "launch"}
    landed = {x["op"]: x["seq"] for x in _landed(e) if x["op"] in launched}
    copies = [x for x in _landed(e) if x["label"] == RESTORE]
    return all(op in landed for op in launched) and all(
        landed[op] < copy["seq"] for copy in copies for op, slots in launched.items() if slots & set(copy["slots"]))


def restored_own_kv(e: Effects) -> bool:
    """Once every write of the step landed, each position of the resumed request's KV holds its own KV for that
    position, on the pages it was given: none holds the finished request's, or nothing."""
    pages = e["pages"]
    return bool(pages) and len(pages) == e["request"]["length"] and all(
        p["holds"] == f"{e['subject']}[{i}]" for i, p in enumerate(pages))


def resumed(e: Effects) -> bool:
    """The retracted request was resumed: handed back to the scheduler, out of the retracted queue, no longer marked
    retracted, holding a KV row again."""
    r = e["request"]
    return (e["subject"] in e["resumed"] and e["subject"] not in e["retracted"] and not r["is_retracted"]
            and r["holds_kv"])


DUTIES: tuple[Duty, ...] = (
    Duty("restore-after-forward",
         "a retracted request's KV restored into a page the forward still in flight writes lands after that write "
         "(the device's recorded order)",
         restored_after_forward),
    Duty("restore-own-kv",
         "once the step's writes landed, every position of the resumed request's KV holds its own KV, not the "
         "finished request's or nothing",
         restored_own_kv),
    Duty("restore-resumed",
         "the retracted request was resumed: returned to the scheduler, out of the retracted queue, unmarked, "
         "holding a KV row (a guard: a healthy resume still resumes)",
         resumed),
)

SPACE = space.Space(
    probe="lifetime-restore",
    dimensions=(
        space.Dimension("overlap", (
            space.Value("on", "the stock decode server: overlap scheduling (the next batch's forward is launched, on "
                        "the forward stream, before the last batch's results are processed)", label=""),
            space.Value("off", "--disable-overlap-schedule: each forward runs on the scheduling stream (the forward "
                        "stream idle) and is waited for before its results are processed; no forward is in flight when "
                        "a retracted request resumes",
                        label="without-overlap", says="without overlap scheduling",
                        implies={"in_flight": "none"}),
        ), core=True, reads=("enable_overlap",)),
        space.Dimension("in_flight", (
            space.Value("finished", "another request finished last step: its pages go back (release_kv_cache) while "
                        "the next batch's forward, launched with it, still writes its next token's KV into the page it "
                        "was given; the resume is given that page", label="forward-in-flight",
                        says="a finished request's forward still writing a page the resume is given"),
            space.Value("none", "the other request finished with its forward done: the pages the resume is given hold "
                        "its old KV, nothing writes them", label="nothing-in-flight",
                        says="nothing in flight"),
        ), core=True, reads=("forward_stream", "schedule_stream")),
        space.Dimension("backup", (
            space.Value("host-pool", "--disaggregation-decode-retraction-backup host_pool (what a decode server "
                        "resolves for an MHA model): the KV backed up to the HiCache host pool and restored by its "
                        "host-to-device copy", label=""),
            space.Value("cpu-tensor", "--disaggregation-decode-retraction-backup cpu_tensor: the KV copied to CPU "
                        "tensors (offload_kv_cache) and restored by the pool's own load_cpu_copy, which synchronizes "
                        "the device first", label="cpu-tensor-backup", says="backed up to CPU tensors"),
        ), core=True, reads=("disaggregation_decode_retraction_backup",)),
    ),
    bug=({"overlap": ("on",), "in_flight": ("finished",), "backup": ("host-pool",)},),
    duties_by=(space.Rule({}, ("restore-after-forward", "restore-own-kv", "restore-resumed")),),
    site="retracted-resume",
)

# The code the fix changed, in the release that first carries it (0.5.23), by qualified name (the slice of the long
# function naming these): what ``diffprobe mutate`` changes, one statement at a time.
FIX_CODE: dict[str, tuple[str, ...]] = {
    f"{DECODE}.DecodePreallocQueue.resume_retracted_reqs": ("enable_overlap", "wait_stream"),
}

EQUIVALENT: dict[tuple[str, str, str], str] = {
    ("DecodePreallocQueue.resume_retracted_reqs", "true", "self.scheduler.enable_overlap"):
        "waiting without overlap too: without overlap the tree's run_batch runs the forward on the scheduling stream "
        "and waits for its result before scheduling again, so the forward stream has no work to wait for",
}
EXPLAINED: dict[tuple[str, str, str], str] = {}
