"""``diffprobe report``: a summary first (at most 40 lines for the committed five-release bundle), the
details behind --fix, --case and --all; the summary, the matrix and the page read one word per fix."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from runner import cli, ui
from runner.evidence import pins
from runner.views import verdict
from tests.helpers import EVIDENCE

RELEASES = EVIDENCE / "releases-20261201"


@pytest.fixture
def screen(monkeypatch):
    buffer = io.StringIO()
    monkeypatch.setattr(ui, "out", Console(file=buffer, width=120, highlight=False, soft_wrap=True))

    def run(*argv: str, root=RELEASES) -> tuple[int, str]:
        buffer.seek(0)
        buffer.truncate()
        return cli.main(["report", str(root), *argv]), buffer.getvalue()
    return run


def test_the_summary_fits_a_screen_and_says_where_the_rest_is(screen):
    code, text = screen()
    lines = text.splitlines()
    assert code == 0 and len(lines) <= 40, len(lines)
    heads = [line for line in lines if line.startswith("#")]
    assert len(heads) == 7 and all("fix observed (as pinned)" in h for h in heads)
    assert any(line.startswith("incident steps: CPU differential: ") for line in lines)
    assert lines[-1].startswith("more: --fix N (one fix's cases, duties, side effects), --case ID, --all")
    assert "┃ case" not in text  # no case table in the summary


def test_the_summary_and_the_matrix_read_a_fix_off_by_default_alike(screen, tmp_path):
    _, text = screen("--html", str(tmp_path / "r.html"))
    [row] = [line for line in text.splitlines() if line.startswith("  sglang 0.5.21 ")]
    assert f"#39500 {verdict.OFF_BY_DEFAULT}" in row
    page = (tmp_path / "r.html").read_text()
    matrix = page.split('id="matrix"', 1)[1]
    assert verdict.OFF_BY_DEFAULT in matrix and "fixed-when-enabled-off-by-default" in matrix


def test_fix_case_and_all_open_the_details(screen):
    code, one = screen("--fix", "38935")
    assert code == 0 and "#38935 Retire rejected requests" in one and "#36988 Clean up" not in one
    assert "failed duties" in one and "door-" in one
    code, case = screen("--case", "prefill-door-rejected")
    assert code == 0 and "prefill-door-rejected " in case and "decode-door-rejected " not in case
    code, everything = screen("--all")
    assert code == 0 and "The incident's seven steps" in everything and everything.count("verdict: fix observed") == len(pins.load().fixes)


def test_an_unknown_fix_or_case_is_bad_input(screen, capsys):
    assert screen("--fix", "999")[0] == 2  # a well-formed local id no pin names
    assert "--fix 999: no receipt of this bundle is about it" in capsys.readouterr().err
    assert screen("--case", "no-such-case")[0] == 2
    assert "--case no-such-case: no case of this bundle has that id" in capsys.readouterr().err


def test_fix_opens_an_audits_cases_with_their_duties(screen, tmp_path):
    """An audit's bundle has no differential: --fix N lists the fix's cases on its tree, each with the duties it failed."""
    from runner.evidence import bundle
    from runner.evidence.records import SweepRecord
    from tests.views.test_verdict import tree
    from runner.evidence.receipts import Receipt, seal
    row, committed = tree("0.5.22")
    rs = []
    for r in committed:  # sealed as the receipt model writes it today (bundle.write)
        raw = r.model_dump(mode="json")
        rs.append(Receipt.model_validate(raw | {"digest": seal(raw)}))
    record = SweepRecord(order=[row.source], shard=None, rows=[row], first_fixed={}, probe_runs=len(rs))
    root = bundle.write(tmp_path / "audit", kind="audit", created_at="2026-12-04T00:00:00Z", receipts=rs, differentials=[],
                        pins_sha256=None, extra=record.model_dump(mode="json"))
    code, text = screen("--fix", "39500", root=root)
    assert code == 0
    assert ("  receipts/sglang-0.5.22.handoff.json short-handoff (default, bug case): bug; failed duties: "
            "handoff-no-unwritten-read") in text
