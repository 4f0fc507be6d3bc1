"""Red team r2 on #23: harness-aware forks of shapes of our own, and a clean release beside them.

The claim: "every harness-aware fork either fails the audit or is shown, in report, as fixed on code
that differs from upstream at the hunk that detects the probe", and "a clean upstream release shows no
departures; an identical ``path:`` copy reads identical to its baseline". One sweep of five trees made
from 0.5.21 (tests/unseen_forks.py): the release, an identical copy, and three aware forks. The
receipts of the release and its copy are shared (same bytes), so the slow part is three probe runs.
"""

from __future__ import annotations

import pytest

from runner import cli
from runner.evidence import bundle, departures
from runner.evidence.records import SweepRecord
from tests import unseen_forks

pytestmark = pytest.mark.slow
RELEASE = "pypi:sglang==0.5.21"


@pytest.fixture(scope="module")
def trees(release_tree, tmp_path_factory):
    root = release_tree("0.5.21").root
    work = tmp_path_factory.mktemp("unseen")
    copy = unseen_forks.forks.make(root, work / "copy", [])
    made = {"inline": unseen_forks.inline(root, work / "inline"), "at_import": unseen_forks.at_import(root, work / "at_import"),
            "relocated": unseen_forks.relocated(root, work / "relocated")}
    return {"release": RELEASE, "copy": f"path:{copy}", **{k: f"path:{v}" for k, v in made.items()}, "roots": made}


@pytest.fixture(scope="module")
def swept(trees, cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "bundle"
    order = [trees[k] for k in ("release", "copy", "inline", "at_import", "relocated")]
    code = cli.main(["sweep", *order, "--out", str(out), "--cache-dir", str(cache.root), "-j", "2"])
    index = bundle.Index.model_validate_json((out / bundle.INDEX).read_bytes())
    rows = {r.source: r for r in SweepRecord.model_validate(index.extra).rows}
    records = {r.source: r for r in departures.in_bundle(out).values()}
    assert bundle.verify(out) == []
    return {"code": code, "rows": rows, "records": records}


def _fix(row, n):
    return next(f for f in row.fixes if f.fix == n)


def _plain_fixed(fs) -> bool:
    return fs.status == "fixed" and fs.departed is None and not fs.not_covered


def test_a_clean_release_and_its_identical_copy_show_no_departures(swept, trees):
    """The copy has the release's bytes: the sweep probes and records them once, and says of each that it is
    identical to the release it declares."""
    record = swept["records"][RELEASE]
    assert record.identical and not record.files and record.baseline == RELEASE and record.chosen == "declared"
    for key in ("release", "copy"):
        row = swept["rows"][trees[key]]
        assert row.departures == f"{trees[key]}: identical to {RELEASE} (by the version it declares)", key
        assert all(f.departed is None for f in row.fixes), key  # later defences 0.5.21 lacks read "not fixed", as they should
        assert all(_plain_fixed(_fix(row, n)) for n in (36988, 38935)), key


def test_detectors_the_awareness_scan_does_not_name_still_surface_as_run_and_the_verdict_says_so(swept, trees):
    """Nine detectors awareness.py does not flag, called by the predicate, and a hunk outside the fix's
    functions (``Req.__init__``) that marks every request retracted in production: each hunk ran in the
    door cases, so the verdict rests on them, flagged or not."""
    row, record = swept["rows"][trees["inline"]], swept["records"][trees["inline"]]
    fix = _fix(row, 38935)
    if fix.status == "inconclusive":  # condition evidence (issue 38): the fork's own test went one way, named in its hunk
        at = [int(w.rsplit(":", 1)[1].split()[0]) for w in fix.one_way if f"{unseen_forks.UTILS}:" in w]
        hunks = [h for h in record.hunks() if h.file == unseen_forks.UTILS]
        assert at and all(any(h.lines[0] <= line <= h.lines[1] for h in hunks) for line in at), fix.one_way
    else:  # the detectors see the harness: it behaves, on code the verdict names
        assert fix.status == "fixed" and fix.departed is not None and fix.departed.baseline == RELEASE, fix
    places = fix.departed.places if fix.departed else None
    for name in unseen_forks.DETECTORS:
        [hunk] = [h for h in record.hunks() if h.file == unseen_forks.UTILS and h.function == f"_r2_{name}"]
        assert "prefill-door-rejected" in hunk.ran_in.get("admission", []), f"{name}: not marked as run"
        assert places is None or hunk.place in places, name
    birth = next(h for h in record.hunks() if h.file == unseen_forks.SCHEDULE_BATCH and h.function == "Req.__init__")
    assert birth.ran_in.get("admission") and (places is None or birth.place in places)


def test_a_fork_that_decides_at_import_is_not_plain_fixed(swept, trees):
    """Was a BREAK (r2): module-level code that ran at import, with reads awareness.py does not name, was
    listed but not counted. Every changed statement of module-level code in a module the fix's runs
    imported is now a place the verdict rests on."""
    row, record = swept["rows"][trees["at_import"]], swept["records"][trees["at_import"]]
    assert not record.identical
    decision = next(h for h in record.hunks() if h.file == unseen_forks.UTILS and h.at_import)
    assert decision.ran
    assert not _plain_fixed(_fix(row, 38935)), _fix(row, 38935)


def test_a_fork_hiding_its_changed_lines_from_the_recorder_is_not_plain_fixed(swept, trees):
    """Was a BREAK (r2): code renamed after a library's file at import ran unseen. The recorder now
    places code by the module whose globals it runs with, and names the module as one that ran renamed
    code; the verdict counts the module's changed places."""
    row, record = swept["rows"][trees["relocated"]], swept["records"][trees["relocated"]]
    getter = next(h for h in record.hunks() if h.file == unseen_forks.SCHEDULE_BATCH and h.function == "ReqKvInfo.holds_mamba")
    assert getter.ran or getter.aware, getter
    assert not _plain_fixed(_fix(row, 38935)), _fix(row, 38935)
    # seen as run by the door cases (not only through the import-time code that renames it), its module named
    assert "prefill-door-rejected" in getter.ran_in.get("admission", []) and getter.place in _fix(row, 38935).departed.places
    assert "prefill-door-rejected" in getter.renamed_in.get("admission", [])
