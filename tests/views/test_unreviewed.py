""""Fixed on unreviewed code" reads the same in every view that shows a tree's fixes (audit's and
sweep's screens, the sweep matrix, report's headline from a bundle, a backport against head,
compare of two bundles), names its places, and every exit code is read from those words."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from runner import errors, ui
from runner.app import survey
from runner.evidence import compare, departures, reviews
from runner.evidence.records import BackportRecord, BackportRow, SweepRecord
from runner.judge import judging
from runner.views import status, verdict
from tests.views.test_verdict import PINNED, tree

PLACE = "sglang/srt/disaggregation/utils.py:40 in is_unadmitted_reject (ran) 3f2a9c1d0b7e"
ROW, RECEIPTS = tree("0.5.21")
FIXED = [f.fix for f in ROW.fixes if f.status == "fixed"]


def _row(**update):
    return ROW.model_copy(update={"source": "path:/fork", "label": "fork", **update})


def _screen(monkeypatch) -> io.StringIO:
    buffer = io.StringIO()
    monkeypatch.setattr(ui, "out", Console(file=buffer, width=240, highlight=False, soft_wrap=True))
    return buffer


def test_the_rule_counts_fixed_only_and_a_tree_without_baseline():
    fixes = [judging.FixStatus(fix=1, status="fixed", sites=[]), judging.FixStatus(fix=2, status="not fixed", sites=[])]
    hunk = departures.Hunk(file="sglang/a.py", function="f", at=1, lines=(1, 1), baseline_lines=None, added=1, removed=0,
                           code=True, ran_in={}, aware=[], diff=["+x"], reach="imported", key="k" * 64)
    assert reviews.resting(fixes, None, [hunk], []) == [1] == reviews.resting(fixes, None, [], [hunk])
    assert reviews.resting(fixes, None, [], []) == []
    none = departures.Departures(source="path:x", tree_digest="d", baseline=None, baseline_digest=None, chosen="shared",
                                 declared=None, unavailable="no release shares half its files", identical=False)
    assert reviews.resting(fixes, none, [], []) == [1]


def test_the_headline_reads_unreviewed_names_its_places_and_the_exit_code_follows(monkeypatch):
    row = _row(on_unreviewed=FIXED, unreviewed=[PLACE], rejected=["sglang/x.py:1 in f (imported) 0123456789ab"], reviewed=2)
    lines = verdict.of_tree(row.fixes, RECEIPTS, PINNED, row)
    words = {line.fix: line.word for line in lines}
    assert {n for n, w in words.items() if w == verdict.UNREVIEWED} == set(FIXED) and FIXED
    line = next(line for line in lines if line.word == verdict.UNREVIEWED)
    assert line.reason.startswith("rests on 2 changed place(s) the probes can reach (1 rejected by a review) that no review "
                                  "accepted (2 accepted)")
    assert line.detail == ["rejected by a review: sglang/x.py:1 in f (imported) 0123456789ab", f"unreviewed: {PLACE}"]
    assert any(not verdict.carried(w) and w != verdict.UNREVIEWED for w in words.values())  # 0.5.21 lacks later defences
    assert verdict.exit_code(lines) == verdict.exit_code(lines, accept_unreviewed=True) == errors.DIFFERS
    buffer = _screen(monkeypatch)
    verdict.show(lines)
    assert f"{verdict.UNREVIEWED}  rests on 2 changed place(s)" in buffer.getvalue() and f"    unreviewed: {PLACE}" in buffer.getvalue()


def test_an_audit_where_every_fix_is_fixed_exits_4_only_for_unreviewed_code():
    fixed = [verdict.Line(1, "fixed", "r", "c"), verdict.Line(2, verdict.OFF_BY_DEFAULT, "r", "c")]
    assert verdict.exit_code(fixed) == errors.OK
    resting = [*fixed, verdict.Line(3, verdict.UNREVIEWED, "r", "c")]
    assert (verdict.exit_code(resting), verdict.exit_code(resting, accept_unreviewed=True)) == (errors.UNREVIEWED, errors.OK)
    assert verdict.exit_code([*resting, verdict.Line(4, "not fixed", "r", "c")], accept_unreviewed=True) == errors.DIFFERS


def test_a_tree_without_baseline_reads_unreviewed_and_says_why():
    [line] = verdict.of_tree([f for f in ROW.fixes if f.fix == FIXED[0]], RECEIPTS, PINNED, _row(on_unreviewed=FIXED))
    assert line.word == verdict.UNREVIEWED and line.reason.startswith("the tree has no baseline") and not line.detail


def test_the_sweep_matrix_and_exit_code_read_the_same(monkeypatch, tmp_path):
    plain, resting = ROW, _row(on_unreviewed=FIXED, unreviewed=[PLACE])
    record = SweepRecord(order=[plain.source, resting.source], shard=None, rows=[plain, resting], first_fixed={}, probe_runs=0)
    buffer = _screen(monkeypatch)
    status.print_matrix(record, [], PINNED, tmp_path / "b", "ledger.json")
    text = buffer.getvalue()
    fs = next(f for f in resting.fixes if f.fix == FIXED[0])
    assert status._cell(fs, PINNED[fs.fix], resting) == f"[bold red]{verdict.UNREVIEWED} (1)[/]"
    assert verdict.UNREVIEWED not in status._cell(fs, PINNED[fs.fix], plain)
    assert f"on unreviewed code: fork: {', '.join(f'#{n}' for n in FIXED)}: rests on 1 changed place(s)" in text
    assert f"  {PLACE}" in text and f"diffprobe review {tmp_path / 'b'} --ledger ledger.json" in text
    gaps = survey.inconclusive_sites([plain, resting])
    if not gaps:
        assert survey.exit_code([plain, resting]) == errors.UNREVIEWED
        assert survey.exit_code([plain, resting], accept_unreviewed=True) == errors.OK
        assert survey.exit_code([plain]) == errors.OK


def test_the_report_headline_of_a_bundle_is_the_screens(monkeypatch):
    resting = _row(on_unreviewed=FIXED, unreviewed=[PLACE])
    extra = SweepRecord(order=[resting.source], shard=None, rows=[resting], first_fixed={}, probe_runs=0).model_dump(mode="json")
    label, lines = verdict.of_record("audit", extra, RECEIPTS)
    screen = verdict.of_tree(resting.fixes, RECEIPTS, PINNED, resting)
    assert label == "fork" and [(l.word, l.reason, l.detail) for l in lines] == [(l.word, l.reason, l.detail) for l in screen]


@pytest.mark.parametrize("on_unreviewed, word", [(True, verdict.BACKPORT_UNREVIEWED), (False, "behaves like head")])
def test_a_backport_against_head_reads_unreviewed_with_its_places(on_unreviewed, word):
    rows = [BackportRow(probe="admission", case="b", backport="clean", head="clean", same=True)]
    record = BackportRecord(pr=38935, onto="pypi:sglang==0.5.20", head="pypi:sglang==0.5.21", patch_sha256=None,
                            applied="taken as applied", files=[], rows=rows, behaves_like_head=True,
                            on_unreviewed=on_unreviewed, unreviewed=[PLACE] if on_unreviewed else [])
    line = verdict.of_backport(record, {})
    assert line.word == word
    if on_unreviewed:
        assert line.reason.endswith("rests on 1 changed place(s) the probes can reach that no review accepted (0 accepted)")
        assert line.detail == [f"unreviewed: {PLACE}"]
    bundled = verdict.of_backport_bundle("backport", record.model_dump(mode="json"), [])
    assert bundled.word == word


def test_compare_says_where_two_bundles_differ_in_what_is_unreviewed():
    a = {"d1": ("fork", [38935], {PLACE}), "d2": ("other", [], set())}
    b = {"d1": ("fork", [], set()), "d3": ("new", [1], {"x"})}
    assert compare.compare_reviews(a, b) == ["fork: on unreviewed code: #38935 -> none", f"fork: unreviewed only in A: {PLACE}"]
    assert compare.compare_reviews(a, a) == []


def test_what_the_fixed_rested_on_is_kept_beside_why_it_is_unreviewed():
    departed = verdict.Line(38935, "fixed, on code that differs from pypi:sglang==0.5.20 at 3 places the cases ran: read them",
                            "r", "c", warn=["can tell it is being probed: x"])
    line = verdict.unreviewed(departed, _row(on_unreviewed=[38935], unreviewed=[PLACE]))
    assert line.word == verdict.UNREVIEWED and line.warn == departed.warn
    assert line.reason == ("rests on 1 changed place(s) the probes can reach that no review accepted (0 accepted); on code that "
                           "differs from pypi:sglang==0.5.20 at 3 places the cases ran: read them")
