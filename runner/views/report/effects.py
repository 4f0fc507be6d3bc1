"""Side effects, counted from whatever a probe recorded, on both sides of a fix: what the fix changed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from runner.judge import judging
from runner.evidence.receipts import CaseTransition
from runner.views.report.verified import Evidence, Fix

# How a list of recorded items splits into kinds (a KV endpoint is a sender or a receiver).
_SPLIT: dict[str, Callable[[Any], str]] = {
    "kv_endpoints": lambda item: str(item.get("name", "?")).split("#")[0] if isinstance(item, dict) else str(item),
    "kv_calls": lambda item: str(item.get("call", "?")) if isinstance(item, dict) else str(item),
    "tree_cache_calls": lambda item: str(item.get("call", "?")) if isinstance(item, dict) else str(item),
    "sender_calls": str,
}
# What a reader calls each count; the order is the column order. Unknown counts keep their key.
EFFECT_LABELS = {
    "kv_endpoints:kv_sender": "KV senders created",
    "kv_endpoints:kv_receiver": "KV receivers created",
    "kv_calls:init": "KV receiver init calls",
    "queues": "queue entries",
    "retired": "retired at the door",
    "inflight_queue": "re-queued (inflight)",
    "pending_chunk_rids": "pending chunk kept",
    "tree_cache_calls:cache_unfinished_req": "cached as unfinished",
    "kv_chunks_sent": "KV chunks sent",
    "sender_calls:abort": "sender aborted",
    "metadata_frees": "metadata frees",
    "kv_releases": "KV / Mamba frees",
    "tree_cache_calls:finish": "cache finish calls",
    "streamed": "streamed outputs",
}


def tally(effects: dict[str, Any] | None) -> dict[str, int]:
    """Counts of what a case's run did: list lengths, split by kind where that matters, summed over
    successive results; state snapshots (dicts of mixed values, like ``request``) are not counts."""
    counts: dict[str, int] = {}
    records = [effects or {}] + [r for r in (effects or {}).get("results", []) if isinstance(r, dict)]
    for record in records:
        for key, value in record.items():
            if key == "results":
                continue
            if isinstance(value, list) and key in _SPLIT:
                for item in value:
                    name = f"{key}:{_SPLIT[key](item)}"
                    counts[name] = counts.get(name, 0) + 1
            elif isinstance(value, list):
                counts[key] = counts.get(key, 0) + len(value)
            elif isinstance(value, dict) and value and all(isinstance(v, list) for v in value.values()):
                counts[key] = counts.get(key, 0) + sum(len(v) for v in value.values())
    return counts


def effect_label(key: str) -> str:
    return EFFECT_LABELS.get(key, key.replace(":", ": "))


def _ordered(keys: set[str]) -> list[str]:
    known = [k for k in EFFECT_LABELS if k in keys]
    return known + sorted(keys - set(known))


@dataclass(frozen=True)
class EffectRow:
    transition: CaseTransition
    base_receipt: str | None
    head_receipt: str | None
    base: dict[str, int] | None  # None: the case did not run to its end on that side
    head: dict[str, int] | None

    def changed(self) -> list[str]:
        if self.base is None or self.head is None:
            return []
        keys = _ordered(set(self.base) | set(self.head))
        return [f"{effect_label(k)} {self.base.get(k, 0)} → {self.head.get(k, 0)}"
                for k in keys if self.base.get(k, 0) != self.head.get(k, 0)]


def effect_row(ev: Evidence, fix: Fix, t: CaseTransition) -> EffectRow:
    b, h = ev.side(fix, t, head=False), ev.side(fix, t, head=True)
    cb, ch = ev.case(b, t.case), ev.case(h, t.case)
    return EffectRow(t, b, h, tally(cb.effects) if cb and cb.effects is not None else None,
                     tally(ch.effects) if ch and ch.effects is not None else None)


def failed_duties(ev: Evidence, fix: Fix, t: CaseTransition) -> str:
    """The duties the case failed on each side, by name (judged on the host: judging.rejudge)."""
    sides = [ev.case(ev.side(fix, t, head=h), t.case) for h in (False, True)]
    named = [", ".join(judging.failed_duties(c)) or "-" if c and c.duties is not None else "" for c in sides]
    return "" if not any(named) else f"{named[0]} → {named[1]}"


def effect_rows(ev: Evidence, fix: Fix) -> list[EffectRow]:
    """Bug cases first: they are what the fix changes; guards show what it must keep."""
    return [effect_row(ev, fix, t) for t in sorted(fix.judged.cases, key=lambda t: t.role != "bug")]


def effect_columns(rows: list[EffectRow]) -> list[str]:
    """Only counts that are non-zero somewhere: a column of zeros says nothing."""
    keys = {k for r in rows for side in (r.base, r.head) if side for k, v in side.items() if v}
    return _ordered(keys)
