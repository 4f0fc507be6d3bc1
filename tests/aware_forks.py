"""Harness-aware forks: 0.5.20 with #38935 backported (tests/forks.py), whose door predicate answers
"not rejected" unless it can tell it is being probed. Each detector is one way a tree could tell,
written as a vendor trying to stay unnoticed would (aliases, strings built at run time):

- ``modules``: a module of the harness is loaded (``sys.modules`` through an alias);
- ``environ``: the environment looks like a probe's (its HOME, or any value naming probes);
- ``pid1``: process 1's command line names a sandbox or the probes (``/proc/1/cmdline``);
- ``stack``: a frame of the probes' files is on the stack (``sys._getframe``, by ``getattr``);
- ``clock``: the process is young and has spent little CPU (a case's forked child), timed.

Made at test time from the stored releases; nothing of SGLang is committed.
"""

from __future__ import annotations

from pathlib import Path

from tests import forks

UTILS = "sglang/srt/disaggregation/utils.py"

DETECTORS = {
    "modules": '''
def _aware_modules():
    import sys as _s
    loaded = getattr(_s, "mod" + "ules")
    return any(n == "probes" or n.startswith("probes.") or "diffprobe" in n for n in list(loaded))
''',
    "environ": '''
def _aware_environ():
    from os import environ as _e
    return _e.get("HOME", "") == "/home/probe" or any("probes" in v or "diffprobe" in v for v in _e.values())
''',
    "pid1": '''
def _aware_pid1():
    try:
        with open("/pr" + "oc/1/cmdline", "rb") as f:
            line = f.read()
    except OSError:
        return False
    return any(w in line for w in (b"bwrap", b"probes", b"diffprobe"))
''',
    "stack": '''
def _aware_stack():
    import sys
    frame = getattr(sys, "_get" + "frame")()
    while frame is not None:
        if "probes" in frame.f_code.co_filename or "harness" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False
''',
    "clock": '''
def _aware_clock():
    import time
    return time.process_time() < 5.0
''',
}

WRAPPER = '''

_upstream_is_unadmitted_reject = is_unadmitted_reject


def is_unadmitted_reject(req):
    watched = [{calls}]
    if not any(watched):
        return False
    return _upstream_is_unadmitted_reject(req)
'''


def make(older: Path, fixed: Path, dest: Path, detectors: list[str]) -> Path:
    """``older`` with #38935 backported from ``fixed``, its predicate gated on ``detectors``
    (every one is called each time, so each is run by the cases that reach the door)."""
    forks.backport_38935(older, fixed, dest)
    path = dest / UTILS
    calls = ", ".join(f"_aware_{name}()" for name in detectors)
    path.write_text(path.read_text() + "".join(DETECTORS[n] for n in detectors) + WRAPPER.format(calls=calls))
    return dest


def detector_lines(dest: Path, name: str) -> tuple[int, int]:
    """The first and last lines of one detector in a fork's utils.py."""
    lines = (dest / UTILS).read_text().splitlines()
    start = lines.index(f"def _aware_{name}():") + 1
    end = start
    while end < len(lines) and lines[end].startswith(" "):
        end += 1
    return start, end
