"""The release line as a picture: ``report --html`` on a sweep draws one lane per fix, one cell per
tree linking to its receipt, the bug window and the first fixed tree; the terminal prints the same
strip. Hand-made receipts (the runner's own mechanics): a bug that enters the line after its first
trees, a fix, and a tree after the fix that shows the bug again."""

from __future__ import annotations

import io
import re
from pathlib import Path
from urllib.parse import unquote

import orjson
import pytest
from rich.console import Console

from runner import cli, ui
from runner.evidence import bundle, receipts
from runner.judge import judging
from runner.evidence.records import Row, SweepRecord, windows
from tests.views.test_report import assert_self_contained, chromium, parse, visible_text
from tests.helpers import case, receipt

VERSIONS = ["0.4.5", "0.4.6", "0.5.0", "0.5.10", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"]
ADMISSION = receipts.ProbeRef(id="admission", fix=38935, sha256="a" * 64, files={"admission.py": "b" * 64})
CLEANUP = receipts.ProbeRef(id="prefill-cleanup", fix=36988, sha256="c" * 64, files={"prefill_cleanup.py": "d" * 64})
# Per tree: the cleanup bug case's state, the admission bug case's state ("na": the API is missing).
CLEANUP_LINE = ["clean", "bug", "bug", "bug", "bug", "clean", "clean", "clean", "clean"]
ADMISSION_LINE = ["na", "na", "bug", "bug", "bug", "bug", "clean", "clean", "bug"]


def cases(state: str, site: str) -> list:
    bug = case("rejected", site=site, outcome="not_applicable") if state == "na" else case("rejected", site=site, bug=state == "bug")
    return [bug, case("valid", role="guard", site=site)]


def sweep_bundle(out: Path) -> Path:
    made, rows = [], []
    for v, c, a in zip(VERSIONS, CLEANUP_LINE, ADMISSION_LINE):
        mine = [receipt(v, cases(c, "prefill-result"), CLEANUP), receipt(v, cases(a, "prefill-door"), ADMISSION)]
        made += mine
        rows.append(Row(source=f"pypi:sglang=={v}", label=f"sglang-{v}", tree_digest=mine[0].source.tree_digest,
                        fixes=judging.fixes(mine), static=[]))
    record = SweepRecord(order=[r.source for r in rows], shard=None, rows=rows,
                         first_fixed={w.fix: w.first_fixed for w in windows(rows)}, windows=windows(rows))
    return bundle.write(out, kind="sweep", created_at="2026-11-30T00:00:00Z", receipts=made, differentials=[],
                        pins_sha256=None, extra=record.model_dump(mode="json"))


@pytest.fixture
def swept(tmp_path) -> Path:
    return sweep_bundle(tmp_path / "sweep")


def lanes(page: str) -> list[str]:
    svg = page[page.index("<svg"):page.index("</svg>")]
    return re.split(r'<text x="4" y="\d+" font-weight="600" font-size="12">', svg)[1:]


def test_the_line_is_an_inline_svg_lane_per_fix_cell_per_tree(swept, tmp_path):
    out = tmp_path / "report" / "r.html"
    out.parent.mkdir()
    assert cli.main(["report", str(swept), "--html", str(out)]) == 0
    page = out.read_text()
    assert_self_contained(parse(page))
    assert page.count("<svg") - page.count('<svg width="12"') == 1 and "<script" not in page
    cleanup, admission = lanes(page)
    assert cleanup.startswith("#36988") and admission.startswith("#38935")
    cells = [re.findall(r'<rect class="cell ([a-z-]+)"', lane) for lane in (cleanup, admission)]
    assert cells == [["no-bug-observed", *["not-fixed"] * 4, *["fixed"] * 4],
                     [*["not-applicable"] * 2, *["not-fixed"] * 4, "fixed", "fixed", "not-fixed"]]
    assert "bug window 0.4.6 .. 0.5.19 (4 trees); first fixed 0.5.20; no tree after it shows the bug" in cleanup
    assert "bug window 0.5.0 .. 0.5.20 (4 trees); first fixed 0.5.21; shows the bug again: 0.5.23" in admission
    assert ">first fixed 0.5.20<" in cleanup and ">first fixed 0.5.21<" in admission
    assert cleanup.count('class="window"') == admission.count('class="window"') == 1
    assert len(re.findall(r'stroke="#1f2328" stroke-width="2"', admission)) == 1  # the tree showing it again


def test_each_cell_links_its_own_receipt_relative_to_the_page(swept, tmp_path):
    out = tmp_path / "elsewhere" / "r.html"
    out.parent.mkdir()
    html_page = (cli.main(["report", str(swept), "--html", str(out)]), out.read_text())[1]
    for lane, probe in zip(lanes(html_page), ("prefill-cleanup", "admission")):
        hrefs = re.findall(r'<a href="([^"]+)"><rect class="cell', lane)
        assert len(hrefs) == len(VERSIONS)
        for href, version in zip(hrefs, VERSIONS):
            assert not href.startswith(("/", "file:")) and "://" not in href
            target = (out.parent / unquote(href)).resolve()
            assert swept.resolve() in target.parents
            r = orjson.loads(target.read_bytes())
            assert (r["source"]["version"], r["probe"]["id"]) == (version, probe)


def test_the_terminal_prints_the_same_line_as_a_strip(swept, monkeypatch):
    buf = io.StringIO()
    monkeypatch.setattr(ui, "out", Console(file=buf, width=250, highlight=False, no_color=True))
    assert cli.main(["report", str(swept)]) == 0
    text = buf.getvalue()
    strip = text[text.index("the line, oldest first"):]
    assert "  ░████████\n   ^   ^     bug window 0.4.6 .. 0.5.19 (4 trees); first fixed 0.5.20" in strip
    assert "  ··███████\n    ^   ^    bug window 0.5.0 .. 0.5.20 (4 trees); first fixed 0.5.21; shows the bug again: 0.5.23" in strip
    assert "0.4.5 → 0.5.23" in strip


def test_a_bundle_that_is_not_a_line_draws_none(tmp_path):
    r = receipt("0.5.20", cases("bug", "prefill-door"), ADMISSION)
    b = bundle.write(tmp_path / "run", kind="run", created_at="2026-11-30T00:00:00Z", receipts=[r], differentials=[],
                     pins_sha256=None)
    out = tmp_path / "r.html"
    assert cli.main(["report", str(b), "--html", str(out)]) == 0
    assert "<svg" not in out.read_text() and 'id="line"' not in out.read_text()


@pytest.mark.needs("chromium")
@pytest.mark.slow
def test_chromium_draws_the_line_offline(swept, tmp_path):
    out = tmp_path / "r.html"
    assert cli.main(["report", str(swept), "--html", str(out)]) == 0
    dom, asked = chromium(tmp_path, out.as_uri(), "--dump-dom")
    assert asked == []
    text = visible_text(dom)
    assert "first fixed 0.5.20" in text and "first fixed 0.5.21" in text and "shows the bug again: 0.5.23" in text
    shot = tmp_path / "line.png"
    _, asked = chromium(tmp_path, out.as_uri(), f"--screenshot={shot}", "--window-size=1400,900")
    assert asked == [] and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_strip_shows_each_duty_where_it_first_holds_and_where_it_stopped(tmp_path, monkeypatch):
    """A fix landing in two parts (one case fixed a tree before the other), and a duty that held,
    stopped holding and holds again: each named with its cases under the fix's own window."""
    peers = ["bug", "bug", "clean", "clean"]
    cleared = ["bug", "bug", "bug", "clean"]
    released = [True, False, True, True]
    made, rows = [], []
    for i, v in enumerate(["0.5.19", "0.5.20", "0.5.21", "0.5.22"]):
        mine = [receipt(v, [case("two-ranks", duties={"acked": peers[i] == "clean", "released": released[i]},
                                 bug=peers[i] == "bug" or not released[i]),
                            case("room-cleared", duties={"acked": cleared[i] == "clean"}, bug=cleared[i] == "bug")],
                        ADMISSION)]
        made += mine
        rows.append(Row(source=f"pypi:sglang=={v}", label=f"sglang-{v}", tree_digest=mine[0].source.tree_digest,
                        fixes=judging.fixes(mine), static=[]))
    record = SweepRecord(order=[r.source for r in rows], shard=None, rows=rows,
                         first_fixed={w.fix: w.first_fixed for w in windows(rows)}, windows=windows(rows))
    out = bundle.write(tmp_path / "sweep", kind="sweep", created_at="2026-11-30T00:00:00Z", receipts=made,
                       differentials=[], pins_sha256=None, extra=record.model_dump(mode="json"))
    terminal = io.StringIO()
    monkeypatch.setattr(ui, "out", Console(file=terminal, width=400, color_system=None))
    assert cli.main(["report", str(out)]) == 0
    text = terminal.getvalue()
    assert "first fixed 0.5.22" in text  # the fix's own window: both parts
    assert ("acked: first holds 0.5.21 in 1 case (two-ranks); first holds 0.5.22 in 1 case (room-cleared)" in text)
    assert "released: held from 0.5.19, stops holding at 0.5.20, holds again 0.5.21 in 1 case (two-ranks)" in text
