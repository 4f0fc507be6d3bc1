"""The verdict screen (runner/views/verdict.py): per fix one line with its status, the reason that
decides it and the configuration; headline and exit code agree for every fix state, off by default
included; a run outside the sandbox is said first. Rows and receipts are the committed release line's."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
from rich.console import Console

from runner import errors, fixids, ui
from runner.app import survey
from runner.evidence import pins
from runner.judge import judging
from runner.evidence import receipts
from runner.evidence.receipts import Isolation, Receipt
from runner.evidence.records import BackportRecord, BackportRow, Row, SweepRecord, windows
from runner.views import status, verdict
from tests.helpers import EVIDENCE, case

LINE = EVIDENCE / "release-line-20261201"
RECORD = SweepRecord.model_validate(orjson.loads((LINE / "bundle.json").read_bytes())["extra"])
PINNED = {n: f.sites for n, f in pins.load().fixes.items()}


def tree(version: str) -> tuple[Row, list[Receipt]]:
    """A row of the release line and its tree's receipts (only those: the whole line takes a minute to load)."""
    row = next(r for r in RECORD.rows if r.source == f"pypi:sglang=={version}")
    rs = [Receipt.model_validate_json(p.read_bytes()) for p in sorted((LINE / "receipts").glob(f"{row.label}.*.json"))]
    return row, rs


def headlines(text: str) -> list[str]:
    """The screen's fix lines: each starts with a pinned fix's label (#38935, L1) and a space."""
    starts = tuple(f"{fixids.label(n)} " for n in PINNED)
    return [line for line in text.splitlines() if line.startswith(starts)]


def screen(row: Row, rs: list[Receipt], monkeypatch) -> tuple[str, int]:
    """What audit prints for this tree, and its exit code (the command's own rule)."""
    buffer = io.StringIO()
    monkeypatch.setattr(ui, "out", Console(file=buffer, width=200, highlight=False, soft_wrap=True))
    lines = verdict.of_tree(row.fixes, rs, PINNED)
    status.print_audit(row, lines, rs, Path("/b"))
    return buffer.getvalue(), verdict.exit_code(lines)


@pytest.mark.parametrize("version", ["0.5.19", "0.5.20", "0.5.21", "0.5.22"])
def test_headline_and_exit_code_agree(version, monkeypatch):
    text, code = screen(*tree(version), monkeypatch)
    heads = headlines(text)
    assert len(heads) == len(PINNED)
    assert [h.split(" ", 1)[0] for h in heads] == [fixids.label(n) for n in sorted(PINNED, key=fixids.order)]
    words = [h.split("  ")[0].split(" ", 1)[1] for h in heads]
    assert (code == errors.OK) == all(verdict.carried(w) for w in words), text
    assert all(" [" in h and h.endswith("]") for h in heads), "each line names its configuration"
    assert "every case, duty and side effect: diffprobe report /b --fix N" in text


def test_a_fix_off_by_default_reads_so_and_exits_0(monkeypatch):
    text, code = screen(*tree("0.5.22"), monkeypatch)
    [line] = [h for h in text.splitlines() if h.startswith("#39500 ")]
    assert line.startswith(f"#39500 {verdict.OFF_BY_DEFAULT}") and line.endswith("[with-kv-checksum]")
    assert "    default: not fixed, early-success: failed handoff-no-unwritten-read" in text
    # off by default never fails the exit code: it follows the other fixes' headlines alone
    others = [h.split("  ")[0].split(" ", 1)[1] for h in headlines(text) if not h.startswith("#39500 ")]
    assert verdict.carried(verdict.OFF_BY_DEFAULT) and (code == errors.OK) == all(verdict.carried(w) for w in others)


def test_not_fixed_names_the_case_and_the_failed_duty(monkeypatch):
    text, code = screen(*tree("0.5.20"), monkeypatch)
    [line] = [h for h in text.splitlines() if h.startswith("#38935 ")]
    assert line.startswith("#38935 not fixed  prefill-door-rejected: failed door-") and code == errors.DIFFERS
    assert "empty" not in text and "()" not in text  # a finding of no pinned fix prints no empty brackets


def test_inconclusive_names_what_stopped_the_case():
    fs = judging.FixStatus(fix=38935, status="inconclusive", sites=[judging.SiteStatus(
        fix=38935, site="prefill-door", status="inconclusive", cases={"a": "clean", "b": "error"})])
    line = verdict.of_fix(fs, {"b": case("b", outcome="error")})
    assert (line.word, line.reason, line.carried) == ("inconclusive", "b: error (AttributeError: x)", False)


def test_every_case_held_but_a_condition_went_one_way_names_the_condition():
    """The conditions' rule in the verdict line: the sites read fixed, the line reads inconclusive and says which
    condition of the fix's code no case drove the other way (the rest as detail)."""
    one_way = ["condition `req.priority is None` at sglang/srt/disaggregation/prefill.py:461 never false",
               "condition `req.return_logprob` at sglang/srt/disaggregation/prefill.py:990 never true"]
    fs = judging.FixStatus(fix=38935, status="inconclusive", one_way=one_way, conditions=[15, 17], sites=[
        judging.SiteStatus(fix=38935, site="prefill-door", status="fixed", cases={"a": "clean"})])
    line = verdict.of_fix(fs, {"a": case("a")})
    assert (line.word, line.carried) == ("inconclusive", False)
    assert line.reason == one_way[0] + " (and 1 more condition(s))" and line.detail == one_way[1:]
    assert verdict.of_fix(fs.model_copy(update={"one_way": []}), {"a": case("a")}).word == "fixed"


def test_a_fix_pinned_on_its_option_but_not_fixed_there_is_not_carried():
    row, _ = tree("0.5.20")
    fs = next(f for f in row.fixes if f.fix == 39500)
    line = verdict.of_fix(fs, {}, ["with-kv-checksum"])
    assert line.word == "not fixed" and line.config == "with-kv-checksum" and not line.carried


def test_unsandboxed_is_said_first(monkeypatch):
    row, rs = tree("0.5.21")
    loose = [r.model_copy(update={"environment": r.environment.model_copy(update={"isolation": Isolation(sandbox="none")})})
             for r in rs]
    text, _ = screen(row, loose, monkeypatch)
    first = next(line for line in text.splitlines() if not line.startswith(("audit ", "baseline: ")))
    assert first.startswith(f"WARNING: {len(rs)} of {len(rs)} probe run(s) not in the sandbox: UNSANDBOXED")
    assert "WARNING" not in screen(row, rs, monkeypatch)[0]


def test_a_partial_backport_names_the_case_and_the_duty_it_failed():
    row, rs = tree("0.5.20")  # 0.5.20's admission cases stand in for a backport that misses the doors
    cases = {c.id: c for r in rs if r.probe.fix == 38935 for c in r.cases}
    rows = [BackportRow(probe="admission", case=c.id, backport=judging.state(c), head="clean" if c.role == "bug" else judging.state(c),
                        same=c.role != "bug" or judging.state(c) != "bug") for c in cases.values()]
    record = BackportRecord(pr=38935, onto="path:/fork", head="pypi:sglang==0.5.21", patch_sha256=None, applied="taken as applied",
                            files=[], rows=rows, behaves_like_head=False)
    line = verdict.of_backport(record, cases)
    assert line.word == "does not behave like head" and line.what == "backport vs head:"
    assert line.reason.startswith("prefill-door-rejected: backport bug, head clean (failed door-")
    differing = sum(not r.same for r in rows)
    assert line.detail[0].startswith(f"{differing - 1} more case(s) differ: ") and line.config == "decode-door, prefill-door"


def test_a_differential_not_as_pinned_names_the_case_that_stayed_a_bug():
    _, base = tree("0.5.20")
    admission = [("b.json", next(r for r in base if r.probe.id == "admission"))]
    d = receipts.differential(38935, "t", ["admission"], admission, admission, "fix observed")
    line = verdict.of_differential(d, dict(admission))
    assert line.word == "fix not observed (pinned: fix observed)"
    assert line.reason.startswith("pypi:sglang==0.5.20 -> pypi:sglang==0.5.20: prefill-door-rejected: bug -> bug (failed door-")


def test_a_sweep_ends_with_the_newest_trees_verdict_screen(monkeypatch):
    rows = RECORD.rows[-3:]
    record = RECORD.model_copy(update={"rows": rows, "order": [r.source for r in rows], "windows": windows(rows),
                                       "first_fixed": survey.first_fixed(rows)})
    probed = [survey.Probed(row=r, receipts=tree(r.source.split("==")[1])[1]) for r in rows]
    buffer = io.StringIO()
    monkeypatch.setattr(ui, "out", Console(file=buffer, width=200, highlight=False, soft_wrap=True))
    status.print_matrix(record, probed, PINNED, Path("/b"))
    text = buffer.getvalue()
    assert "#39500: first fixed in pypi:sglang==0.5.21 (configuration with-kv-checksum, as pinned)" in text
    screen = text.split("the newest tree, sglang-0.5.23 (every fix, why):\n", 1)[1].splitlines()
    [kv] = [line for line in screen if line.startswith("#39500 ")]  # 0.5.23: off by default, or a condition left one way
    assert screen[0].startswith("#36988 fixed  ")
    assert kv.startswith(f"#39500 {verdict.OFF_BY_DEFAULT}") or kv.startswith("#39500 inconclusive  condition `"), kv
    assert screen[-1] == "every case, duty and side effect: diffprobe report /b --fix N  (or --all; --html FILE for one page)"


def test_a_backport_case_that_could_not_run_says_what_stopped_it():
    rows = [BackportRow(probe="admission", case="b", backport="error", head="clean", same=False)]
    record = BackportRecord(pr=38935, onto="path:/fork", head="pypi:sglang==0.5.21", patch_sha256=None, applied="taken as applied",
                            files=[], rows=rows, behaves_like_head=False)
    line = verdict.of_backport(record, {"b": case("b", outcome="error")})
    assert line.reason == "b: backport error, head clean (AttributeError: x)"
