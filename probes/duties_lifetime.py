"""What the later defences' duty tables share (#41023, #40645, #41402, #41404, #39500): readings of the
page-ownership model (probes/pages.py) and the wire (probes/lifetime.py), the dimensions every lifetime probe
varies, and the groups of duties their spaces name. "The subject" is the request whose transfer the case aborts
or fails. Standard library only: the host judges with it too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from . import space
from .effects import Effects


# The later defences' cases are grouped by the configuration they run under (their site): the tree's
# defaults, a defence's option switched on, or the deferred release switched off. A defence off by default is
# in force only where its "with-" configuration is fixed; the host keeps one bug window per configuration
# (judging.window). Where the deferred release is switched off its cases check only what must hold without it.
# A case over a KV-transfer backend other than Mooncake (lifetime-drain's ``backend``) has a site of its own per
# configuration: a deployment runs one backend, and each backend's half of a fix has its own window.
# A fleet part-way through switching the deferred release on has it on at decode and off at prefill (MIXED).
MIXED = "decode-only-deferred-release"
_BASE_CONFIGURATIONS = ("default", "with-deferred-release", "without-deferred-release", MIXED)
OTHER_BACKENDS = ("nixl",)
CONFIGURATIONS = (*_BASE_CONFIGURATIONS, "with-kv-checksum",
                  *(f"{c}-{b}" for b in OTHER_BACKENDS for c in _BASE_CONFIGURATIONS))


def subject(effects: Effects) -> str:
    return effects["subject"]


def started(effects: Effects) -> dict[str, Any]:
    """The step at which the subject took the room (bootstrapped on every rank)."""
    return next(s for s in effects["steps"] if s["step"] == "bootstrapped" and s.get("rid") == subject(effects))


def timeout_at(effects: Effects) -> int:
    """When the tree's stated release timeout, counted from the subject's start, is reached."""
    return started(effects)["t"] + effects["timeout"]


def frees(rank: Mapping[str, Any], rid: str) -> list[Mapping[str, Any]]:
    return [e for e in rank["events"] if e["event"] == "free" and e["rid"] == rid]


def no_early_release(effects: Effects) -> bool:
    """No page of the subject went back to the allocator while a prefill write could still land in
    it, unless the tree's stated release timeout had passed (a release by the timeout is recorded as
    such in the events, and allowed)."""
    return not any(f["rid"] == subject(effects) and f["t"] < timeout_at(effects)
                   for rank in effects["decode"] for f in rank["freed_while_writable"])


def freed_once(effects: Effects) -> bool:
    """By the last step, each page of the subject went back exactly once (its KV, written or not, not
    kept in the prefix cache for later requests), its metadata row was freed exactly once, no page was
    freed twice or by a request that did not own it, nothing is still held."""
    rid = subject(effects)
    for rank in effects["decode"]:
        request = rank["requests"][rid]
        freed = [p for f in frees(rank, rid) for p in f["pages"]]
        if any(f.get("cached") for f in frees(rank, rid)):
            return False
        if sorted(freed) != sorted(request["pages"]) or rank["double_frees"] or rank["held"]:
            return False
        if rank["metadata_frees"].count(request["metadata_index"]) != 1:
            return False
    return True


def acks(effects: Effects, prefill: int, decode: int) -> list[Mapping[str, Any]]:
    """Acknowledgements prefill rank ``prefill`` sent decode rank ``decode`` since the subject started."""
    return [m for m in effects["wire"] if m["kind"] == "ABORT_ACK" and m["seq"] > started(effects)["seq"]
            and m["from"] == f"prefill{prefill}" and m["to"].endswith(f":{17000 + decode}")]


def drained(effects: Effects, prefill: int) -> int:
    """The sequence number at which prefill rank ``prefill``'s last write of the subject landed or failed (0: none)."""
    ends = [e["seq"] for rank in effects["decode"] for e in rank["events"]
            if e["event"] in ("write lands", "write fails") and e.get("rank") == prefill and e["rid"] == subject(effects)]
    return max(ends, default=0)


def acked_after_drain(effects: Effects, ranks: list[int]) -> bool:
    """Each of decode ``ranks`` got exactly one acknowledgement from every prefill rank, sent after
    that prefill rank's writes of the subject stopped."""
    prefills = range(len(effects["outstanding"]))
    for d in ranks:
        for p in prefills:
            sent = acks(effects, p, d)
            if len(sent) != 1 or sent[0]["seq"] < drained(effects, p):
                return False
    return True


def aborting(effects: Effects) -> list[int]:
    """Decode ranks that told prefill the subject was aborted."""
    return [r["rank"] for r in effects["decode"] if r["requests"][subject(effects)]["notified"]]


def aborted_after_clear(effects: Effects) -> list[int]:
    """Decode ranks whose ABORT reached prefill only after the prefill scheduler had cleared the room."""
    cleared = [s["seq"] for s in effects["steps"] if s["step"] == "prefill concludes" and s.get("rid") == subject(effects)]
    if not cleared:
        return []
    return sorted({int(m["frames"][3]) - 17000 for m in effects["wire"] if m["kind"] == "ABORT"
                   and m.get("delivered", 0) > min(cleared) and len(m["frames"]) >= 4})


def released_before_timeout(effects: Effects) -> bool:
    """With every acknowledgement delivered, the subject's pages went back before the timeout."""
    rid = subject(effects)
    return all(frees(rank, rid) and all(f["t"] < timeout_at(effects) for f in frees(rank, rid))
               for rank in effects["decode"])


def timeout_recorded(effects: Effects) -> bool:
    """The subject's pages went back by the release timeout exactly when the tree logged a release by timeout
    after the subject started: a timeout release is recorded as such, a release on acknowledgement is not. A
    record naming another request's room (``others``: a neighbour held to its own timeout) is that request's."""
    rid = subject(effects)
    by_timeout = any(f["t"] >= timeout_at(effects) for rank in effects["decode"] for f in frees(rank, rid))
    others = [re.compile(rf"\broom {room}\b") for room in effects.get("others", {}).values()]
    logged = any(r["seq"] > started(effects)["seq"] and "timed out" in r["message"] and "release" in r["message"].lower()
                 and not any(o.search(r["message"]) for o in others) for r in effects["log"])
    return by_timeout == logged


def not_held_forever(effects: Effects) -> bool:
    rid = subject(effects)
    return all(not rank["held"] and frees(rank, rid) for rank in effects["decode"])


def committed(effects: Effects) -> bool:
    """Committed on every rank and handed to the scheduler to decode (what ``pop_transferred`` returns: a request
    committed but not returned never runs), read only where its own write landed, its pages kept, nothing held, and
    its metadata row handed back once (the commit is done with it)."""
    rid = subject(effects)
    return all(rid in rank["committed"] and rid in rank["handed"] and not rank["unwritten_reads"] and not frees(rank, rid) and not rank["held"]
               and rank["metadata_frees"].count(rank["requests"][rid]["metadata_index"]) == 1
               for rank in effects["decode"])


HELD = ("lifetime-no-early-release", "lifetime-no-foreign-write", "lifetime-freed-once", "lifetime-timeout-recorded")
ACKED = ("lifetime-acked-after-drain", "lifetime-released-on-ack")
GUARD_ABORT = ("lifetime-not-held-forever", "lifetime-freed-once", "lifetime-timeout-recorded")
ON_ACK = ("lifetime-released-on-ack", "lifetime-freed-once")
# with nothing in flight at the abort, the request's chunk, finished after it, must be refused: nothing lands
ON_ACK_IDLE = ("lifetime-acked-after-drain", "lifetime-released-on-ack", "lifetime-no-foreign-write", "lifetime-freed-once")
# with the deferred release switched off: an aborted or failed request's pages went back exactly once and by the
# end, none held forever, no release by the timeout unrecorded (they hold on every tree where the abort frees)
OFF_DUTIES = GUARD_ABORT

# Every lifetime case runs in the tree's default configuration, with the deferred release switched on (a tree
# where it is off by default is probed with it on as well) and with it switched off (a tree where it is on by
# default is probed with it off as well: the code the defences guard with its switch runs both ways); the
# configuration is the case's site.
DEFERRED_CONFIG = space.Dimension("config", (
    space.Value("default", "the tree's own defaults: nothing set", label=""),
    space.Value("with-deferred-release", "SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE=true in the ranks' "
                "environment", says="deferred release switched on"),
    space.Value("without-deferred-release", "SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE=false in the ranks' "
                "environment", says="deferred release switched off"),
), core=True, reads=("enable_deferred_decode_kv_release", "enable_deferred_kv_release"))
# The configurations where the deferred release is not switched off: a defence's duties and bug cases are these
# (the tree's default is one: a tree where it is off by default shows the bug there). Switched off, the defence
# is off by design: pages go back at once and nothing waits for a drain, so its cases check only what must
# still hold (``OFF_DUTIES``: nothing leaked or held forever, nothing freed twice, no timeout release unrecorded),
# as guards, never the defence's own duties; what the tree must still do without it (an abort stops a chunk not
# yet written; decode's own failed send is handled) is a bug case where trees before it fail in every configuration.
SWITCHED_OFF = "without-deferred-release"
ON: tuple[str, ...] = tuple(v.name for v in DEFERRED_CONFIG.values if v.name != SWITCHED_OFF)
OFF: Mapping[str, tuple[str, ...]] = {"config": (SWITCHED_OFF,)}
# what each configuration adds to a case id (aliases keep the ids cases had before the space was generated)
SUFFIXES = tuple(f"-{v.name}" if v.label is None else "" for v in DEFERRED_CONFIG.values)


def on(*patterns: space.Pattern) -> tuple[space.Pattern, ...]:
    """``patterns`` restricted to the configurations where the deferred release is not switched off."""
    return tuple({**p, "config": ON} for p in patterns)


def on_rules(*rules: space.Rule) -> tuple[space.Rule, ...]:
    """``rules`` restricted to the configurations where the deferred release is not switched off."""
    return tuple(space.Rule({**r.when, "config": ON}, r.duties) for r in rules)
IN_FLIGHT = space.Dimension("in_flight", (
    space.Value("yes", "prefill's write of the request is inside the engine when it happens", label="in-flight",
                says="while prefill's write is in flight"),
    space.Value("no", "before prefill wrote anything", label="nothing-in-flight", says="before prefill wrote anything"),
), reads=("_staging_outstanding",))
ACKS = space.Dimension("acks", (
    space.Value("delivered", "the drain acknowledgements reach decode", label=""),
    space.Value("lost", "every drain acknowledgement is lost on the wire", label="acks-lost",
                says="every drain acknowledgement lost"),
    space.Value("late", "the acknowledgement arrives after the release timeout", label="acks-late",
                says="the acknowledgement arriving after the release timeout"),
), reads=("is_abort_release_safe", "note_abort_ack"))


def configuration(point: Mapping[str, str]) -> str:
    """The configuration a case runs under: its ``config``, or MIXED where prefill's switch is off alone."""
    return MIXED if point.get("prefill_config") == "switched-off" else point["config"]


def site(point: Mapping[str, str]) -> str:
    """The case's configuration, and its backend where that is not Mooncake (the backend every probe runs by default)."""
    backend = point.get("backend", "mooncake")
    return configuration(point) if backend == "mooncake" else f"{configuration(point)}-{backend}"


# The SGLang modules the later defences' code is in (their FIX_CODE names functions of these).
CONN, MOONCAKE, DECODE, NIXL = ("sglang.srt.disaggregation.common.conn", "sglang.srt.disaggregation.mooncake.conn",
                                "sglang.srt.disaggregation.decode", "sglang.srt.disaggregation.nixl.conn")
