"""Which fixes does each tree carry? Probe trees and record each fix's status, door by door: the
rows that ``audit``, ``sweep`` and ``merge`` write.

Statuses come from observed behaviour (runner/judge/judging.py); code or options of later defences are
reported beside them as static findings (runner/evidence/static.py), labelled as such.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from runner import errors
from runner.app import baseline, pipeline
from runner.evidence import bundle, departures, dsse, pins, receipts, reviews, static
from runner.judge import judging
from runner.evidence.departures import Departures
from runner.evidence.records import Row, SweepRecord, inconclusive_sites, windows
from runner.evidence.receipts import Differential, Receipt
from runner.store import specs


class Probed(BaseModel):
    row: Row
    receipts: list[Receipt]  # empty for a row whose tree an earlier row holds (row.same_tree_as)
    departures: Departures | None = None  # None with the receipts: an earlier row holds the tree


def probe(texts: list[str], opts: pipeline.Options) -> list[Probed]:
    """Rows only (``accept`` judges a fleet's trees by behaviour; it keeps no departure records)."""
    return counted(texts, opts, compare=False)[0]


def counted(texts: list[str], opts: pipeline.Options, twins: dict[str, str] | None = None,
            against: str | None = None, compare: bool = True,
            ledger: reviews.Ledger | None = None) -> tuple[list[Probed], int]:
    """One row per source, in order, and the number of probe runs it took. ``twins`` maps a source
    to an earlier one known to hold the same tree (a commit that did not touch the package, by its
    git tree id): it is neither resolved nor probed. Each tree is compared with its baseline
    (``against``, else the release it declares: runner/app/baseline.py), and each fix's
    status says what it rests on; each row names the changed places the probes can reach that
    ``ledger`` (runner/evidence/reviews.py) does not accept."""
    twins = twins or {}
    probes = list(opts.probes)
    findings: dict[str, list[static.Finding]] = {}
    baselines: dict[str, baseline.Baseline] = {}

    def on_tree(text: str, tree) -> None:  # while the pool probes earlier trees
        findings[text] = static.scan(tree.root, tree.files)
        if compare:
            baselines[text] = baseline.of(tree, against, opts, text)

    done = pipeline.probe({t: probes for t in texts if t not in twins}, opts, on_tree=on_tree)
    out: dict[str, Probed] = {}
    for t in texts:
        if t in twins:
            out[t] = twin(out[twins[t]], t)
            continue
        receipts = [done.receipts[(t, p)] for p in probes]
        record = baseline.departures_of(t, done.trees[t], baselines[t], receipts) if compare else None
        if record is not None:
            baseline.say(record)
        fixes = judging.fixes(receipts)
        unreviewed, rejected, accepted = reviews.standing(record, ledger or reviews.Ledger()) if record else ([], [], [])
        row = Row(source=t, label=bundle.label(done.trees[t].identity), tree_digest=done.trees[t].identity.tree_digest,
                  fixes=departures.judged(fixes, record, receipts) if record else fixes, static=findings[t],
                  reused=all((t, p) in done.reused for p in probes), departures=record.line() if record else None,
                  unreviewed=[reviews.named(h) for h in unreviewed], rejected=[reviews.named(h) for h in rejected],
                  reviewed=len(accepted), on_unreviewed=reviews.resting(fixes, record, unreviewed, rejected))
        out[t] = Probed(row=row, receipts=receipts, departures=record)
    return same_trees([out[t] for t in texts]), done.runs


def twin(of: Probed, text: str) -> Probed:
    """The row of ``text``, a source with the same tree as ``of``'s."""
    spec = specs.parse(text)
    label = f"git-{spec.rev[:12]}" if isinstance(spec, specs.GitSpec) else text
    return Probed(row=of.row.model_copy(update={"source": text, "label": label, "reused": True}), receipts=of.receipts)


def same_trees(probed: list[Probed]) -> list[Probed]:
    """Rows in order; a row whose tree an earlier row has names it and carries no receipts of its own."""
    first: dict[str, str] = {}
    out = []
    for p in probed:
        earlier = first.setdefault(p.row.tree_digest, p.row.source)
        out.append(p if earlier == p.row.source else
                   Probed(row=p.row.model_copy(update={"same_tree_as": earlier}), receipts=[], departures=None))
    return out


def first_fixed(rows: list[Row]) -> dict[int, str | None]:
    """Per fix, the first fixed row after the first one showing the bug (records.windows)."""
    return {w.fix: w.first_fixed for w in windows(rows) if w.site is None}


def status_of(row: Row, fix: int, site: str | None = None) -> str:
    found = next((f for f in row.fixes if f.fix == fix), None)
    if site is not None:
        found = judging.at_site(found, site)
    return found.status if found else "not applicable"


def exit_code(rows: list[Row], strict: bool = False, accept_unreviewed: bool = False) -> int:
    """1 when any site of any source is inconclusive: a matrix with a gap is not a result, even
    when another site of the same fix already shows the bug; with ``strict``, also when a "fixed"
    rests on code that differs from its baseline. Else 4 when a cell reads "fixed on unreviewed
    code" (unless ``accept_unreviewed``), as audit exits for it."""
    failed = inconclusive_sites(rows) or (strict and any(judging.strict_fails(r.fixes) for r in rows))
    if failed:
        return errors.DIFFERS
    return errors.UNREVIEWED if any(r.on_unreviewed for r in rows) and not accept_unreviewed else errors.OK


def differentials(probed: list[Probed], p: pins.Pins) -> list[Differential]:
    """For each fix, its first fixed row against the last row before it that showed the bug (the
    end of the bug window), else the last row before it that was not fixed: the pair a sweep names,
    as a differential a report can back incident steps with."""
    by_tree = {pr.row.tree_digest: pr.receipts for pr in probed if pr.receipts}
    rows = [pr.row for pr in probed]
    by_source = {r.source: r for r in rows}
    out = []
    for w in windows(rows):
        if w.fix not in p.fixes:
            continue
        # a fix pinned on one configuration (an option off by default, on) is compared on its window
        sites = p.fix(w.fix).sites
        if not w.first_fixed or w.site != (sites[0] if len(sites) == 1 else None):
            continue
        i = rows.index(by_source[w.first_fixed])
        before = [by_source[w.last_bug]] if w.last_bug else [r for r in rows[:i] if status_of(r, w.fix, w.site) != "fixed"]
        if not before:
            continue
        pinned = p.fix(w.fix)
        base, head = ([(bundle.receipt_name(r), r) for r in by_tree[row.tree_digest] if r.probe.id in pinned.probes]
                      for row in (before[-1], rows[i]))
        title = f"{pinned.title} (sweep: {before[-1].label} -> {rows[i].label})"
        out.append(receipts.differential(w.fix, title, pinned.probes, base, head, None, pinned.sites))
    return out


def write(target: Path, kind: str, started: str, probed: list[Probed], record: SweepRecord,
          diffs: list[Differential] = (), signers: list[dsse.Signer] = ()) -> Path:
    unique = {bundle.receipt_name(r): r for p in probed for r in p.receipts}
    records = {departures.file_name(p.row.label): bundle.dump(p.departures) for p in probed if p.departures is not None}
    return bundle.write(target, kind=kind, created_at=started, receipts=list(unique.values()), differentials=list(diffs),
                        pins_sha256=None, extra=record.model_dump(mode="json"), files=records, signers=signers)
