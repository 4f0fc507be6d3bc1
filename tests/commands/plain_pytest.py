"""What plain pytest says about a test file, read from its own reports: the reference that
``diffprobe upstream-tests`` must equal, test id by test id.

``python -m pytest -rA --junitxml=FILE TEST_FILE`` in the same environment and directory: the short
summary (``-rA``) gives each test's outcome by id and each failed subtest (``SUBFAILED``); JUnit XML
gives the ids of skipped tests, which the short summary groups by location; the last line is
pytest's own count.
"""

from __future__ import annotations

import re
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# diffprobe's outcome names -> pytest's words in the short summary
WORDS = {"passed": "PASSED", "failed": "FAILED", "error": "ERROR", "xfailed": "XFAIL", "xpassed": "XPASS",
         "skipped": "SKIPPED"}
_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS) (\S+)(?: - .*)?$")
_TOTAL = re.compile(r"^=+ (.*) in [0-9.]+s(?: \([0-9:]+\))? =+$")


@dataclass(frozen=True)
class Plain:
    outcomes: dict[str, str]  # test id -> PASSED, FAILED, ERROR, XFAIL, XPASS, SKIPPED
    failed_subtests: Counter  # (test id, subtest description) -> how many
    summary: list[str]  # "3 passed", "1 failed", ... as pytest prints its last line
    exit_status: int


def run(python: Path, directory: Path, test_file: str, env: dict[str, str], timeout: int = 900) -> Plain:
    junit = directory.parent / "plain-junit.xml"
    argv = [str(python), "-I", "-B", "-m", "pytest", "-rA", "-p", "no:cacheprovider", f"--junitxml={junit}", test_file]
    proc = subprocess.run(argv, cwd=directory, env={**env, "COLUMNS": "400"}, capture_output=True, text=True,
                          timeout=timeout)
    return parse(proc.stdout, junit.read_text() if junit.exists() else "", test_file, proc.returncode)


def parse(stdout: str, junit_xml: str, test_file: str, exit_status: int) -> Plain:
    lines = stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if "short test summary info" in line), len(lines))
    outcomes: dict[str, str] = {}
    failed_subtests: Counter = Counter()
    subfailed = re.compile(rf"^SUBFAILED(?P<desc>.*?) (?P<id>{re.escape(test_file)}::\S+)(?: - .*)?$")
    for line in lines[start + 1:]:
        if m := _LINE.match(line):
            outcomes[m.group(2)] = m.group(1)
        elif m := subfailed.match(line):
            failed_subtests[(m.group("id"), m.group("desc"))] += 1
    if junit_xml:
        for case in ET.fromstring(junit_xml).iter("testcase"):
            skipped = case.find("skipped")
            if skipped is not None and skipped.get("type") == "pytest.skip":
                classes = case.get("classname", "").split(".")[1:]
                outcomes["::".join([test_file, *classes, case.get("name", "")])] = "SKIPPED"
    total = next((m.group(1) for line in reversed(lines) if (m := _TOTAL.match(line))), "")
    return Plain(outcomes, failed_subtests, [part.strip() for part in total.split(",") if part.strip()], exit_status)
