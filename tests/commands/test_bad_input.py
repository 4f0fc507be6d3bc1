"""Bad input through the real CLI: one ``diffprobe: error:`` line naming the culprit, the documented
exit code (2 bad input, 1 tampered, 3 infrastructure), never a traceback, nothing already written
lost. Each row runs ``python -m runner.cli`` as a subprocess, as a user would."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from runner import fixids
from runner.evidence import bundle, pins, receipts
from tests.conftest import git
from tests.helpers import ROOT, case, receipt

PROJECT_PINS = (ROOT / "pins.toml").read_text()
PINNED = sorted(pins.load(ROOT / "pins.toml").fixes)  # the incident's two fixes and the later defences


def cli(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner.cli", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "80"})


def assert_one_error(proc: subprocess.CompletedProcess, code: int, culprit: str) -> None:
    """Exactly one error line naming ``culprit``; besides it only the ✓ lines of steps that
    completed before the failure and, for infrastructure failures, indented detail lines."""
    lines = proc.stderr.splitlines()
    errors = [line for line in lines if line.startswith("diffprobe: error: ")]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.returncode == code, proc.stderr
    assert len(errors) == 1, proc.stderr
    assert re.search(culprit, errors[0]), errors[0]
    others = [line for line in lines if line not in errors and not line.startswith("✓ ")]
    assert all(line.startswith("    ") for line in others) and (code == 3 or not others), proc.stderr


@dataclass(frozen=True)
class Row:
    id: str
    argv: tuple[str, ...]  # {d}: the inputs directory; {cache}: a cache directory of the test's own
    code: int
    culprit: str  # regex the error line must match


MUTATED_SHA = PROJECT_PINS.replace('base = "9c254df8cdbe99ef5f58e7fcd932da052f258538"', 'base = "zz"', 1)
INPUT_FILES: dict[str, bytes] = {
    "pins-incomplete.toml": b"schema_version = 1\n",
    "pins-not-toml.toml": b"schema_version = [1,\n",
    "pins-not-utf8.toml": b"\xff\xfe schema_version = 1\n",
    "pins-bad-sha.toml": MUTATED_SHA.encode(),
    "pins-newline-key.toml": PROJECT_PINS.replace("[fixes.36988]", '[fixes.36988]\n"a\\nb" = 1', 1).encode(),
    "pins-unknown-probe.toml": PROJECT_PINS.replace('probes = ["admission"]', 'probes = ["x"]', 1).encode(),
    "pins-no-fixes.toml": PROJECT_PINS.split("[fixes.36988]")[0].encode(),
    "taken/keep.txt": b"already written\n",
    "not-a-receipt.json": b'{"schema_version": "nope"}\n',
}

ROWS = [
    Row("pins-incomplete", ("run", "--pins", "{d}/pins-incomplete.toml"), 2, r"pins-incomplete\.toml: upstream: required key is missing"),
    Row("pins-not-toml", ("run", "--pins", "{d}/pins-not-toml.toml"), 2, r"pins-not-toml\.toml: not valid TOML"),
    Row("pins-not-utf8", ("run", "--pins", "{d}/pins-not-utf8.toml"), 2, r"pins-not-utf8\.toml: cannot read"),
    Row("pins-absent", ("run", "--pins", "{d}/absent.toml"), 2, r"absent\.toml: no such file"),
    Row("pins-directory", ("run", "--pins", "{d}/taken"), 2, r"taken: cannot read"),
    Row("pins-bad-sha", ("run", "--pins", "{d}/pins-bad-sha.toml"), 2, r"fixes\.36988\.base: must be a lower-case hex"),
    Row("pins-newline-key", ("run", "--pins", "{d}/pins-newline-key.toml"), 2, r"fixes\.36988\.a\\nb: unknown key"),
    Row("pins-unknown-probe", ("run", "--pins", "{d}/pins-unknown-probe.toml"), 2, r"unknown probe 'x'"),
    Row("pins-no-fixes", ("run", "--pins", "{d}/pins-no-fixes.toml"), 2, r"pins-no-fixes\.toml: fixes: required key"),
    Row("unknown-fix", ("run", "--pr", "1234"), 2, rf"unknown fix #1234 \(pinned: {re.escape(fixids.labels(PINNED))}\)"),
    Row("audit-unknown-fix", ("audit", "pypi:sglang==0.5.21", "--fix", "1234"), 2, r"unknown fix #1234 \(pinned: "),
    Row("audit-unknown-local-fix", ("audit", "pypi:sglang==0.5.21", "--fix", "L999"), 2, r"unknown fix L999 \(pinned: "),
    Row("audit-local-fix-too-big", ("audit", "pypi:sglang==0.5.21", "--fix", "L1234"), 2, r"--fix: 'L1234': a local fix id is under 1000"),
    Row("sweep-fix-word", ("sweep", "pypi:sglang==0.5.21", "--fix", "latest"), 2, r"--fix: expected a fix number \(38935\) or a local fix id \(L3\)"),
    Row("jobs-zero", ("run", "-j", "0"), 2, r"-j/--jobs: expected a positive integer, got '0'"),
    Row("repeat-word", ("audit", "pypi:sglang==0.5.21", "--repeat", "many"), 2, r"--repeat: expected a positive integer"),
    Row("out-taken", ("run", "--out", "{d}/taken", "--cache-dir", "{cache}"), 2, r"--out .*taken: exists and is not empty"),
    Row("unknown-command", ("probe-everything",), 2, r"invalid choice: 'probe-everything'"),
    Row("spec-no-scheme", ("resolve", "sglang==0.5.21"), 2, r"source 'sglang==0\.5\.21': expected git\+"),
    Row("spec-option-url", ("env", "git+--upload-pack=touch@HEAD"), 2, r"'--upload-pack=touch': refused.*option injection"),
    Row("spec-option-host", ("resolve", "git+ssh://-oProxyCommand=x/y@HEAD"), 2, r"host may not start with '-'"),
    Row("spec-ext-transport", ("run", "--via", "commits", "--repo", "ext::sh -c x"), 2, r"'ext::sh -c x': refused"),
    Row("spec-option-rev", ("audit", "git+https://example.com/x@--output=/tmp/x"), 2, r"revision '--output=/tmp/x': refused"),
    Row("spec-option-ref", ("resolve", "git+https://example.com/x@main#ref=--upload-pack=x"), 2, r"ref '--upload-pack=x': not a full ref name"),
    Row("spec-two-refspecs", ("audit", "git+https://example.com/x@main#ref=refs/pull/1/head:refs/heads/main"), 2, r"not a full ref name"),
    Row("spec-range", ("audit", "pypi:sglang>=0.5"), 2, r"expected pypi:sglang==VERSION"),
    Row("spec-empty-path", ("sweep", "path:"), 2, r"path: needs a directory"),
    Row("path-missing", ("resolve", "path:{d}/absent", "--cache-dir", "{cache}"), 2, r"path:.*absent: no such directory"),
    Row("path-not-sglang", ("resolve", "path:{d}/taken", "--cache-dir", "{cache}"), 2, r"no sglang package in it"),
    Row("python-missing", ("audit", "path:{d}/taken", "--python", "{d}/no-python", "--cache-dir", "{cache}"), 2, r"--python .*no-python: no such interpreter"),
    Row("rev-missing", ("resolve", "git+{d}/repo@no-such-branch", "--cache-dir", "{cache}"), 2, r"revision 'no-such-branch' does not resolve"),
    Row("repo-missing-local", ("resolve", "git+{d}/no-repo@HEAD", "--cache-dir", "{cache}"), 2, r"no-repo: no git repository there"),
    Row("repo-unreachable", ("resolve", "git+https://nonexistent.invalid/x/sglang@HEAD", "--cache-dir", "{cache}"), 3,
        r"nonexistent\.invalid/x/sglang: cannot clone"),
    Row("release-missing", ("resolve", "pypi:sglang==99.99.99", "--cache-dir", "{cache}"), 2, r"no such release of sglang"),
    Row("releases-no-range", ("sweep", "--releases", "0.5.19"), 2, r"--releases '0\.5\.19': expected A\.\.B"),
    Row("shard-out-of-range", ("sweep", "pypi:sglang==0.5.21", "--shard", "3/2"), 2, r"--shard '3/2': expected I/N"),
    Row("sweep-nothing", ("sweep",), 2, r"exactly one"),
    Row("bisect-shard", ("sweep", "path:{d}/absent", "--bisect", "--shard", "1/2"), 2, r"no such directory|do not combine"),
    Row("verify-empty-dir", ("verify", "{d}/taken"), 2, r"taken: not a bundle \(no SHA256SUMS\)"),
    Row("verify-manifest-garbage", ("verify", "{d}/garbage"), 2, r"SHA256SUMS:5: not a sha256sum line"),
    Row("verify-partial", ("verify", "{d}/.partial-b-x1"), 2, r"not a bundle \(the staging directory"),
    Row("verify-truncated-receipt", ("verify", "{d}/truncated"), 1, r"truncated: tampered or damaged"),
    Row("compare-tampered", ("compare", "{d}/intact", "{d}/truncated"), 1, r"truncated: bundle does not verify"),
    Row("compare-not-a-receipt", ("compare", "{d}/not-a-receipt.json", "{d}/intact"), 2, r"not-a-receipt\.json: not a diffprobe receipt"),
    Row("report-truncated-index", ("report", "{d}/index-cut"), 1, r"index-cut: does not verify"),
    Row("report-absent", ("report", "{d}/absent"), 2, r"absent: not a bundle"),
    Row("merge-not-a-bundle", ("merge", "{d}/taken", "--out", "{d}/merged"), 2, r"taken: not a bundle"),
    Row("merge-tampered", ("merge", "{d}/truncated", "--out", "{d}/merged"), 1, r"truncated: bundle does not verify"),
]


def _bundle(path: Path) -> Path:
    base = receipt("0.5.20", [case("rejected", bug=True), case("valid", role="guard")])
    head = receipt("0.5.21", [case("rejected"), case("valid", role="guard")])
    diff = receipts.differential(38935, "t", ["admission"], [(bundle.receipt_name(base), base)],
                                 [(bundle.receipt_name(head), head)], "fix observed")
    return bundle.write(path, kind="run", created_at="2026-11-30T00:00:00Z", receipts=[base, head],
                        differentials=[diff], pins_sha256=None)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Every malformed input of the table, written once."""
    d = tmp_path_factory.mktemp("inputs")
    for name, data in INPUT_FILES.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data)
    _bundle(d / "intact")
    for name in ("garbage", "truncated", "index-cut", ".partial-b-x1"):
        shutil.copytree(d / "intact", d / name)
    with open(d / "garbage" / bundle.MANIFEST, "a") as f:
        f.write("this is not a checksum line\n")
    receipt_file = next((d / "truncated" / "receipts").iterdir())
    receipt_file.write_bytes(receipt_file.read_bytes()[:100])
    (d / "index-cut" / bundle.INDEX).write_bytes((d / "index-cut" / bundle.INDEX).read_bytes()[:-40])
    repo = d / "repo"
    (repo / "python" / "sglang").mkdir(parents=True)
    (repo / "python" / "sglang" / "__init__.py").write_text("")
    git(repo.parent, "init", "-q", "-b", "main", str(repo))
    git(repo, "add", "-A")
    git(repo, "-c", "user.email=t@diffprobe.invalid", "-c", "user.name=t", "commit", "-q", "-m", "one")
    return d


def _snapshot(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".git" not in p.parts}


@pytest.mark.slow  # a diffprobe process per row (~0.5 s each, ~1 min in all)
@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_bad_input_gives_one_line_and_its_exit_code(row, inputs, tmp_path):
    before = _snapshot(inputs)
    argv = [a.format(d=inputs, cache=tmp_path / "cache") for a in row.argv]
    proc = cli(*argv)
    assert_one_error(proc, row.code, row.culprit)
    assert _snapshot(inputs) == before  # nothing already written is lost or changed
    assert not (inputs / "merged").exists()


def test_the_table_covers_at_least_twenty_inputs():
    assert len(ROWS) >= 20 and len({r.id for r in ROWS}) == len(ROWS)


def _fake_tree(root: Path) -> Path:
    (root / "sglang" / "srt").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    (root / "sglang" / "srt" / "x.py").write_text("X = 1\n")
    return root


def _digest(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stderr
    return re.search(r'"tree_digest": "([^"]+)"', proc.stdout).group(1)


# Each damage leaves the entry looking present; the next use must notice, warn (saying why) and rebuild it.
STAMP, MISMATCH = "its stamp tree.json does not read or names another digest", "digest mismatch"
DAMAGES = {
    "stamp-garbage": (lambda tree: (tree / "tree.json").write_text("{not json"), STAMP),
    "stamp-truncated": (lambda tree: (tree / "tree.json").write_bytes((tree / "tree.json").read_bytes()[:10]), STAMP),
    "file-truncated": (lambda tree: (tree / "sglang" / "srt" / "x.py").write_text(""), MISMATCH),
    "file-added": (lambda tree: (tree / "sglang" / "srt" / "extra.py").write_text(""), MISMATCH),
    "file-removed": (lambda tree: (tree / "sglang" / "srt" / "x.py").unlink(),
                     "an empty directory 'srt/', which intake never stores"),
    "bytecode-planted": (lambda tree: (tree / "sglang" / "srt" / "__pycache__").mkdir() or
                         (tree / "sglang" / "srt" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0" * 16),
                         "planted byte-code 'srt/__pycache__/x.cpython-311.pyc'"),
}


@pytest.mark.slow  # a diffprobe process per row (~0.5 s each, ~1 min in all)
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_tree_entry_is_rebuilt_with_a_warning(tmp_path, damage):
    source, cache = f"path:{_fake_tree(tmp_path / 'src')}", str(tmp_path / "cache")
    digest = _digest(cli("resolve", source, "--cache-dir", cache))
    (entry,) = (tmp_path / "cache" / "trees").iterdir()
    damaging, why = DAMAGES[damage]
    damaging(entry)
    again = cli("resolve", source, "--cache-dir", cache)
    assert _digest(again) == digest
    assert again.stderr.splitlines() == [f"warning: cache entry {entry} is damaged ({why}); rebuilding it"]
    assert cli("resolve", source, "--cache-dir", cache).stderr == ""  # repaired for good


@pytest.mark.slow
def test_a_truncated_cached_wheel_is_downloaded_again(tmp_path):
    """The wheel is read only when the tree must be rebuilt: then a damaged one is never unpacked."""
    cache = tmp_path / "cache"
    first = cli("resolve", "pypi:sglang==0.5.21", "--cache-dir", str(cache))
    (wheel,) = (cache / "downloads" / "sglang-0.5.21").glob("*.whl")
    wheel.write_bytes(wheel.read_bytes()[:1000])
    shutil.rmtree(cache / "trees")
    shutil.rmtree(cache / "index")
    again = cli("resolve", "pypi:sglang==0.5.21", "--cache-dir", str(cache))
    assert _digest(again) == _digest(first)
    assert f"warning: cached download {wheel.parent} is damaged (stamp or sha256); downloading again" in again.stderr.splitlines()
