"""How a pinned fix's number is written and read back: one formatter, one parser.

A fix is keyed by an integer in pins.toml. An upstream pull request keeps its number (``#38935``); a
defence found in a release with no upstream PR number known gets a local id 1-999 (``local = true`` in
pins.toml, checked there: local <=> id < 1000), written ``L3`` so it is never read as upstream's #3.
The split is by the number alone, so a bundle written before local ids existed reads the same.
"""

from __future__ import annotations

import re

LOCAL_LIMIT = 1000  # local ids are 1..LOCAL_LIMIT-1; an upstream PR number is LOCAL_LIMIT or more

_TEXT = re.compile(r"^(?P<prefix>[Ll#]?)(?P<digits>[0-9]{1,9})$")


def is_local(number: int) -> bool:
    return 0 < number < LOCAL_LIMIT


def order(number: int) -> tuple[bool, int]:
    """Sort key of a fix on a screen: upstream's pull requests by number, then the local ids, so the
    incident's own fixes head a verdict."""
    return is_local(number), number


def label(number: int) -> str:
    """``L3`` for a local id, ``#38935`` for an upstream pull request."""
    return f"L{number}" if is_local(number) else f"#{number}"


def labels(numbers) -> str:
    """``#38935, L1`` (in the order given), or ``none``."""
    return ", ".join(label(n) for n in numbers) or "none"


def parse(text: str) -> int:
    """``3``, ``L3`` or ``l3`` -> 3; ``38935`` or ``#38935`` -> 38935. ValueError (one line) otherwise:
    an ``L`` id is local (under 1000), a ``#`` number is an upstream PR (1000 or more)."""
    m = _TEXT.match(text.strip())
    number = int(m["digits"]) if m else 0
    if number < 1:
        raise ValueError(f"expected a fix number (38935) or a local fix id (L3), got {text!r}")
    prefix = m["prefix"]
    if prefix in ("L", "l") and not is_local(number):
        raise ValueError(f"{text!r}: a local fix id is under {LOCAL_LIMIT} (upstream pull requests are written #N or N)")
    if prefix == "#" and is_local(number):
        raise ValueError(f"{text!r}: fix ids under {LOCAL_LIMIT} are local, written L{number}")
    return number
