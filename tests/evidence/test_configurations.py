"""A defence probed under configurations (the later defences: the tree's defaults, an option on): one
status per configuration, one bug window per configuration beside the fix's own, a differential of the
configuration its pin names, and an audit verdict in that configuration. Hand-made receipts."""

from __future__ import annotations

from runner.app import survey
from runner.evidence import pins, receipts
from runner.judge import judging
from runner.evidence.records import Row, windows
from runner.views import verdict
from tests.helpers import case, receipt

CHECKSUM = receipts.ProbeRef(id="handoff", fix=39500, sha256="e" * 64, files={"handoff.py": "f" * 64})
VERSIONS = ["0.5.19", "0.5.20", "0.5.21", "0.5.22"]
WITH_OPTION = ["bug", "bug", "clean", "clean"]  # the option did not exist, then it catches the short handoff


def handoff(version: str, option: str) -> receipts.Receipt:
    return receipt(version, [
        case("short-handoff", site="default", bug=True),  # the default configuration never checks
        case("short-handoff-with-kv-checksum", site="with-kv-checksum", bug=option == "bug"),
        case("full-handoff-with-kv-checksum", site="with-kv-checksum", role="guard"),
    ], CHECKSUM)


def rows() -> list[Row]:
    out = []
    for v, option in zip(VERSIONS, WITH_OPTION):
        r = handoff(v, option)
        out.append(Row(source=f"pypi:sglang=={v}", label=f"sglang-{v}", tree_digest=r.source.tree_digest,
                       fixes=judging.fixes([r]), static=[]))
    return out


def test_one_window_per_configuration_beside_the_fixs_own():
    found = {w.site: w for w in windows(rows())}
    assert set(found) == {None, "default", "with-kv-checksum"}
    assert found[None].first_fixed is None and found["default"].first_fixed is None  # never in force by default
    assert found["with-kv-checksum"].first_bug == "pypi:sglang==0.5.19"
    assert found["with-kv-checksum"].first_fixed == "pypi:sglang==0.5.21" and not found["with-kv-checksum"].recurred
    assert survey.first_fixed(rows()) == {39500: None}  # the fix over all its configurations


def test_a_fix_pinned_on_its_option_is_judged_there():
    fs = rows()[2].fixes[0]
    assert fs.status == "not fixed" and judging.at_site(fs, "with-kv-checksum").status == "fixed"
    assert judging.at_site(fs, "default").status == "not fixed" and judging.at_site(fs, "nowhere") is None
    sites = pins.load().fix(39500).sites  # #39500 is pinned with the checksum on
    assert verdict.of_fix(fs, {}, sites).word == verdict.OFF_BY_DEFAULT
    assert verdict.of_fix(rows()[1].fixes[0], {}, sites).word == "not fixed"


def test_the_differential_compares_the_pinned_configuration_only():
    base, head = handoff("0.5.20", "bug"), handoff("0.5.21", "clean")
    every = receipts.differential(39500, "t", ["handoff"], [("b", base)], [("h", head)], "fix observed")
    assert every.verdict == "fix not observed"  # the default configuration's case stays a bug
    pinned = receipts.differential(39500, "t", ["handoff"], [("b", base)], [("h", head)], "fix observed", ["with-kv-checksum"])
    assert pinned.verdict == "fix observed" and pinned.sites == ["with-kv-checksum"]
    assert {c.case for c in pinned.cases} == {"short-handoff-with-kv-checksum", "full-handoff-with-kv-checksum"}
