"""``diffprobe report``: a verified bundle shown to people, in the terminal and as one HTML file.

People read evidence, they do not parse it. Everything shown is derived from the bundle itself:
each differential is re-judged from the receipts it names (a differential only pairs base and head;
the receipts are what was observed), each incident step's evidence level follows from those
transitions, and side effects are counted from the receipts' recorded effects. Receipts may come
from untrusted forks, so every piece of their text is escaped, for rich markup and for HTML alike.
"""

from __future__ import annotations

import argparse
import html
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal
from urllib.parse import quote

import orjson
from rich.markup import escape as rich_escape
from rich.table import Table

from runner import errors, ui
from runner.commands import upstream_tests
from runner.evidence import bundle, judging, receipts
from runner.files import sha256_file, write_atomic
from runner.evidence.observations import Case
from runner.evidence.receipts import CaseTransition, Differential, Receipt, Source
from runner.evidence.records import SweepRecord
from runner.store import specs
from runner.store.sources import TreeIdentity
from runner.views import styles, timeline

Level = Literal["CPU differential", "vendor disclosure", "not covered"]


class Tampered(errors.DiffprobeError):
    """A bundle that does not verify is never shown: a report would lend it credibility."""

    exit_code = errors.DIFFERS


# --- the incident's seven steps, and which probe cases can back them -------------------------


@dataclass(frozen=True)
class Step:
    number: int
    text: str
    backing: tuple[tuple[str, str], ...]  # (probe, case): bug at base, clean at head backs the step
    beyond: str  # what of the step no CPU probe observes, so it rests on the vendor disclosure


STEPS = (
    Step(1, "Bootstrap: the router tells decode the prompt is N pages; decode reserves N KV pages.",
         (("admission", "decode-door-rejected"),),
         "The router and the page count N are not modelled: no pages are reserved on CPU."),
    Step(2, "Prefill admission admits the rejected request.", (("admission", "prefill-door-rejected"),), ""),
    Step(3, "Prefill forward runs the 1-token placeholder.", (),
         "No probe runs a forward pass: no GPU, no model weights."),
    Step(4, "KV transfer sends one page and signals transfer-complete.",
         (("prefill-cleanup", "aborted-final-result"),),
         "The KV sender is a recording double: the last-chunk send is observed, no bytes move."),
    Step(5, "Decode admission applies the same finished() check and accepts.",
         (("admission", "decode-door-rejected"),), ""),
    Step(6, "Decode attention reads all N reserved pages: only page 0 was written by this request, "
            "the rest is stale data of earlier tenants.", (),
         "Needs real KV pages, attention kernels and other tenants' data: none exist on CPU."),
    Step(7, "HTTP 200 with a plausible answer instead of HTTP 400.", (),
         "No HTTP server or model answers in a CPU probe."),
)
LEVEL_CLASS = {"CPU differential": "cpu", "vendor disclosure": "vendor", "not covered": "none"}
TREE_KINDS = ("git", "pypi", "path")
VERIFY_HINT = "cd BUNDLE && sha256sum -c SHA256SUMS   and   diffprobe verify BUNDLE"


# --- what the bundle shows: derived once, rendered twice ---------------------------------------


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
class Backing:
    fix: Fix
    transition: CaseTransition


@dataclass(frozen=True)
class Finding:
    step: Step
    level: Level
    backing: list[Backing]
    found: list[str]  # what else the bundle holds for the step's cases: observations that do not back it


@dataclass(frozen=True)
class Evidence:
    root: Path
    index: bundle.Index
    receipts: dict[str, Receipt]
    fixes: list[Fix]
    manifest_sha256: str

    def side(self, fix: Fix, transition: CaseTransition, head: bool) -> str | None:
        """The receipt file that observed this case on one side of a fix."""
        sides = fix.judged.head if head else fix.judged.base
        return next((s.receipt for s in sides if self.receipts[s.receipt].probe.id == transition.probe), None)

    def case(self, receipt: str | None, case_id: str) -> Case | None:
        return self.receipts[receipt].case(case_id) if receipt else None


def gather(root: Path) -> Evidence:
    """Load and verify a bundle; refuse it with one line when it does not verify."""
    root = root.resolve()
    problems = bundle.verify(root)
    if problems:
        raise Tampered(f"{root}: does not verify ({len(problems)} problem(s), first: {problems[0]}); "
                       f"run `diffprobe verify {root}` for all")
    index, rs, ds = bundle.contents(root)
    fixes = [Fix(name, d, _rejudge(d, rs)) for name, d in sorted(ds.items(), key=lambda kv: kv[1].fix)]
    return Evidence(root, index, rs, fixes, sha256_file(root / bundle.MANIFEST))


def _rejudge(d: Differential, rs: dict[str, Receipt]) -> Differential:
    for side in d.base + d.head:
        if side.receipt not in rs:
            raise errors.BadInput(f"differential #{d.fix} names {side.receipt}, which is not a receipt of this bundle")
    base, head = ([(s.receipt, rs[s.receipt]) for s in sides] for sides in (d.base, d.head))
    return receipts.differential(d.fix, d.title, d.probes, base, head, d.expected)


def assess(step: Step, fixes: list[Fix]) -> Finding:
    """CPU differential only if every backing case went bug -> clean between tree receipts here."""
    if not step.backing:
        return Finding(step, "vendor disclosure", [], [])
    backing: list[Backing] = []
    found: list[str] = []
    for fix in fixes:
        for t in fix.judged.cases:
            if (t.probe, t.case) not in step.backing:
                continue
            if fix.cpu and t.transition == "bug -> clean":
                backing.append(Backing(fix, t))
            else:
                what = "" if fix.cpu else " (model or gate receipts: not a CPU differential)"
                found.append(f"#{fix.judged.fix} {t.probe}/{t.case}: {arrow(t.transition)}{what}")
    if {(b.transition.probe, b.transition.case) for b in backing} == set(step.backing):
        return Finding(step, "CPU differential", backing, found)  # conflicting observations stay visible
    if not found:
        found = [f"no base/head differential here observed {p}/{c}" for p, c in step.backing]
    return Finding(step, "not covered", [], found)


# --- side effects: counted from whatever a probe recorded ---------------------------------------

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
    "released_aborted": "released as aborted",
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


# --- status by source: a matrix for any bundle kind -----------------------------------------------


@dataclass(frozen=True)
class Column:
    fix: int | None
    probe: str

    @property
    def label(self) -> str:
        return f"#{self.fix} {self.probe}" if self.fix is not None else self.probe


@dataclass(frozen=True)
class Status:
    word: str  # a judging.Status; for a model or a server "bug observed" / "no bug observed"
    detail: str  # where a problem shows (sites) and the case counts behind the word


def status(cases: list[Case]) -> Status:
    """One source's status for one probe (judging.status), with the sites (doors, paths) each
    problem shows at (a dropped guard is named even when the bug is fixed) and the case counts."""
    word = judging.status(cases)
    if word == "not probed":
        return Status(word, "")
    counts = _counts(cases)
    found = judging.problems(cases)
    if found:
        where = [f"{'' if i == 0 else w + ' '}at {', '.join(sites)}" for i, (w, sites) in enumerate(found)]
        return Status(word, "; ".join(where) + f" ({counts})")
    return Status(word, counts)


def _counts(cases: list[Case]) -> str:
    n: dict[str, int] = {}
    for c in cases:
        key = judging.state(c).replace("_", " ")
        n[key] = n.get(key, 0) + 1
    return ", ".join(f"{v} {k}" for k, v in n.items())


@dataclass(frozen=True)
class MatrixRow:
    source: Source  # whose receipts fill the row's cells
    name: str
    note: str = ""


def matrix(ev: Evidence) -> tuple[list[MatrixRow], list[Column], dict[tuple[str, Column], str]]:
    """Rows are the observed sources (trees in the bundle's order, then models and servers), or for
    a sweep one row per swept source in sweep order (a commit that shares an earlier one's tree
    says so and shows that tree's receipts); columns (fix, probe); each cell names the receipt
    behind it."""
    order = {receipts.source_key(t): i for i, t in enumerate(ev.index.trees)}
    sources: dict[str, Source] = {}
    cells: dict[tuple[str, Column], str] = {}
    for name, r in sorted(ev.receipts.items()):
        key = receipts.source_key(r.source)
        sources.setdefault(key, r.source)
        cells[(key, Column(r.probe.fix, r.probe.id))] = name
    columns = sorted(dict.fromkeys(col for _, col in cells), key=lambda c: (c.fix is None, c.fix or 0, c.probe))
    swept = ev.index.extra.get("rows") if ev.index.kind in ("sweep", "audit") and ev.index.extra else None
    if swept:
        record = SweepRecord.model_validate(ev.index.extra)
        labels = {row.source: row.label for row in record.rows}
        out = []
        for row in record.rows:
            observed = sources.get(row.tree_digest)
            if observed is None:
                continue
            note = (f"same tree as {labels[row.same_tree_as]}" if row.same_tree_as else
                    "" if observed.source == row.source else f"receipts observed via {observed.source}")
            out.append(MatrixRow(observed, describe(observed) if observed.source == row.source else _named(row.source), note))
        return out, columns, cells
    rows = sorted(sources.items(), key=lambda kv: (kv[1].kind not in TREE_KINDS, order.get(kv[0], len(order))))
    return [MatrixRow(s, describe(s)) for _, s in rows], columns, cells


def _named(text: str) -> str:
    """A swept source without a receipt of its own, as ``describe`` would name it."""
    spec = specs.parse(text)
    return f"{spec.url} @ {spec.rev[:12]}" if isinstance(spec, specs.GitSpec) else text


# A model configuration or a live server is not "fixed": it shows the bug or it does not.
_NOT_A_TREE = {"fixed": "no bug observed", "not fixed": "bug observed"}


def cell_status(ev: Evidence, cells: dict[tuple[str, Column], str], source: Source, col: Column) -> tuple[str | None, Status]:
    name = cells.get((receipts.source_key(source), col))
    st = status(ev.receipts[name].cases if name else [])
    failed = ev.receipts[name].import_result.error if name else None
    if failed is not None:  # every case errored for one reason: say it, not only how many
        st = Status(st.word, f"the tree did not import: {failed.type}: {failed.message}"
                    + (f" ({failed.frame})" if failed.frame else "") + f"; {st.detail}")
    if source.kind not in TREE_KINDS:
        st = Status(_NOT_A_TREE.get(st.word, st.word), st.detail)
    return name, st


# --- identities and stand-ins -------------------------------------------------------------------


def describe(source: Source) -> str:
    """One line a newcomer recognises: which release, commit, directory, server or model."""
    if source.kind == "pypi":
        return f"sglang {source.version} (PyPI)"
    if source.kind == "git":
        return f"{source.repo or source.source} @ {(source.commit or '?')[:12]}"
    if source.kind == "path":
        return f"directory {source.path or source.source}"
    if source.kind == "server":
        return f"live server {source.url}"
    return source.source


def identity(source: Source) -> list[tuple[str, str]]:
    """Every field that pins down what was observed, as (label, value)."""
    if isinstance(source, TreeIdentity):
        fields = [("kind", source.kind), ("source", source.source), ("version", source.version),
                  ("commit", source.commit), ("rev", source.rev), ("artifact", source.artifact),
                  ("artifact sha256", source.artifact_sha256), ("tree digest", source.tree_digest),
                  ("files", str(source.files))]
    elif source.kind == "server":
        fields = [("kind", "server (live gate)"), ("source", source.source), ("url", source.url),
                  ("reported", ", ".join(f"{k}={v}" for k, v in sorted(source.reported.items())))]
    else:
        on = [k for k, v in sorted(source.switches.items()) if v]
        fields = [("kind", "model (synthetic state machine)"), ("source", source.source),
                  ("switches on", ", ".join(on) or "none")]
    if not isinstance(source, TreeIdentity):
        fields.append(("identity digest", receipts.source_key(source)))
    return [(k, v) for k, v in fields if v]


def standins(r: Receipt) -> list[str]:
    """Declared stand-ins this run imported, each with why it stands in (not every submodule)."""
    s = r.environment.standins
    if s is None:
        return []
    hit = lambda name: any(u == name or u.startswith(name + ".") for u in s.used)  # noqa: E731
    named = [f"{name} ({why})" for name, why in sorted(s.declared.items()) if hit(name)]
    undeclared = sorted({u.split(".")[0] for u in s.used if not any(u == d or u.startswith(d + ".") for d in s.declared)})
    return named + [f"{u} (undeclared)" for u in undeclared]


# Model and gate receipts are labelled for what they are, never as CPU differentials: (short, long).
WHAT = {
    "model": ("executable model", "executable model: a synthetic state machine of PD serving, not SGLang code; "
                                  "not CPU-differential evidence"),
    "server": ("live-server gate", "live-server gate: answers of a running deployment, not a code-path "
                                   "differential; not CPU-differential evidence"),
    "tree": ("CPU probe", "CPU probe of a pinned SGLang tree with recording doubles"),
}


def what_it_is(source: Source, short: bool = False) -> str:
    return WHAT["tree" if source.kind in TREE_KINDS else source.kind][0 if short else 1]


def limits(index: bundle.Index) -> list[str]:
    """The bundle's stated limits (a model's or a gate's bundle states its own)."""
    return index.limits


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


# --- terminal -------------------------------------------------------------------------------------


def _t(text: object) -> str:
    """Text from a bundle (a tree's words among it) for the terminal: no markup, no control character."""
    return rich_escape(errors.printable(str(text)))


def sandbox(r: Receipt) -> tuple[str, bool]:
    """How the run was isolated, and whether that is the sandbox (README, \"Threat model\")."""
    i = r.environment.isolation
    if i is None:
        return "not recorded (before the sandbox)", False
    if not i.sandboxed:
        return "UNSANDBOXED: the tree's code ran with the user's rights", False
    return f"bubblewrap {i.version} ({', '.join(i.namespaces)} namespaces; writable: {', '.join(i.writable)})", True


def show(ev: Evidence) -> None:
    o = ui.out
    o.print(f"[bold]{_t(ev.index.kind)} bundle[/] {_t(ev.root)}  created {_t(ev.index.created_at)}  "
            f"[green]✓ verified[/] ({len(ev.receipts)} receipts, {len(ev.fixes)} differentials)")
    for fix in ev.fixes:
        _show_fix(ev, fix)
    for score in ev.index.extra.get("scores", []) if ev.index.kind == "mutation" else []:
        judged = judging.MutationScore.model_validate({k: v for k, v in score.items() if k != "source"})
        o.print(f"#{judged.fix} in {_t(score.get('source', '?'))}: evidence strength: {_t(judged.strength())}; "
                f"{judged.survived} survived, {judged.equivalent} equivalent, {judged.error} error "
                f"(baseline {_t(judged.baseline)}; every mutant in mutation/)")
    if ev.index.kind == upstream_tests.PROBE_ID:  # graded per test and subtest, not by the incident's steps
        upstream_tests.show_bundle(ev.index.extra)
    else:
        steps = Table("step", "evidence", "backed by / found", title="The incident's seven steps", title_justify="left")
        for f in (assess(s, ev.fixes) for s in STEPS):
            refs = [f"#{b.fix.judged.fix} {b.transition.probe}/{b.transition.case}: bug → clean" for b in f.backing]
            steps.add_row(f"{f.step.number}. {_t(f.step.text)}", f"[{_level_style(f.level)}]{f.level}[/]",
                          _t("; ".join(refs + f.found) or f.step.beyond))
        o.print(steps)
    _show_matrix(ev)
    if record := timeline.of_bundle(ev.index.kind, ev.index.extra):
        o.print("[bold]the line, oldest first[/] (one mark per tree)")
        for text in timeline.strip(record, fix_titles(ev)):
            o.print(text)
    o.print("[bold]not tested[/] (this bundle's limits):")
    for limit in limits(ev.index):
        o.print(f"  - {_t(limit)}")
    o.print(f"re-verify: {_t(VERIFY_HINT.replace('BUNDLE', str(ev.root)))}")


def _level_style(level: Level) -> str:
    return {"CPU differential": "green", "vendor disclosure": "cyan", "not covered": "yellow"}[level]


def _show_fix(ev: Evidence, fix: Fix) -> None:
    d = fix.judged
    o = ui.out
    o.print(f"\n[bold]#{d.fix} {_t(d.title)}[/]")
    for label, sides in (("base", d.base), ("head", d.head)):
        for s in sides:
            tree = f"  tree {_t(s.source.tree_digest)}" if isinstance(s.source, TreeIdentity) else ""
            o.print(f"  {label}: {_t(describe(s.source))}  [dim]{_t(s.source.kind)}{tree}  {_t(s.receipt)}[/]")
            o.print(f"        stand-ins used: {_t(', '.join(standins(ev.receipts[s.receipt])) or 'none')}")
            said, sandboxed = sandbox(ev.receipts[s.receipt])
            o.print(f"        sandbox: {_t(said)}" if sandboxed else f"        sandbox: [bold red]{_t(said)}[/]")
    table = Table("case", "role", "base", "head", "transition", "failed duties (base → head)", "side effects that changed")
    for row in effect_rows(ev, fix):
        t = row.transition
        table.add_row(_t(t.case), t.role, _t(t.base), _t(t.head),
                      f"[{styles.TRANSITION.get(t.transition, 'yellow')}]{arrow(t.transition)}[/]",
                      _t(failed_duties(ev, fix, t)), _t("; ".join(row.changed())))
    o.print(table)
    expected = "" if d.expected is None else (" (as pinned)" if d.as_expected else f" [red](pinned: {d.expected})[/]")
    kind = "CPU differential" if fix.cpu else "[yellow]not a CPU differential (model or gate receipts)[/]"
    o.print(f"  verdict: [{styles.VERDICT[d.verdict]}]{d.verdict}[/]{expected}  — {kind}")
    for score in ev.index.extra.get("scores", []):
        if score.get("fix") == d.fix:
            judged = judging.MutationScore.model_validate({k: v for k, v in score.items() if k != "source"})
            o.print(f"  evidence strength: {_t(judged.strength())} at {_t(score.get('source', '?'))}"
                    f" ({judged.survived} survived, {judged.equivalent} equivalent)")
    if not fix.consistent:
        o.print(f"  [red]the stored differential says {_t(fix.stored.verdict)}; its receipts say {d.verdict}[/]")


def _show_matrix(ev: Evidence) -> None:
    rows, columns, cells = matrix(ev)
    if not rows:
        return
    table = Table("source", "what", *[_t(c.label) for c in columns], title="Status by source", title_justify="left")
    for mrow in rows:
        source, row = mrow.source, []
        for col in columns:
            _, st = cell_status(ev, cells, source, col)
            row.append(f"[{styles.STATUS.get(st.word, 'red')}]{_t(st.word)}[/] [dim]{_t(st.detail)}[/]")
        kind = what_it_is(source, short=True)
        name = _t(mrow.name) + (f" [dim]({_t(mrow.note)})[/]" if mrow.note else "")
        table.add_row(name, kind if source.kind in TREE_KINDS else f"[yellow]{_t(kind)}[/]", *row)
    ui.out.print(table)



# --- HTML -----------------------------------------------------------------------------------------


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def el(tag: str, *children: str, **attrs: str | None) -> str:
    """An element; children are HTML already, attribute values are escaped here (``class_`` -> class)."""
    a = "".join(f' {k.rstrip("_").replace("_", "-")}="{esc(v)}"' for k, v in attrs.items() if v is not None)
    return f"<{tag}{a}>{''.join(children)}</{tag}>"


def table(head: list[str], rows: list[list[str]], class_: str | None = None) -> str:
    return el("table", el("thead", el("tr", *[el("th", h) for h in head])),
              el("tbody", *[el("tr", *[el("td", c) for c in row]) for row in rows]), class_=class_)


def _slug(text: str) -> str:
    """An id fragment that stays recognisable (``sglang-0.5.20.admission``) and needs no escaping."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)


def _cls(text: str) -> str:
    """A CSS class for a word: ``bug -> clean`` becomes ``bug-clean``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def anchor(receipt: str, case_id: str | None = None) -> str:
    base = _slug(receipt.removeprefix("receipts/").removesuffix(".json"))
    return base if case_id is None else f"{base}--{_slug(case_id)}"


@dataclass(frozen=True)
class Page:
    """Renders one bundle; ``out_dir`` is where the HTML goes, so file links are relative to it."""

    ev: Evidence
    out_dir: Path

    def file(self, name: str) -> str:
        return quote(Path(os.path.relpath(self.ev.root / name, self.out_dir)).as_posix())

    def case_link(self, receipt: str | None, case_id: str, label: str) -> str:
        if receipt is None:
            return esc(f"{label}: not observed")
        return (el("a", esc(label), href=f"#{anchor(receipt, case_id)}") + " "
                + el("a", "receipt", href=self.file(receipt), class_="file"))

    def render(self) -> str:
        ev = self.ev
        title = f"diffprobe evidence: {ev.index.kind} bundle of {ev.index.created_at}"
        body = [
            el("header", el("h1", esc(title)), el("p", esc(f"{ev.root.name} · SHA256SUMS sha256 {ev.manifest_sha256}"),
                                                  class_="sub")),
            self.glance(), self.line(), self.steps(), *[self.fix(f) for f in ev.fixes], self.status_matrix(), self.limits(),
            self.digests(), self.appendix(),
        ]
        head = el("head", '<meta charset="utf-8">', '<meta name="viewport" content="width=device-width, initial-scale=1">',
                  el("title", esc(title)), el("style", CSS))
        return "<!DOCTYPE html>\n" + el("html", head, el("body", el("main", *body)), lang="en") + "\n"

    def glance(self) -> str:
        ev = self.ev
        items = [el("li", self.fix_line(f)) for f in ev.fixes] or [el("li", esc(
            "No base/head differential in this bundle: see the status by source below."))]
        findings = [assess(s, ev.fixes) for s in STEPS]
        by_level = {lv: [str(f.step.number) for f in findings if f.level == lv] for lv in LEVEL_CLASS}
        evidence = "; ".join(f"{lv}: step{'s' if len(n) > 1 else ''} {', '.join(n)}" for lv, n in by_level.items() if n)
        return el("section", el("h2", "At a glance"),
                  el("p", el("b", "What was fixed, where: ")), el("ul", *items),
                  el("p", el("b", "On what evidence: "), esc(
                      f"{evidence_kinds(ev)}. Incident steps by evidence level: {evidence}.")),
                  el("p", el("b", "Not tested: "), esc("; ".join(limits(ev.index)) + ".")),
                  class_="glance", id="glance")

    def fix_line(self, fix: Fix) -> str:
        d = fix.judged
        bugs = [t for t in d.cases if t.role == "bug"]
        fixed = [t for t in bugs if t.transition == "bug -> clean"]
        guards = [t for t in d.cases if t.role == "guard"]
        kept = [t for t in guards if t.transition == "clean -> clean"]
        sites = sorted({t.site for t in fixed})
        where = f" at {', '.join(sites)}" if sites else ""
        sides = f"{', '.join(describe(s.source) for s in d.base)} → {', '.join(describe(s.source) for s in d.head)}"
        return (el("a", esc(f"#{d.fix} {d.title}"), href=f"#fix-{d.fix}") + " " + verdict(fix) + " "
                + esc(f"{sides}{where}: {len(fixed)} of {len(bugs)} bug cases bug → clean, "
                      f"{len(kept)} of {len(guards)} guard cases clean on both sides."))

    def line(self) -> str:
        """A sweep as a timeline: each cell links to its receipt, the bug window and first fixed tree marked."""
        record = timeline.of_bundle(self.ev.index.kind, self.ev.index.extra)
        if record is None:
            return ""
        picture = timeline.svg(record, timeline.receipt_finder(self.ev.receipts), self.file, fix_titles(self.ev))
        return el("section", el("h2", "The line, tree by tree"), el("p", esc(
            "One lane per fix, one cell per swept tree, oldest first, coloured by the fix's status observed there (each "
            "cell links to its receipt). The dashed band is the bug window: from the first tree whose bug cases showed "
            "the bug signature to the first fixed tree after it (green bar)."), class_="note"),
            el("div", picture, class_="line"), el("p", timeline.legend(), class_="note"), id="line")

    def steps(self) -> str:
        if self.ev.index.kind == upstream_tests.PROBE_ID:  # graded per test and subtest, not by the incident's steps
            return self.grading()
        rows = []
        for f in (assess(s, self.ev.fixes) for s in STEPS):
            rows.append([el("b", str(f.step.number)), esc(f.step.text),
                         el("span", esc(f.level), class_=f"level {LEVEL_CLASS[f.level]}"), self.step_evidence(f)])
        legend = el("p", esc("CPU differential: the backing case was observed as a bug at base and clean at head in "
                             "this bundle. Vendor disclosure: beyond what a CPU probe can observe; rests on the "
                             "published write-up. Not covered: a CPU probe can observe it, but this bundle holds no "
                             "bug → clean observation for it."), class_="note")
        return el("section", el("h2", "The incident, step by step"), legend,
                  table(["#", "step", "evidence", "backed by"], rows, class_="steps"), id="steps")

    def grading(self) -> str:
        """An upstream-tests bundle: each test and subtest on both sides (kind and origin) and its grade's cause."""
        g = upstream_tests.Grading.model_validate(self.ev.index.extra["grading"])
        rows = [[esc(r.id.split("::", 1)[-1]), esc(r.base.kind), esc(r.head.kind),
                 el("b", esc(r.grade + (f" ({r.cause})" if r.cause and r.grade != "pass-to-pass" else "")))]
                for r in g.tests]
        verdict = g.verdict or ("passes" if g.passed else "does not pass")
        return el("section", el("h2", "Upstream tests, graded per test and subtest"),
                  el("p", esc(f"verdict: {verdict}. {upstream_tests.grading_line(g)}")),
                  *[el("p", esc(line)) for line in g.blockers],
                  el("p", esc(upstream_tests.ORIGINS), class_="note"),
                  table(["test", "base", "head", "grade"], rows, class_="grading"), id="grading")

    def step_evidence(self, f: Finding) -> str:
        parts = []
        for b in f.backing:
            t = b.transition
            base, head = self.ev.side(b.fix, t, False), self.ev.side(b.fix, t, True)
            case = self.ev.case(base, t.case)
            changed = "; ".join(effect_row(self.ev, b.fix, t).changed())
            parts.append(el("div", esc(f"#{b.fix.judged.fix} {t.probe}/{t.case}: "),
                            self.case_link(base, t.case, "bug at base"), esc(" → "),
                            self.case_link(head, t.case, "clean at head"),
                            el("div", esc(f"bug signature: {case.signature}" if case else ""), class_="note"),
                            el("div", esc(f"failed duties: {failed_duties(self.ev, b.fix, t)}"), class_="note")
                            if failed_duties(self.ev, b.fix, t) else "",
                            el("div", esc(f"changed: {changed}"), class_="note changed") if changed else ""))
        parts += [el("div", esc(line)) for line in f.found]
        if f.step.beyond:
            parts.append(el("div", esc(f.step.beyond), class_="note"))
        return "".join(parts)

    def fix(self, fix: Fix) -> str:
        d = fix.judged
        ids = self.identities(d)
        rows = effect_rows(self.ev, fix)
        cols = effect_columns(rows)
        effects = table(["case", "role", "transition", *[esc(effect_label(c)) for c in cols]],
                        [self.effect_cells(r, cols) for r in rows], class_="effects")
        reasons = el("ul", *[el("li", esc(r)) for r in d.reasons if "bug -> clean" not in r])
        warn = "" if fix.consistent else el("p", esc(
            f"Warning: the stored differential says {fix.stored.verdict}; its receipts, re-judged here, say "
            f"{d.verdict}. This report shows the re-judged result."), class_="warn")
        kind = "" if fix.cpu else el("p", esc("Model or gate receipts: not a CPU differential of SGLang code."), class_="warn")
        return el("section", el("h2", esc(f"#{d.fix} {d.title} "), verdict(fix)), kind, warn, ids,
                  el("h3", "Side effects, before → after"),
                  el("p", esc("Counts of what each case's run did, from the receipts. A highlighted cell changed "
                              "between base and head; a plain number is the same on both sides."), class_="note"),
                  effects, reasons, el("p", el("a", esc(f"differential: {fix.name}"), href=self.file(fix.name),
                                                 class_="file")), id=f"fix-{d.fix}", class_="fix")

    def identities(self, d: Differential) -> str:
        sides = [("base", s) for s in d.base] + [("head", s) for s in d.head]
        labels = list(dict.fromkeys(k for _, s in sides for k, _ in identity(s.source)))
        rows = [[esc(k), *[el("code", esc(dict(identity(s.source)).get(k, ""))) for _, s in sides]] for k in labels]
        rows.append([esc("stand-ins used"), *[esc(", ".join(standins(self.ev.receipts[s.receipt])) or "none")
                                              for _, s in sides]])
        rows.append([esc("sandbox"), *[el("span", esc(said), class_=None if ok else "st bug")
                                       for said, ok in (sandbox(self.ev.receipts[s.receipt]) for _, s in sides)]])
        rows.append([esc("receipt"), *[el("a", esc(s.receipt), href=self.file(s.receipt)) for _, s in sides]])
        return table(["", *[esc(f"{side}: {describe(s.source)}") for side, s in sides]], rows, class_="ids")

    def effect_cells(self, row: EffectRow, cols: list[str]) -> list[str]:
        t = row.transition
        case = el("a", esc(t.case), href=f"#{anchor(row.base_receipt, t.case)}") if row.base_receipt else esc(t.case)
        cells = [case, esc(t.role), el("span", esc(arrow(t.transition)), class_=f"tr {_cls(t.transition)}")]
        for col in cols:
            if row.base is None or row.head is None:
                cells.append(el("span", esc(f"{t.base} / {t.head}"), class_="na"))
                continue
            b, h = row.base.get(col, 0), row.head.get(col, 0)
            cells.append(esc(b) if b == h else el("span", f"{b}&nbsp;→&nbsp;{h}", class_="diff"))
        return cells

    def status_matrix(self) -> str:
        mrows, columns, cells = matrix(self.ev)
        if not mrows:
            return ""
        rows = []
        for mrow in mrows:
            source = mrow.source
            kind = "cpu" if source.kind in TREE_KINDS else "model"
            row = [esc(mrow.name) + (el("div", esc(mrow.note), class_="note") if mrow.note else "")
                   + el("div", el("code", esc(receipts.source_key(source))), class_="note"),
                   el("span", esc(what_it_is(source, short=True)), class_=f"level {kind}")]
            for col in columns:
                name, st = cell_status(self.ev, cells, source, col)
                link = el("a", esc(st.word), href=f"#{anchor(name)}") if name else esc(st.word)
                row.append(el("span", link, class_=f"st {_cls(st.word)}") + el("div", esc(st.detail), class_="note"))
            rows.append(row)
        note = el("p", esc(
            "Per source and probe, from the receipts' case classifications: fixed = every bug case ran and showed no "
            "bug signature; not fixed = a bug case showed it (at the sites named); regression = a guard case, one "
            "that must behave the same, showed it; inconclusive = a case errored or timed out. Executable-model and live-gate rows "
            "observe a model or a server, not SGLang code: they never count as CPU-differential evidence."),
            class_="note")
        return el("section", el("h2", "Status by source"), note,
                  table(["source", "what", *[esc(c.label) for c in columns]], rows, class_="matrix"), id="matrix")

    def limits(self) -> str:
        return el("section", el("h2", "What this bundle does not test"),
                  el("ul", *[el("li", esc(x)) for x in limits(self.ev.index)]), id="limits", class_="limits")

    def digests(self) -> str:
        ev = self.ev
        rows = [[el("code", esc(n)), el("code", esc(r.digest)), el("code", esc(r.observation_digest))]
                for n, r in sorted(ev.receipts.items())]
        manifest = (ev.root / bundle.MANIFEST).read_text()
        return el("section", el("h2", "Digests and how to re-verify"),
                  el("p", esc("Inside the bundle directory, without diffprobe:")),
                  el("pre", esc(f"cd {ev.root.name} && sha256sum -c {bundle.MANIFEST}")),
                  el("p", esc("With diffprobe (also recomputes every receipt's own digest and checks that each "
                              "differential names receipts with the digests it was judged on):")),
                  el("pre", esc(f"diffprobe verify {ev.root.name}")),
                  el("p", esc(f"This report was made from the bundle whose {bundle.MANIFEST} has sha256 "
                              f"{ev.manifest_sha256}. Its contents:")),
                  el("pre", esc(manifest), class_="manifest"),
                  table(["receipt", "digest", "observation digest"], rows, class_="digests"), id="digests")

    def appendix(self) -> str:
        return el("section", el("h2", "Receipts and cases"), *[self.receipt(n, r) for n, r in sorted(self.ev.receipts.items())],
                  id="receipts")

    def receipt(self, name: str, r: Receipt) -> str:
        rows = []
        for c in r.cases:
            detail = c.effects if c.effects is not None else (c.error.model_dump() if c.error else {"missing": c.missing})
            rows.append(el("tr", el("td", el("b", esc(c.id)), el("div", esc(c.title), class_="note")),
                           el("td", esc(c.role)), el("td", esc(c.site)),
                           el("td", el("span", esc(judging.state(c)),
                                       class_=f"st {_cls(c.classification)}")),
                           el("td", el("div", esc(c.signature), class_="note"), el("pre", esc("\n".join(flat(detail))))),
                           id=anchor(name, c.id)))
        head = el("thead", el("tr", *[el("th", h) for h in ("case", "role", "site", "observed", "signature / effects")]))
        return el("article", el("h3", el("a", esc(name), href=self.file(name))),
                  el("p", esc(f"{what_it_is(r.source)} · {describe(r.source)} · probe {r.probe.id} "
                              f"(sha256 {r.probe.sha256[:16]}…) · {r.started_at} → {r.finished_at}"), class_="note"),
                  el("table", head, el("tbody", *rows), class_="cases"), id=anchor(name), class_="receipt")


def fix_titles(ev: Evidence) -> dict[int, str]:
    return {f.judged.fix: f.judged.title for f in ev.fixes}


def verdict(fix: Fix) -> str:
    d = fix.judged
    pinned = "" if d.expected is None else (" (as pinned)" if d.as_expected else f" (pinned: {d.expected})")
    return el("span", esc(d.verdict + pinned), class_=f"verdict {_cls(d.verdict)}")


def arrow(transition: str) -> str:
    return transition.replace(" -> ", " → ")


def flat(value: Any, path: str = "", depth: int = 0) -> list[str]:
    """Recorded effects as ``path: value`` lines, one per effect: a record's keys and a list of
    records are unfolded one level, deeper state (a request snapshot) stays one JSON line."""
    if isinstance(value, dict) and value and depth == 0:
        return [line for k, v in value.items() for line in flat(v, f"{path}.{k}" if path else str(k), 1)]
    if isinstance(value, list) and value and depth == 1 and all(isinstance(v, dict) for v in value):
        return [line for i, v in enumerate(value) for line in flat(v, f"{path}[{i}]", 0)]
    return [f"{path}: {orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()}"]


CSS = """
:root { --ok:#1a7f37; --bad:#b42318; --warn:#9a6700; --muted:#57606a; --line:#d0d7de; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, "Segoe UI", "DejaVu Sans", Arial, sans-serif; color: #1f2328; }
main { max-width: 1240px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 1.5em; margin: 0; } h2 { font-size: 1.2em; margin: 1.6em 0 .4em; border-bottom: 2px solid var(--line); }
h3 { font-size: 1.05em; margin: 1em 0 .3em; }
.sub, .note { color: var(--muted); font-size: .88em; }
code, pre { font: .85em/1.35 ui-monospace, "DejaVu Sans Mono", monospace; }
pre { white-space: pre-wrap; word-break: break-all; margin: .2em 0; }
table { border-collapse: collapse; width: 100%; margin: .4em 0; }
th, td { border: 1px solid var(--line); padding: 4px 6px; vertical-align: top; text-align: left; }
th { background: #f6f8fa; font-size: .88em; }
a { color: #0550ae; }
.glance { border: 2px solid #1f2328; border-radius: 6px; padding: 4px 16px; margin-top: 12px; background: #fbfcfd; }
.glance ul { margin: 0 0 .5em; }
.verdict, .level, .st, .tr { display: inline-block; padding: 0 6px; border-radius: 4px; font-weight: 600;
  font-size: .88em; white-space: nowrap; }
.verdict.fix-observed, .st.fixed, .st.clean, .st.no-bug-observed, .tr.bug-clean { background: #dafbe1; color: var(--ok); }
.verdict.fix-not-observed, .verdict.regression, .st.not-fixed, .st.regression,
.st.bug, .st.bug-observed, .tr.bug-bug, .tr.clean-bug { background: #ffebe9; color: var(--bad); }
.verdict.inconclusive, .st.inconclusive, .tr.inconclusive, .tr.not-comparable { background: #fff8c5; color: var(--warn); }
.tr.clean-clean, .st.not-applicable, .st.not-probed { background: #f6f8fa; color: var(--muted); }
.level.cpu { background: #dafbe1; color: var(--ok); } .level.vendor { background: #ddf4ff; color: #0550ae; }
.level.none { background: #fff8c5; color: var(--warn); } .level.model { background: #fbefff; color: #8250df; }
.steps td:first-child { width: 2em; text-align: center; } .steps td:nth-child(3) { width: 11em; }
.effects td:nth-child(n+4), .effects th:nth-child(n+4) { text-align: center; }
.effects th { font-weight: 600; font-size: .8em; } .effects td:first-child { white-space: nowrap; }
.changed { color: #1f2328; }
.diff { background: #ffd33d; font-weight: 700; padding: 1px 5px; border-radius: 3px; white-space: nowrap; }
.na { color: var(--warn); font-size: .85em; }
.warn { border-left: 4px solid var(--bad); padding-left: 8px; color: var(--bad); }
.ids td:first-child { width: 10em; color: var(--muted); } .ids code { word-break: break-all; }
.cases td:last-child { width: 60%; } .cases pre { font-size: .78em; } .manifest { background: #f6f8fa; padding: 6px; }
a.file { font-size: .82em; }
.line { overflow-x: auto; } .line svg { max-width: 100%; height: auto; } .key { margin-right: 10px; white-space: nowrap; }
.limits li { font-weight: 600; }
@page { margin: 12mm; }
@media print {
  body { font-size: 10pt; } main { max-width: none; padding: 0; }
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  a { color: inherit; text-decoration: none; }
  tr, .glance, .ids, article h3 { break-inside: avoid; }
  h2, h3 { break-after: avoid; }
  #receipts { break-before: page; }
}
"""


# --- command --------------------------------------------------------------------------------------


def write_html(ev: Evidence, out: Path) -> Path:
    """The page, written atomically; never inside the bundle, which must hold only what it lists."""
    out = out.resolve()
    if out.parent == ev.root or ev.root in out.parents:
        raise errors.BadInput(f"--html {out}: inside the bundle, which would then no longer verify; write it elsewhere")
    write_atomic(out, Page(ev, out.parent).render().encode("utf-8"))
    return out


def cmd_report(args: argparse.Namespace) -> int:
    ev = gather(Path(args.bundle))
    show(ev)
    if args.html:
        out = write_html(ev, Path(args.html))
        ui.out.print(f"html: {_t(out)}")
    return errors.OK


def register(sub) -> None:
    """The ``report`` command; it reads only the bundle, so the cache and pins options do not apply."""
    p = sub.add_parser("report", help="show a verified bundle: terminal summary, optionally a self-contained HTML page")
    p.add_argument("bundle")
    p.add_argument("--html", metavar="OUT.html", help="also write a single self-contained HTML report here")
    p.set_defaults(func=cmd_report)
