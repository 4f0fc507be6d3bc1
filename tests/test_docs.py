"""The README and the documentation site are checked like code.

- The site builds with ``mkdocs build --strict``: a broken link or anchor, a missing page, or a page
  left out of the nav fails; the command reference, format tables and duty table it generates
  (mkdocs_hooks.py) come from the parser, the JSON schemas and the duty tables (probes/duties_*.py).
- Every shell example in the README is checked: the cheap ones (``verify`` and ``report`` of the
  committed bundle) run for real; the expensive ones (``run``, ``backport``, ``audit``, ``accept``, the
  set-up commands) are parsed by diffprobe's own parser, so a renamed option or command fails here.
- The docs pages' concrete ``diffprobe`` examples parse too (a synopsis with ``[optional]`` parts,
  alternatives or ``…`` is not a command line, and is left to the generated reference).
- The README stays what a newcomer reads in five minutes: at most 250 lines, the two set-up commands
  (verbatim: CI runs the test one) in the first screen, every verdict word within the first 100 lines,
  and every command of the parser in its table.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys

import pytest

from runner import cli
from tests.helpers import ROOT

README = (ROOT / "README.md").read_text()
LINES = README.splitlines()
MAIN_JOB = "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/diffprobe run --via releases --out evidence-run"
TEST_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/python -m pytest -q"
VERDICTS = ("fixed", "not fixed", "regression", "inconclusive", "not applicable")
RUN_FOR_REAL = {"verify", "report"}  # seconds, on the committed bundle; every other example is parsed only
# the set-up commands' other steps (checked verbatim by the test below), as examples() spells them
NOT_DIFFPROBE = {" ".join(shlex.split(step)) for command in (MAIN_JOB, TEST_COMMAND) for step in command.split(" && ")[:2]} | {
    ".venv/bin/python -m pytest -q"}


def examples(text: str = README, only: str = "") -> list[str]:
    """Every command of the ``sh`` and ``console`` blocks of ``text`` (those starting with ``only``),
    continuation lines joined, each ``&&`` step apart; a console block's commands are its ``$`` lines
    (the rest is their output)."""
    found = []
    for lang, body in re.findall(r"^```(sh|console)\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        lines = body.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if lang == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            while line.endswith("\\") and i < len(lines):
                line = line[:-1] + " " + lines[i].strip()
                i += 1
            if not line.startswith(only):
                continue
            line = re.sub(r"\$\([^)]*\)", "X", line)  # a shell substitution stands for one word
            found += [" ".join(words) for step in line.split(" && ") if (words := shlex.split(step, comments=True))]
    return found


def subcommands() -> dict[str, argparse.ArgumentParser]:
    [sub] = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_site_builds_in_strict_mode(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(site)], capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    reference = (site / "commands" / "index.html").read_text()
    for name in subcommands():
        assert f"usage: diffprobe {name}" in reference, f"{name} is not in the generated command reference"
    formats = (site / "formats" / "index.html").read_text()
    for schema in (ROOT / "evidence" / "schema").glob("*.schema.json"):
        assert schema.name in formats, f"{schema.name} is not in the generated format reference"


def test_readme_is_short_and_says_first_what_a_newcomer_needs():
    assert len(LINES) <= 250
    first_screen = "\n".join(LINES[:25])
    assert MAIN_JOB in first_screen and TEST_COMMAND in first_screen
    assert TEST_COMMAND in (ROOT / ".ci" / "run").read_text()  # CI runs the README's test command verbatim
    top = "\n".join(LINES[:100])
    for word in VERDICTS:
        assert f"**{word}**" in top, f"the verdict '{word}' is not explained within the first 100 lines"


def test_readme_command_table_is_the_parser():
    section = README.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `([a-z-]+)` \|", section, re.MULTILINE)
    assert listed == list(subcommands())


def test_readme_links_resolve():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_every_readme_example_is_checked(tmp_path, monkeypatch, capsys):
    commands = examples()
    assert MAIN_JOB.split(" && ")[2] in commands and len(commands) >= 8
    monkeypatch.chdir(tmp_path)  # what a real example writes (report --html) lands here
    ran = 0
    for command in commands:
        if command in NOT_DIFFPROBE:
            continue
        argv = shlex.split(command)
        assert argv[0] in ("diffprobe", ".venv/bin/diffprobe"), f"README example not checked by any test: {command}"
        if argv[1] in RUN_FOR_REAL:
            argv = [str(ROOT / a) if (ROOT / a).exists() else a for a in argv[1:]]
            assert cli.main(argv) == 0, f"{command}: {capsys.readouterr()}"
            ran += 1
        else:
            cli.build_parser().parse_args(argv[1:])  # a usage mistake exits 2 (SystemExit) and fails here
    assert ran == len(RUN_FOR_REAL)
    assert (tmp_path / "run.html").is_file()


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_docs_examples_parse(page):
    for command in examples(page.read_text(), only="diffprobe "):
        argv = shlex.split(command)
        if any(mark in command for mark in ("[", "|", "…", "...")):
            continue
        cli.build_parser().parse_args(argv[1:])  # a usage mistake exits 2 (SystemExit) and fails here


PATH_NAMED = re.compile(r"`((?:runner|probes|tests|bench|evidence|docs|\.ci)/[\w./*-]+)")


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_every_path_a_page_names_exists(page):
    """A file moved or renamed in the code leaves no page pointing at where it was (``x/y.name`` names
    ``name`` in ``x/y.py``)."""
    for named in PATH_NAMED.findall(page.read_text()):
        path = named.rstrip(".")
        module = path.rsplit(".", 1)[0] + ".py"
        assert any(ROOT.glob(path)) or (ROOT / module).is_file(), \
            f"{page.name} names {path}, which does not exist: update the page"
