"""``report`` on an accept bundle: the four gates beside the incident's steps, each backed by its
receipts, and never a pass the bundle does not bear out.

The bundles are made here (the runner's own mechanics): gate receipts shaped like ``accept``'s, the
tree audit's receipts from test_report's cases, and an acceptance record that is sometimes false.
The same page of a real ``accept`` run against fake workers is checked in tests/commands/test_accept.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from runner import cli
from runner.evidence import bundle
from runner.judge.observations import Case, CaseError
from runner.evidence.receipts import ProbeRef, ServerIdentity, make
from runner.evidence.records import Acceptance, GateResult
from runner.views.acceptance import GATES
from runner.views.report import gates, verified
from tests.views.test_report import (ENV, HOSTILE, admission, assert_self_contained, cleanup, html_of, parse, pypi, receipt,
                                     terminal)  # noqa: F401 (terminal: a fixture)

PREFILL, DECODE = "http://10.0.0.1:30000", "http://10.0.0.2:30000"
TREE = "pypi:sglang==0.5.22"


def gate_case(case_id: str, held: list[tuple[bool, str]], outcome: str = "observed") -> Case:
    bug = not all(ok for ok, _ in held)
    if outcome != "observed":
        return Case(id=case_id, site="server args + tree", role="bug", title="t", signature="any check not held",
                    outcome=outcome, classification="inconclusive", duration_ms=1,
                    error=CaseError(type="URLError", message="connection refused", where="process"))
    effects = {"checks": [{"held": ok, "what": what} for ok, what in held],
               "summary": "; ".join(w for ok, w in held if not ok) if bug else "in force"}
    return Case(id=case_id, site="server args + tree", role="bug", title="t", signature="any check not held",
                outcome="observed", classification="bug" if bug else "clean", effects=effects, duration_ms=1)


def gate_receipt(n: int, url: str, cases: list[Case]):
    probe = ProbeRef(id=f"accept-gate-{n}", fix=None, sha256="9" * 64, files={"runner/commands/accept.py": "9" * 64})
    r = make(probe, ServerIdentity(source=url, url=url, reported={"endpoint": "/server_info"}), ENV, cases,
             started_at="2026-11-30T00:00:00Z", finished_at="2026-11-30T00:00:01Z")
    return bundle.receipt_name(r), r


def fleet(gate3_what: str = "disaggregation_enable_kv_checksum=True (reported by the worker)", gate4_outcome: str = "observed"):
    """Receipts of a healthy 1P1D fleet running 0.5.22, by gate."""
    tree = [receipt("admission", pypi("0.5.22"), admission("clean", "clean")),
            receipt("prefill-cleanup", pypi("0.5.22"), cleanup("clean"))]
    return {
        1: [gate_receipt(1, PREFILL, [gate_case("pool-covers-context", [(True, "pool 32768 vs context 8192 x 1.25: covered")])])],
        2: tree,
        3: [gate_receipt(3, url, [gate_case("kv-checksum-in-force", [(True, gate3_what), (True, "present (disagg.py:72)")])])
            for url in (PREFILL, DECODE)],
        4: [gate_receipt(4, url, [gate_case("deferred-release-in-force", [(True, "deferred release on (declared)")],
                                            gate4_outcome)]) for url in (PREFILL, DECODE)],
    }


def accept_bundle(out: Path, by_gate: dict, passed: dict[int, bool] | None = None, names: dict[int, list[str]] | None = None,
                  trees: dict[str, str] | None = None, extra: dict | None = None, unused: dict[int, list[str]] | None = None) -> Path:
    """An accept bundle whose record says what ``passed`` says (default: every gate passed)."""
    passed = passed or {n: True for n in by_gate}
    record = Acceptance(
        workers={PREFILL: {"role": "prefill", "endpoint": "/server_info", "version": "0.5.22", "tree": TREE},
                 DECODE: {"role": "decode", "endpoint": "/server_info", "version": "0.5.22", "tree": TREE}},
        trees=trees or {TREE: "h1:tree-0.5.22="},
        gates=[GateResult(gate=n, title=GATES[n], passed=passed[n], reasons=["as recorded"],
                          receipts=(names or {}).get(n, [name for name, _ in rs]), unused=(unused or {}).get(n, []))
               for n, rs in by_gate.items()],
        accepted=all(passed.values()) and len(by_gate) == 4)
    every = {name: r for rs in by_gate.values() for name, r in rs}
    return bundle.write(out, kind="accept", created_at="2026-11-30T00:00:00Z", receipts=list(every.values()),
                        differentials=[], pins_sha256=None, extra=extra if extra is not None else record.model_dump(mode="json"))


def words(root: Path) -> dict[int, str]:
    found = gates.of(verified.gather(root))
    return {g.number: g.status for g in found.gates}


def test_a_healthy_fleet_passes_every_gate_backed_by_worker_tree_and_receipt(tmp_path, terminal):
    root = accept_bundle(tmp_path / "accept", fleet())
    a = gates.of(verified.gather(root))
    assert [g.status for g in a.gates] == ["passed"] * 4 and a.accepted and a.claimed
    g2 = a.gates[1]
    assert {b.receipt for b in g2.backing} == {"receipts/sglang-0.5.22.admission.json", "receipts/sglang-0.5.22.prefill-cleanup.json"}
    assert all(b.tree == TREE and b.tree_digest == "h1:tree-0.5.22=" for g in a.gates for b in g.backing)
    assert [b.who for b in a.gates[3].backing] == [f"prefill worker {PREFILL}", f"decode worker {DECODE}"]
    assert cli.main(["report", str(root), "--all"]) == 0  # everything, in the page's order
    out = terminal.getvalue()
    assert "The four acceptance gates" in out and "acceptance: accepted (all four gates passed)" in out
    assert out.index("The incident's seven steps") < out.index("The four acceptance gates")
    assert "held disaggregation_enable_kv_checksum=True" in out and "fixed #38935 fixed: prefill-door fixed" in out


def test_the_page_shows_the_gates_beside_the_steps_and_every_link_resolves(tmp_path):
    root = accept_bundle(tmp_path / "accept", fleet(gate3_what=HOSTILE))
    out = tmp_path / "site" / "r.html"
    page = html_of(root, out)
    p = parse(page)
    assert_self_contained(p)
    for link in p.links:
        assert link[1:] in p.ids if link.startswith("#") else (out.parent / unquote(link)).resolve().is_file(), link
    assert page.index('id="steps"') < page.index('id="gates"') < page.index('id="matrix"')
    section = page[page.index('id="gates"'):page.index('id="matrix"')]
    assert re.findall(r'<td><span class="st ([a-z-]+)">', section) == ["passed"] * 4
    assert section.count("h1:tree-0.5.22=") == 7  # every receipt behind a gate names the tree it bears on
    assert f'href="#{"server-"}' in section and "receipts/sglang-0.5.22.admission.json" in section
    assert HOSTILE not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in section
    assert "<b>Acceptance: </b>" in page and '<span class="verdict accepted">accepted</span>' in page


@pytest.mark.parametrize("canary", ["bug", "error"])
def test_the_alternative_a_gate_did_not_use_is_shown_as_not_used(tmp_path, terminal, canary):
    """Gate 3 rests on the checksum: the canary's cases (off here, or not even read) are not used, so
    neither a bug of the fleet nor a case that did not run; the checksum's own cases still count."""
    by_gate = fleet()
    canary_case = (gate_case("kv-canary-in-force-rank-0", [(False, "kv_canary='none' (reported by the worker)")])
                   if canary == "bug" else gate_case("kv-canary-in-force-rank-0", [], outcome="error"))
    by_gate[3] = [gate_receipt(3, url, [gate_case("kv-checksum-in-force-rank-0", [(True, "checksum on")]), canary_case])
                  for url in (PREFILL, DECODE)]
    root = accept_bundle(tmp_path / "accept", by_gate, unused={3: ["kv-canary-in-force-rank-0"]})
    a = gates.of(verified.gather(root))
    assert a.gates[2].status == "passed" and not a.gates[2].problems and a.accepted
    lines = [(line.word, line.text.split(":")[0]) for b in a.gates[2].backing for line in b.lines if not line.depth]
    assert lines == [("clean", "kv-checksum-in-force-rank-0"), ("not used", "kv-canary-in-force-rank-0")] * 2
    assert cli.main(["report", str(root)]) == 0
    out = terminal.getvalue()
    assert "not used kv-canary-in-force-rank-0: the gate rests on the other alternative" in out
    assert not re.search(r"(?<!no )bug observed", out) and "did not run" not in out


def test_a_used_case_that_did_not_run_still_fails_the_gate(tmp_path):
    by_gate = fleet()
    by_gate[3] = [gate_receipt(3, PREFILL, [gate_case("kv-checksum-in-force-rank-0", [], outcome="error"),
                                            gate_case("kv-canary-in-force-rank-0", [(True, "canary on")])])]
    root = accept_bundle(tmp_path / "accept", by_gate, unused={3: ["kv-checksum-in-force-rank-0"]})
    assert words(root)[3] == "passed"  # the errored case is the alternative not used
    root = accept_bundle(tmp_path / "again", by_gate, unused={3: ["kv-canary-in-force-rank-0"]})
    assert words(root)[3] == "failed"


def test_a_gate_the_record_lacks_did_not_run_and_nothing_is_accepted(tmp_path, terminal):
    by_gate = fleet()
    del by_gate[4]
    extra = accept_bundle(tmp_path / "x", by_gate).joinpath("bundle.json")  # its record, then claimed accepted
    record = bundle.Index.model_validate_json(extra.read_bytes()).extra | {"accepted": True}
    root = accept_bundle(tmp_path / "accept", by_gate, extra=record)
    assert words(root) == {1: "passed", 2: "passed", 3: "passed", 4: "not run"}
    assert cli.main(["report", str(root)]) == 0
    out = terminal.getvalue()
    assert "not accepted (gate 4 not run)" in out and "the record says accepted" in out
    assert "not in this bundle's acceptance record" in out


def test_a_pass_no_receipt_backs_did_not_run(tmp_path):
    root = accept_bundle(tmp_path / "accept", fleet(), names={1: []})
    a = gates.of(verified.gather(root))
    assert a.gates[0].status == "not run" and not a.accepted
    assert a.gates[0].problems == ["the record says passed, but no receipt backs it"]


def test_a_pass_naming_a_receipt_the_bundle_lacks_did_not_run(tmp_path):
    root = accept_bundle(tmp_path / "accept", fleet(), names={4: ["receipts/server-gone.accept-gate-4.json"]})
    a = gates.of(verified.gather(root))
    assert a.gates[3].status == "not run" and "which is not a receipt of this bundle" in a.gates[3].problems[0]


def test_a_pass_whose_case_never_ran_is_not_shown_as_a_pass(tmp_path, terminal):
    root = accept_bundle(tmp_path / "accept", fleet(gate4_outcome="error"))
    assert words(root)[4] == "failed"
    assert cli.main(["report", str(root)]) == 0
    assert "case deferred-release-in-force did not run to a result (error)" in terminal.getvalue()


def test_a_tree_audit_of_another_tree_than_the_record_binds_is_not_a_pass(tmp_path):
    root = accept_bundle(tmp_path / "accept", fleet(), trees={TREE: "h1:another-tree="})
    a = gates.of(verified.gather(root))
    assert a.gates[1].status == "failed" and "the record binds its workers to h1:another-tree=" in a.gates[1].problems[0]


def test_a_failed_gate_stays_failed(tmp_path):
    root = accept_bundle(tmp_path / "accept", fleet(), passed={1: True, 2: True, 3: False, 4: True})
    assert words(root) == {1: "passed", 2: "passed", 3: "failed", 4: "passed"}


def test_a_record_that_does_not_parse_leaves_every_gate_not_run(tmp_path, terminal):
    root = accept_bundle(tmp_path / "accept", fleet(), extra={"gates": "all passed", "accepted": True})
    assert words(root) == {n: "not run" for n in GATES}
    assert cli.main(["report", str(root)]) == 0
    assert "the acceptance record does not parse" in terminal.getvalue()


@pytest.mark.parametrize("kind", ["run", "gate-pool"])
def test_other_bundles_have_no_gates(tmp_path, kind):
    named = [receipt("admission", pypi("0.5.22"), admission("clean", "clean"))]
    root = bundle.write(tmp_path / "b", kind=kind, created_at="2026-11-30T00:00:00Z", receipts=[r for _, r in named],
                        differentials=[], pins_sha256=None)
    assert gates.of(verified.gather(root)) is None
    assert 'id="gates"' not in html_of(root, tmp_path / "r.html")
