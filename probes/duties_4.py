"""The duty table of L4 (0.5.23, no upstream PR number known): a freed metadata slot's checksum row is zeroed (and
the checksum covers only the pages after decode's cached prefix).

Decode's metadata slot holds, beside the first output token, the KV digest prefill wrote for the request (with
``--disaggregation-enable-kv-checksum``). A prefill instance not running the option (a rolling restart) registers
one metadata buffer fewer, so the aux transfer leaves decode's digest row as it was: before the fix, as the slot's
previous owner left it, and the next request was checked against that request's digest. From 0.5.23
``MetadataBuffers.clear_slot`` zeroes the row whenever the slot is freed, and the request is admitted unverified.

Rows are duties (id, what must hold, the check over a case's recorded effects); the case space (``SPACE``)
says which cases check which duties; ``FIX_CODE`` names the code the fix changed (what ``mutate`` mutates).
Standard library only: the host judges with it too.
"""

from __future__ import annotations

from . import duties_39500, space
from .duties_lifetime import DECODE, frees, site
from .effects import Duty, Effects

PROBE = "handoff-slot"


def previous_accepted(e: Effects) -> bool:
    """The slot's previous owner completed as it should: a full handoff (verified where the option is on) committed
    and read, only its own KV, not aborted or released; or, aborted by its client, never read and its pages given back
    once; either way its slot went back to the tree's allocator (so the subject reused it)."""
    rank, previous = e["decode"][0], e["previous"]
    rid = previous["rid"]
    if previous["aborted"]:
        freed = sorted(p for f in frees(rank, rid) for p in f["pages"])
        done = (not any(rid in batch["runs"] for batch in e["batches"]) and previous["request"]["finished"]
                and freed == sorted(rank["requests"][rid]["pages"]) and not rank["double_frees"])
    else:
        done = (any(rid in batch["runs"] for batch in e["batches"])
                and not any(r["rid"] == rid for r in rank["unwritten_reads"])
                and not previous["request"]["finished"] and not frees(rank, rid))
    return done and previous["slot"] in rank["metadata_frees"] and previous["subject_slot"] == previous["slot"]


def not_inherited(e: Effects) -> bool:
    """The subject, whose prefill wrote no digest into the reused slot, was not judged by the digest its previous
    owner left there: its full handoff was committed and read, only its own KV, and not aborted or released."""
    return duties_39500.full_accepted(e)


def past_prefix(e: Effects) -> bool:
    """A healthy handoff past a prefix decode's cache held, that cache's KV computed by another prefill instance (the
    same tokens, other bytes), was accepted: the digests cover only the pages prefill sent, not the cached prefix."""
    return duties_39500.full_accepted(e)


DUTIES: tuple[Duty, ...] = (
    Duty("slot-previous-accepted",
         "the previous owner of the subject's metadata slot, a full handoff, was committed and read, only its own KV, "
         "and its slot freed to the allocator (a guard: healthy work completes)",
         previous_accepted),
    Duty("slot-digest-not-inherited",
         "a request whose prefill wrote no digest into a reused metadata slot is not checked against the digest the "
         "slot's previous owner left: its full handoff is committed and read, not aborted",
         not_inherited),
    Duty("checksum-past-prefix",
         "a healthy handoff past the prefix decode's cache held, that prefix's KV computed by another prefill instance "
         "(the same tokens, other bytes), is committed and read, not aborted: each side digests only the pages "
         "prefill sent",
         past_prefix),
)

SPACE = space.Space(
    probe=PROBE,
    dimensions=(
        space.Dimension("slot", (
            space.Value("reused", "the subject's decode metadata slot is the one the tree freed when it committed the "
                        "previous owner's full handoff (sent by a prefill running the option as decode does) in the "
                        "decode step before", label="slot-reused", says="a reused metadata slot"),
            space.Value("aborted", "the subject's decode metadata slot is the one the tree's deferred release freed for "
                        "the previous owner, whose client aborted it after its handoff (KV and digest row) landed, the "
                        "success still on the wire, released on prefill's acknowledgement",
                        label="slot-reused-after-abort", says="a metadata slot reused after its owner's abort"),
        ), core=True, reads=("clear_slot", "kv_checksum")),
        space.Dimension("transfer", (
            space.Value("full", "all 4 pages written", label="", says="a full handoff"),
            space.Value("short", "the prefill request was cut to its 1-token placeholder: its last chunk sends 1 page "
                        "of the 4 decode reserved", label="short-handoff",
                        says="prefill sends 1 page of the 4 decode reserved"),
        ), over={"config": ("with-kv-checksum",)}, reads=("expected_kv_checksum",)),
        space.Dimension("prefill", (
            space.Value("same", "the subject's prefill runs the option as decode does (it writes its own digest)",
                        label=""),
            space.Value("without", "the subject's prefill instance does not run the option yet (a rolling restart): "
                        "it registers no digest buffer, so the aux transfer leaves decode's digest row as it was",
                        label="prefill-without-checksum", says="its prefill not running the checksum"),
        ), over={"config": ("with-kv-checksum",), "transfer": ("full",)}, reads=("get_kv_checksum",)),
        space.Dimension("decode_cache", (
            space.Value("miss", "decode's prefix cache holds nothing of the prompt", label=""),
            space.Value("prefix-from-another-prefill", "decode's prefix cache (--disaggregation-decode-enable-radix-cache) "
                        "holds the prompt's first 2 tokens as another prefill instance computed and sent them for an "
                        "earlier request (the same tokens, other bytes); this prefill's own cache holds its own "
                        "computation: decode reserves, and prefill sends, only the other 2",
                        label="decode-prefix-from-another-prefill",
                        says="decode's cached prefix computed by another prefill instance"),
        ), over={"config": ("with-kv-checksum",), "slot": ("reused",)},
            reads=("cache_protected_len", "disagg_decode_prefix_len")),
        space.Dimension("config", (
            space.Value("default", "the stock server: the checksum off (no digest row)", label=""),
            space.Value("with-kv-checksum", "--disaggregation-enable-kv-checksum on decode (and on the prefill "
                        "instances the dimension prefill says)", says="kv checksum on"),
        ), core=True, reads=("disaggregation_enable_kv_checksum",)),
    ),
    bug=({"config": ("with-kv-checksum",), "prefill": ("without",)},
         {"decode_cache": ("prefix-from-another-prefill",)}),
    duties_by=(
        space.Rule({}, ("slot-previous-accepted",)),
        space.Rule({"transfer": ("full",), "prefill": ("same",), "decode_cache": ("miss",)}, ("handoff-full-accepted",)),
        space.Rule({"decode_cache": ("prefix-from-another-prefill",)}, ("checksum-past-prefix",)),
        space.Rule({"transfer": ("short",)}, duties_39500.SHORT),
        space.Rule({"prefill": ("without",)}, ("slot-digest-not-inherited",)),
    ),
    site=site,
)

# The code the fix changed, in the release that first carries it (0.5.23), by qualified name (whole functions, or
# the slice of a long one naming these): what ``diffprobe mutate`` changes, one statement at a time.
FIX_CODE: dict[str, tuple[str, ...]] = {
    "sglang.srt.disaggregation.utils.MetadataBuffers.clear_slot": (),
    f"{DECODE}.DecodeTransferQueue.pop_transferred": ("clear_slot",),
    f"{DECODE}.DecodeTransferQueue._do_release": ("clear_slot",),
    # the digests past decode's cached prefix, on both sides
    f"{DECODE}.SchedulerDisaggregationDecodeMixin._verify_kv_checksums": ("start_idx",),
    "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin.send_kv_chunk": ("start_idx",),
}

EQUIVALENT: dict[tuple[str, str, str], str] = {}
EXPLAINED: dict[tuple[str, str, str], str] = {
    ("MetadataBuffers.clear_slot", "delete", "self.bootstrap_room[idx] = 0"):
        "the room reset is the metadata gate's, older than L4 (0.5.22 reset it inline where the slot is freed): it "
        "tells a row not yet written apart from the previous owner's only when a transfer's status arrives before its "
        "metadata row, which no case builds (the transfer worker writes the row before reporting success); L4's "
        "promise is the checksum row",
}
