"""Mutation reports (``mutation/*.json`` in a bundle): one tree, one fix, every mutant of the fix's
code and how it ended. A file format of the evidence, so ``verify`` reads it against its schema and
a bundle of them is attested like one of receipts (statements.bundle_statement)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from runner.evidence import judging

DIR = "mutation/"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Mutant(_Model):
    id: str
    function: str
    file: str
    line: int
    operator: str
    before: str
    after: str
    status: judging.MutantStatus
    why: str  # the case and failed duty that killed it, the reason it is equivalent, what no case covers


class Mutation(_Model):
    """One tree, one fix: the score, and every mutant with how it ended."""

    source: str
    tree_digest: str
    probe: str
    probe_sha256: str
    score: judging.MutationScore
    targets: list[dict]
    missing: list[str]
    mutants: list[Mutant]

    def unexplained(self) -> list[Mutant]:
        """Survivors nobody said why: a gap in the probes no one has looked at."""
        return [m for m in self.mutants if m.status == "survived" and not m.why]

    def holds(self) -> bool:
        """The evidence holds: the unmutated tree reads fixed and every surviving mutant is explained."""
        return self.score.baseline == "fixed" and not self.unexplained()


def file_name(label: str, m: Mutation) -> str:
    return f"{DIR}{label}.{m.probe}.json"
