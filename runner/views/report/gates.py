"""The four acceptance gates of an accept bundle, each with what backs it: the worker or tree each
receipt observed, the tree that worker runs and its digest, and every case and check behind the word.

The word is the acceptance record's (``commands/accept.py`` decides when a gate passes), shown only
as far as the bundle bears it out: a gate the record lacks, or one no receipt of this bundle backs,
did not run; a pass whose receipts hold a case that never ran to a result, or a tree whose digest
is not the one the record binds the workers to, is not shown as a pass. Nothing unknown passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import ValidationError

from runner import fixids
from runner.judge import judging
from runner.evidence.receipts import Receipt
from runner.evidence.records import Acceptance, GateResult
from runner.store.sources import TreeIdentity
from runner.views.acceptance import GATES, KIND
from runner.views.report.verified import Evidence

GateStatus = Literal["passed", "failed", "not run"]
NOT_USED = "not used"


@dataclass(frozen=True)
class Line:
    word: str  # what colours it: a case's state, a fix's status, "held" / "not held"
    text: str
    depth: int = 0  # 1: a check inside the case above it


@dataclass(frozen=True)
class Backer:
    """One receipt behind a gate, and whose: a worker (and the tree it runs) or the tree itself."""

    receipt: str
    who: str
    tree: str | None
    tree_digest: str | None
    lines: list[Line]


@dataclass(frozen=True)
class Gate:
    number: int
    title: str
    status: GateStatus
    reasons: list[str]  # the record's: why it failed, or what a pass rests on
    backing: list[Backer]
    problems: list[str]  # why the record's word is not shown as it stands


@dataclass(frozen=True)
class Gates:
    gates: list[Gate]  # always the four, in order
    accepted: bool  # every one of the four passed here
    claimed: bool | None  # what the record says; None: no record that parses


def of(ev: Evidence) -> Gates | None:
    """The four gates of an accept bundle; None for any other kind."""
    if ev.index.kind != KIND:
        return None
    try:
        record = Acceptance.model_validate(ev.index.extra)
    except ValidationError as e:
        why = f"the acceptance record does not parse ({e.error_count()} error(s))"
        gates = [Gate(n, title, "not run", [], [], [why]) for n, title in GATES.items()]
        return Gates(gates, accepted=False, claimed=None)
    stored = {g.gate: g for g in record.gates}
    gates = [gate(n, stored.get(n), record, ev) for n in GATES]
    return Gates(gates, accepted=all(g.status == "passed" for g in gates), claimed=record.accepted)


def unused(ev: Evidence, receipt: str) -> set[str]:
    """The case ids of ``receipt`` that an accept bundle's gate did not rest on (an alternative it did
    not need, such as gate 3's canary where the checksum verifies every pair): shown as not used."""
    if ev.index.kind != KIND:
        return set()
    try:
        record = Acceptance.model_validate(ev.index.extra)
    except ValidationError:
        return set()
    return {case for g in record.gates if receipt in g.receipts for case in g.unused}


def gate(n: int, result: GateResult | None, record: Acceptance, ev: Evidence) -> Gate:
    if result is None:
        return Gate(n, GATES[n], "not run", [], [], ["not in this bundle's acceptance record"])
    held = [name for name in result.receipts if name in ev.receipts]
    unused = set(result.unused)
    backing = [backer(name, ev.receipts[name], record, unused) for name in held]
    unbacked = [f"it names {name}, which is not a receipt of this bundle" for name in result.receipts if name not in held]
    unbacked += [] if result.receipts else ["no receipt backs it"]
    if not result.passed:
        return Gate(n, result.title, "failed", result.reasons, backing, unbacked)
    unrun = [f"{name} case {c.id} did not run to a result ({judging.state(c).replace('_', ' ')})"
             for name in held for c in ev.receipts[name].cases if not ran(c.outcome, ev.receipts[name]) and c.id not in unused]
    rebound = [f"{b.receipt} observed tree {b.tree} as {b.tree_digest}; the record binds its workers to "
               f"{record.trees.get(b.tree or '', 'no digest')}" for b in backing
               if isinstance(ev.receipts[b.receipt].source, TreeIdentity) and record.trees.get(b.tree or "") != b.tree_digest]
    doubts = unbacked + unrun + rebound
    status: GateStatus = "not run" if unbacked else "failed" if doubts else "passed"
    return Gate(n, result.title, status, result.reasons, backing, [f"the record says passed, but {d}" for d in doubts])


def ran(outcome: str, r: Receipt) -> bool:
    """A case that ran to a result: observed, or for a tree a case whose API the tree lacks (judged as
    such by judging.status); a server's check that could not apply is a check not made."""
    return outcome == "observed" or (outcome == "not_applicable" and isinstance(r.source, TreeIdentity))


def backer(name: str, r: Receipt, record: Acceptance, unused: set[str] = frozenset()) -> Backer:
    source = r.source
    if isinstance(source, TreeIdentity):
        runs = sorted(url for url, w in record.workers.items() if w.get("tree") == source.source)
        who = f"audit of the tree run by {', '.join(runs) or 'no worker of this fleet'}"
        lines = [Line(fs.status, f"{fixids.label(fs.fix)} {fs.status}: " + ", ".join(f"{s.site} {s.status}" for s in fs.sites))
                 for fs in judging.fixes([r])]
        return Backer(name, who, source.source, source.tree_digest, lines)
    url = getattr(source, "url", source.source)
    worker = record.workers.get(url)
    who = f"{worker.get('role', '?')} worker {url}" if worker else f"{url} (not a worker of this fleet: the router)"
    tree = worker.get("tree") if worker else None
    lines = []
    for c in r.cases:
        effects = c.effects or {}
        said = effects.get("summary") or c.missing or (c.error.message if c.error else c.outcome)
        if c.id in unused:  # an alternative the gate did not rest on: not a bug of this fleet
            lines.append(Line(NOT_USED, f"{c.id}: the gate rests on the other alternative ({said})"))
            continue
        lines.append(Line(judging.state(c), f"{c.id}: {said}"))
        lines += [Line("held" if check.get("held") else "not held", str(check.get("what", "")), 1)
                  for check in effects.get("checks", []) if isinstance(check, dict)]
    return Backer(name, who, tree, record.trees.get(tree) if tree else None, lines)
