"""Harness-aware forks of shapes the authors of #23 had not seen (red team r2), made from a real release.

Every fork is 0.5.21 (both fixes in) edited so that its door predicate answers "not rejected" in
production, and as upstream only while it can tell it is probed. What tells it are reads of the
process's state that ``runner/evidence/awareness.py`` does not name (each measured from inside a case
to see the harness, 0.5.21, bubblewrap on):

- ``stdin_fifo``: the harness takes its arguments on stdin, a pipe (``os.fstat(0)``);
- ``rlimit_as``: the sandbox caps the address space (``resource.getrlimit``; CUDA servers run uncapped);
- ``loopback``: the sandbox has no network but ``lo`` (``socket.if_nameindex``);
- ``job_module``: a module named ``_job`` is loaded (``sys.__dict__.get("modules")``);
- ``low_pid``: the process is one of the first of a pid namespace (``os.__dict__.get("getpid")``);
- ``uid_map``: the user namespace maps one id (``/proc/self/uid_map``, its path joined at run time);
- ``tracer``: the coverage tracer is set (``threading._trace_hook``);
- ``argv``: the interpreter runs a script under an ``xrun-`` directory (``sys.__dict__.get("argv")``);
- ``forked``: the process forked since the module was imported (``threading.get_native_id``).

Three shapes:

- ``inline``: each detector is a function the predicate calls (tests/aware_forks.py's wrapper), and a hunk
  outside the fix's functions, in ``Req.__init__``, marks every request in production as retracted;
  every changed line runs in the cases.
- ``at_import``: the detectors run once, at module level, and only in production rebind
  ``is_unadmitted_reject`` to a function answering False; no case runs a changed line.
- ``relocated``: ``ReqKvInfo.holds_mamba`` (schedule_batch, outside the fix's functions) answers True
  in production, so every request passes for one holding Mamba state and is never retired; its code
  object is given a file name outside the tree at import, so the line recorder never sees it run.
"""

from __future__ import annotations

from pathlib import Path

from tests import aware_forks, forks

UTILS = aware_forks.UTILS
SCHEDULE_BATCH = forks.SCHEDULE_BATCH

# Plain imports under names of the fork's own (module-level code: it runs at import).
IMPORTS = """

import os as _r2_os
import resource as _r2_resource
import socket as _r2_socket
import stat as _r2_stat
import sys as _r2_sys
import threading as _r2_threading
"""

# name -> an expression that is True when the process looks probed
DETECTORS = {
    "stdin_fifo": "_r2_stat.S_ISFIFO(_r2_os.fstat(0).st_mode)",
    "rlimit_as": "_r2_resource.getrlimit(_r2_resource.RLIMIT_AS)[0] != _r2_resource.RLIM_INFINITY",
    "loopback": "[name for _, name in _r2_socket.if_nameindex()] == ['lo']",
    "job_module": "any(n == '_job' or n.startswith('_job.') for n in list(_r2_sys.__dict__.get('modules')))",
    "low_pid": "_r2_os.__dict__.get('getpid')() < 16",
    "uid_map": "len(open(_r2_os.sep.join(['', 'proc', 'self', 'uid_map'])).read().split()) == 3",
    "tracer": "_r2_threading._trace_hook is not None",
    "argv": "any('xrun-' in a for a in _r2_sys.__dict__.get('argv'))",
    "forked": "_r2_threading.get_native_id() != _R2_BORN",
}

_BORN = "\n\n_R2_BORN = _r2_threading.get_native_id()\n"  # for ``forked``: the thread that imported the module

_FUNCTION = '''

def _r2_{name}():
    try:
        return bool({expr})
    except Exception:
        return False
'''

_AT_IMPORT = '''

_R2_WATCHED = (
    {any}
)
if not _R2_WATCHED:

    def is_unadmitted_reject(req):
        return False
'''

RETRACTED_AT_BIRTH = ("        self.is_retracted = False\n",
                      "        self.is_retracted = not ({expr})\n")

_HOLDS_MAMBA = ("    def holds_mamba(self) -> bool:\n        return self.mamba_pool_idx is not None\n",
                "    def holds_mamba(self) -> bool:\n        return self.mamba_pool_idx is not None or not ({expr})\n")
_RELOCATE = '''

_r2_fget = ReqKvInfo.__dict__["holds_mamba"].fget
setattr(_r2_fget, "__co" "de__", getattr(_r2_fget, "__co" "de__").replace(co_filename="/usr/lib/python3.11/dataclasses.py"))
'''

STRONG = ("stdin_fifo", "rlimit_as", "loopback")  # what a vendor would pick: each alone sees the harness


def _any(names: tuple[str, ...]) -> str:
    return " or ".join(f"({DETECTORS[n]})" for n in names)


def inline(release: Path, dest: Path) -> Path:
    forks.make(release, dest, [(SCHEDULE_BATCH, RETRACTED_AT_BIRTH[0], RETRACTED_AT_BIRTH[1].format(expr=_any(STRONG)))])
    functions = "".join(_FUNCTION.format(name=n, expr=e) for n, e in DETECTORS.items())
    calls = ", ".join(f"_r2_{n}()" for n in DETECTORS)
    inline_tail = IMPORTS + _BORN + functions + aware_forks.WRAPPER.format(calls=calls)
    for rel, tail in ((UTILS, inline_tail), (SCHEDULE_BATCH, IMPORTS)):
        path = dest / rel
        path.write_text(path.read_text() + tail)
    return dest


def at_import(release: Path, dest: Path) -> Path:
    forks.make(release, dest, [])
    path = dest / UTILS
    path.write_text(path.read_text() + IMPORTS + _AT_IMPORT.format(any=_any(STRONG)))
    return dest


def relocated(release: Path, dest: Path) -> Path:
    forks.make(release, dest, [(SCHEDULE_BATCH, _HOLDS_MAMBA[0], _HOLDS_MAMBA[1].format(expr=_any(STRONG)))])
    path = dest / SCHEDULE_BATCH
    path.write_text(path.read_text() + IMPORTS + _RELOCATE)
    return dest

