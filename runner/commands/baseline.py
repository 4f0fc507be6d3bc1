"""The upstream baseline an audited tree is compared with, and the departure record it gives.

By default a tree is compared with the PyPI release its own ``sglang/version.py`` names ("by the
version it declares"; a wheel's version lives in the generated ``sglang/_version.py``, which
``version.py`` imports; a local segment such as ``+vendor.3`` is dropped), or with ``--against
SOURCE``. The declaration is read from the stored bytes, never run. A tree with no usable
declaration, or whose declared release cannot be had, gets a record that says so in one line.
"""

from __future__ import annotations

import ast
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape

from runner import errors, ui
from runner.commands import pipeline
from runner.evidence import departures
from runner.evidence.departures import Departures
from runner.evidence.receipts import Receipt
from runner.store import sources, specs

DECLARING = ("sglang/version.py", "sglang/_version.py")
MAX_BYTES = 64 << 10
_RELEASE = re.compile(r"[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?")


@dataclass(frozen=True)
class Baseline:
    text: str | None  # the baseline's source; None: there is none
    chosen: str  # "declared" or "against"
    declared: str | None
    tree: sources.Tree | None
    unavailable: str | None = None


def declared_version(root: Path) -> str | None:
    """The version the tree declares: a module-level ``__version__ = "..."`` in ``sglang/version.py``,
    else in ``sglang/_version.py`` (a fallback inside ``try``/``except`` is not a declaration)."""
    for rel in DECLARING:
        path = root / rel
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
            continue
        try:
            module = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in module.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            value = getattr(node, "value", None)
            if (any(isinstance(t, ast.Name) and t.id == "__version__" for t in targets)
                    and isinstance(value, ast.Constant) and isinstance(value.value, str)):
                return value.value[:100]
    return None


def check_against(text: str | None) -> None:
    """``--against``, refused (one line, exit 2) before any work when it is not a source."""
    if text is not None:
        specs.parse(text)


def of(tree: sources.Tree, against: str | None, opts: pipeline.Options) -> Baseline:
    """The baseline of ``tree``: ``against`` when given (a failure to resolve it is the user's
    error), else the release it declares (a failure is said, and the audit goes on)."""
    declared = declared_version(tree.root)
    if against:
        return Baseline(against, "against", declared, pipeline.resolve(against, opts))
    if declared is None:
        return Baseline(None, "declared", None, None, "its sglang/version.py declares no version; give --against SOURCE")
    release = declared.split("+", 1)[0]
    if not _RELEASE.fullmatch(release):
        return Baseline(None, "declared", declared, None, f"it declares version {declared!r}, which is not a release; give --against SOURCE")
    text = f"pypi:{specs.PACKAGE}=={release}"
    if tree.identity.kind == "pypi" and tree.identity.version == release:
        return Baseline(text, "declared", declared, tree)
    try:
        return Baseline(text, "declared", declared, pipeline.resolve(text, opts))
    except errors.DiffprobeError as e:
        return Baseline(text, "declared", declared, None, f"{text} could not be had ({errors.one_line(str(e))[:200]}); give --against SOURCE")


def departures_of(source: str, tree: sources.Tree, baseline: Baseline, receipts: list[Receipt]) -> Departures:
    digest = tree.identity.tree_digest
    if baseline.tree is None:
        return Departures(source=source, tree_digest=digest, baseline=baseline.text, baseline_digest=None, chosen=baseline.chosen,
                          declared=baseline.declared, unavailable=baseline.unavailable, identical=False)
    return departures.compare(source, digest, tree.root, baseline.text or "", baseline.tree.identity.tree_digest,
                              baseline.tree.root, baseline.chosen, baseline.declared, receipts)


def say(record: Departures) -> None:
    """One line on the terminal: identical, no baseline, or how far it departs."""
    ui.err.print(escape(record.line()))
