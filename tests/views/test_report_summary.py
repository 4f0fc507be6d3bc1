"""``diffprobe report``: a summary first (at most 40 lines for the committed five-release bundle), the
details behind --fix, --case and --all; the summary, the matrix and the page read one word per fix."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from runner import cli, ui
from runner.views import verdict
from tests.helpers import EVIDENCE

RELEASES = EVIDENCE / "releases-20261201"


@pytest.fixture
def screen(monkeypatch):
    buffer = io.StringIO()
    monkeypatch.setattr(ui, "out", Console(file=buffer, width=120, highlight=False, soft_wrap=True))

    def run(*argv: str) -> tuple[int, str]:
        buffer.seek(0)
        buffer.truncate()
        return cli.main(["report", str(RELEASES), *argv]), buffer.getvalue()
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
    assert code == 0 and "The incident's seven steps" in everything and everything.count("verdict: fix observed") == 7


def test_an_unknown_fix_or_case_is_bad_input(screen, capsys):
    assert screen("--fix", "1")[0] == 2
    assert "--fix 1: no differential of this bundle is about it" in capsys.readouterr().err
    assert screen("--case", "no-such-case")[0] == 2
    assert "--case no-such-case: no case of this bundle has that id" in capsys.readouterr().err
