"""The progress line a probe run prints counts cases as the receipt does."""

from __future__ import annotations

from runner.app import pipeline
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


def test_steps_on_two_threads_are_two_live_lines_each_with_its_count(monkeypatch):
    """Two trees probed at once: each shows its own line, its cases done of total, as the harness reports them."""
    import io
    import threading

    from rich.console import Console

    from runner import ui
    buffer = io.StringIO()
    monkeypatch.setattr(ui, "err", Console(file=buffer, force_terminal=True, width=120))
    inside, release = threading.Barrier(3), threading.Event()

    def probing(name: str, done: int) -> None:
        with ui.step(f"probing {name}", done=False) as advance:
            advance("cases", done, 187)
            inside.wait()
            release.wait()

    threads = [threading.Thread(target=probing, args=(n, d)) for n, d in (("pypi:sglang==0.5.20", 37), ("pypi:sglang==0.5.21", 12))]
    for t in threads:
        t.start()
    inside.wait()
    ui._live.progress.refresh()
    shown = buffer.getvalue()
    release.set()
    for t in threads:
        t.join()
    assert "probing pypi:sglang==0.5.20" in shown and "37/187" in shown
    assert "probing pypi:sglang==0.5.21" in shown and "12/187" in shown and "cases" in shown
    assert ui._live.progress is None  # the display ends with its last step


def test_off_a_terminal_a_long_step_says_so_in_plain_lines_and_a_short_one_says_nothing(monkeypatch):
    import io
    import time

    from rich.console import Console

    from runner import ui
    buffer = io.StringIO()
    monkeypatch.setattr(ui, "err", Console(file=buffer, force_terminal=False, width=120))
    monkeypatch.setattr(ui, "PLAIN_EVERY", 0.2)
    with ui.step("probing pypi:sglang==0.5.21: admission", done=False) as advance:
        advance("cases [red]x", 3, 50)
        time.sleep(0.5)
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 2 and all(line.startswith("… probing pypi:sglang==0.5.21: admission cases [red]x 3/50, 0 s")
                                   for line in lines)
    buffer.truncate(0)
    buffer.seek(0)
    with ui.step("resolve pypi:sglang==0.5.21", done=False):
        pass
    assert buffer.getvalue() == ""
