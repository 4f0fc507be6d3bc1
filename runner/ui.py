"""Terminal output: rich progress on stderr for long steps, so stdout stays machine-readable."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.markup import escape
from rich.text import Text

from runner import errors


class _Console(Console):
    """A console that lets no control character through: whatever it renders (a message, a table
    cell) may hold text from a tree, a tool or a file, and ESC sequences could clear the screen or
    forge a verdict. Escaped before markup is read; newlines and tabs are kept."""

    def render_str(self, text: str, **kwargs) -> Text:
        return super().render_str(errors.printable(text, keep="\n\t"), **kwargs)


err = _Console(stderr=True, highlight=False, soft_wrap=True)
out = _Console(highlight=False, soft_wrap=True)
if not out.is_terminal:  # a pipe or a log file: tables at a width that keeps their rows whole
    out = _Console(highlight=False, soft_wrap=True, width=160)

Advance = Callable[[str | None, int | None, int | None], None]
PLAIN_EVERY = 30.0  # seconds: how often a step still running says so where stderr is not a terminal


class _Live:
    """The one live display on a terminal: a line per step running (on every thread: two trees
    probed at once show two lines), each with its count and the time elapsed; it ends with its last step."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.progress: Progress | None = None
        self.steps = 0

    def add(self, description: str, total: int | None) -> tuple[Progress, TaskID]:
        with self.lock:
            if self.progress is None:
                self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                         TimeElapsedColumn(), console=err, transient=True)
                self.progress.start()
            self.steps += 1
            return self.progress, self.progress.add_task(description, total=total)

    def remove(self, task: TaskID) -> None:
        with self.lock:
            assert self.progress is not None
            self.progress.remove_task(task)
            self.steps -= 1
            if not self.steps:
                self.progress.stop()
                self.progress = None


_live = _Live()


@contextmanager
def step(description: str, total: int | None = None, done: bool = True) -> Iterator[Advance]:
    """A progress line for one long step; yields ``advance(detail, completed, total)``. On a
    terminal the line is live (with the count and the time elapsed) while the step runs; elsewhere
    a step still running after ``PLAIN_EVERY`` seconds says so in a plain line, and again every
    ``PLAIN_EVERY`` seconds. ``done``: print "✓ description" when it ends (off when the caller prints
    its own result line)."""
    state: dict = {"detail": None, "completed": 0, "total": total}

    def described() -> str:
        return description + (f" [dim]{escape(state['detail'])}[/]" if state["detail"] else "")

    live = _live.add(description, total) if err.is_terminal else None

    def advance(detail: str | None = None, completed: int | None = None, new_total: int | None = None) -> None:
        state.update({k: v for k, v in (("detail", detail), ("completed", completed), ("total", new_total)) if v is not None})
        if live:
            live[0].update(live[1], description=described(), completed=state["completed"], total=state["total"])

    start, ended = time.monotonic(), threading.Event()

    def tell() -> None:
        while not ended.wait(PLAIN_EVERY):
            count = f" {state['completed']}/{state['total']}" if state["total"] else ""
            err.print(f"… {described()}{count}, {int(time.monotonic() - start)} s")

    teller = None if live else threading.Thread(target=tell, daemon=True)
    if teller:
        teller.start()
    try:
        yield advance
    finally:
        if live:
            _live.remove(live[1])
        else:
            ended.set()
            teller.join()
    if done:
        err.print(f"[green]✓[/] {description}")


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {message}")
