"""Red team r2 on #22: fresh single-hunk changes of the fix's code (tests/probes/fresh_hunks.py) and of the
functions it calls, on a real release.

The claim: "any single-hunk change of the fix's code that changes behaviour on a reachable input reads
'not fixed' or 'regression'". ``HUNKS`` hold (each reads as stated, naming its duty; the behaviour-
preserving ones read fixed, each with its argument); ``FOUND`` among them are the changes r2 found reading
"fixed" because no case built their input, now cases of the generated space (#22, helper g22). They
run as ``mutate --hunks``, one SGLang import per fix, on 0.5.23 (the single-duty table of #22 runs on
0.5.21 and 0.5.22; the fragments here are found once on all three, and r2 ran them on all three).

Two changes of functions the fix's code calls, outside ``duties.FIX_CODE``, are ``path:`` forks audited
end to end: there the departure record sees them too.
"""

from __future__ import annotations

import json

import pytest

from runner import cli
from runner.evidence import bundle
from runner.evidence.records import SweepRecord
from tests import forks
from tests.probes import fresh_hunks

pytestmark = pytest.mark.slow  # a real release, its environment and SGLang imports

RELEASE = "0.5.23"


@pytest.fixture(scope="module")
def tried(tmp_path_factory, cache):
    """One ``mutate --hunks`` per fix, every change of both tables: {hunk id: its mutant in the report}."""
    done: dict[int, dict] = {}

    def get(fix: int) -> dict:
        if fix not in done:
            root = tmp_path_factory.mktemp(f"fresh-{fix}")
            changes = fresh_hunks.HUNKS[fix]
            (root / "hunks.json").write_text(json.dumps(fresh_hunks.as_json(changes)))
            cli.main(["mutate", f"pypi:sglang=={RELEASE}", "--fix", str(fix), "--hunks", str(root / "hunks.json"),
                      "--out", str(root / "out"), "--cache-dir", str(cache.root)])
            report = json.loads(next((root / "out" / "mutation").glob("*.json")).read_text())
            done[fix] = {m["id"]: m for m in report["mutants"]}
        return done[fix]

    return get


@pytest.mark.parametrize("fix", sorted(fresh_hunks.HUNKS))
def test_fresh_hunks_read_as_their_behaviour_says(fix, tried):
    mutants = tried(fix)
    for hunk, change in fresh_hunks.HUNKS[fix].items():
        m = mutants[hunk]
        assert m["reads"] == change.reads, (hunk, m["status"], m["why"], change.why)
        assert change.names is None or change.names in m["why"], (hunk, m["why"])


# --- changes of functions the fix's code calls (not in FIX_CODE): path: forks ------------------------------

COMMON = "sglang/srt/mem_cache/common.py"
CALLEES = {
    # the metadata release the retire path calls: slot 0 is never freed (the slot dimension's cases hold slot 0)
    "metadata-slot-zero-kept": (forks.PREFILL, '    """\n    if req.metadata_buffer_index >= 0:\n        allocator.free(',
                                '    """\n    if req.metadata_buffer_index > 0:\n        allocator.free('),
    # the KV release the retire path calls with is_insert=False / checkpoint=False: inserted into the radix tree
    # all the same (the tree's own release_kv_cache runs in the cases; the tree cache is asked to checkpoint it)
    "aborted-kv-inserted": (COMMON, "    checkpoint = checkpoint and not req.skip_radix_cache_insert\n",
                            "    checkpoint = not req.skip_radix_cache_insert\n"),
}


@pytest.fixture(scope="module")
def audited(release_tree, cache, tmp_path_factory):
    """Each callee fork audited (both probes and its departures from the release it declares)."""
    root = release_tree(RELEASE).root
    work = tmp_path_factory.mktemp("callees")
    sources = [f"path:{forks.make(root, work / name, [edit])}" for name, edit in CALLEES.items()]
    out = work / "bundle"
    cli.main(["sweep", *sources, "--out", str(out), "--cache-dir", str(cache.root), "-j", "2"])
    index = bundle.Index.model_validate_json((out / bundle.INDEX).read_bytes())
    rows = {r.source: r for r in SweepRecord.model_validate(index.extra).rows}
    return dict(zip(CALLEES, (rows[s] for s in sources)))


@pytest.mark.parametrize("name", list(CALLEES))
def test_a_broken_callee_of_the_fix_reads_broken(name, audited):
    fix = next(f for f in audited[name].fixes if f.fix == 36988)
    assert fix.status in ("not fixed", "regression"), (name, fix)
