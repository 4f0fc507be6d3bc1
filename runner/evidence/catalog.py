"""The probes diffprobe knows, where their source lives, and the digests that version them and the judge.

Read as files only: the host never imports a probe (they import SGLang).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

from runner.files import sha256_bytes, sha256_file

# probe id -> module file inside probes/
PROBES: dict[str, str] = {
    "admission": "admission.py",
    "prefill-cleanup": "prefill_cleanup.py",
    "lifetime-default": "lifetime_default.py",
    "lifetime-drain": "lifetime_drain.py",
    "lifetime-peers": "lifetime_peers.py",
    "lifetime-failures": "lifetime_failures.py",
    "handoff": "handoff.py",
}
HARNESS = "harness.py"
# ``diffprobe upstream-tests``' entry point: not a tree probe (no fix of its own), and not part of theirs.
UPSTREAM_TESTS = ("upstream-tests", "pytest_outcomes.py")
# ``diffprobe accept``'s reading of a live worker's configuration with the tree's own code: no probe's either.
SERVER_CONFIG = "server_config.py"


def probes_dir() -> Path:
    spec = importlib.util.find_spec("probes")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the probes package is not installed beside runner")
    return Path(list(spec.submodule_search_locations)[0])


def probe_files(probe: str, root: Path | None = None) -> list[Path]:
    """The files a probe's behaviour depends on: its module and every shared (non-probe) module."""
    root = root or probes_dir()
    others = {f for p, f in [*PROBES.items(), UPSTREAM_TESTS] if p != probe} | {SERVER_CONFIG}
    return sorted(p for p in root.glob("*.py") if p.name not in others)


def probe_digest(probe: str, root: Path | None = None) -> str:
    """asv-style probe version: receipts whose probes differ in any byte are not comparable."""
    lines = "".join(f"{sha256_file(p)}  {p.name}\n" for p in probe_files(probe, root))
    return sha256_bytes(lines.encode())


@functools.cache
def judge_digest() -> str:
    """The judge as a digest, like a probe's: sha256 over ``runner/evidence``, the code that turns effects
    into duties, classifications, statuses and verdicts and seals them (byte-code left out). Receipts
    name the exact code that derived their verdicts by it; code that only runs or shows them (commands,
    store, sandbox, views) is not the judge, so changing it keeps evidence comparable."""
    package = Path(__file__).resolve().parent
    files = sorted(p for p in package.rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo"))
    lines = "".join(f"{sha256_file(p)}  {p.relative_to(package.parent.parent).as_posix()}\n" for p in files)
    return sha256_bytes(lines.encode())
