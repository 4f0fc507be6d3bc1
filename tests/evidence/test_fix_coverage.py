"""Coverage of the fix's code is evidence (issue #22): the statements of each function a fix changed are read
from the stored tree on the host; a statement no case ran is named in the receipt, the audit line and
``report``; a tree whose fix's code has such statements reads "fixed, with N lines of the fix no case
reaches", never plain "fixed"; ``verify`` re-derives the coverage from the cases' lines. A hand-made tree
(no SGLang)."""

from __future__ import annotations

import pytest

from probes import duties
from runner import cli
from runner.evidence import bundle, materials, receipts
from runner.judge import fixcode, judging
from runner.views.report.matrix import cell_at, matrix
from runner.views.report.verified import gather
from tests import helpers

UTILS = "sglang/srt/disaggregation/utils.py"
SOURCE = '''
def is_unadmitted_reject(req):
    """A rejected request."""
    if req.aborted:
        return not req.holds
    return False
'''


@pytest.fixture()
def tree_root(tmp_path, monkeypatch):
    monkeypatch.setitem(duties.FIX_CODE, 38935, {"sglang.srt.disaggregation.utils.is_unadmitted_reject": (),
                                                 "sglang.srt.disaggregation.prefill.PrefillBootstrapQueue.add": ()})
    path = tmp_path / "tree" / UTILS
    path.parent.mkdir(parents=True)
    path.write_text(SOURCE)
    return tmp_path / "tree"


# each condition of SOURCE seen both ways: what the lines say is then all that qualifies a "fixed"
BOTH_WAYS = {f"{UTILS}:4:7": [False, True], f"{UTILS}:5:19": [False, True]}


def _cases(*ran: list[list[int]] | None, took: dict | None = BOTH_WAYS):
    return [helpers.case(f"c{i}", lines=None if r is None else {UTILS: r}, conditions=took) for i, r in enumerate(ran)]


def test_each_statement_of_the_fix_code_is_covered_or_named(tree_root):
    cov = fixcode.measure(38935, materials.reader(tree_root), _cases([[3, 4]], [[5, 5]]))
    predicate, absent = cov.functions
    assert predicate.file == UTILS and predicate.statements == [(4, 5), (5, 5), (6, 6)]
    assert predicate.not_covered == [6]  # ``return False``: the cases only took the other branch
    assert absent.file is None and absent.statements == []  # the tree does not define it where FIX_CODE says
    assert cov.not_covered() == [f"{UTILS}:6"]
    assert fixcode.measure(38935, materials.reader(tree_root), _cases([[4, 6]])).not_covered() == []


def test_a_case_whose_lines_are_unknown_is_said_so(tree_root):
    cov = fixcode.measure(38935, materials.reader(tree_root), _cases(None))
    assert cov.unrecorded == ["c0"] and cov.not_covered() == [f"{UTILS}:{n}" for n in (4, 5, 6)]


def test_a_file_that_is_not_a_regular_file_of_the_tree_defines_nothing(tree_root, tmp_path):
    outside = tmp_path / "outside.py"
    outside.write_text(SOURCE)
    (tree_root / UTILS).unlink()
    (tree_root / UTILS).symlink_to(outside)
    assert fixcode.measure(38935, materials.reader(tree_root), _cases([[3, 6]])).functions[0].file is None


def _receipt(tree_root, *ran, took: dict | None = BOTH_WAYS):
    cases = _cases(*ran, took=took)
    return receipts.make(helpers.PROBE, helpers.tree("0.5.21"), receipts.host_environment(), cases,
                         started_at="t0", finished_at="t1",
                         fix_code=fixcode.measure(38935, materials.reader(tree_root), cases))


def test_a_fixed_tree_with_uncovered_fix_code_does_not_read_plain_fixed(tree_root):
    [fs] = judging.fixes([_receipt(tree_root, [[3, 5]])])
    assert fs.status == "fixed" and fs.not_covered == [f"{UTILS}:6"]
    assert judging.shown(fs) == "fixed, with 1 line of the fix no case reaches"
    [whole] = judging.fixes([_receipt(tree_root, [[4, 6]])])
    assert judging.shown(whole) == "fixed"
    not_fixed = judging.covered("not fixed", [f"{UTILS}:6"])
    assert not_fixed == "not fixed"  # the behaviour already says what is wrong


def test_a_condition_no_case_saw_both_ways_makes_it_inconclusive_whatever_the_lines(tree_root):
    """The conditions decide the word; the lines only qualify a "fixed" that stands."""
    [fs] = judging.fixes([_receipt(tree_root, [[3, 5]], took={f"{UTILS}:4:7": [True], f"{UTILS}:5:19": [False, True]})])
    assert fs.status == "inconclusive" and fs.conditions == [1, 2]
    assert fs.one_way == [f"condition `req.aborted` at {UTILS}:4 never false"]
    assert judging.shown(fs) == "inconclusive"
    assert judging.at_site(fs, "prefill-door").status == "inconclusive"


def test_verify_rederives_the_coverage_from_the_cases_lines(tree_root, tmp_path):
    honest = _receipt(tree_root, [[3, 5]])
    assert receipts.rederive(honest, None) == []
    lied = honest.fix_code.model_copy(update={"functions": [honest.fix_code.functions[0].model_copy(
        update={"not_covered": []}), honest.fix_code.functions[1]]})
    body = honest.model_dump(mode="json") | {"fix_code": lied.model_dump(mode="json")}
    body["digest"] = receipts.seal(body)
    resealed = receipts.Receipt.model_validate(body)
    assert "the coverage of the fix's code does not follow from its cases' lines" in receipts.rederive(resealed, None)


def test_report_names_the_lines_no_case_reaches(tree_root, tmp_path, capsys):
    out = bundle.write(tmp_path / "b", kind="audit", created_at="t0", receipts=[_receipt(tree_root, [[3, 5]])],
                       differentials=[], pins_sha256=None)
    ev = gather(out)
    rows, columns, cells = matrix(ev)
    _, cell = cell_at(ev, cells, rows[0].source, columns[0])
    assert cell.word == "fixed, with 1 line of the fix no case reaches" and f"not covered: {UTILS}:6" in cell.detail
    capsys.readouterr()
    cli.main(["report", str(out)])
    assert "fixed, with 1 line of the fix no case reaches" in capsys.readouterr().out
