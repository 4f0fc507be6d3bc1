"""What each fix promises, as data: duties, and which case checks which.

A duty is one promise of a fix (its PR summary, its own tests), stated as a predicate over the
effects a case records. A case's bug signature is the conjunction of the duties it declares: the
case is ``clean`` when every one held and ``bug`` (for a guard case: a regression) when any failed,
and the failed ones are named. Nothing here imports SGLang or the rest of ``probes``: the host
imports this module to re-derive every classification from the recorded effects, so a verdict
that does not follow from its effects cannot pass for evidence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Effects = Mapping[str, Any]


@dataclass(frozen=True)
class Duty:
    id: str
    fix: int
    promise: str  # what must hold, in one line
    held: Callable[[Effects], bool]


# --- reading effects -----------------------------------------------------------------------------


def _rid(effects: Effects) -> str:
    return effects["request"]["rid"]


def returned(effects: Effects) -> bool:
    """No failure escaped the tree's own code (a scripted transport failure, a member its class lacks)."""
    return effects.get("escaped") is None


def _streams(effects: Effects) -> list[dict[str, Any]]:
    """Every request the tree streamed to its client, as it stood when streamed."""
    return [item for call in effects["streamed"] for item in call]


def _streamed_once_with(effects: Effects, status: int | None) -> bool:
    """Streamed exactly once, finished with an abort (of ``status`` when given) at that moment."""
    mine = [item for item in _streams(effects) if item["rid"] == _rid(effects)]
    if len(mine) != 1:
        return False
    reason = mine[0]["finished_reason"]
    return (
        isinstance(reason, dict)
        and reason.get("type") == "abort"
        and (status is None or reason.get("status_code") == status)
    )


# --- #38935: the admission doors ------------------------------------------------------------------

REJECTION_STATUS = 400  # what ``set_finish_with_abort`` gives an over-long prompt


def _admitted(effects: Effects) -> bool:
    return any(_rid(effects) in queue for queue in effects["queues"].values())


def _door_untouched(effects: Effects) -> bool:
    """A request the door must leave alone: not retired, not released, not finished or streamed,
    and whatever it held (metadata buffer, KV, Mamba, retraction backup) still held."""
    before, after = effects["before"], effects["request"]
    kept = ("metadata_buffer_index", "holds_kv", "holds_mamba", "holds_backup")
    return (
        not effects["retired"]
        and not effects["released_aborted"]
        and not _streams(effects)
        and not after["finished"]
        and all(before.get(key) == after.get(key) for key in kept)
    )


DOOR_DUTIES = (
    Duty("door-not-queued", 38935, "the rejected request entered no queue", lambda e: not _admitted(e)),
    Duty(
        "door-no-kv-endpoint",
        38935,
        "no KV sender or receiver was built for the rejected request",
        lambda e: not e["kv_endpoints"] and not e["kv_calls"],
    ),
    Duty(
        "door-no-bootstrap",
        38935,
        "no bootstrap was started for the rejected request",
        lambda e: not e["request"]["pending_bootstrap"] and not e["request"]["has_kv_sender"],
    ),
    Duty(
        "door-no-metadata-buffer",
        38935,
        "the rejected request holds no metadata buffer",
        lambda e: e["request"]["metadata_buffer_index"] < 0,
    ),
    Duty(
        "door-retired-by-tree",
        38935,
        "the door retired the request once, through the tree's own Scheduler.retire_unadmitted_request",
        lambda e: e["retired"] == [_rid(e)],
    ),
    Duty(
        "door-finished-rejected",
        38935,
        f"the request ended finished with the rejection's abort (status {REJECTION_STATUS})",
        lambda e: e["request"]["finished"]
        and isinstance(e["request"]["finished_reason"], dict)
        and e["request"]["finished_reason"].get("status_code") == REJECTION_STATUS,
    ),
    Duty(
        "door-streamed-once",
        38935,
        f"the client was streamed the rejection (status {REJECTION_STATUS}) exactly once",
        lambda e: _streamed_once_with(e, REJECTION_STATUS),
    ),
    Duty("door-returns", 38935, "the door returned: no failure escaped the tree's code", returned),
    Duty(
        "door-admits",
        38935,
        "the request reached its queue (a guard: the fix must not drop it)",
        _admitted,
    ),
    Duty(
        "door-keeps-resources",
        38935,
        "the request was not retired, finished or streamed, and kept what it held",
        _door_untouched,
    ),
)

REJECTED = ("door-not-queued", "door-no-kv-endpoint", "door-no-bootstrap", "door-no-metadata-buffer",
            "door-retired-by-tree", "door-finished-rejected", "door-streamed-once", "door-returns")
KEPT = ("door-admits", "door-keeps-resources", "door-returns")


# --- #36988: prefill result cleanup ---------------------------------------------------------------


def _final(effects: Effects) -> Mapping[str, Any]:
    return effects["results"][-1]


def _held(effects: Effects, key: str) -> bool:
    return bool(effects["before"][key])


def _untouched(snapshot: Mapping[str, Any]) -> bool:
    """No handoff and no release, stream or cache call: nothing happened to the request."""
    return not (
        snapshot["request"]["rid"] in snapshot["inflight_queue"]
        or snapshot["kv_chunks_sent"]
        or snapshot["sender_calls"]
        or snapshot["metadata_frees"]
        or snapshot["kv_releases"]
        or snapshot["tree_cache_calls"]
        or snapshot["streamed"]
    )


def _tree_cache(effects: Effects, call: str) -> list[Mapping[str, Any]]:
    return [c for c in _final(effects)["tree_cache_calls"] if c["call"] == call]


def _sender_aborted(effects: Effects) -> bool:
    calls = _final(effects)["sender_calls"]
    return calls.count("abort") == 1 if effects["before"]["has_kv_sender"] else not calls


def _metadata_freed(effects: Effects) -> bool:
    index = effects["before"]["metadata_buffer_index"]
    return _final(effects)["metadata_frees"] == ([index] if index >= 0 else [])


def _kv_released(effects: Effects) -> bool:
    """The KV it held went back exactly once (none released when it held none)."""
    releases = [r for r in _final(effects)["kv_releases"] if r["kv"]]
    return len(releases) == (1 if _held(effects, "holds_kv") else 0) and not _final(effects)["request"]["holds_kv"]


def _mamba_freed(effects: Effects) -> bool:
    releases = [r for r in _final(effects)["kv_releases"] if r["mamba"]]
    return len(releases) == (1 if _held(effects, "holds_mamba") else 0) and not _final(effects)["request"]["holds_mamba"]


def _cache_finished_aborted(effects: Effects) -> bool:
    finishes = _tree_cache(effects, "finish")
    return len(finishes) == 1 and any("ABORT" in str(arg) for arg in finishes[0]["args"])


RESULT_DUTIES = (
    Duty(
        "result-sender-aborted",
        36988,
        "the request's KV sender was told to abort, once",
        _sender_aborted,
    ),
    Duty(
        "result-returns",
        36988,
        "result processing returned: a failing sender.abort() (or anything else) did not escape",
        returned,
    ),
    Duty(
        "result-pending-chunk-cleared",
        36988,
        "the request left the pending chunk-send set",
        lambda e: _rid(_final(e)) not in _final(e)["pending_chunk_rids"],
    ),
    Duty(
        "result-not-requeued",
        36988,
        "the aborted result was not re-queued for transfer nor cached as an unfinished request",
        lambda e: _rid(_final(e)) not in _final(e)["inflight_queue"] and not _tree_cache(e, "cache_unfinished_req"),
    ),
    Duty("result-no-kv-chunk", 36988, "no KV chunk was sent for it", lambda e: not _final(e)["kv_chunks_sent"]),
    Duty("result-metadata-freed", 36988, "its metadata buffer was freed exactly once", _metadata_freed),
    Duty("result-kv-released", 36988, "the KV it held was released exactly once", _kv_released),
    Duty(
        "result-kv-not-inserted",
        36988,
        "no release inserted its KV into the radix tree",
        lambda e: not any(r["is_insert"] for r in _final(e)["kv_releases"]),
    ),
    Duty(
        "result-cache-finished-aborted",
        36988,
        "the tree cache (HiCache) was told once that the request ended aborted",
        _cache_finished_aborted,
    ),
    Duty("result-mamba-freed", 36988, "the Mamba state it held was freed exactly once", _mamba_freed),
    Duty(
        "result-finished",
        36988,
        "the request ended finished with an abort",
        lambda e: _final(e)["request"]["finished"]
        and isinstance(_final(e)["request"]["finished_reason"], dict)
        and _final(e)["request"]["finished_reason"].get("type") == "abort",
    ),
    Duty(
        "result-streamed-once",
        36988,
        "the client was streamed the abort exactly once",
        lambda e: _streamed_once_with(_final(e), None),
    ),
    Duty(
        "result-late-no-effect",
        36988,
        "a late result of an already retired request had no effect at all",
        lambda e: _untouched(_final(e)),
    ),
    Duty(
        "result-not-freed-early",
        36988,
        "nothing was freed, sent or streamed while a later chunk was still in flight",
        lambda e: _untouched(e["results"][0]),
    ),
    Duty(
        "result-handed-off",
        36988,
        "a healthy final result was queued for transfer and sent its last KV chunk (a guard)",
        lambda e: _rid(_final(e)) in _final(e)["inflight_queue"]
        and any(chunk["kwargs"].get("last_chunk") for chunk in _final(e)["kv_chunks_sent"]),
    ),
    Duty(
        "result-healthy-kept",
        36988,
        "a healthy final result was not aborted, freed or streamed (a guard)",
        lambda e: not _final(e)["sender_calls"]
        and not _final(e)["metadata_frees"]
        and not _final(e)["kv_releases"]
        and not _final(e)["streamed"]
        and not _final(e)["request"]["finished"],
    ),
)

RETIRED_ONCE = ("result-sender-aborted", "result-returns", "result-pending-chunk-cleared", "result-not-requeued",
                "result-no-kv-chunk", "result-metadata-freed", "result-kv-released", "result-kv-not-inserted",
                "result-cache-finished-aborted", "result-mamba-freed", "result-finished", "result-streamed-once")

DUTIES: dict[str, Duty] = {duty.id: duty for duty in DOOR_DUTIES + RESULT_DUTIES}

# Which duties each case checks, by probe and case id: its signature is their conjunction.
CASES: dict[str, dict[str, tuple[str, ...]]] = {
    "admission": {
        "prefill-door-rejected": REJECTED,
        "decode-door-rejected": REJECTED,
        "prefill-door-valid": KEPT,
        "decode-door-valid": KEPT,
        "prefill-door-reentry-metadata": KEPT,
        "prefill-door-reentry-backup": KEPT,
        "decode-door-retracted": KEPT,
        "decode-door-rebootstrap": KEPT,
        "prefill-door-preempted": KEPT,
        "decode-door-preempted": KEPT,
    },
    "prefill-cleanup": {
        "aborted-final-result": RETIRED_ONCE,
        "late-result-after-retire": ("result-late-no-effect", "result-returns"),
        "aborted-middle-chunk": ("result-not-freed-early", *RETIRED_ONCE),
        "sender-abort-raises": RETIRED_ONCE,
        "grammar-rejection": RETIRED_ONCE,
        "mamba-before-kv": RETIRED_ONCE,
        "healthy-final-result": ("result-handed-off", "result-healthy-kept", "result-returns"),
    },
}


def declared(probe: str, case: str) -> tuple[str, ...]:
    """The duties ``case`` of ``probe`` checks; KeyError for a case nobody declared."""
    return CASES[probe][case]


def signature(duties: tuple[str, ...]) -> str:
    """The one-line bug signature of a case: which of its duties failing makes it a bug."""
    return "a duty failed: " + ", ".join(duties)


def judge(probe: str, case: str, effects: Effects) -> dict[str, bool]:
    """Each declared duty of the case, in order, and whether it held in ``effects``."""
    return judge_duties(declared(probe, case), effects)


def judge_duties(duties: tuple[str, ...], effects: Effects) -> dict[str, bool]:
    """A duty whose effects are missing or malformed did not hold: effects that cannot show a
    duty never count as showing it."""
    results = {}
    for duty_id in duties:
        try:
            results[duty_id] = bool(DUTIES[duty_id].held(effects))
        except (KeyError, IndexError, TypeError, AttributeError, ValueError):
            results[duty_id] = False
    return results


def classify(duties: Mapping[str, bool]) -> str:
    """``bug`` when any duty failed (for a guard case: the regression), else ``clean``."""
    return "clean" if all(duties.values()) else "bug"
