"""Errors that end a command with one clear line and a documented exit code."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

# Exit codes, shared by every command (README, "Exit codes").
OK = 0
DIFFERS = 1  # a verdict differs from the pin, a bundle was tampered with, observations differ
BAD_INPUT = 2  # the user's input is wrong: pins, source spec, rev, bundle path
INFRASTRUCTURE = 3  # the machine failed us: network, pip, git, a probe process that died
UNREVIEWED = 4  # audit: a "fixed" rests on changed code the probes can reach that no review accepted (docs/review.md)


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


# The user info of a URL (``https://user:token@host/``): a secret whoever wrote it, never printed.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s@\"'<>\\]*@")  # never across a quote: JSON, repr


def redact(text: str) -> str:
    """``text`` with the user info of every URL in it replaced by ``***``."""
    return _USERINFO.sub(r"\1***@", text)


# A recorded field that names a source or a URL (receipts, rows, records): redacted as it is made or
# read, so no file diffprobe writes ever holds a URL's user info.
Redacted = Annotated[str, AfterValidator(redact)]


def printable(text: str, keep: str = "") -> str:
    """What every view shows of ``text`` from a tree, a bundle, a tool or the user: every character
    that is not printable (C0 and C1 controls, ESC and so every terminal escape, the bidirectional
    controls U+202A-U+202E, U+2066-U+2069, U+200E, U+200F, U+061C, line and paragraph separators)
    but those in ``keep`` shown as its escape sequence (``\x1b``, ``\u202e``), and the user info
    of URLs redacted (``redact``). Terminal, HTML and JSON views call it (the HTML escapes its
    markup after)."""
    return redact("".join(c if c.isprintable() or c in keep else c.encode("unicode_escape").decode() for c in text))


# The bidirectional controls (Trojan Source, CVE-2021-42574): they reorder what a reader sees of a line.
BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")


BIDI_WARNING = "this hunk contains bidirectional control characters (shown as \\u escapes: what a reader sees may not be what runs)"


def bidirectional(text: str) -> bool:
    """Whether ``text`` holds a bidirectional control: a view warns beside it (printable shows them)."""
    return not BIDI.isdisjoint(text)


def printable_json(text: str) -> str:
    """A JSON document as a view prints it: every character ``printable`` would escape (inside its
    strings: JSON's own structure is ASCII) written as JSON's ``\\uXXXX``, so it reads back as the same
    data; newlines between its lines kept; URLs' user info redacted."""
    def escaped(c: str) -> str:
        if c.isprintable() or c == "\n":
            return c
        code = ord(c)
        if code < 0x10000:
            return f"\\u{code:04x}"
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return redact("".join(escaped(c) for c in text))


DETAIL_LINES = 15
LINE_CHARS = 400


def one_line(text: str, limit: int = LINE_CHARS) -> str:
    """The promise is one short line per error: control characters and terminal escapes from the
    input (a newline in a TOML key, an ANSI sequence in a tree's exception) are shown escaped,
    never printed, and a longer text is cut at ``limit`` characters, saying how long it was."""
    shown = printable(text[: limit + 1])
    return shown if len(text) <= limit and len(shown) <= limit else f"{shown[:limit]}… ({len(text)} characters)"


class BadInput(DiffprobeError):
    exit_code = BAD_INPUT


class Infrastructure(DiffprobeError):
    exit_code = INFRASTRUCTURE
