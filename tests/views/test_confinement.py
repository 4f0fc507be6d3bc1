"""How the trees' code ran is never hidden: compare says when two runs differ in sandbox, interpreter
or layer (a line of its own), and report says when the code ran outside the sandbox."""

from __future__ import annotations

import orjson

from runner import cli
from runner.evidence.receipts import Isolation, seal
from tests.helpers import EVIDENCE

RECEIPT = EVIDENCE / "releases-20261201" / "receipts" / "sglang-0.5.20.admission.json"


def unsandboxed(path, python: str | None = None):
    raw = orjson.loads(RECEIPT.read_bytes())
    raw["environment"]["isolation"] = Isolation(sandbox="none").model_dump(mode="json")
    if python:
        raw["environment"]["python"] = python
    raw["digest"] = seal(raw)
    path.write_bytes(orjson.dumps(raw))
    return path


def test_compare_says_the_runs_differ_in_confinement_on_lines_of_their_own(tmp_path, capsys):
    assert cli.main(["compare", str(RECEIPT), str(unsandboxed(tmp_path / "b.json", "3.12.1"))]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "same observations"
    assert "the runs differ in sandbox: A bubblewrap 0.8.0; B none" in lines
    assert "the runs differ in interpreter: A CPython 3.11.7 (cp311); B CPython 3.12.1 (cp311)" in lines
    assert not any("dependency layer" in line for line in lines)  # the same layer is not a difference


def test_compare_of_alike_runs_says_nothing_of_confinement(capsys):
    assert cli.main(["compare", str(RECEIPT), str(RECEIPT)]) == 0
    assert capsys.readouterr().out.splitlines() == ["same observations"]


def test_report_of_an_unsandboxed_audit_warns_in_terminal_and_html_and_answers_the_audit(tmp_path, capsys):
    from runner.evidence import bundle
    from runner.evidence.receipts import Receipt
    from runner.evidence.records import SweepRecord
    from tests.views.test_verdict import LINE, tree

    row, rs = tree("0.5.22")
    loose = []
    for r in rs:  # as the model writes it (bundle.write), sealed again
        raw = r.model_dump(mode="json")
        raw["environment"]["isolation"] = Isolation(sandbox="none").model_dump(mode="json")
        raw["digest"] = seal(raw)
        loose.append(Receipt.model_validate(raw))
    record = SweepRecord(order=[row.source], shard=None, rows=[row], first_fixed={}, probe_runs=len(rs))
    root = bundle.write(tmp_path / "audit", kind="audit", created_at="2026-12-04T00:00:00Z", receipts=loose, differentials=[],
                        pins_sha256=None, extra=record.model_dump(mode="json"))
    capsys.readouterr()
    assert cli.main(["report", str(root), "--html", str(tmp_path / "r.html")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "the newest tree, sglang-0.5.22 (every fix, why):"
    assert lines[2].startswith(f"WARNING: {len(rs)} of {len(rs)} probe run(s) not in the sandbox: UNSANDBOXED")
    assert any(line.startswith("#39500 fixed when enabled; off by default") for line in lines)
    page = (tmp_path / "r.html").read_text()
    glance = page.split('id="glance">', 1)[1].split("</section>", 1)[0]
    assert '<p class="warn"><b>WARNING: </b>' in glance and "UNSANDBOXED" in glance
    assert "No base/head differential" not in glance and "What each fix is in sglang-0.5.22, and why" in glance
    assert "fixed when enabled; off by default" in glance
