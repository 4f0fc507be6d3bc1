"""Every command's --help answers a new user: each argument documented, the source syntax wherever a
source is taken, one example and the exit codes; no markup; ``diffprobe --help`` one line per command."""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path

import pytest

from runner import cli
from runner.store import specs

ROOT = Path(__file__).resolve().parents[2]


def parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by its name (gate's checks as "gate pool", ...)."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found[f"{prefix}{name}".strip()] = sub
                    walk(sub, f"{prefix}{name} ")
    walk(cli.build_parser(), "")
    return found


def shown(parser: argparse.ArgumentParser) -> str:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        parser.print_help()
    return out.getvalue()


COMMANDS = parsers()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_argument_documented_with_an_example_and_exit_codes(name: str) -> None:
    parser = COMMANDS[name]
    undocumented = [a.dest for a in parser._actions if not a.help and not isinstance(a, argparse._SubParsersAction)]
    assert not undocumented, f"{name}: {undocumented}"
    text = shown(parser)
    example = text.split("example:\n", 1)[1].splitlines()[0].strip()
    assert example.startswith(f"diffprobe {name}"), example
    codes = text.split("exit codes:\n", 1)[1]
    for code in ("0 ", "2 ", "3 "):
        assert any(line.strip().startswith(code) for line in codes.splitlines()), f"{name}: exit code {code} not explained"
    assert "``" not in text and "`" not in text, f"{name}: markup in help"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_points_at_its_page_in_the_docs(name: str) -> None:
    """The last line of a command's help names a page of the documentation site that exists; a
    command without a page of its own points at its heading in the generated command reference."""
    last = shown(COMMANDS[name]).rstrip().splitlines()[-1]
    assert last.startswith("more: docs/"), last
    page, _, anchor = last.removeprefix("more: ").partition("#")
    assert (ROOT / page).is_file(), page
    if anchor:
        assert page == "docs/commands.md" and anchor == name  # mkdocs_hooks.commands gives each command {#name}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_source_argument_gives_the_syntax(name: str) -> None:
    for action in COMMANDS[name]._actions:
        if action.metavar and "SOURCE" in action.metavar:
            assert specs.SYNTAX in " ".join(action.help.split()), f"{name} {action.dest}"


def test_top_level_help_one_line_per_command_without_markup(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    text = shown(cli.build_parser())
    assert "`" not in text
    lines = text.splitlines()
    for name in (n for n in COMMANDS if " " not in n):
        at = next(i for i, line in enumerate(lines) if line.strip().split(" ")[0] == name)
        said = lines[at].strip().removeprefix(name).strip() or lines[at + 1].strip()
        follow = lines[at + 1 if lines[at].strip() != name else at + 2]
        assert said, name
        assert not follow.startswith(" " * 18), f"{name}: its line wraps"
    assert specs.SYNTAX in text


def test_backport_help_documents_the_patch_format_and_the_offline_way() -> None:
    text = " ".join(shown(COMMANDS["backport"]).split())
    assert "git diff or git format-patch" in text
    assert "python/sglang/" in text and "Offline: --patch FILE and --head SOURCE" in text
