"""What each kind of bundle records beside its receipts (``bundle.json`` ``extra``), one model per
kind, so every file diffprobe writes has a schema (runner.evidence.schema): a sweep's rows (audit,
sweep and merge bundles), a run's sides, a backport's comparison, an acceptance's gates, mutation
scores, a gate's server and the synthetic model's configurations. The upstream-tests record lives
with the other upstream-tests formats (runner.evidence.upstream). Models only: the commands fill
them, and the rules they apply stay with the commands and with judging."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer
from typing_extensions import NotRequired, TypedDict

from runner.evidence import static
from runner.errors import Redacted
from runner.judge import judging


class Reviewed(BaseModel):
    """Where a tree stands with the review ledger (runner/evidence/reviews.py): its reachable changed places."""

    unreviewed: list[str] = Field([], description="each changed place the probes can reach that no review accepted or "
                                                  "rejected: 'file:line in function (how reached) key' (docs/review.md)")
    rejected: list[str] = Field([], description="each reachable changed place a review rejected")
    reviewed: int = Field(0, description="reachable changed places a review accepted (--reviews)")

    def unreviewed_reason(self) -> str:
        """Why a verdict on this tree rests on unreviewed code, in one line."""
        places = self.rejected + self.unreviewed
        if not places:
            return "the tree has no baseline: none of its code is known to be upstream's (give --against SOURCE)"
        return (f"rests on {len(places)} changed place(s) the probes can reach" + (f" ({len(self.rejected)} rejected by a "
                f"review)" if self.rejected else "") + f" that no review accepted ({self.reviewed} accepted)")


class Row(Reviewed):
    source: Redacted
    label: str
    tree_digest: str
    fixes: list[judging.FixStatus]
    static: list[static.Finding]
    same_tree_as: str | None = None  # an earlier source of this sweep with the same tree: its receipts stand for both
    reused: bool = False  # every receipt behind the row was observed before this command (receipts store or a twin)
    departures: str | None = None  # one line: how the tree departs from its baseline (record: departures/<label>.json)
    on_unreviewed: list[int] = Field([], description="the fixes whose 'fixed' rests on the places in unreviewed or rejected, "
                                                     "or (none listed) on a tree with no baseline: 'fixed on unreviewed code'")


class SweepRecord(BaseModel):
    """What a sweep bundle adds in ``bundle.json`` ``extra``; a merge rebuilds it from shards."""

    order: list[str]  # every source of the whole sweep, in sweep order
    shard: str | None
    rows: list[Row]
    first_fixed: dict[int, str | None]  # each window's first_fixed
    windows: list[judging.Window] = []  # per fix, where the bug entered the line and where it left (judging.window)
    bisect: dict[int, list[str]] | None = None  # fix -> sources whose status the bisection read
    probe_runs: int = 0  # probe processes this sweep started (a merge adds its shards'); the rest was reused


def inconclusive_sites(rows: list[Row]) -> list[str]:
    """Every source and site whose status is inconclusive: one is enough for a sweep to fail."""
    return [f"{r.label} {s.site}" for r in rows for f in r.fixes for s in f.sites if s.status == "inconclusive"]


def windows(rows: list[Row]) -> list[judging.Window]:
    """Each fix's bug window over the rows, in their order, and, for a fix probed under configurations
    (the later defences: defaults, option on), one window per configuration after it."""
    out = []
    for fix in sorted({f.fix for r in rows for f in r.fixes}):
        line = [(r.source, next((f for f in r.fixes if f.fix == fix), None)) for r in rows]
        out.append(judging.window(fix, line))
        out += [judging.window(fix, line, site) for site in judging.configured_sites(fs for _, fs in line if fs)]
    return out


# --- the other kinds: strict, so a schema says exactly what a bundle of that kind holds -----------


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Score(judging.MutationScore):
    """A fix's mutation score in one tree (its report is the bundle's ``mutation/*.json``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    source: Redacted


class MutationRecord(_Record):
    """What a mutation bundle (``diffprobe mutate``) adds: one score per tree and fix."""

    scores: list[Score]


class DutyCheck(_Record):
    """A duty-level bracket of pins.toml, as a run found it on its two releases (runner/judge/duty_windows.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    fix: int
    title: str
    without: Redacted = Field(description="the source without this part of the fix")
    with_: Redacted = Field(alias="with", description="the source with it")
    as_pinned: bool
    why: list[str] = Field(description="why it is not as pinned, case by case; empty when it is")


class RunRecord(_Record):
    """What a run bundle adds: where each fix's base and head trees came from."""

    via: Literal["releases", "commits"] = Field(description="the release brackets on PyPI, or the pinned commits")
    fixes: list[int]
    repo: Redacted | None = Field(description="the git repository of --via commits; null with --via releases")
    scores: list[Score] | None = Field(None, description="with --mutate only, absent without: each fix's mutation "
                                                         "score at its head")
    duties: list[DutyCheck] | None = Field(None, description="--via releases, with duty-level brackets pinned: each "
                                                             "checked (absent otherwise)")

    @model_serializer(mode="wrap")
    def _scores_absent(self, handler) -> dict:
        """Without --mutate a run bundle has no ``scores`` key at all (not null), as it always had; nor
        ``duties`` without a duty-level bracket to check."""
        dumped = handler(self)
        for key in ("scores", "duties"):
            if getattr(self, key) is None:
                del dumped[key]
        return dumped


Applied = Literal["applied cleanly", "applied by three-way merge", "already applied", "taken as applied"]


class BackportRow(_Record):
    """One case of the fix's probes, in the backport and in the upstream head."""

    probe: str
    case: str
    backport: judging.State
    head: judging.State
    same: bool = Field(description="the same bug or clean on both, or not applicable on both (judging.alike)")


class BackportRecord(_Record, Reviewed):
    """What a backport bundle adds: how the fix was applied and whether the result behaves like head."""

    pr: int
    onto: str = Field(description="the tree the fix was applied onto, as given")
    head: str = Field(description="the upstream head it is compared with")
    patch_sha256: str | None = Field(description="the patch applied (the PR's diff or --patch); null with --applied")
    applied: Applied
    files: list[str] = Field(description="the files the patch changed")
    rows: list[BackportRow]
    behaves_like_head: bool
    on_unreviewed: bool = Field(False, description="it behaves like head on reachable changed code no review accepted (or "
                                                   "on a tree with no baseline): 'behaves like head on unreviewed code'")
    departures: str | None = Field(None, description="how the backported tree departs from its baseline, in one line "
                                                     "(record: departures/<label>.json)")
    rests_on: judging.Departed | None = Field(None, description="when it behaves like head on code that differs from its "
                                                                "baseline where the fix's cases ran: those places")


class AcceptedWorker(TypedDict):
    """A worker of the fleet, as it reported itself, and the tree it was judged by."""

    __pydantic_config__ = ConfigDict(extra="forbid")
    role: Literal["prefill", "decode"]
    endpoint: str | None
    version: str | None
    tree: str
    ranks: NotRequired[int]  # how many data-parallel ranks' own states it reported (internal_states)


ValueSource = Literal["reported by the worker", "declared", "tree default"]


class AcceptedValue(_Record):
    """One environment value a gate judged, for one rank of one worker, and where it came from."""

    worker: str
    rank: int | None = Field(description="the data-parallel rank whose own report it is; null: every rank of the worker")
    name: str
    raw: str | None = Field(description="the text as set (reported or declared); null: not set, the tree's default")
    value: str = Field(description="what the tree's own code reads from it (repr), or why it reads nothing")
    source: ValueSource
    detail: str = Field(description="which report or declaration, exactly")
    parsed_by: str = Field(description="the tree's code that read it, and in which tree")
    warnings: list[str] = Field([], description="what the tree's code warned while reading it; where a declaration "
                                                "disagrees with the worker's report")


class GateResult(_Record):
    gate: Literal[1, 2, 3, 4]
    title: str
    passed: bool
    reasons: list[str] = Field(description="why it failed; for a pass, what it rests on")
    receipts: list[str]
    unused: list[str] = Field([], description="case ids of an alternative the gate did not need (gate 3: the canary "
                                              "where the checksum verifies every pair, or the other way round)")


class Acceptance(_Record):
    """What an accept bundle adds: the fleet, the trees it runs, and the four gates."""

    workers: dict[str, AcceptedWorker] = Field(description="worker URL -> role, endpoint, version, tree source")
    trees: dict[str, str] = Field(description="tree source -> tree digest")
    gates: list[GateResult]
    accepted: bool
    values: list[AcceptedValue] = Field([], description="every environment value judged, per worker and rank")
    warnings: list[str] = Field([], description="declarations the workers' own reports overrode, and the like")
    deadlines: dict[str, int] | None = Field(None, description="seconds: each whole request, the whole accept")
    reader_sha256: str | None = Field(None, description="sha256 of probes/server_config.py, which read the workers' "
                                                        "values with each tree's own code")


GateName = Literal["pool", "canary", "latency"]


class GateRecord(_Record):
    """What a gate bundle (kind ``gate-NAME``) adds: which gate, against which server."""

    gate: GateName
    url: Redacted


class ModelRecord(_Record):
    """What a model bundle adds: the synthetic model it ran, under which switches, and its steps."""

    synthetic: str = Field(description="the label that says this is diffprobe's state machine, not SGLang code")
    configurations: dict[str, dict[str, bool]] = Field(description="name -> fault and defence switches")
    steps: dict[str, str] = Field(description="step number -> name, where a situation stops")
