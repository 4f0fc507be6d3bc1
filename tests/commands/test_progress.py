"""The progress line a probe run prints counts cases as the receipt does."""

from __future__ import annotations

from runner.commands import pipeline
from tests.helpers import case, receipt


def test_not_applicable_cases_are_counted_by_that_name_not_as_inconclusive():
    r = receipt("0.5.21", [case("a", bug=True), case("b"), case("c", outcome="not_applicable"),
                           case("d", outcome="not_applicable"), case("e", outcome="error")])
    assert pipeline.tally(r) == "1 bug, 1 clean, 2 not applicable, 1 inconclusive"
    assert pipeline.tally(receipt("0.5.21", [case("a"), case("b", outcome="timeout")])) == "0 bug, 1 clean, 1 inconclusive"


def test_a_probe_run_is_a_live_line_on_a_terminal_and_leaves_only_its_result(monkeypatch):
    """On a terminal a running step shows (never ~30 s of silence); its own result line replaces the ✓."""
    import io

    from rich.console import Console

    from runner import ui
    buffer = io.StringIO()
    monkeypatch.setattr(ui, "err", Console(file=buffer, force_terminal=True, width=100))
    with ui.step("probing pypi:sglang==0.5.21: admission", done=False) as advance:
        advance("1 of 2")
    shown = buffer.getvalue()
    assert "probing pypi:sglang==0.5.21: admission" in shown and "0:00:00" in shown and "✓" not in shown  # elapsed time
    with ui.step("building the environment"):
        pass
    assert buffer.getvalue().count("✓") == 1 and buffer.getvalue().rstrip().endswith("building the environment")
