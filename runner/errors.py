"""Errors that end a command with one clear line and a documented exit code."""

from __future__ import annotations

import argparse

# Exit codes, shared by every command (README, "Exit codes").
OK = 0
DIFFERS = 1  # a verdict differs from the pin, a bundle was tampered with, observations differ
BAD_INPUT = 2  # the user's input is wrong: pins, source spec, rev, bundle path
INFRASTRUCTURE = 3  # the machine failed us: network, pip, git, a probe process that died


class DiffprobeError(Exception):
    exit_code = INFRASTRUCTURE

    def __init__(self, message: str, *, detail: str | None = None):
        super().__init__(message)
        self.message = one_line(message)
        # extra lines (the tail of a failing build log, of a tree's output), shown below: escaped too
        self.detail = "\n".join(one_line(line) for line in detail.splitlines()[-DETAIL_LINES:]) if detail else None

    @classmethod
    def differs(cls, message: str) -> "DiffprobeError":
        """An outcome that is the answer, not a failure of ours: exit 1."""
        error = cls(message)
        error.exit_code = DIFFERS
        return error


def printable(text: str, keep: str = "") -> str:
    """``text`` with every control character and terminal escape (but those in ``keep``) shown as
    its escape sequence."""
    return "".join(c if c.isprintable() or c in keep else c.encode("unicode_escape").decode() for c in text)


DETAIL_LINES = 15
LINE_CHARS = 400


def one_line(text: str, limit: int = LINE_CHARS) -> str:
    """The promise is one short line per error: control characters and terminal escapes from the
    input (a newline in a TOML key, an ANSI sequence in a tree's exception) are shown escaped,
    never printed, and a longer text is cut at ``limit`` characters, saying how long it was."""
    shown = printable(text[: limit + 1])
    return shown if len(text) <= limit and len(shown) <= limit else f"{shown[:limit]}… ({len(text)} characters)"


def positive_int(text: str) -> int:
    """argparse type for counts and seconds: 0 or less would silently do nothing useful."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


class BadInput(DiffprobeError):
    exit_code = BAD_INPUT


class Infrastructure(DiffprobeError):
    exit_code = INFRASTRUCTURE
