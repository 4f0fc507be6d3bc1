"""Where real forks depart from the release they declare, on the code the verdicts rest on.

One sweep probes four trees made from real releases (the release itself, a vendor fork with an
unrelated change, a partial backport, a harness-aware backport), so the slow part is four probe
runs; ``audit --strict``, ``backport --applied`` and ``report`` then reuse its receipts. A fifth
run looks, from inside a case, for anything that names the harness.
"""

from __future__ import annotations

import json
import re

import pytest

from runner import cli
from runner.evidence import bundle, departures, reviews
from runner.evidence.records import SweepRecord
from runner.sandbox import bwrap, execute
from runner.store import envs, sources, specs
from tests import aware_forks, forks

pytestmark = pytest.mark.slow
AWARE = list(aware_forks.DETECTORS)
VENDOR_FUNCTION = '\n\ndef acme_build_banner():\n    return "ACME build 7 " + str(len(__name__))\n'


@pytest.fixture(scope="module")
def trees(release_tree, tmp_path_factory):
    older, fixed = release_tree("0.5.20").root, release_tree("0.5.21").root
    work = tmp_path_factory.mktemp("departures")
    vendor = forks.make(fixed, work / "vendor", [(aware_forks.UTILS, "\ndef is_aborted(", VENDOR_FUNCTION + "\ndef is_aborted(")])
    (vendor / "sglang" / "acme_tools.py").write_text("ACME = True\n")
    partial = forks.backport_38935(older, fixed, work / "partial")
    decode = partial / forks.DECODE
    decode.write_text(decode.read_text().replace(forks.DECODE_GATE, "", 1))  # the decode door left ungated
    aware = aware_forks.make(older, fixed, work / "aware", AWARE)
    return {"release": "pypi:sglang==0.5.21", "vendor": f"path:{vendor}", "partial": f"path:{partial}",
            "aware": f"path:{aware}", "aware_root": aware}


@pytest.fixture(scope="module")
def swept(trees, cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "bundle"
    order = [trees[k] for k in ("release", "vendor", "partial", "aware")]
    code = cli.main(["sweep", *order, "--out", str(out), "--cache-dir", str(cache.root), "-j", "2"])
    _, receipts, _ = bundle.load(out)
    index = bundle.Index.model_validate_json((out / bundle.INDEX).read_bytes())
    record = SweepRecord.model_validate(index.extra)
    rows = {r.source: r for r in record.rows}
    records = {r.source: r for r in departures.in_bundle(out).values()}
    return {"code": code, "out": out, "rows": rows, "records": records}


def _status(row, fix):
    return next(f for f in row.fixes if f.fix == fix)


def test_a_release_is_identical_to_the_version_it_declares(swept, trees):
    record = swept["records"][trees["release"]]
    assert record.identical and record.baseline == "pypi:sglang==0.5.21" and record.chosen == "declared"
    assert record.line().endswith("identical to pypi:sglang==0.5.21 (by the version it declares)")
    fixes = swept["rows"][trees["release"]].fixes
    assert all(f.departed is None for f in fixes)  # later defences 0.5.21 lacks read "not fixed", as they should
    assert all(_status(swept["rows"][trees["release"]], n).status == "fixed" for n in (36988, 38935))


def test_a_vendor_change_off_the_verdicts_path_is_listed_and_leaves_fixed_alone(swept, trees):
    record = swept["records"][trees["vendor"]]
    assert not record.identical and record.counts() == {"added": 1, "removed": 0, "changed": 1}
    tool, hunk = record.hunks()  # every changed module is read (in path order), whatever the probe runs imported
    assert (hunk.file, hunk.function, hunk.ran, hunk.aware, hunk.reach) == (aware_forks.UTILS, "acme_build_banner", False, [],
                                                                            "imported")
    added = next(f for f in record.files if f.change == "added")
    assert added.path == "sglang/acme_tools.py" and not added.imported and not added.reachable
    assert (tool.file, tool.reach) == ("sglang/acme_tools.py", "unreachable")
    assert all(f.departed is None for f in swept["rows"][trees["vendor"]].fixes)
    assert swept["rows"][trees["vendor"]].unreviewed == [reviews.named(hunk)]  # audit: fixed on unreviewed code (exit 4)
    assert all(_status(swept["rows"][trees["vendor"]], n).status == "fixed" for n in (36988, 38935))


def test_a_partial_backport_fails_at_the_door_it_left_and_shows_what_it_changed(swept, trees):
    row, record = swept["rows"][trees["partial"]], swept["records"][trees["partial"]]
    fix = _status(row, 38935)
    assert fix.status == "not fixed" and fix.bug_at == ["decode-door"] and fix.departed is None
    gate = next(h for h in record.hunks() if h.file == forks.PREFILL and h.function == "PrefillBootstrapQueue.add")
    assert "prefill-door-rejected" in gate.ran_in["admission"] and not any(c.startswith("decode") for c in gate.ran_in["admission"])
    retire = next(h for h in record.hunks() if h.function == "Scheduler.retire_unadmitted_request")
    assert retire.ran and not retire.aware


def test_every_probe_aware_hunk_surfaces_marked_run_and_the_verdict_says_so(swept, trees):
    row, record = swept["rows"][trees["aware"]], swept["records"][trees["aware"]]
    fix = _status(row, 38935)
    root = trees["aware_root"]
    if fix.status == "fixed":  # some detector still sees the harness: fixed, on code that says so
        assert fix.departed is not None and fix.departed.baseline == "pypi:sglang==0.5.20"
    elif fix.status == "inconclusive":  # a test of the fork's own went one way under every case: named, in its hunk
        at = [int(w.rsplit(":", 1)[1].split()[0]) for w in fix.one_way if f"{aware_forks.UTILS}:" in w]
        hunks = [h for h in record.hunks() if h.file == aware_forks.UTILS]
        assert at and all(any(h.lines[0] <= line <= h.lines[1] for h in hunks) for line in at), fix.one_way
    else:  # nothing gives the harness away any more: the fork answers "not rejected", and fails
        assert fix.status == "not fixed"
    for name in AWARE:
        first, last = aware_forks.detector_lines(root, name)
        [hunk] = [h for h in record.hunks() if h.file == aware_forks.UTILS and h.function == f"_aware_{name}"]
        assert hunk.lines[0] <= first and hunk.lines[1] >= last, name
        assert hunk.aware, f"{name}: not flagged as able to tell it is probed"
        assert "prefill-door-rejected" in hunk.ran_in.get("admission", []), f"{name}: not marked as run by the cases"
        if fix.departed:
            assert hunk.place in fix.departed.aware and hunk.place in fix.departed.places
    other = _status(row, 36988).departed  # its cases never reached the detectors: at most the backport's import-time code
    assert other is None or (not other.places and not other.aware and other.at_import)


def test_strict_fails_a_verdict_resting_on_code_that_differs_and_report_shows_it(swept, trees, cache, tmp_path, capsys):
    """The sweep's receipts are reused: audit and backport only recompute the departures."""
    fixed = _status(swept["rows"][trees["aware"]], 38935).status == "fixed"
    common = ["--cache-dir", str(cache.root)]
    capsys.readouterr()
    # audit exits 0 only when every fix (later defences too) is in force: the aware fork is 0.5.20 with #38935
    assert cli.main(["audit", trees["aware"], "--out", str(tmp_path / "a"), *common]) == 1
    shown = capsys.readouterr().out
    if fixed:
        assert re.search(r"#38935 fixed on unreviewed code  rests on \d+ changed place\(s\) the probes can reach that no review "
                         r"accepted \(0 accepted\); on code that differs from pypi:sglang==0\.5\.20 at \d+ places the cases "
                         r"ran, 5 of which can tell they are being probed(, and at \d+ places? of [^:]*)?: read them", shown)
    if fixed:
        assert "can tell it is being probed: " in shown and "_aware_stack" in shown
    else:  # the detectors' places are counted on the baseline line, their one-way test named in the verdict
        assert re.search(r"\d+ reachable in all, 5 that can tell they are being probed", shown), shown
        assert re.search(r"#38935 (not fixed|inconclusive  condition `.*` at sglang/srt/disaggregation/utils\.py:\d+ never)", shown)
    assert cli.main(["audit", trees["aware"], "--strict", "--out", str(tmp_path / "s"), *common]) == 1
    release = cli.main(["audit", trees["release"], "--out", str(tmp_path / "r0"), *common])
    assert cli.main(["audit", trees["release"], "--strict", "--out", str(tmp_path / "r"), *common]) == release  # nothing departs
    code = cli.main(["backport", "--pr", "38935", "--applied", "--onto", trees["aware"], "--head", trees["release"],
                     "--strict", "--out", str(tmp_path / "b"), *common])
    assert code == 1 and departures.in_bundle(tmp_path / "b")
    capsys.readouterr()
    assert cli.main(["report", str(swept["out"]), "--all", "--html", str(tmp_path / "r.html")]) == 0
    text = capsys.readouterr().out
    assert "where the trees depart from their baselines" in text and "identical to pypi:sglang==0.5.21" in text
    assert "_aware_modules" in text and "can tell it is being probed" in text and "+def _aware" not in text  # folded
    page = (tmp_path / "r.html").read_text()
    assert '<details class="departures">' in page and "<details open" not in page and "_aware_pid1" in page
    assert bundle.verify(swept["out"]) == []


TELLS = '''

_upstream_is_unadmitted_reject = is_unadmitted_reject


def is_unadmitted_reject(req):
    import json, os, sys
    seen, counts = {}, {}

    def look(where, text):
        if any(w in str(text).lower() for w in ("diffprobe", "probes")):
            seen.setdefault(where, []).append(str(text)[:300])

    for name, module in list(sys.modules.items()):
        look("module name", name)
        look("module file", getattr(module, "__file__", None) or "")
    for where, values in (("sys.path", sys.path), ("argv", sys.argv), ("orig_argv", sys.orig_argv),
                          ("interpreter", [sys.executable, sys.prefix, sys.base_prefix, os.getcwd()]),
                          ("environ", [k + "=" + v for k, v in os.environ.items()])):
        for value in values:
            look(where, value)
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    for pid in pids:
        for part in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{part}", "rb") as f:
                    look(f"/proc/{pid}/{part}", f.read().replace(b"\\0", b" ").decode(errors="replace"))
            except OSError:
                pass
    with open("/proc/self/mountinfo") as f:
        for line in f:
            look("mountinfo", line)
    frame, frames = sys._getframe(), 0
    while frame is not None:
        look("frame", frame.f_code.co_filename + ":" + frame.f_code.co_name)
        frames, frame = frames + 1, frame.f_back
    counts = {"modules": len(sys.modules), "pids": len(pids), "frames": frames, "environ": len(os.environ)}
    raise RuntimeError("TELLS " + json.dumps({"seen": seen, "counts": counts}))
'''


@pytest.mark.skipif(not bwrap.version(), reason="bubblewrap cannot run here")
def test_nothing_a_case_can_read_names_diffprobe_or_the_probes(release_tree, cache, interp, tmp_path):
    """From inside a case: module names and files, sys.path, argv, the interpreter's paths, the
    environment, every process's command line and environment, the mounts, the stack."""
    fork = forks.make(release_tree("0.5.21").root, tmp_path / "tells", [])
    utils = fork / aware_forks.UTILS
    utils.write_text(utils.read_text() + TELLS)
    tree = sources.resolve(specs.parse(f"path:{fork}"), cache)
    environment = envs.env(tree, cache, interp)
    runs = execute.run_probes(environment, ["admission"], cases=["prefill-door-rejected"], sandboxed=True)
    [case] = runs["admission"].observations.cases
    assert case.outcome == "error" and case.error.message.startswith("TELLS "), case
    told = json.loads(case.error.message.removeprefix("TELLS "))
    assert told["counts"]["modules"] > 500 and told["counts"]["frames"] > 5 and told["counts"]["pids"] >= 2
    assert told["seen"] == {}
