"""No single-duty change of a fix is ever reported "fixed" (issue #11).

Each fork is a real release with one statement of a fix changed, the way an auditor would try to
slip a broken backport past the evidence: every name stays defined, only one duty of the fix is
broken. Each must read "not fixed" (or "regression" for an over-eager door) at its fix, and the
receipt must name the broken duty.
"""

from __future__ import annotations

import pytest

from runner.commands import options, pipeline
from runner.evidence import judging
from tests import forks

pytestmark = pytest.mark.slow  # real releases, environments and SGLang imports

PREFILL, SCHEDULER, DECODE = forks.PREFILL, "sglang/srt/managers/scheduler.py", forks.DECODE
ABORT_TRY = (
    "            try:\n                sender.abort()\n            except Exception:\n"
    "                # Transport notification is best effort; local ownership must\n"
    "                # still be released or the next idle invariant check will fail.\n"
    "                logger.exception(\"Failed to notify KV sender of abort for %s\", req.rid)\n"
)
METADATA = "        maybe_release_metadata_buffer(req, self.req_to_metadata_buffer_idx_allocator)\n        req.pending_bootstrap = False\n        self.tree_cache.finish("
FINISH = "        self.tree_cache.finish(req.cache_request_handle, CacheRequestOutcome.ABORT)\n        if req.kv.holds_kv or req.kv.holds_mamba:\n"
CLEAR = "        \"\"\"Release an aborted request when its last prefill result is safe.\"\"\"\n        self.clear_pending_chunk_send(req)\n"
STREAM = "        req.update_finish_state()\n        self.output_streamer.stream_output([req], req.return_logprob)\n"

# name -> (probe, edits, case that must fail, the duty it must name, the fix's status)
MUTANTS = {
    "sender-never-aborted": ("prefill-cleanup", [(PREFILL, "                sender.abort()\n", "                pass\n")],
                             "aborted-final-result", "result-sender-aborted", "not fixed"),
    "abort-failure-escapes": ("prefill-cleanup", [(PREFILL, ABORT_TRY, "            sender.abort()\n")],
                              "sender-abort-raises", "result-returns", "not fixed"),
    "metadata-kept": ("prefill-cleanup", [(PREFILL, METADATA, METADATA.split("\n", 1)[1])],
                      "aborted-final-result", "result-metadata-freed", "not fixed"),
    "hicache-not-finished": ("prefill-cleanup", [(PREFILL, FINISH, FINISH.split("\n", 1)[1])],
                             "aborted-final-result", "result-cache-finished-aborted", "not fixed"),
    "pending-chunk-kept": ("prefill-cleanup", [(PREFILL, CLEAR, CLEAR.split("\n", 1)[0] + "\n")],
                           "aborted-final-result", "result-pending-chunk-cleared", "not fixed"),
    "scheduler-lacks-retire": ("admission", [(SCHEDULER, "    def retire_unadmitted_request(self, req: Req) -> None:",
                                              "    def retire_unadmitted_request_v2(self, req: Req) -> None:")],
                               "prefill-door-rejected", "door-retired-by-tree", "not fixed"),
    "cache-not-released": ("admission", [(SCHEDULER, forks.RELEASE, forks.RELEASE.split("\n", 1)[0] + "\n")],
                           "prefill-door-rejected", "door-cache-released", "not fixed"),
    "cache-finished-as-success": ("admission", [(SCHEDULER, forks.RELEASE, forks.RELEASED_INLINE.replace(".ABORT", ".SUCCESS"))],
                                  "decode-door-rejected", "door-cache-released", "not fixed"),
    "rejection-not-streamed": ("admission", [(SCHEDULER, STREAM, STREAM.split("\n", 1)[0] + "\n")],
                               "decode-door-rejected", "door-streamed-once", "not fixed"),
    "retracted-retired-at-door": ("admission", [(DECODE, forks.DECODE_GATE,
                                                 forks.DECODE_GATE.replace("not is_retracted and ", ""))],
                                  "decode-door-retracted", "door-queued-retracted", "regression"),
}


@pytest.fixture(scope="module")
def opts(cache):
    return pipeline.Options(cache=cache, probe=options.ProbeOptions(jobs=1, case_timeout=20))


@pytest.mark.parametrize("version", ["0.5.21", "0.5.22"])
@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_a_single_duty_mutant_is_never_fixed(name, version, tmp_path, release_tree, opts):
    probe, edits, case_id, duty, expected = MUTANTS[name]
    root = forks.make(release_tree(version).root, tmp_path / "fork", edits)
    text = f"path:{root}"
    _, got = pipeline.probe_sources({text: [probe]}, opts)
    receipt = got[(text, probe)]
    assert judging.status(receipt.cases) == expected
    case = receipt.case(case_id)
    assert case.outcome == "observed" and duty in judging.failed_duties(case), (case.error, case.duties)


@pytest.mark.parametrize("version", ["0.5.21"])
def test_a_retire_path_releasing_the_cache_its_own_way_is_fixed(version, tmp_path, release_tree, opts):
    """The duty is that the tree cache hears the rejected request ended aborted, not which helper
    says so: a retire path calling ``tree_cache.finish`` itself (as a PR head or a fork may) is fixed."""
    root = forks.make(release_tree(version).root, tmp_path / "fork", [(SCHEDULER, forks.RELEASE, forks.RELEASED_INLINE)])
    text = f"path:{root}"
    _, got = pipeline.probe_sources({text: ["admission"]}, opts)
    receipt = got[(text, "admission")]
    assert judging.status(receipt.cases) == "fixed"
    for case in receipt.cases:
        if case.role == "bug":
            assert case.outcome == "observed" and case.duties["door-cache-released"], (case.id, case.duties)
