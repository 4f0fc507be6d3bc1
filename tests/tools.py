"""System tools some tests need, and what a test does where one is missing.

A test that needs one says so: ``@pytest.mark.needs("bubblewrap")`` (or ``needs("chromium")``), or
``tools.need("chromium")`` half-way through a test whose first half runs anywhere. Where the tool
cannot run, the test is skipped with one line naming the tool and how to install it, and the run's
summary counts the skips per tool (tests/conftest.py); where it can, nothing is skipped. Whether a
tool is found follows PATH, so a machine without it is simulated by a PATH that lacks it.
"""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass
from typing import Callable

import pytest

from runner.sandbox import bwrap

PREFIX = "needs "  # every skip reason given here starts "needs <tool>:"


@dataclass(frozen=True)
class Tool:
    usable: Callable[[], object]  # truthy where the tool runs on this machine
    why: str  # what is missing, said where it is
    install: str


TOOLS = {
    "bubblewrap": Tool(bwrap.version, "bubblewrap cannot run here (not installed, or no unprivileged user namespaces)",
                       "apt-get install -y bubblewrap"),
    "chromium": Tool(lambda: shutil.which("chromium"), "no chromium on PATH", "apt-get install -y chromium"),
    # registry: sources are pulled with skopeo; tests push to Debian's registry (distribution) on loopback
    "skopeo": Tool(lambda: shutil.which("skopeo"), "no skopeo on PATH", "apt-get install -y skopeo"),
    "docker-registry": Tool(lambda: shutil.which("docker-registry"), "no docker-registry on PATH",
                            "apt-get install -y docker-registry"),
    "umoci": Tool(lambda: shutil.which("umoci"), "no umoci on PATH", "apt-get install -y umoci"),
}


@functools.cache
def missing(name: str) -> str | None:
    """The one skip reason for a test that needs tool ``name``, or None where the tool runs."""
    tool = TOOLS[name]
    if tool.usable():
        return None
    return f"{PREFIX}{name}: {tool.why}; install it with `{tool.install}` (.ci/run does)"


def need(name: str) -> None:
    """Skip the running test here where tool ``name`` cannot run."""
    reason = missing(name)
    if reason:
        pytest.skip(reason)


UNCONFINED: set[str] = set()  # tests that ran a trusted fixture tree without bubblewrap, where it cannot run


def sandboxed(request) -> bool:
    """For a test that runs one of the project's trusted fixture trees itself (``run_isolated``,
    ``run_side``): True where bubblewrap can run; else False, and the run's summary counts the test."""
    if not missing("bubblewrap"):
        return True
    UNCONFINED.add(request.node.nodeid)
    return False


def tool_of(reason: str) -> str | None:
    """The tool a skip reason given here names, else None."""
    if not reason.startswith(PREFIX):
        return None
    name = reason[len(PREFIX):].split(":", 1)[0]
    return name if name in TOOLS else None
