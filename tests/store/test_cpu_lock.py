"""The CPU lock against what the pinned releases declare: every runtime dependency of each pinned
sglang wheel (``Requires-Dist`` whose marker holds on the probe machine: CPython 3.11, Linux x86_64)
is in the lock at a version the release accepts, or is listed in the lock with why it is not
(``# omit NAME: why``, ``# differs NAME: why``). Nothing is listed without a release needing it."""

from __future__ import annotations

import re
import zipfile

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from runner.evidence import pins
from runner.store import envs, pypi, specs

PROBE_MACHINE = {**default_environment(), "python_version": "3.11", "python_full_version": "3.11.7",
                 "implementation_name": "cpython", "platform_python_implementation": "CPython",
                 "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix"}
NOTE = re.compile(r"^# (omit|differs) ([A-Za-z0-9_.-]+): (\S.*)$")


def lock() -> tuple[dict[str, Version], dict[str, dict[str, str]]]:
    """``(name -> locked version, kind -> {name: why})`` from the lock file."""
    locked, notes = {}, {"omit": {}, "differs": {}}
    for line in envs.LOCK.read_text().splitlines():
        if m := NOTE.match(line):
            notes[m.group(1)][canonicalize_name(m.group(2))] = m.group(3)
        elif line.strip() and not line.startswith("#"):
            name, version = line.strip().split("==")
            locked[canonicalize_name(name)] = Version(version)
    return locked, notes


def declared(wheel) -> list[Requirement]:
    """The wheel's runtime requirements that apply on the probe machine (no extras)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    reqs = [Requirement(line.split(":", 1)[1].strip()) for line in lines if line.startswith("Requires-Dist:")]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({**PROBE_MACHINE, "extra": ""})]


@pytest.fixture(scope="module")
def requirements(cache) -> dict[str, list[Requirement]]:
    pinned = pins.load().releases
    return {v: declared(pypi._download(specs.PypiSpec(version=v), cache, pinned[v].sha256)) for v in pinned}


def test_lock_lines_are_exact_pins_and_notes_name_their_reason():
    locked, notes = lock()
    assert locked and all(v for v in locked.values())
    assert not set(notes["omit"]) & set(locked), "a package is both locked and omitted"
    assert set(notes["differs"]) <= set(locked), "a version difference is noted for a package not in the lock"


@pytest.mark.slow
def test_every_declared_dependency_is_locked_or_left_out_with_a_reason(requirements):
    locked, notes = lock()
    unexplained, used = [], {"omit": set(), "differs": set()}
    for version, reqs in requirements.items():
        for req in reqs:
            name = canonicalize_name(req.name)
            if name in notes["omit"]:
                used["omit"].add(name)
            elif name not in locked:
                unexplained.append(f"{version}: {req} is not in the lock")
            elif not req.specifier.contains(locked[name], prereleases=True):
                if name in notes["differs"]:
                    used["differs"].add(name)
                else:
                    unexplained.append(f"{version}: {req} but the lock has {locked[name]}")
    assert not unexplained
    for kind in ("omit", "differs"):  # a note no pinned release needs any more is stale
        assert set(notes[kind]) == used[kind], f"stale '# {kind}' lines: {sorted(set(notes[kind]) - used[kind])}"
