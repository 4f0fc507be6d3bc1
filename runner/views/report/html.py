"""The report as one self-contained HTML file: no script, no external asset, every piece of a bundle's
text escaped; file links relative to where the page is written, never inside the bundle."""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

from runner import errors, fixids
from runner.evidence import bundle, receipts
from runner.judge import judging
from runner.evidence.receipts import Differential, Receipt
from runner.judge.pytest_records import Grading
from runner.files import write_atomic
from runner.views import confinement, grading, timeline
from runner.views.verdict import UNREVIEWED, of_backport_bundle, of_record
from runner.views.report import departures, gates
from runner.views.report.css import CSS
from runner.views.report.effects import EffectRow, effect_columns, effect_label, effect_row, effect_rows, failed_duties
from runner.views.report.incident import LEVEL_CLASS, STEPS, Finding, arrow, assess
from runner.views.report.matrix import cell_at, matrix
from runner.views.report.sources import TREE_KINDS, describe, identity, sandbox, standins, what_it_is
from runner.views.report.verified import Evidence, Fix, evidence_kinds, fix_titles


def esc(text: object) -> str:
    """Every text of the page: what errors.printable shows of it (controls, terminal escapes and
    bidirectional controls as visible escapes, URLs' user info redacted), then HTML-escaped."""
    return html.escape(errors.printable(str(text), keep="\n\t"), quote=True)


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
            self.glance(), self.line(), self.steps(), self.gates(), *[self.fix(f) for f in ev.fixes], self.status_matrix(), self.departures(), self.limits(),
            self.digests(), self.appendix(),
        ]
        head = el("head", '<meta charset="utf-8">', '<meta name="viewport" content="width=device-width, initial-scale=1">',
                  el("title", esc(title)), el("style", CSS))
        return "<!DOCTYPE html>\n" + el("html", head, el("body", el("main", *body)), lang="en") + "\n"

    def glance(self) -> str:
        ev = self.ev
        newest = of_record(ev.index.kind, ev.index.extra, ev.receipts.values())
        head = of_backport_bundle(ev.index.kind, ev.index.extra, ev.receipts.values())
        items = [el("li", el("a", esc(fixids.label(line.fix)), href=f"#fix-{line.fix}"), " ", esc(line.what), " ",
                    el("span", esc(line.word), class_=f"st {_cls(line.word)}"), " ", esc(line.reason),
                    *([el("ul", *[el("li", esc(d)) for d in line.detail])] if line.detail else []))
                 for line in filter(None, [head])]
        items += [el("li", self.fix_line(f)) for f in ev.fixes] or [
            el("li", el("a", esc(fixids.label(line.fix)), href="#matrix"), " ", el("span", esc(line.word), class_=f"st {_cls(line.word)}"),
               " ", esc(f"{line.reason} [{line.config}]"),
               *([el("ul", *[el("li", esc(d)) for d in line.detail])] if line.word == UNREVIEWED else []))
            for line in (newest[1] if newest else [])] or [el("li", esc(
            "No base/head differential in this bundle: see the status by source below."))]
        what = f"What each fix is in {newest[0]}, and why: " if newest and not ev.fixes else "What was fixed, where: "
        loose = confinement.warning(ev.receipts.values())
        findings = [assess(s, ev.fixes) for s in STEPS]
        by_level = {lv: [str(f.step.number) for f in findings if f.level == lv] for lv in LEVEL_CLASS}
        evidence = "; ".join(f"{lv}: step{'s' if len(n) > 1 else ''} {', '.join(n)}" for lv, n in by_level.items() if n)
        return el("section", el("h2", "At a glance"),
                  *([el("p", el("b", "WARNING: "), esc(loose), class_="warn")] if loose else []),
                  el("p", el("b", esc(what))), el("ul", *items),
                  el("p", el("b", "On what evidence: "), esc(
                      f"{evidence_kinds(ev)}. Incident steps by evidence level: {evidence}.")),
                  *([el("p", el("b", "Acceptance: "), self.acceptance(a), " ", el("a", "the four gates", href="#gates"))]
                    if (a := gates.of(ev)) else []),
                  el("p", el("b", "Not tested: "), esc("; ".join(ev.index.limits) + ".")),
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
        return (el("a", esc(f"{fixids.label(d.fix)} {d.title}"), href=f"#fix-{d.fix}") + " " + verdict(fix) + " "
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
        if self.ev.graded:
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

    def gates(self) -> str:
        """An accept bundle's four gates, beside the steps: each word with the receipts behind it."""
        a = gates.of(self.ev)
        if a is None:
            return ""
        rows = [[el("b", str(g.number)), esc(g.title), el("span", esc(g.status), class_=f"st {_cls(g.status)}"),
                 el("ul", *[el("li", esc(r)) for r in g.reasons]),
                 "".join(self.backer(b) for b in g.backing) + "".join(el("p", esc(x), class_="warn") for x in g.problems)]
                for g in a.gates]
        note = el("p", esc("Each gate as the acceptance record words it, shown only as far as this bundle bears it out: "
                           "a gate the record lacks, or that no receipt here backs, did not run; a pass whose receipts "
                           "hold a case that never ran to a result is not shown as a pass. Gate 2 is CPU code-path "
                           "evidence about the tree the workers run; gates 1, 3 and 4 read the live workers."), class_="note")
        return el("section", el("h2", "The four acceptance gates"), el("p", self.acceptance(a)), note,
                  table(["#", "gate", "status", "the record's reasons", "backed by"], rows, class_="gates"), id="gates")

    def acceptance(self, a: gates.Gates) -> str:
        word = "accepted" if a.accepted else "not accepted"
        why = "all four gates passed" if a.accepted else ", ".join(
            f"gate {g.number} {g.status}" for g in a.gates if g.status != "passed")
        claimed = "" if a.claimed is None or a.claimed == a.accepted else el("span", esc(
            f" The record says {'accepted' if a.claimed else 'not accepted'}; this page shows what its receipts bear out."),
            class_="warn")
        return el("span", esc(word), class_=f"verdict {_cls(word)}") + esc(f" ({why})") + claimed

    def backer(self, b: gates.Backer) -> str:
        tree = el("div", esc("tree "), el("code", esc(b.tree)), esc(" "), el("code", esc(b.tree_digest or "digest not recorded")),
                  class_="note") if b.tree else ""
        lines = [el("li", el("span", esc(line.word), class_=f"st {_cls(line.word)}"), " ", esc(line.text),
                    class_="check" if line.depth else None) for line in b.lines]
        return el("div", el("div", esc(b.who)), tree,
                  el("div", el("a", esc(b.receipt), href=f"#{anchor(b.receipt)}"), " ",
                     el("a", "file", href=self.file(b.receipt), class_="file")),
                  el("ul", *lines), class_="backer")

    def grading(self) -> str:
        """An upstream-tests bundle: each test and subtest on both sides (kind and origin) and its grade's cause."""
        g = Grading.model_validate(self.ev.index.extra["grading"])
        rows = [[esc(r.id.split("::", 1)[-1]), esc(r.base.kind), esc(r.head.kind),
                 el("b", esc(r.grade + (f" ({r.cause})" if r.cause and r.grade != "pass-to-pass" else ""))),
                 esc(r.reason or "")]
                for r in g.tests]
        return el("section", el("h2", "Upstream tests, graded per test and subtest"),
                  el("p", esc(f"{grading.verdict_line(g)}. {grading.grading_line(g)}")),
                  *[el("p", esc(line)) for line in g.blockers],
                  el("p", esc(grading.ORIGINS), class_="note"),
                  table(["test", "base", "head", "grade", "why"], rows, class_="grading"), id="grading")

    def step_evidence(self, f: Finding) -> str:
        parts = []
        for b in f.backing:
            t = b.transition
            base, head = self.ev.side(b.fix, t, False), self.ev.side(b.fix, t, True)
            case = self.ev.case(base, t.case)
            changed = "; ".join(effect_row(self.ev, b.fix, t).changed())
            parts.append(el("div", esc(f"{fixids.label(b.fix.judged.fix)} {t.probe}/{t.case}: "),
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
        return el("section", el("h2", esc(f"{fixids.label(d.fix)} {d.title} "), verdict(fix)), kind, warn, ids,
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
                name, st = cell_at(self.ev, cells, source, col)
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

    def departures(self) -> str:
        """Each tree against its baseline, folded: a summary line a reader opens into the changed
        places (each folded again over its lines), those that can tell they are probed first."""
        trees = departures.of(self.ev.departures)
        if not trees:
            return ""

        def place(p: departures.Place) -> str:
            h = p.hunk
            head = [el("code", esc(h.place)), " ", el("span", esc(p.changed), class_="note"), " ",
                    el("span", esc(p.ran), class_="ran" if h.ran else "note")]
            if p.aware:
                head += [" ", el("span", esc(p.aware), class_="aware")]
            lines = "\n".join(h.diff) + (f"\n… {h.diff_more} more line(s)" if h.diff_more else "")
            if errors.bidirectional(lines):
                head += [" ", el("span", esc(errors.BIDI_WARNING), class_="aware")]
            return el("details", el("summary", *head), el("pre", esc(lines), class_="hunk"))

        items = []
        for tree in trees:
            body = [place(p) for p in tree.first + tree.others]
            body.append(el("p", esc(f"{tree.more} more changed place(s) neither run nor able to tell, and {tree.unimported} "
                                    f"changed file(s) no probe run imported: "), el("a", esc(tree.name), href=self.file(tree.name)),
                           class_="note"))
            items.append(el("details", el("summary", esc(tree.line)), *body, class_="departures"))
        return el("section", el("h2", "Where the trees depart from their baselines"), el("p", esc(
            "Each tree compared with its upstream baseline (the release its own sglang/version.py declares, or --against). "
            "Changed places in modules a probe run imported, each with the cases whose recorded lines touch it; places "
            "that read the interpreter's or process's state can tell they are being probed. Folded: open to read."),
            class_="note"), *items, id="departures")

    def limits(self) -> str:
        return el("section", el("h2", "What this bundle does not test"),
                  el("ul", *[el("li", esc(x)) for x in self.ev.index.limits]), id="limits", class_="limits")

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


def verdict(fix: Fix) -> str:
    d = fix.judged
    pinned = "" if d.expected is None else (" (as pinned)" if d.as_expected else f" (pinned: {d.expected})")
    return el("span", esc(d.verdict + pinned), class_=f"verdict {_cls(d.verdict)}")


def flat(value: Any, path: str = "", depth: int = 0) -> list[str]:
    """Recorded effects as ``path: value`` lines, one per effect: a record's keys and a list of
    records are unfolded one level, deeper state (a request snapshot) stays one JSON line."""
    if isinstance(value, dict) and value and depth == 0:
        return [line for k, v in value.items() for line in flat(v, f"{path}.{k}" if path else str(k), 1)]
    if isinstance(value, list) and value and depth == 1 and all(isinstance(v, dict) for v in value):
        return [line for i, v in enumerate(value) for line in flat(v, f"{path}[{i}]", 0)]
    return [f"{path}: {orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()}"]


def write_html(ev: Evidence, out: Path) -> Path:
    """The page, written atomically; never inside the bundle, which must hold only what it lists."""
    out = out.resolve()
    if out.parent == ev.root or ev.root in out.parents:
        raise errors.BadInput(f"--html {out}: inside the bundle, which would then no longer verify; write it elsewhere")
    write_atomic(out, Page(ev, out.parent).render().encode("utf-8"))
    return out
