"""A bundle as the report reads it: verified (never shown otherwise), every differential re-judged
from the receipts it names."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from runner import errors, fixids
from runner.evidence import bundle, catalog, departures, receipts
from runner.evidence.departures import Departures
from runner.evidence.records import Row, SweepRecord
from runner.judge.observations import Case
from runner.evidence.receipts import CaseTransition, Differential, Receipt
from runner.files import sha256_file
from runner.store.sources import TreeIdentity
from runner.views.report.sources import TREE_KINDS

UPSTREAM_TESTS = catalog.UPSTREAM_TESTS[0]  # the bundle kind of ``diffprobe upstream-tests``


class Tampered(errors.DiffprobeError):
    """A bundle that does not verify is never shown: a report would lend it credibility."""

    exit_code = errors.DIFFERS


@dataclass(frozen=True)
class Fix:
    name: str  # file name of the differential inside the bundle
    stored: Differential
    judged: Differential  # re-judged from the receipts the stored one names

    @property
    def cpu(self) -> bool:
        """Only tree receipts on both sides make a CPU differential; a model or gate never does."""
        return all(isinstance(s.source, TreeIdentity) for s in self.judged.base + self.judged.head)

    @property
    def consistent(self) -> bool:
        return (self.stored.verdict, self.stored.cases) == (self.judged.verdict, self.judged.cases)


@dataclass(frozen=True)
class Evidence:
    root: Path
    index: bundle.Index
    receipts: dict[str, Receipt]
    fixes: list[Fix]
    manifest_sha256: str
    departures: dict[str, Departures]  # each tree's departures from its baseline (departures/<label>.json)

    def side(self, fix: Fix, transition: CaseTransition, head: bool) -> str | None:
        """The receipt file that observed this case on one side of a fix."""
        sides = fix.judged.head if head else fix.judged.base
        return next((s.receipt for s in sides if self.receipts[s.receipt].probe.id == transition.probe), None)

    def case(self, receipt: str | None, case_id: str) -> Case | None:
        return self.receipts[receipt].case(case_id) if receipt else None

    @cached_property
    def rows(self) -> dict[str, Row]:
        """An audit's or a sweep's rows by tree digest (the first row of each tree): what each tree's
        fixes rest on, reviewed or not."""
        if self.index.kind not in ("audit", "sweep") or not self.index.extra.get("rows"):
            return {}
        out: dict[str, Row] = {}
        for row in SweepRecord.model_validate(self.index.extra).rows:
            out.setdefault(row.tree_digest, row)
        return out

    @property
    def graded(self) -> bool:
        """An upstream-tests bundle: graded per test and subtest, not by the incident's steps."""
        return self.index.kind == UPSTREAM_TESTS


def gather(root: Path) -> Evidence:
    """Load and verify a bundle; refuse it with one line when it does not verify."""
    root = root.resolve()
    problems = bundle.verify(root)
    if problems:
        raise Tampered(f"{root}: does not verify ({len(problems)} problem(s), first: {problems[0]}); "
                       f"run `diffprobe verify {root}` for all")
    index, rs, ds = bundle.contents(root)
    fixes = [Fix(name, d, _rejudge(d, rs)) for name, d in sorted(ds.items(), key=lambda kv: kv[1].fix)]
    return Evidence(root, index, rs, fixes, sha256_file(root / bundle.MANIFEST), departures.in_bundle(root))


def _rejudge(d: Differential, rs: dict[str, Receipt]) -> Differential:
    for side in d.base + d.head:
        if side.receipt not in rs:
            raise errors.BadInput(f"differential {fixids.label(d.fix)} names {side.receipt}, which is not a receipt of this bundle")
    base, head = ([(s.receipt, rs[s.receipt]) for s in sides] for sides in (d.base, d.head))
    return receipts.differential(d.fix, d.title, d.probes, base, head, d.expected, d.sites)


def fix_titles(ev: Evidence) -> dict[int, str]:
    return {f.judged.fix: f.judged.title for f in ev.fixes}


def evidence_kinds(ev: Evidence) -> str:
    """What kinds of observation the bundle holds, in words."""
    kinds = {r.source.kind if r.source.kind not in TREE_KINDS else "tree" for r in ev.receipts.values()}
    words = {
        "tree": "code paths of pinned SGLang trees driven on CPU with recording doubles"
                + (", observed before and after each fix" if any(f.cpu for f in ev.fixes) else ""),
        "model": "an executable model of the incident (synthetic, not SGLang code)",
        "server": "live-server gates (a running deployment's answers)",
    }
    return "; ".join(words[k] for k in words if k in kinds) or "no receipts"
