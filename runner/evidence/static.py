"""Static findings: is the code or option of a later defence present in a tree, and its default.

These are read from the source text, never observed running, and every report labels them so.
Each finding names the file and line it rests on. What cannot be told apart statically (which of
two PRs touching the same mechanism a tree carries) is said, not guessed.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel


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


def _files(root: Path, rel: str) -> list[Path]:
    path = root / rel
    return sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []


def scan(root: Path) -> list[Finding]:
    findings = []
    for sig in SIGNATURES:
        pattern = re.compile(sig.pattern, re.MULTILINE)
        evidence, default = [], None
        for path in _files(root, sig.file):
            text = path.read_text(errors="replace")
            for m in pattern.finditer(text):  # the first match of each file: which files, not how often
                line = text.count("\n", 0, m.start()) + 1
                evidence.append(f"{path.relative_to(root).as_posix()}:{line}: {m.group(0).strip().splitlines()[0][:120]}")
                default = default or m.groupdict().get("default")
                break
        findings.append(Finding(id=sig.id, prs=sig.prs, what=sig.what, present=bool(evidence), default=default,
                                evidence=evidence[:10], caveat=sig.caveat))
    return findings
