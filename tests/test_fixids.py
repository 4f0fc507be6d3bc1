"""A pinned fix's number, written and read back (runner/fixids.py): ``L3`` for a local id, ``#38935`` for an
upstream pull request, one formatter for every view and command, one parser for every option naming a fix."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from runner import fixids
from runner.commands import options

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("number, shown", [(1, "L1"), (3, "L3"), (999, "L999"), (1000, "#1000"), (38935, "#38935")])
def test_label(number, shown):
    assert fixids.label(number) == shown
    assert fixids.parse(shown) == number  # what is shown reads back


@pytest.mark.parametrize("text, number", [("3", 3), ("L3", 3), ("l3", 3), ("38935", 38935), ("#38935", 38935),
                                          (" L12 ", 12)])
def test_parse(text, number):
    assert fixids.parse(text) == number


@pytest.mark.parametrize("text, why", [
    ("L38935", "a local fix id is under 1000"),
    ("#3", "fix ids under 1000 are local, written L3"),
    ("0", "expected a fix number"), ("L0", "expected a fix number"), ("-3", "expected a fix number"),
    ("LL3", "expected a fix number"), ("L", "expected a fix number"), ("latest", "expected a fix number"),
    ("3.0", "expected a fix number"), ("", "expected a fix number"), ("L\n3", "expected a fix number"),
])
def test_parse_refuses(text, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        fixids.parse(text)


def test_labels():
    assert fixids.labels([38935, 2, 41404]) == "#38935, L2, #41404"
    assert fixids.labels([]) == "none"


def test_every_option_naming_a_fix_takes_both_forms():
    """--fix (audit, sweep, run and its --pr, report, mutate), backport's --pr, upstream-tests' --fix: one parser."""
    from runner import cli
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    seen = []
    for name, p in sub.choices.items():
        for action in p._actions:
            if {"--fix", "--pr"} & set(action.option_strings):
                assert action.type is options.fix_id, (name, action.option_strings)
                seen.append(name)
    assert {"audit", "sweep", "run", "report", "mutate", "backport", "upstream-tests"} <= set(seen)
    assert options.fix_id("L3") == options.fix_id("3") == 3
    with pytest.raises(argparse.ArgumentTypeError):
        options.fix_id("L38935")


# A fix number written by hand as ``#{...}`` in an f-string; the ones left are HTML anchors and links.
_HAND = re.compile(r"#\{")
_ANCHOR = re.compile(r"""href=f?["']#\{|\.md#\{|#\{anchor\(|\{#\{""")


def test_no_view_or_command_writes_a_fix_number_by_hand():
    """Every place that prints a fix number goes through fixids.label: an ``f"#{n}"`` elsewhere would show a
    local id as upstream's pull request of the same number."""
    found = []
    for path in sorted((ROOT / "runner").rglob("*.py")):
        if path.name == "fixids.py":  # the formatter itself
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _HAND.search(_ANCHOR.sub("", line)):
                found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert found == []
