"""What the store tells its caller while it works: a damaged entry rebuilt, a download under way.

The store never prints: every notice goes to the ``Notices`` its ``Store`` carries, and the
command that made the store decides how to show them (runner/app/notices.py prints them through
runner/ui, escaped). A store made without one (a test, a script) keeps quiet.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager
from typing import Callable, Iterator, Protocol

# advance(detail, completed, total): how far a step has come, each part None when unchanged
Advance = Callable[[str | None, int | None, int | None], None]


class Notices(Protocol):
    def warn(self, message: str) -> None:
        """Something found wrong and dealt with (an entry rebuilt, a wait for another process)."""

    def say(self, message: str) -> None:
        """A fact the user should keep (where a layer's torch came from)."""

    def step(self, description: str) -> AbstractContextManager[Advance]:
        """A long step (a clone, a download, an install), for as long as the context lasts."""


class _Quiet:
    def warn(self, message: str) -> None:
        pass

    def say(self, message: str) -> None:
        pass

    @contextmanager
    def step(self, description: str) -> Iterator[Advance]:
        yield lambda detail=None, completed=None, total=None: None


QUIET: Notices = _Quiet()
