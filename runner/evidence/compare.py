"""Observation-level comparison of two bundles or two receipts.

Only what a probe observed counts: times, durations and where things lived on disk do not. Two
receipts are matched by probe and tree digest inside bundles; given as files they are compared
directly, whatever trees they name (a backport against a head, say).
"""

from __future__ import annotations

from pathlib import Path

import orjson
from pydantic import ValidationError

from runner import fixids
from runner.evidence import bundle, departures
from runner.errors import BadInput
from runner.judge.observations import NOT_OBSERVED
from runner.evidence.receipts import Receipt, seal, source_key
from runner.evidence.records import BackportRecord, SweepRecord


def _receipt_file(path: Path) -> Receipt:
    try:
        raw = orjson.loads(path.read_bytes())
        receipt = Receipt.model_validate(raw)
    except (OSError, orjson.JSONDecodeError, ValidationError) as e:
        raise BadInput(f"{path}: not a diffprobe receipt ({str(e).splitlines()[0][:120]})") from None
    if seal(raw) != receipt.digest:
        raise BadInput(f"{path}: receipt digest does not match its content")
    return receipt


def _receipts(path: Path) -> dict[tuple[str, str], Receipt]:
    if path.is_dir():
        _, receipts, _ = bundle.load(path)
        return {(r.probe.id, source_key(r.source)): r for r in receipts.values()}
    r = _receipt_file(path)
    return {(r.probe.id, "*"): r}


def compare_receipts(a: Receipt, b: Receipt, where: str) -> list[str]:
    if a.probe.sha256 != b.probe.sha256:
        return [f"{where}: not comparable, probe versions differ ({a.probe.sha256[:12]} vs {b.probe.sha256[:12]})"]
    ja, jb = a.environment.diffprobe_sha256, b.environment.diffprobe_sha256
    if ja != jb:
        return [f"{where}: not comparable, judges differ ({ja[:12]} vs {jb[:12]})"]
    if a.observation_digest == b.observation_digest:
        return []
    lines = []
    if source_key(a.source) != source_key(b.source):
        lines.append(f"{where}: different trees ({a.source.source} vs {b.source.source})")
    ids = list(dict.fromkeys([c.id for c in a.cases] + [c.id for c in b.cases]))
    for case_id in ids:
        ca, cb = a.case(case_id), b.case(case_id)
        if ca is None or cb is None:
            lines.append(f"{where} {case_id}: only in {'A' if cb is None else 'B'}")
            continue
        da, db = ca.model_dump(exclude=set(NOT_OBSERVED)), cb.model_dump(exclude=set(NOT_OBSERVED))
        for key in sorted(da):
            if da[key] != db[key]:
                lines.append(f"{where} {case_id}: {key}: {_short(da[key])} -> {_short(db[key])}")
    return lines


def _short(value) -> str:
    text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return text if len(text) <= 160 else text[:157] + "..."


def compare(a: Path, b: Path) -> list[str]:
    ra, rb = _receipts(a), _receipts(b)
    if len(ra) == 1 and len(rb) == 1 and (a.is_file() or b.is_file()):
        a_receipt, b_receipt = next(iter(ra.values())), next(iter(rb.values()))
        return compare_receipts(a_receipt, b_receipt, a_receipt.probe.id)
    lines = []
    for key in sorted(set(ra) | set(rb)):
        probe, tree = key
        where = f"{probe} @ {(ra.get(key) or rb.get(key)).source.source}"
        if key not in rb:
            lines.append(f"{where}: only in A")
        elif key not in ra:
            lines.append(f"{where}: only in B")
        else:
            lines += compare_receipts(ra[key], rb[key], where)
    return lines + compare_reviews(_standing(a), _standing(b))


def _standing(path: Path) -> dict[str, tuple[str, list[int], set[str]]]:
    """An audit's, sweep's or backport's trees by digest (a bundle ``_receipts`` verified): label, the
    fixes (a backport: its PR) that read "on unreviewed code", and the reachable changed places no
    review accepted."""
    if not path.is_dir():
        return {}
    index = bundle.Index.model_validate(orjson.loads((path / bundle.INDEX).read_bytes()))
    if index.kind == "backport":
        record = BackportRecord.model_validate(index.extra)
        trees = [(d.tree_digest, record.onto, [record.pr] if record.on_unreviewed else [], record)
                 for d in departures.in_bundle(path).values()]
    elif index.kind in ("audit", "sweep") and index.extra.get("rows"):
        trees = [(r.tree_digest, r.label, r.on_unreviewed, r) for r in SweepRecord.model_validate(index.extra).rows
                 if not r.same_tree_as]
    else:
        return {}
    return {digest: (label, fixes, {*r.unreviewed, *(f"rejected: {p}" for p in r.rejected)}) for digest, label, fixes, r in trees}


def compare_reviews(a: dict[str, tuple[str, list[int], set[str]]], b: dict[str, tuple[str, list[int], set[str]]]) -> list[str]:
    """Per tree in both: where one reads "on unreviewed code" and the other does not, or their unreviewed places differ."""
    lines = []
    for digest in sorted(a.keys() & b.keys()):
        (label, fa, pa), (_, fb, pb) = a[digest], b[digest]
        if fa != fb:
            lines.append(f"{label}: on unreviewed code: {_fixes(fa)} -> {_fixes(fb)}")
        for place in sorted(pa - pb):
            lines.append(f"{label}: unreviewed only in A: {place}")
        for place in sorted(pb - pa):
            lines.append(f"{label}: unreviewed only in B: {place}")
    return lines



def _fixes(numbers: list[int]) -> str:
    return fixids.labels(numbers)
