"""Mutation reports (``mutation/*.json`` in a bundle): one tree, one fix, the fix's cases as they ran on
the tree unmutated, and every mutant of the fix's code and how it ended. A file format of the evidence,
so ``verify`` reads it against its schema and a bundle of them is attested like one of receipts
(statements.bundle_statement).

A mutant's status is judged on the host from the effects its cases recorded (``judging.mutant_status``);
the report keeps the status and why, not the effects, so verify cannot judge a mutant again. It checks
what follows from the report itself (``rederive``): the score counts its mutants and baseline,
``bundle.json`` states the same scores, and, where the bundle holds a receipt of the same tree and probe
(``run --mutate``), the report was measured on the same bytes with the same probe, its cases as they ran
unmutated reading as that receipt's do: the score is a measure of the very evidence the verdict rests on.
"""

from __future__ import annotations

import orjson
from pydantic import BaseModel, ConfigDict, Field, RootModel

from runner.judge import judging
from runner.errors import Redacted
from runner.evidence.receipts import Receipt

DIR = "mutation/"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Hunk(_Model):
    """A change of the fix's code as a vendor's backport might make it (``mutate --hunks FILE``: a JSON list
    of these): in ``function`` (a qualified name of ``duties.FIX_CODE``), the source text ``old``, found
    exactly once, becomes ``new``."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    function: str
    old: str = Field(min_length=1)
    new: str


class Hunks(RootModel[list[Hunk]]):
    pass


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
    reached_by: int = 0  # how many cases ran a line of it on the tree unmutated (0: not covered)
    reads: judging.Status | None = None  # a hunk: what the tree with it reads, every case reaching it run (in the
    # configurations the fix is pinned in, where the report names them: a defence off by default is read with it on)
    reads_by_site: dict[str, judging.Status] = Field(
        {}, description="a hunk: what the tree with it reads in each configuration (site) its cases run under, as an "
                        "audit reads each site (judging.status_with over that site's cases): a change that breaks "
                        "only the default configuration reads so there, and fixed where it does not reach")
    unvaried: str = Field("", description="a survivor of a condition's mutant: the input no case varied, or the "
                                          "condition on its line the unmutated cases never saw both ways "
                                          "(judging.unvaried); a diagnosis, never an explanation")


class BaselineCase(_Model):
    """One case as it ran on the tree unmutated: only a case that held there can tell a mutant."""

    id: str
    role: str
    state: judging.State
    site: str | None = None  # the case's site (for the later defences, the configuration it ran under)


class Mutation(_Model):
    """One tree, one fix: the score, the cases as they ran unmutated, and every mutant with how it ended."""

    source: Redacted
    tree_digest: str
    probe: str
    probe_sha256: str
    score: judging.MutationScore
    baseline: list[BaselineCase]
    targets: list[dict]
    missing: list[str]
    mutants: list[Mutant]
    sites: list[str] = []  # the configurations the fix is pinned in (pins.toml): the baseline status is theirs; empty: all

    def counted_baseline(self) -> list[tuple[str, judging.State]]:
        return [(c.role, c.state) for c in self.baseline if not self.sites or c.site in self.sites]

    def unexplained(self) -> list[Mutant]:
        """Survivors and mutants no case reaches that nobody said why: a gap in the probes no one has
        looked at."""
        return [m for m in self.mutants if m.status in ("survived", "not covered") and not m.why]

    def holds(self) -> bool:
        """The evidence holds: the unmutated tree reads fixed and every surviving mutant is explained."""
        return self.score.baseline == "fixed" and not self.unexplained()


def file_name(label: str, m: Mutation) -> str:
    return f"{DIR}{label}.{m.probe}.json"


def counted(m: Mutation) -> judging.MutationScore:
    """The score as the report's own mutants and baseline give it."""
    return judging.score_of(m.score.probe, m.score.fix, m.counted_baseline(), [x.status for x in m.mutants])


def rederive(reports: dict[str, Mutation], extra: dict, receipts: dict[str, Receipt]) -> list[str]:
    """What in a bundle's mutation reports (name -> report, each valid against its schema) does not
    follow from them, one line each."""
    problems: list[str] = []
    for name, m in reports.items():
        if counted(m) != m.score:
            problems.append(f"{name}: its score does not count its mutants and baseline")
        for receipt in receipts.values():
            if receipt.probe.id != m.probe or getattr(receipt.source, "tree_digest", None) != m.tree_digest:
                continue
            if receipt.probe.sha256 != m.probe_sha256:
                problems.append(f"{name}: measured with another version of probe {m.probe} than the receipt of its tree")
            elif {c.id: judging.state(c) for c in receipt.cases} != {c.id: c.state for c in m.baseline}:
                problems.append(f"{name}: its cases unmutated do not read as the receipt of its tree does")
    stated = sorted(orjson.dumps(s, option=orjson.OPT_SORT_KEYS) for s in extra.get("scores", []))
    derived = sorted(orjson.dumps(m.score.model_dump(mode="json") | {"source": m.source}, option=orjson.OPT_SORT_KEYS)
                     for m in reports.values())
    if stated != derived:
        problems.append("bundle.json: its scores are not those of the bundle's mutation reports")
    return problems
