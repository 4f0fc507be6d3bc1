"""The store's notices as a command shows them: on stderr through runner/ui, every byte escaped
(they name paths, URLs and files from trees and users), each on one line."""

from __future__ import annotations

from contextlib import AbstractContextManager

from rich.markup import escape

from runner import errors, ui
from runner.store.notices import Advance


def _shown(text: str) -> str:
    return escape(errors.printable(text))


class _Printed:
    def warn(self, message: str) -> None:
        ui.warn(_shown(message))

    def say(self, message: str) -> None:
        ui.err.print(_shown(message))

    def step(self, description: str) -> AbstractContextManager[Advance]:
        return ui.step(_shown(description))


PRINTED = _Printed()
