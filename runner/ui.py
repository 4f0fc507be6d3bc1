"""Terminal output: rich progress on stderr for long steps, so stdout stays machine-readable."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
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
_LIVE = threading.Lock()  # one live progress line at a time: a step on another thread meanwhile prints only its ✓


@contextmanager
def step(description: str, total: int | None = None, done: bool = True) -> Iterator[Advance]:
    """A progress line for one long step (on a terminal: live, with the time elapsed); yields
    ``advance(detail, completed, total)``. ``done``: print "✓ description" when it ends (off when
    the caller prints its own result line)."""
    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    live = err.is_terminal and _LIVE.acquire(blocking=False)
    try:
        with Progress(*columns, console=err, transient=True, disable=not live) as progress:
            task = progress.add_task(description, total=total)

            def advance(detail: str | None = None, completed: int | None = None, new_total: int | None = None) -> None:
                progress.update(
                    task,
                    description=f"{description} [dim]{detail}[/]" if detail else description,
                    completed=completed if completed is not None else progress.tasks[0].completed,
                    total=new_total if new_total is not None else progress.tasks[0].total,
                )

            yield advance
    finally:
        if live:
            _LIVE.release()
    if done:
        err.print(f"[green]✓[/] {description}")


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {message}")
