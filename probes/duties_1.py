"""The duty table of L1 (0.5.23, a local id: no upstream PR number known): decode ranks agree on a failed transfer.

Whether a failed transfer's decode pages are held, and when held pages are released, is agreed across the TP ranks
(``DecodeTransferQueue.pop_transferred`` reduces each rank's hold by MAX, ``resolve_deferred_releases`` each rank's
readiness by MIN): a rank that could not send its abort still holds while a peer does, and no rank releases on its
own acknowledgement or deadline while a peer still waits, so admission sees the same capacity on every rank.

Rows are duties (id, what must hold, the check over a case's recorded effects); the case space (``SPACE``)
says which cases check which duties; ``FIX_CODE`` names the code the fix changed (what ``mutate`` mutates).
Standard library only: the host judges with it too.
"""

from __future__ import annotations

from . import space
from .duties_lifetime import DECODE, DEFERRED_CONFIG, GUARD_ABORT, HELD, OFF, OFF_DUTIES, frees, on, on_rules, site, subject
from .effects import Duty, Effects


def release_passes(e: Effects, rank: dict) -> list[int]:
    """The passes of the decode ranks' event loop (``decode steps``, counted from 0) in which ``rank`` gave the
    subject's pages back; a release outside a pass (the abort's own) counts in the pass that follows it."""
    passes = [s["seq"] for s in e["steps"] if s["step"] == "decode steps"]
    return sorted({next((i for i, seq in enumerate(passes) if seq > f["seq"]), len(passes))
                   for f in frees(rank, subject(e))})


def ranks_agree(e: Effects) -> bool:
    """Every decode rank gave the subject's pages back in the same pass (each once), or none did, and the ranks never
    reached different all-reduces (where a server's ranks would wait on each other forever)."""
    seen = [release_passes(e, rank) for rank in e["decode"]]
    return (len(e["decode"]) > 1 and all(s == seen[0] for s in seen) and len(seen[0]) <= 1
            and not e.get("diverged"))


DUTIES: tuple[Duty, ...] = (
    Duty("lifetime-ranks-agree",
         "every decode rank gave the failed request's pages back in the same pass of the event loop: whether they "
         "are held, and when they are released, is agreed across the TP ranks (admission sees the same capacity "
         "on every rank), and no rank waits in an all-reduce its peers never reach",
         ranks_agree),
)

SPACE = space.Space(
    probe="lifetime-ranks",
    dimensions=(
        space.Dimension("ranks", (
            space.Value("cannot-notify", "two decode ranks hold the room; rank 1 never learned its prefill ranks (the "
                        "tree's send_metadata with no bootstrap infos fails the room), so it cannot send its abort, "
                        "while rank 0 published to them and notifies its prefill rank: each rank's own hold differs",
                        label="peer-cannot-notify", says="one of two decode ranks unable to send its abort"),
            space.Value("cannot-notify-writing", "as cannot-notify, rank 1's failure seen while prefill's write into "
                        "rank 0's pages is in flight: rank 0 must hold its pages for the write, rank 1 with it",
                        label="peer-cannot-notify-while-writing",
                        says="one of two decode ranks unable to send its abort while prefill writes the other's pages"),
            space.Value("ack-late", "two decode ranks abort the room while prefill's write is in flight; prefill's "
                        "drain acknowledgement reaches rank 0, rank 1's arrives after the release timeout: each "
                        "rank's own readiness differs", label="peer-ack-late",
                        says="the acknowledgement to one of two decode ranks arriving after the release timeout"),
            space.Value("ack-lost", "as ack-late, rank 1's acknowledgement lost on the wire", label="peer-ack-lost",
                        says="the acknowledgement to one of two decode ranks lost"),
            space.Value("acked", "two decode ranks abort the room while prefill's write is in flight; both "
                        "acknowledgements are delivered", label="both-acked",
                        says="two decode ranks aborting, both acknowledged"),
            space.Value("healthy", "a healthy transfer to two decode ranks", label="healthy-transfer",
                        says="a healthy transfer to two decode ranks"),
        ), core=True, reads=("abort_notified", "all_reduce_flags", "is_abort_release_safe", "required_acks",
                             "deadline", "ready", "drained", "held", "failed")),
        DEFERRED_CONFIG,
    ),
    # both acknowledged, the ranks agree by themselves where every peer is acknowledged (#41402): a bug case still, as
    # before #41402 the second rank's acknowledgement never comes and it is the lost case (a guard would read a
    # regression there); it also holds a defence that keeps the pages to the timeout on every rank to the acknowledgements
    bug=on({"ranks": ("cannot-notify", "cannot-notify-writing", "ack-late", "ack-lost", "acked")}),
    duties_by=(*on_rules(
        space.Rule({"ranks": ("cannot-notify",)}, ("lifetime-ranks-agree", *GUARD_ABORT)),
        space.Rule({"ranks": ("cannot-notify-writing", "ack-late", "ack-lost")}, ("lifetime-ranks-agree", *HELD)),
        space.Rule({"ranks": ("acked",)}, ("lifetime-ranks-agree", "lifetime-released-on-ack", *HELD)),
    ), space.Rule({**OFF, "ranks": ("cannot-notify", "cannot-notify-writing", "ack-late", "ack-lost", "acked")},
                  ("lifetime-ranks-agree", *OFF_DUTIES)),
        space.Rule({"ranks": ("healthy",)}, ("lifetime-committed",))),
    site=site,
)

# The code the fix changed, in the release that first carries it (pins.toml), by qualified name (whole functions,
# or the slice of a long one naming these): what ``diffprobe mutate`` changes, one statement at a time. The tree's
# reducer (utils.all_reduce_flags) runs in the cases, over the scene's process group standing in for torch.distributed;
# it is not listed: its one decision (a single-rank group reduces nothing) is the group's size, two in every case.
FIX_CODE: dict[str, tuple[str, ...]] = {
    f"{DECODE}.DecodeTransferQueue.pop_transferred": ("failed", "held", "all_reduce_flags", "hold"),
    f"{DECODE}.DecodeTransferQueue._defer_release": ("required_acks", "abort_notified"),
    f"{DECODE}.DecodeTransferQueue.resolve_deferred_releases": ("ready", "drained", "is_ready", "is_drained",
                                                                "all_reduce_flags"),
}

# Mutants no case can tell from the tree, each with why, keyed by (function, operator, statement before):
# ``EQUIVALENT`` ones behave the same on every input; ``EXPLAINED`` ones do not, and stay survivors.
EQUIVALENT: dict[tuple[str, str, str], str] = {}
EXPLAINED: dict[tuple[str, str, str], str] = {
    ("DecodeTransferQueue.pop_transferred", "true", "hold"):
        "every failed transfer deferred, held or not: where no rank holds, nothing is awaited (required_acks 0, "
        "readiness agreed) and the pages go back in the same pass's resolve_deferred_releases, as the release at "
        "once does; switched off, a rank that sent its abort awaits its prefill ranks' acknowledgements, which the "
        "switched-off path does not arrange, so its pages may come back only at the release timeout (logged): later, "
        "never earlier, and no duty of the switched-off configuration promises them back before the timeout (only "
        "back, once, a timeout release logged)",
}
