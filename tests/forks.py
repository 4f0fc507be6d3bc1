"""Fork trees made from a real release by editing its source, like a vendor would."""

from __future__ import annotations

import shutil
from pathlib import Path

from probes import duties

# Each edit: (file inside the tree, exact text to find, replacement). Finding nothing is an error:
# a fork that silently did not apply would make a test pass for the wrong reason.
Edit = tuple[str, str, str]

PREFILL = "sglang/srt/disaggregation/prefill.py"
DECODE = "sglang/srt/disaggregation/decode.py"
SCHEDULER = "sglang/srt/managers/scheduler.py"
SCHEDULE_BATCH = "sglang/srt/managers/schedule_batch.py"

PREFILL_GATE = "        if is_unadmitted_reject(req):\n            self.scheduler.retire_unadmitted_request(req)\n            return\n"
DECODE_GATE = "        if not is_retracted and not is_rebootstrap and is_unadmitted_reject(req):\n            self.scheduler.retire_unadmitted_request(req)\n            return\n"

WITHOUT_PREFILL_GATE: list[Edit] = [(PREFILL, PREFILL_GATE, "")]
WITHOUT_DECODE_GATE: list[Edit] = [(DECODE, DECODE_GATE, "")]


def rejected_at(door: str) -> list[str]:
    """The bug cases of #38935's case space at ``door`` ("prefill" or "decode"), in the space's order:
    what a tree without that door's gate must show the bug on (read from probes/duties_38935.py's SPACE,
    so a case the space gains is expected too)."""
    space = duties.SPACES["admission"]
    return [space.case_id(p) for p in space.points() if p["door"] == door and space.role(p) == "bug"]
# The cleanup of #36988 removed at one call site only: after a grammar rejection.
GRAMMAR_CLEANUP = (
    "                    if is_aborted(req):\n"
    "                        if self._retire_aborted_prefill_result(req):\n"
    "                            req.time_stats.set_completion_time()\n"
    "                            aborted_reqs.append(req)\n"
    "                        advance_logprob_pt(i, req)\n"
    "                        continue\n"
)
WITHOUT_GRAMMAR_CLEANUP: list[Edit] = [(PREFILL, GRAMMAR_CLEANUP, "")]
# The gate still recognises the rejected request, but hangs or crashes instead of retiring it,
# so only that case is hit and the others go on.
RETIRE = "            self.scheduler.retire_unadmitted_request(req)\n"
# The hang sleeps: its timeout kills it as it would a spinning one, without burning a core meanwhile.
HANG_AT_PREFILL_DOOR: list[Edit] = [(PREFILL, PREFILL_GATE, PREFILL_GATE.replace(RETIRE, "            import time\n            time.sleep(3600)\n"))]
CRASH_AT_DECODE_DOOR: list[Edit] = [
    (DECODE, DECODE_GATE, DECODE_GATE.replace(RETIRE, "            import os, signal\n            os.kill(os.getpid(), signal.SIGSEGV)\n"))
]

# 0.5.21's retire path releases the cache through a helper; a PR head or a fork may call the cache itself.
RELEASE = "        # that, and a retired request reaches neither.\n        self._release_aborted_request(req)\n"
RELEASED_INLINE = RELEASE.replace("self._release_aborted_request(req)",
                                  "self.tree_cache.finish(req.cache_request_handle, CacheRequestOutcome.ABORT)")


def make(release_root: Path, dest: Path, edits: list[Edit]) -> Path:
    shutil.copytree(release_root / "sglang", dest / "sglang")
    for rel, old, new in edits:
        path = dest / rel
        text = path.read_text()
        assert text.count(old) == 1, f"{rel}: the text to edit occurs {text.count(old)} times"
        path.write_text(text.replace(old, new))
    return dest


def _definition(path: Path, qualname: str) -> str:
    """The source of one function or method of a real tree, read at test time (never committed)."""
    import ast

    text = path.read_text()
    scope: list = ast.parse(text).body
    node = None
    for part in qualname.split("."):
        node = next(n for n in scope if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == part)
        scope = node.body
    lines = text.splitlines(keepends=True)
    return "".join(lines[node.lineno - 1 : node.end_lineno]) + "\n"


def backport_38935(older: Path, fixed: Path, dest: Path) -> Path:
    """``older`` (0.5.20) with #38935 backported the way a vendor would: both doors gated, and
    ``is_unadmitted_reject`` and ``Scheduler.retire_unadmitted_request`` taken from ``fixed`` (0.5.21)."""
    utils = "sglang/srt/disaggregation/utils.py"
    scheduler_text = _definition(fixed / SCHEDULER, "Scheduler.retire_unadmitted_request")
    make(older, dest, [
        (utils, "\ndef is_aborted(", "\n" + _definition(fixed / utils, "is_unadmitted_reject") + "\ndef is_aborted("),
        (PREFILL, "    is_aborted,\n", "    is_aborted,\n    is_unadmitted_reject,\n"),
        (PREFILL, "    def add(self, req: Req, num_kv_heads: int) -> None:\n",
         "    def add(self, req: Req, num_kv_heads: int) -> None:\n" + PREFILL_GATE),
        (DECODE, "    is_mla_backend,\n", "    is_mla_backend,\n    is_unadmitted_reject,\n"),
        (DECODE, "        if self._check_if_req_exceed_kv_capacity(req):\n            return\n\n        if is_retracted:\n",
         DECODE_GATE + "        if self._check_if_req_exceed_kv_capacity(req):\n            return\n\n        if is_retracted:\n"),
        (SCHEDULER, "    def _add_request_to_queue(", scheduler_text + "    def _add_request_to_queue("),
    ])
    return dest


# A hostile driver planted in a tree finds the probe case it runs inside (its id) by walking the stack.
CASE_ID = """
def _case_id():
    frame = sys._getframe()
    while frame is not None:
        case = frame.f_locals.get("case")
        if getattr(case, "id", None):
            return case.id
        frame = frame.f_back
    return None
"""
