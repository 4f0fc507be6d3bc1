"""No single-duty change of a fix is ever reported "fixed" (issues #11 and #22).

Each change is one hunk of a fix's code in a real release, the way a sloppy vendor backport would make
it: every name stays defined, one duty of the fix breaks on one input of its case space. There is one
per dimension of each probe's space (the door, the request's state and what it holds, sessions, the
fake transfer, a new prefill peer, capacity; abort, chunk phase, bootstrap, holdings, sender, grammar,
sampling mask, discarded output, overlap, HiCache), and each must read "not fixed" (or "regression" for a
door or loop that drops a guard) naming the duty. Behaviour-preserving refactors must stay "fixed".

They run as ``mutate --hunks`` in one harness process per release and fix (one SGLang import; each
change swapped into the imported function in a forked child, run against every case reaching it), so
the whole table costs a few imports, not an environment per fork. A change that is not a function body
edit (a retire method renamed) and a refactor of the retire path are ``path:`` forks, audited end to end.
"""

from __future__ import annotations


import pytest

from runner.app import pipeline
from runner.commands import options
from runner.judge import judging
from tests import forks, helpers

pytestmark = pytest.mark.slow  # real releases, environments and SGLang imports

# One release of the era that carries both fixes: 0.5.22, whose table is 0.5.21's and the discarded-output
# hunk (0.5.21 lacks that path). Both read alike in every earlier run; 0.5.21's two more mutate runs
# cost 85 s of CPU in a full run.
RELEASES = ["0.5.22"]
PREFILL, SCHEDULER = forks.PREFILL, forks.SCHEDULER
RESULT = "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin.process_batch_result_disagg_prefill"
RETIRE_RESULT = "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin._retire_aborted_prefill_result"
PREFILL_ADD = "sglang.srt.disaggregation.prefill.PrefillBootstrapQueue.add"
DECODE_ADD = "sglang.srt.disaggregation.decode.DecodePreallocQueue.add"
PREDICATE = "sglang.srt.disaggregation.utils.is_unadmitted_reject"
RETIRE = "sglang.srt.managers.scheduler.Scheduler.retire_unadmitted_request"
DECODE_GATE = "if not is_retracted and not is_rebootstrap and is_unadmitted_reject(req):"
ABORT_TRY = (
    "            try:\n                sender.abort()\n            except Exception:\n"
    "                # Transport notification is best effort; local ownership must\n"
    "                # still be released or the next idle invariant check will fail.\n"
    "                logger.exception(\"Failed to notify KV sender of abort for %s\", req.rid)\n"
)

# id -> (function, old, new, what the tree with it reads, a case that shows it, what the reading names: the
# broken duty, or what the tree's own code did)
HUNKS = {
    38935: {
        # door
        "prefill-gate-dropped": (PREFILL_ADD, "        if is_unadmitted_reject(req):\n            self.scheduler."
                                 "retire_unadmitted_request(req)\n            return\n", "",
                                 "not fixed", "prefill-door-rejected", "door-not-queued"),
        "decode-gate-dropped": (DECODE_ADD, DECODE_GATE, "if False:", "not fixed", "decode-door-rejected", "door-not-queued"),
        # abort: a door that retires every pending abort drops requests aborted while they ran
        "predicate-any-abort": (PREDICATE, "return is_aborted(req) and not (", "return is_aborted(req) or not (",
                                "regression", "prefill-door-valid", "the tree's code raised"),  # retiring it crashes
        # entry
        "preempted-not-recognised": (PREDICATE, "        req.is_retracted\n        or ", "        ",
                                     "regression", "prefill-door-preempted", "door-keeps-resources"),
        "retracted-retired-at-door": (DECODE_ADD, DECODE_GATE, DECODE_GATE.replace("not is_retracted and ", ""),
                                      "regression", "decode-door-retracted", "door-queued-retracted"),
        "rebootstrap-retired-at-door": (DECODE_ADD, DECODE_GATE, DECODE_GATE.replace("not is_rebootstrap and ", ""),
                                        "regression", "decode-door-rebootstrap", "door-queued-prealloc"),
        # holds: each resource a re-entering request may hold, at the door that did not guard it (#22)
        "kv-not-a-keeper": (PREDICATE, "        or req.kv.holds_kv\n", "", "regression", "decode-door-reentry-kv",
                            "door-keeps-resources"),
        "metadata-not-a-keeper": (PREDICATE, "        or req.metadata_buffer_index >= 0\n", "", "regression",
                                  "decode-door-reentry-metadata", "door-keeps-resources"),
        "mamba-not-a-keeper": (PREDICATE, "        or req.kv.holds_mamba\n", "", "regression", "prefill-door-reentry-mamba",
                               "door-keeps-resources"),
        "backup-not-a-keeper": (PREDICATE, "        or req.kv.retraction_backup is not None\n", "", "regression",
                                "decode-door-reentry-backup", "door-keeps-resources"),
        "decode-gate-pending-abort-only": (DECODE_ADD, DECODE_GATE, DECODE_GATE.replace("is_unadmitted_reject(req)",
                                           "req.to_finish is not None"), "regression", "decode-door-reentry-kv",
                                           "door-keeps-resources"),
        # capacity, transfer, peer
        "over-capacity-admitted": (PREFILL_ADD, "        if not self.create_sender(req, num_kv_heads):\n            return\n",
                                   "        self.create_sender(req, num_kv_heads)\n", "regression",
                                   "prefill-door-valid-over-capacity", "door-refused-over-capacity"),
        "fake-receiver-not-initialised": (DECODE_ADD, "                decode_req.kv_receiver.init(0)\n", "",
                                          "regression", "decode-door-valid-fake", "door-fake-initialised"),
        "new-peer-not-pending": (DECODE_ADD, "            self.pending_reqs.append(decode_req)\n", "", "regression",
                                 "decode-door-valid-new-peer", "door-awaits-peer"),
        # session: the rejected turn's streaming session kept in flight; sessions let through at the decode door
        "session-not-released": (RETIRE, "            req.session.abort_req()\n", "", "not fixed",
                                 "decode-door-rejected-session", "door-session-released"),
        "decode-gate-skips-sessions": (DECODE_ADD, DECODE_GATE, DECODE_GATE.replace(":", " and req.session is None:"),
                                       "not fixed", "decode-door-rejected-plain-session", "door-not-queued"),
        # the retire path itself
        "rejection-not-streamed": (RETIRE, "        self.output_streamer.stream_output([req], req.return_logprob)\n", "",
                                   "not fixed", "decode-door-rejected", "door-streamed-once"),
        "cache-not-released": (RETIRE, "        self._release_aborted_request(req)\n", "", "not fixed",
                               "prefill-door-rejected", "door-cache-released"),
        "cache-finished-as-success": (RETIRE, "        self._release_aborted_request(req)\n", "        self.tree_cache.finish("
                                      "req.cache_request_handle, CacheRequestOutcome.SUCCESS)\n", "not fixed",
                                      "decode-door-rejected", "door-cache-released"),
        # behaviour-preserving refactors: still fixed
        "refactor-decode-gate-nested": (DECODE_ADD, "        " + DECODE_GATE + "\n            self.scheduler."
                                        "retire_unadmitted_request(req)\n            return\n",
                                        "        if not (is_retracted or is_rebootstrap):\n            if is_unadmitted_reject"
                                        "(req):\n                self.scheduler.retire_unadmitted_request(req)\n"
                                        "                return\n", "fixed", None, None),
        "refactor-predicate-order": (PREDICATE, "        req.is_retracted\n        or req.kv.holds_kv\n",
                                     "        req.kv.holds_kv\n        or req.is_retracted\n", "fixed", None, None),
    },
    36988: {
        # abort: pending, and the late result of a retired request (with a grammar: #22)
        "abort-check-dropped": (RESULT, "                if is_aborted(req):\n                    if self._retire", "                if False:\n"
                                "                    if self._retire", "not fixed", "aborted-final-result", "result-sender-aborted"),
        "late-result-not-ignored": (RETIRE_RESULT, "        if not owns_resources:\n", "        if False:\n", "not fixed",
                                    "late-result-after-retire", "result-late-no-effect"),
        "abort-check-misses-finished": ("sglang.srt.disaggregation.utils.is_aborted",
                                        " or isinstance(\n        req.finished_reason, FINISH_ABORT\n    )", "",
                                        "not fixed", "late-result-after-retire", "late-result-after-retire: "),  # a duty, or it crashes
        "late-grammar-skips-abort-check": (RESULT, "                if is_aborted(req):\n                    if self._retire",
                                           "                if is_aborted(req) and req.grammar is None:\n"
                                           "                    if self._retire", "not fixed", "late-final-result-grammar",
                                           "result-late-no-effect"),
        # phase: chunked, last chunk launched, yielded (its bootstrap already completed: #22)
        "middle-chunk-retired-early": (RESULT, "if not still_chunking and self._retire_aborted_prefill_result(req):",
                                       "if self._retire_aborted_prefill_result(req):", "not fixed", "aborted-chunked",
                                       "result-not-freed-early"),
        "last-launched-not-chunking": (RESULT, "still_chunking = self.chunked_req is req or (",
                                       "still_chunking = self.chunked_req is req or False and (", "regression",
                                       "healthy-last-launched-optimistic-overlap", "result-kept-for-bootstrap"),
        "yielded-retired-only-if-optimistic": (RESULT, "if not still_chunking and self._retire_aborted_prefill_result(req):",
                                               "if not still_chunking and req.pending_bootstrap and "
                                               "self._retire_aborted_prefill_result(req):", "not fixed", "aborted-yielded",
                                               "result-sender-aborted"),
        # bootstrap, holdings, sender
        "bootstrap-left-pending": (RETIRE_RESULT, "        req.pending_bootstrap = False\n", "", "not fixed",
                                   "aborted-final-result-optimistic", "result-bootstrap-settled"),
        "metadata-kept": (RETIRE_RESULT, "        maybe_release_metadata_buffer(req, self.req_to_metadata_buffer_idx_allocator)\n",
                          "", "not fixed", "metadata-only", "result-metadata-freed"),
        "mamba-kept": (RETIRE_RESULT, "        if req.kv.holds_kv or req.kv.holds_mamba:\n", "        if req.kv.holds_kv:\n",
                       "not fixed", "mamba-before-kv", "result-mamba-freed"),
        "sender-never-aborted": (RETIRE_RESULT, "                sender.abort()\n", "                pass\n", "not fixed",
                                 "aborted-final-result", "result-sender-aborted"),
        "abort-failure-escapes": (RETIRE_RESULT, ABORT_TRY, "            sender.abort()\n", "not fixed",
                                  "sender-abort-raises", "result-returns"),
        "pending-chunk-kept": (RETIRE_RESULT, "        self.clear_pending_chunk_send(req)\n", "", "not fixed",
                               "aborted-final-result", "result-pending-chunk-cleared"),
        # grammar, sampling mask (#22), HiCache, overlap
        "grammar-rejection-not-retired": (RESULT, forks.GRAMMAR_CLEANUP, "", "not fixed", "grammar-rejection",
                                          "grammar-rejection: "),  # a duty, or (0.5.22) it crashes
        "mask-abort-not-marked": (RESULT, "                    req.to_finish = sampling_mask_finish_reason\n", "",
                                  "not fixed", "healthy-final-result-mask-rejects", "result-finished"),
        "hicache-not-finished": (RETIRE_RESULT, "        self.tree_cache.finish(req.cache_request_handle, "
                                 "CacheRequestOutcome.ABORT)\n", "", "not fixed", "aborted-final-result",
                                 "result-cache-finished-aborted"),
        "middle-chunk-sent-without-overlap": (RESULT, "if self.enable_overlap and not req.pending_bootstrap:",
                                              "if not req.pending_bootstrap:", "regression", "healthy-chunked",
                                              "result-last-chunk-sent"),
        # behaviour-preserving refactors: still fixed
        "refactor-owns-resources-order": (RETIRE_RESULT, "req.kv.holds_kv or req.kv.holds_mamba or req.metadata_buffer_index >= 0",
                                          "req.metadata_buffer_index >= 0 or req.kv.holds_mamba or req.kv.holds_kv",
                                          "fixed", None, None),
        "refactor-finish-in-a-block": (
            RETIRE_RESULT, "        self.tree_cache.finish(req.cache_request_handle, CacheRequestOutcome.ABORT)\n",
            "        if True:\n            self.tree_cache.finish(req.cache_request_handle, CacheRequestOutcome.ABORT)\n",
            "fixed", None, None),
    },
}
# 0.5.22 on: the result of a request whose external KV load failed is aborted (its discarded output)
DISCARD = ("discarded-output-sent", (RESULT, "                    req.to_finish = req.discard_output_reason\n",
                                     "                    pass\n",
                                     "not fixed", "healthy-final-result-discarded", "result-sender-aborted"))


def _table(version: str, fix: int) -> dict[str, tuple]:
    table = dict(HUNKS[fix])
    if fix == 36988 and version != "0.5.21":
        table[DISCARD[0]] = DISCARD[1]
    return table


@pytest.fixture(scope="module")
def tried(tmp_path_factory, cache):
    return helpers.hunk_trials(tmp_path_factory, cache.root)


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("fix", sorted(HUNKS))
def test_every_single_duty_hunk_reads_broken_and_every_refactor_fixed(version, fix, tried):
    """The first case that settled a broken hunk's reading names its duty (the example case, or another)."""
    helpers.check_hunk_reads(tried(version, fix, _table(version, fix)), _table(version, fix))


# path: forks of 0.5.21, audited end to end: name -> edits
PATH_FORKS = {
    "renamed-retire": [(SCHEDULER, "    def retire_unadmitted_request(self, req: Req) -> None:",
                        "    def retire_unadmitted_request_v2(self, req: Req) -> None:")],
    "released-inline": [(SCHEDULER, forks.RELEASE, forks.RELEASED_INLINE)],
}


@pytest.fixture(scope="module")
def path_forks(release_tree, cache, tmp_path_factory) -> dict[str, object]:
    """Each fork of ``PATH_FORKS``' admission receipt: both probed in one run, two trees at a time."""
    work = tmp_path_factory.mktemp("path-forks")
    texts = {name: f"path:{forks.make(release_tree('0.5.21').root, work / name, edits)}" for name, edits in PATH_FORKS.items()}
    opts = pipeline.Options(cache=cache, probe=options.ProbeOptions(jobs=2, case_timeout=20))
    _, got = pipeline.probe_sources({text: ["admission"] for text in texts.values()}, opts)
    return {name: got[(text, "admission")] for name, text in texts.items()}


def test_a_scheduler_lacking_the_retire_method_is_not_fixed(path_forks):
    """A change that is not a function body's: the retire method renamed, so the door's call raises as in production."""
    receipt = path_forks["renamed-retire"]
    assert judging.status(receipt.cases) == "not fixed"
    case = receipt.case("prefill-door-rejected")
    assert case.outcome == "observed" and "door-retired-by-tree" in judging.failed_duties(case), (case.error, case.duties)


def test_a_retire_path_releasing_the_cache_its_own_way_is_fixed(path_forks):
    """The duty is that the tree cache hears the rejected request ended aborted, not which helper
    says so: a retire path calling ``tree_cache.finish`` itself (as a PR head or a fork may) is fixed."""
    receipt = path_forks["released-inline"]
    assert judging.status(receipt.cases) == "fixed"
    for case in receipt.cases:
        if case.role == "bug" and case.outcome == "observed":
            assert case.duties["door-cache-released"], (case.id, case.duties)
