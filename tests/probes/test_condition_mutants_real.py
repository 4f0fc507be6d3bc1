"""Issue 38 item 5: a condition inserted on each input the fix's code reads, generated from the stored tree (not a
hand list), on the real releases that carry #38935 and #36988.

The generator reads each function of ``duties.FIX_CODE`` from the release's stored bytes and, at the first
single-line ``if`` of its fix's code, makes the duty depend on each attribute of an argument or loop variable
the fix's code reads (``mutation.inputs``: ``if X:`` becomes ``if (X) and not <input>:``), the shape of the
issue's mutants (a retire path skipping requests that asked for logprobs, a door retiring only requests
without a priority). Each runs as ``mutate --hunks`` (one SGLang import per release and fix), judged as an
audit of the changed tree would be: its duties on the cases that reach it, and the condition it wrote, which
those cases must drive both ways. The claim: none reads "fixed"; each reads "not fixed", "regression" or
"inconclusive" naming its own condition. It holds for #38935; for #36988 one change still reads "fixed" (``GAP``). Behaviour-preserving changes keep "fixed" (a test rewritten to an
equivalent form, a double negation; the fresh equivalents of tests/probes/fresh_hunks.py run in
test_fresh_hunks.py).

The later defences' probes vary what their code decides on since 2026-12-05 (docs/fixed.md) but are not generated
here yet: #40645's code gives the generator no input to condition on; for #39500 a behaviour-preserving double
negation reaches its default configuration, where the defence is off by design, and reads "not fixed" (a mutant's
reading does not separate configurations); #41023, #41402 and #41404 were not tried.
"""

from __future__ import annotations

import ast
import json
import re

import pytest

from probes import fixcode, mutation
from probes.duties import FIX_CODE
from runner import cli
from runner.evidence import materials

pytestmark = pytest.mark.slow  # real releases, their environments and SGLang imports

# Left of issue 38 (found by this generator): the final-result gate of #36988 made to skip requests that asked
# for logprobs (``req.inflight_middle_chunks <= 0 and not req.return_logprob``) reads "fixed": the cases drive
# return_logprob both ways, but only on aborted results, which the middle-chunk path retires all the same; a
# healthy final result asking for logprobs (a guard: it must still be sent) needs the forward's logprob outputs,
# which no case builds yet. Strict: the day a case builds it, this marker must go.
GAP = pytest.mark.xfail(strict=True, reason="no guard case of a healthy final result asking for logprobs (issue 38)")
FIXES = (38935, pytest.param(36988, marks=GAP))


def generated(read, fix: int) -> list[dict]:
    """One hunk per input each function of ``fix``'s code reads, at its first single-line ``if`` of the fix's
    code; and one equivalent change of that test (``not (not X)``)."""
    hunks = []
    for qualified, names in FIX_CODE[fix].items():
        found = fixcode.locate(read, qualified)
        if found is None:
            continue
        path, fn = found
        lines = read(path).splitlines(keepends=True)
        segment = "".join(lines[fn.lineno - 1 : fn.end_lineno])
        test = next((s for s in fixcode.statements(fn, names) if isinstance(s, ast.If) and s.test.end_lineno == s.lineno
                     and lines[s.lineno - 1].rstrip().endswith(":")), None)
        if test is None:
            continue
        header = lines[test.lineno - 1]
        if segment.count(header) != 1:
            continue
        indent, condition = re.match(r"(\s*)(?:el)?if (.*):\s*$", header).groups()
        keyword = "elif" if header.lstrip().startswith("elif") else "if"
        short = qualified.rsplit(".", 1)[-1].lstrip("_")
        for attribute in mutation.inputs(fn, names):
            hunks.append({"id": f"{short}-not-{attribute.replace('.', '-')}", "function": qualified, "old": header,
                          "new": f"{indent}{keyword} ({condition}) and not {attribute}:\n", "equivalent": False})
        hunks.append({"id": f"{short}-double-negation", "function": qualified, "old": header,
                      "new": f"{indent}{keyword} not (not ({condition})):\n", "equivalent": True})
    return hunks


@pytest.mark.parametrize("version", ["0.5.21", "0.5.22", "0.5.23"])
@pytest.mark.parametrize("fix", FIXES)
def test_a_condition_on_any_input_read_never_passes_for_fixed(version, fix, release_tree, cache, tmp_path):
    hunks = generated(materials.reader(release_tree(version).root), fix)
    assert sum(not h["equivalent"] for h in hunks) >= 5  # the generator found inputs in the stored code
    (tmp_path / "hunks.json").write_text(json.dumps([{k: h[k] for k in ("id", "function", "old", "new")} for h in hunks]))
    cli.main(["mutate", f"pypi:sglang=={version}", "--fix", str(fix), "--hunks", str(tmp_path / "hunks.json"),
              "--out", str(tmp_path / "out"), "--cache-dir", str(cache.root)])
    report = json.loads(next((tmp_path / "out" / "mutation").glob("*.json")).read_text())
    assert report["score"]["baseline"] == "fixed"
    read = {m["id"]: m for m in report["mutants"]}
    wrong = []
    for h in hunks:
        m = read[h["id"]]
        if h["equivalent"]:
            if m["reads"] != "fixed":
                wrong.append((h["id"], m["reads"], m["why"]))
        elif m["reads"] == "fixed" or (m["reads"] == "inconclusive" and "condition `" not in m["why"]):
            wrong.append((h["id"], m["reads"], m["why"]))
    assert not wrong, wrong
