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
        self.detail = detail  # extra lines (e.g. the tail of a failing build log), shown below

    @classmethod
    def differs(cls, message: str) -> "DiffprobeError":
        """An outcome that is the answer, not a failure of ours: exit 1."""
        error = cls(message)
        error.exit_code = DIFFERS
        return error


def one_line(text: str) -> str:
    """The promise is one line per error: control characters from the input (a newline in a TOML
    key, say) are shown escaped, never printed."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


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
