"""The user issue #17 names: a vendor on an old release (0.5.14) who backported #38935's door checks.

The PR's own diff does not carry onto 0.5.14 (its code reads ``req.kv``, a beam coordinator and
``Scheduler._release_aborted_request``, none of which 0.5.14 has), so the vendor adapts it, as a
vendor would: the test builds that patch at run time from the real trees (never committed), taking
the fix's code from 0.5.21 and its few adaptations from 0.5.14's own API, then grades it with
``diffprobe backport --patch`` against 0.5.21: the unpatched release reads the bug, the backport
reads "fix observed", and a backport that dropped one door reads not fixed at that door.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

from runner import cli
from runner.evidence import bundle
from runner.evidence.records import BackportRecord
from tests import forks
from tests.records import checked

pytestmark = pytest.mark.slow  # real releases, environments and SGLang imports

PINS = Path(__file__).resolve().parents[2] / "pins.toml"

UTILS = "sglang/srt/disaggregation/utils.py"
PREFILL = "sglang/srt/disaggregation/prefill.py"
DECODE = "sglang/srt/disaggregation/decode.py"
SCHEDULER = "sglang/srt/managers/scheduler.py"
IMPORT = "\nfrom sglang.srt.disaggregation.utils import is_unadmitted_reject\n"
BEAM = "        self.beam_coordinator.retire_group(req)\n"
RELEASE = "        self._release_aborted_request(req)\n"
RELEASE_0514 = "        if self.enable_hicache_storage:\n            self.tree_cache.release_aborted_request(req.rid)\n"
# How a vendor adapts #38935's code to each old release's API: replacements in the door check
# (``is_unadmitted_reject``), the decode door's gate and ``Scheduler.retire_unadmitted_request``.
ADAPT = {
    # the request keeps its KV row, Mamba slot and retraction backup itself; no is_rebootstrap at the
    # decode door; no beam groups; HiCache storage state released as 0.5.14's own abort path does
    "0.5.14": {
        "check": {
            "req.kv.holds_kv": "req.req_pool_idx is not None",
            "req.kv.holds_mamba": "req.mamba_pool_idx is not None",
            "req.kv.retraction_backup is not None": 'getattr(req, "kv_cache_cpu", None) is not None',
        },
        "decode": {" and not is_rebootstrap": ""},
        "retire": {BEAM: "", RELEASE: RELEASE_0514},
    },
    # the rejection is finished at once (set_finish_with_abort; no to_finish, no is_aborted), no Mamba,
    # no retracted/rebootstrap parameters at the decode door, no streaming sessions or beam groups,
    # nothing registered with the cache before the door, and the scheduler streams its own output
    "0.4.7": {
        "check": {
            "return is_aborted(req) and not (": "from sglang.srt.managers.schedule_batch import FINISH_ABORT\n\n"
            "    return isinstance(req.finished_reason, FINISH_ABORT) and not (",
            "req.kv.holds_kv": "req.req_pool_idx is not None",
            "        or req.kv.holds_mamba\n": "",
            "req.kv.retraction_backup is not None": 'getattr(req, "kv_cache_cpu", None) is not None',
        },
        "decode": {"not is_retracted and not is_rebootstrap and ": ""},
        "retire": {
            "        if req.session is not None and req.session.streaming:\n            req.session.abort_req()\n"
            "            req.session = None\n": "",
            BEAM: "",
            RELEASE: "",
            "        reason = req.finished_reason or req.to_finish\n": "",
            '        req.time_stats.trace_ctx.abort(abort_info={"reason": reason.message})\n': "",
            "        req.update_finish_state()\n": "",
            "self.output_streamer.stream_output(": "self.stream_output(",
        },
    },
}


def _node(text: str, *names: str) -> ast.AST:
    """The class, function or method ``names`` (outermost first) in a module's source."""
    scope: list[ast.stmt] = ast.parse(text).body
    for name in names:
        (node,) = [n for n in scope if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name]
        scope = node.body
    return node


def _segment(text: str, node: ast.AST) -> str:
    return ast.get_source_segment(text, node, padded=True) + "\n"


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


def _insert_before_line(text: str, line: int, block: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[: line - 1]) + block + "".join(lines[line - 1 :])


def _door_gate(text: str, cls: str) -> str:
    """The #38935 check at the top of ``cls.add``: its first ``if`` that asks ``is_unadmitted_reject``."""
    add = _node(text, cls, "add")
    (gate,) = [s for s in add.body if isinstance(s, ast.If) and "is_unadmitted_reject" in ast.unparse(s.test)][:1]
    return _segment(text, gate)


def _first_statement(text: str, cls: str) -> int:
    """Line of the first statement of ``cls.add`` after its docstring."""
    body = _node(text, cls, "add").body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return body[0].lineno


def backported(fixed: Path, old: Path, dest: Path, doors: tuple[str, ...] = ("prefill", "decode"),
               era: str | None = "0.5.14", keep_release: bool = True) -> Path:
    """``old``'s package files with #38935 taken from ``fixed`` and adapted to release ``era``'s API
    (None: as is); only the files it changes. ``doors``: the doors that get the check;
    ``keep_release``: False drops the retire path's release of the request's cache-side state."""
    adapt = ADAPT[era] if era else {"check": {}, "decode": {}, "retire": {}}
    src = {rel: (fixed / rel).read_text() for rel in (UTILS, PREFILL, DECODE, SCHEDULER)}
    out = {rel: (old / rel).read_text() for rel in (UTILS, PREFILL, DECODE, SCHEDULER)}

    check = _segment(src[UTILS], _node(src[UTILS], "is_unadmitted_reject"))
    for field, spelled in adapt["check"].items():
        check = _replace_once(check, field, spelled)
    out[UTILS] += "\n\n" + check

    if "prefill" in doors:
        gate = _door_gate(src[PREFILL], "PrefillBootstrapQueue")
        out[PREFILL] = _insert_before_line(out[PREFILL], _first_statement(out[PREFILL], "PrefillBootstrapQueue"), gate)
        out[PREFILL] += IMPORT
    if "decode" in doors:
        gate = _door_gate(src[DECODE], "DecodePreallocQueue")
        for old_text, new_text in adapt["decode"].items():
            gate = _replace_once(gate, old_text, new_text)
        out[DECODE] = _insert_before_line(out[DECODE], _first_statement(out[DECODE], "DecodePreallocQueue"), gate)
        out[DECODE] += IMPORT

    retire = _segment(src[SCHEDULER], _node(src[SCHEDULER], "Scheduler", "retire_unadmitted_request"))
    for old_text, new_text in adapt["retire"].items():
        retire = _replace_once(retire, old_text, new_text)
    if not keep_release:
        retire = _replace_once(retire, adapt["retire"][RELEASE], "")
    assert "def retire_unadmitted_request" not in out[SCHEDULER]
    out[SCHEDULER] = _replace_once(out[SCHEDULER], "    def _add_request_to_queue(", retire + "\n    def _add_request_to_queue(")

    for rel, text in out.items():
        ast.parse(text)  # the vendor's tree still parses
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return dest


def patch_file(old: Path, new: Path, tmp: Path) -> Path:
    """The vendor's patch: ``git diff`` of the changed files against the release (paths ``a/old/sglang/...``)."""
    (tmp / "old").mkdir()
    for path in new.rglob("*.py"):
        rel = path.relative_to(new)
        (tmp / "old" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / "old" / rel).write_bytes((old / rel).read_bytes())
    diff = subprocess.run(["git", "diff", "--no-index", "old", new.name], cwd=tmp, capture_output=True)
    assert diff.returncode == 1 and diff.stdout, diff.stderr
    out = tmp / "38935.patch"
    out.write_bytes(diff.stdout)
    return out


def _backport(cache, tmp: Path, release_tree, doors: tuple[str, ...], version: str = "0.5.14", keep_release: bool = True):
    """(exit code, backport record, the differential release -> backport, {case: failed duties} of the backport)."""
    old, fixed = release_tree(version).root, release_tree("0.5.21").root
    new = backported(fixed, old, tmp / "new", doors, version, keep_release)
    patch = patch_file(old, new, tmp)
    out = tmp / "bundle"
    code = cli.main(["backport", "--pr", "38935", "--onto", f"pypi:sglang=={version}", "--patch", str(patch),
                     "--head", "pypi:sglang==0.5.21", "--out", str(out), "--cache-dir", str(cache.root)])
    index, receipts, diffs = bundle.load(out)
    (differential,) = diffs.values()
    (mine,) = [r for r in receipts.values() if r.source.kind == "path"]
    failed = {c.id: [d for d, ok in (c.duties or {}).items() if not ok] for c in mine.cases}
    return code, BackportRecord.model_validate(checked(out)), differential, failed


def _cases(differential) -> dict[str, tuple[str, str]]:
    return {c.case: (c.base, c.head) for c in differential.cases}


# the rejected cases each release can run (0.4.7's requests carry no session)
REJECTED = {
    "0.5.14": ("prefill-door-rejected", "decode-door-rejected", "prefill-door-rejected-session",
               "prefill-door-rejected-plain-session"),
    "0.4.7": ("prefill-door-rejected", "decode-door-rejected"),
}


@pytest.mark.parametrize("version", sorted(ADAPT))
def test_backport_of_38935_onto_an_old_release_reads_fix_observed(version, cache, tmp_path, release_tree):
    code, record, differential, failed = _backport(cache, tmp_path, release_tree, ("prefill", "decode"), version)
    assert record.applied == "applied cleanly"
    assert differential.verdict == "fix observed"
    cases = _cases(differential)
    for rejected in REJECTED[version]:
        assert cases[rejected] == ("bug", "clean"), rejected  # the release shows the bug, the backport does not
    # it behaves like 0.5.21 wherever 0.5.14 has the API; the only other rows are cases 0.5.14 cannot run
    differing = [r for r in record.rows if not r.same]
    assert differing and all(r.backport == "not_applicable" for r in differing)
    assert code == 1  # hence not "like head on every case"
    assert not any(failed.values())  # no beam group (nor, in 0.4.7, cache-side state) to release: held without


def test_backport_without_the_decode_door_reads_not_fixed(cache, tmp_path, release_tree):
    code, record, differential, failed = _backport(cache, tmp_path, release_tree, ("prefill",))
    assert code == 1 and differential.verdict == "fix not observed"
    cases = _cases(differential)
    assert cases["prefill-door-rejected"] == ("bug", "clean")
    assert cases["decode-door-rejected"] == ("bug", "bug")
    runs = {r.case for r in record.rows if r.backport != "not_applicable"}  # what 0.5.14's API can build
    differing = [r.case for r in record.rows if not r.same and r.case in runs]
    assert "decode-door-rejected" in runs and sorted(differing) == sorted(runs.intersection(forks.rejected_at("decode")))


def test_backport_that_keeps_the_storage_state_of_a_rejected_request_reads_not_fixed(cache, tmp_path, release_tree):
    """Both doors retire, but the retire path forgets the HiCache storage state ``_prefetch_kvcache``
    registered: one duty dropped, named on every rejected case."""
    code, _, differential, failed = _backport(cache, tmp_path, release_tree, ("prefill", "decode"), keep_release=False)
    assert code == 1 and differential.verdict == "fix not observed"
    rejected = [c for c in failed if "rejected" in c]
    assert {c: failed[c] for c in rejected} == dict.fromkeys(rejected, ["door-cache-released"])


def test_the_fix_as_it_lands_upstream_does_not_carry_onto_0_5_14(cache, tmp_path, release_tree, capsys):
    """``backport --pr`` offered #38935's own code on its parent release (0.5.20 -> 0.5.20 with the fix,
    in a repository laid out like upstream): onto 0.5.14 the patch does not apply and the three-way
    merge conflicts exactly where 0.5.14's API differs (the decode door without ``is_rebootstrap``, a
    scheduler without beam groups or ``_release_aborted_request``). Reported as one line, exit 2,
    nothing written: adapting it is the vendor's work, graded with ``--patch`` above."""
    parent, fixed = release_tree("0.5.20").root, release_tree("0.5.21").root
    repo = tmp_path / "upstream"
    shutil.copytree(parent / "sglang", repo / "python" / "sglang", ignore=shutil.ignore_patterns("*.so"))
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, text=True).stdout.strip()
    git("init", "-q", "-b", "main")
    for key, value in (("user.email", "fixture@diffprobe.invalid"), ("user.name", "fixture"),
                       ("uploadpack.allowFilter", "true"), ("uploadpack.allowAnySHA1InWant", "true")):
        git("config", key, value)
    git("add", "-A")
    git("commit", "-q", "-m", "0.5.20")
    base = git("rev-parse", "HEAD")
    backported(fixed, parent, repo / "python", era=None)
    git("commit", "-q", "-am", "#38935 on 0.5.20")
    head = git("rev-parse", "HEAD")
    text = PINS.read_text()
    text = _replace_once(text, 'base = "17ba2c2e7c7b81f31a8a9e693e7435ab262c16b4"', f'base = "{base}"')
    text = _replace_once(text, 'head = "8f3d6944b76c428d884582cb6c82a39db1465360"', f'head = "{head}"')
    pins = tmp_path / "pins.toml"
    pins.write_text(text)
    out = tmp_path / "b"
    code = cli.main(["backport", "--pr", "38935", "--repo", str(repo), "--pins", str(pins), "--onto",
                     "pypi:sglang==0.5.14", "--out", str(out), "--cache-dir", str(cache.root)])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("diffprobe: error:")]
    assert code == 2 and not out.exists()
    assert len(errors) == 1 and errors[0].endswith(
        "2 file(s) do not merge: sglang/srt/disaggregation/decode.py, sglang/srt/managers/scheduler.py")


def test_offline_a_patch_and_a_head_are_all_a_backport_needs(cache, tmp_path, release_tree, capsys):
    """The README's recipe with no network (issue 41): #38935 adapted to 0.5.20 as a vendor would, given
    with --patch, and 0.5.21 as --head; the PR's repository (.invalid: it cannot be reached) is never
    asked for, and the backport behaves like head (exit 0), its differential on screen. Without
    --head the one line names it (tests/commands/test_backport_writes.py)."""
    old, fixed = release_tree("0.5.20").root, release_tree("0.5.21").root
    patch = patch_file(old, backported(fixed, old, tmp_path / "new", era=None), tmp_path)
    code = cli.main(["backport", "--pr", "38935", "--onto", "pypi:sglang==0.5.20", "--patch", str(patch),
                     "--head", "pypi:sglang==0.5.21", "--repo", "https://nonexistent.invalid/sglang.git",
                     "--accept-unreviewed", "--out", str(tmp_path / "bundle"), "--cache-dir", str(cache.root)])
    shown = capsys.readouterr()
    screen = (shown.out + shown.err).splitlines()
    assert code == 0, shown.err  # the patch's own hunks are unreviewed departures: exit 4 unless accepted (issue 39)
    assert any(line.startswith("#38935 backport vs head: behaves like head") for line in screen)
    assert any(line.startswith("#38935 before vs after the patch: fix observed") for line in screen)
