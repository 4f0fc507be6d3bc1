"""Static findings: is the code or option of a later defence present in a tree, and its default.

These are read from the source text, never observed running, and every report labels them so.
Each finding names the file and line it rests on. What cannot be told apart statically (which of
two PRs touching the same mechanism a tree carries) is said, not guessed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from pydantic import BaseModel

from runner.files import read_regular


class Signature(BaseModel):
    id: str
    prs: list[int]
    what: str
    file: str  # inside the tree, relative to the directory holding sglang/
    pattern: str  # regex; group "default" (optional) captures a default value
    caveat: str = ""


SIGNATURES = [
    Signature(
        id="kv-checksum", prs=[39500],
        what="handoff KV checksum option (--disaggregation-enable-kv-checksum)",
        file="sglang/srt",  # declared in server_args.py or, in later trees, arg_groups/fields/
        pattern=r"(?s)^\s*disaggregation_enable_kv_checksum\s*:\s*(?:bool|A\[.*?\])\s*=\s*(?P<default>True|False)",
        caveat="checks the prefill-to-decode transfer only, and only where the model and backend support it",
    ),
    Signature(
        id="deferred-release", prs=[41023, 41404],
        what="deferred decode-side KV release (SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE)",
        file="sglang/srt/environ.py",
        pattern=r"(?m)^\s*SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE\s*=\s*EnvBool\((?P<default>\w+)\)",
        caveat="a default of True matches #41023; whether #41404's extension to other transfer failures is in "
        "cannot be told from the option alone",
    ),
    Signature(
        id="deferred-release-timeout", prs=[41023],
        what="how long decode holds an aborted transfer's pages before releasing them without a drain "
        "acknowledgement (SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE_TIMEOUT, seconds)",
        file="sglang/srt/environ.py",
        pattern=r"(?m)^\s*SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE_TIMEOUT\s*=\s*EnvFloat\((?P<default>[\d.]+)\)",
    ),
    Signature(
        id="deferred-release-backends", prs=[41023],
        what="transfer backends whose connection implements deferred release, the only ones it applies to "
        "(supports_deferred_decode_kv_release = True, or, before that flag, a backend reading "
        "enable_deferred_decode_kv_release; the backend is the folder of each file listed)",
        file="sglang/srt/disaggregation",
        pattern=r"(?m)^\s*supports_deferred_decode_kv_release\s*(?::\s*bool\s*)?=\s*True"
        r"|^\s*(?:if|elif)\b.*\bself\.enable_deferred_decode_kv_release\b",
    ),
    Signature(
        id="mooncake-batch-limit", prs=[],
        what="Mooncake transfer batch limit (SGLANG_MOONCAKE_MAX_TRANSFER_BATCH_INDICES; 0 sends one "
        "synchronous all-layer batch per transfer, however long)",
        file="sglang/srt/environ.py",
        pattern=r"(?m)^\s*SGLANG_MOONCAKE_MAX_TRANSFER_BATCH_INDICES\s*=\s*EnvInt\((?P<default>\d+)\)",
    ),
    Signature(
        id="kv-canary", prs=[],
        what="KV cache canary option (--kv-canary none|log|raise): verifies what decode reads from the pool",
        file="sglang/srt",  # declared in server_args.py or, in later trees, arg_groups/fields/
        pattern=r"(?s)^\s*kv_canary\s*:\s*(?:str|A\[.*?\])\s*=\s*\"(?P<default>\w+)\"",
        caveat="counts only where the device has the canary kernels or CUDA graphs are off for decode; logs must show it ran",
    ),
    Signature(
        id="drain-ack", prs=[40645, 41402],
        what="drain acknowledgement of aborted transfers (_maybe_ack_drained_abort)",
        file="sglang/srt/disaggregation",
        pattern=r"_maybe_ack_drained_abort\(",
        caveat="present code does not tell whether lost confirmations (#40645) and all decode peers (#41402) are covered",
    ),
]


class Finding(BaseModel):
    id: str
    prs: list[int]
    what: str
    kind: str = "static: code or option present, not behaviour observed"
    present: bool
    default: str | None
    evidence: list[str]  # "path:line: text"
    caveat: str


# The largest source file of a release is under 1 MiB (0.5.23: 0.4 MiB); a larger one is not read.
MAX_SOURCE = 16 << 20


def _files(files: Sequence[str], rel: str) -> list[str]:
    """``rel`` itself, or the ``.py`` files below it, in path order (part by part)."""
    return sorted((f for f in files if f == rel or (f.startswith(f"{rel}/") and f.endswith(".py"))), key=lambda f: f.split("/"))


def scan(root: Path, files: Sequence[str]) -> list[Finding]:
    """Findings over ``files`` (``sglang/...``: the stored tree's verified regular files,
    ``Tree.files``) under ``root``: nothing is found by walking, no link is followed, no read goes
    past ``MAX_SOURCE`` (runner/files.read_regular)."""
    findings = []
    for sig in SIGNATURES:
        pattern = re.compile(sig.pattern, re.MULTILINE)
        evidence, default, unread = [], None, []
        for rel in _files(files, sig.file):
            try:
                text = read_regular(root / rel, MAX_SOURCE).decode(errors="replace")
            except (OSError, ValueError):
                unread.append(rel)
                continue
            for m in pattern.finditer(text):  # the first match of each file: which files, not how often
                line = text.count("\n", 0, m.start()) + 1
                evidence.append(f"{rel}:{line}: {m.group(0).strip().splitlines()[0][:120]}")
                default = default or m.groupdict().get("default")
                break
        caveat = "; ".join(filter(None, [sig.caveat, unread and f"not read (not a regular file of at most 16 MiB): {', '.join(unread[:3])}"]))
        findings.append(Finding(id=sig.id, prs=sig.prs, what=sig.what, present=bool(evidence), default=default,
                                evidence=evidence[:10], caveat=caveat))
    return findings
