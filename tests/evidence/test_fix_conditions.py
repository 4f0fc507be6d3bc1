"""Condition evidence on the host (issue #38): the atomic conditions of the fix's code are read from the stored
tree, each receipt says which values its cases saw each take, and ``verify`` derives that again from the cases'
records. A hand-made tree (no SGLang)."""

from __future__ import annotations

import pytest

from probes import duties
from runner.evidence import materials, receipts
from runner.judge import conditions, fixcode
from tests import helpers

UTILS = "sglang/srt/disaggregation/utils.py"
SOURCE = '''
def is_unadmitted_reject(req):
    """A rejected request."""
    if req.aborted and not req.holds:
        return True
    return req.count > 0
'''
A, HOLDS, COUNT = f"{UTILS}:4:7", f"{UTILS}:4:27", f"{UTILS}:6:11"


@pytest.fixture()
def tree_root(tmp_path, monkeypatch):
    monkeypatch.setitem(duties.FIX_CODE, 38935, {"sglang.srt.disaggregation.utils.is_unadmitted_reject": ()})
    path = tmp_path / "tree" / UTILS
    path.parent.mkdir(parents=True)
    path.write_text(SOURCE)
    return tmp_path / "tree"


def _cases(*took: dict[str, list[bool]] | None):
    return [helpers.case(f"c{i}", lines={UTILS: [[4, 6]]}, conditions=t) for i, t in enumerate(took)]


def test_the_host_lists_each_atomic_condition_from_the_stored_bytes(tree_root):
    cov = fixcode.measure(38935, materials.reader(tree_root), [])
    [fn] = cov.functions
    assert [(c.at, c.kind, c.text) for c in fn.conditions] == [
        (A, "truth", "req.aborted"), (HOLDS, "truth", "req.holds"), (COUNT, "value", "req.count > 0")]
    assert [e["conditions"] for e in conditions.wanted(materials.reader(tree_root))
            if e["function"].endswith("is_unadmitted_reject")] == [[
                {"at": A, "position": [4, 7, 4, 18], "kind": "truth"},
                {"at": HOLDS, "position": [4, 27, 4, 36], "kind": "truth"},
                {"at": COUNT, "position": [6, 11, 6, 24], "kind": "value"}]]


def test_each_condition_is_counted_both_ways_across_cases(tree_root):
    cov = fixcode.measure(38935, materials.reader(tree_root), _cases({A: [True], HOLDS: [False]},
                                                                     {A: [False], COUNT: [False, True]}))
    assert cov.both_ways() == (2, 3)
    assert cov.one_way() == [f"condition `req.holds` at {UTILS}:4 never true"]
    assert fixcode.measure(38935, materials.reader(tree_root), _cases(None)).one_way()[0].endswith("never true or false")


def test_a_case_cannot_report_a_value_a_condition_cannot_take():
    with pytest.raises(ValueError, match="conditions"):
        helpers.case("c0", conditions={A: [True, True]})


def test_verify_rederives_the_conditions_from_the_cases(tree_root):
    cases = _cases({A: [True], HOLDS: [False]})
    honest = receipts.make(helpers.PROBE, helpers.tree("0.5.21"), receipts.host_environment(), cases,
                           started_at="t0", finished_at="t1",
                           fix_code=fixcode.measure(38935, materials.reader(tree_root), cases))
    assert receipts.rederive(honest, None) == []
    [fn] = honest.fix_code.functions
    lied = fn.model_copy(update={"conditions": [c.model_copy(update={"seen": [False, True]}) for c in fn.conditions]})
    body = honest.model_dump(mode="json") | {"fix_code": honest.fix_code.model_copy(
        update={"functions": [lied]}).model_dump(mode="json")}
    body["digest"] = receipts.seal(body)
    resealed = receipts.Receipt.model_validate(body)
    assert any("does not follow" in p for p in receipts.rederive(resealed, None))


def test_a_declared_reason_holds_only_for_the_exact_text(tree_root, monkeypatch):
    monkeypatch.setitem(conditions.REASONS, ("sglang.srt.disaggregation.utils.is_unadmitted_reject", "", "req.holds"),
                        "no probe builds it")
    cov = fixcode.measure(38935, materials.reader(tree_root), _cases({A: [False, True], COUNT: [False, True]}))
    assert cov.one_way() == [] and cov.both_ways() == (3, 3)
    (tree_root / UTILS).write_text(SOURCE.replace("not req.holds", "not req.holds_kv"))
    assert fixcode.measure(38935, materials.reader(tree_root), []).functions[0].conditions[1].reason is None


def test_a_surviving_condition_mutant_names_the_input_no_case_varied():
    """mutate counts conditions: a survivor inserting a condition on an input no dimension reads, or changing a
    condition the cases never drove both ways, says so; one on an input the cases do vary says nothing more."""
    from runner.judge import judging

    survivor = {"function": "sglang.srt.managers.scheduler.Scheduler.retire_unadmitted_request", "before": "x",
                "file": UTILS, "line": 4}
    assert judging.unvaried("admission", {**survivor, "operator": "insert:req.priority2"}, []) == (
        "no case varies `req.priority2`: no dimension of the probe's case space reads it")
    assert judging.unvaried("admission", {**survivor, "operator": "insert:req.return_logprob"}, []) == ""
    baseline = _cases({A: [True], HOLDS: [False, True]})
    assert judging.unvaried("admission", {**survivor, "operator": "negate"}, baseline) == (
        f"no case drove the conditions at {UTILS}:4 both ways ({A})")
    both = _cases({A: [False, True], HOLDS: [False, True]})
    assert judging.unvaried("admission", {**survivor, "operator": "negate"}, both) == ""
    assert judging.unvaried("admission", {**survivor, "operator": "delete"}, baseline) == ""


def test_a_change_is_read_with_its_conditions_as_the_harness_makes_it(tree_root):
    """mutate --hunks: the host lists the changed function's conditions (an inserted one included) from the stored
    bytes with the change made, each with the place the harness's rewrite finds it by."""
    read = materials.reader(tree_root)
    found, wanted = conditions.of_change("sglang.srt.disaggregation.utils.is_unadmitted_reject", (), read,
                                         "req.aborted and", "req.aborted and req.priority is None and", "hunk h")
    assert [c.text for c in found] == ["req.aborted", "req.priority is None", "req.holds"]  # the changed line's
    assert all(c.at.startswith(f"hunk h: {UTILS}:") for c in found) and [w["at"] for w in wanted] == [c.at for c in found]
    assert conditions.of_change("sglang.srt.disaggregation.utils.is_unadmitted_reject", (), read, "absent", "x", "h") == ([], [])
    assert conditions.of_change("sglang.srt.disaggregation.utils.absent", (), read, "a", "b", "h") == ([], [])


def test_a_reason_with_a_premise_explains_only_where_the_stored_tree_shows_it(tmp_path, monkeypatch):
    """Decode-side host receive is explained only while no backend get_kv_class imports (nor a package module they
    import) defines supports_host_destination as anything but False: a tree with one that does gets no reason."""
    decode = "sglang/srt/disaggregation/decode.py"
    qualified = "sglang.srt.disaggregation.decode.DecodeTransferQueue.resolve_deferred_releases"
    monkeypatch.setitem(duties.FIX_CODE, 41023, {qualified: ()})
    files = {
        decode: "class DecodeTransferQueue:\n    def resolve_deferred_releases(self):\n"
                "        if self.enable_host_receive:\n            return 1\n",
        UTILS: "def get_kv_class(backend):\n    from sglang.srt.disaggregation.mooncake import Manager\n    return Manager\n",
        "sglang/srt/disaggregation/mooncake/__init__.py": "from sglang.srt.disaggregation.mooncake.conn import Manager\n",
        "sglang/srt/disaggregation/mooncake/conn.py": "from sglang.srt.disaggregation.base.conn import Base\n"
                                                      "class Manager(Base):\n    pass\n",
        "sglang/srt/disaggregation/base/conn.py": "class Base:\n    supports_host_destination: bool = False\n",
    }

    def measured(**changed: str):
        root = tmp_path / str(len(list(tmp_path.iterdir())))
        for rel, text in {**files, **changed}.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        [fn] = fixcode.measure(41023, materials.reader(root), []).functions
        return [(c.text, c.reason) for c in fn.conditions]

    assert measured() == [("self.enable_host_receive", conditions._HOST)]
    supported = "class Base:\n    @property\n    def supports_host_destination(self):\n        return self.host\n"
    assert measured(**{"sglang/srt/disaggregation/base/conn.py": supported}) == [("self.enable_host_receive", None)]
    assert measured(**{"sglang/srt/disaggregation/mooncake/conn.py": files["sglang/srt/disaggregation/mooncake/conn.py"]
                       + "    supports_host_destination = True\n"}) == [("self.enable_host_receive", None)]
    assert measured(**{UTILS: "def get_kv_class(backend):\n    return None\n"}) == [("self.enable_host_receive", None)]
    from probes import fixcode as read_code

    path, fn = read_code.locate(materials.reader(tmp_path / "0"), qualified)
    assert conditions.listed(qualified, path, fn, ())[0].reason is None  # nothing read: the premise is not shown


def test_the_checksum_hook_is_explained_only_while_every_definition_answers_true(tmp_path):
    """should_verify_kv_checksum is never false where BaseKVManager's True is the only answer; a backend that
    overrides it with anything else leaves the condition to the cases."""
    base = "class Base:\n    def should_verify_kv_checksum(self, addr):\n        return True\n"
    files = {
        UTILS: "def get_kv_class(backend):\n    from sglang.srt.disaggregation.mooncake.conn import Manager\n    return Manager\n",
        "sglang/srt/disaggregation/mooncake/conn.py": "from sglang.srt.disaggregation.base.conn import Base\n"
                                                      "class Manager(Base):\n    pass\n",
        "sglang/srt/disaggregation/base/conn.py": base,
    }

    def shown(**changed: str) -> bool:
        root = tmp_path / str(len(list(tmp_path.iterdir())))
        for rel, text in {**files, **changed}.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        return conditions.PREMISES[conditions._VERIFY](materials.reader(root))

    assert shown()
    override = files["sglang/srt/disaggregation/mooncake/conn.py"] + "    def should_verify_kv_checksum(self, addr):\n" \
                                                                     "        return addr in self.same_layout\n"
    assert not shown(**{"sglang/srt/disaggregation/mooncake/conn.py": override})


def test_every_reason_names_a_function_of_some_fixs_code():
    """A reason keyed on a function no FIX_CODE lists can never explain anything: a misspelt key would leave its
    condition one-way while its author believes it explained."""
    listed = {qualified for code in duties.FIX_CODE.values() for qualified in code}
    assert sorted({function for function, _, _ in conditions.REASONS} - listed) == []


def test_a_mutant_is_equivalent_by_a_never_true_reason_only_where_its_premise_is_shown(tmp_path):
    """mutate: a survivor that makes a never-true condition False, changes an operand of an `and` beside one, inserts
    `and not` one, or changes a statement that runs only under one, is equivalent by that reason, on a tree whose files
    show its premise (no backend supports host destinations); on a tree with a backend that does, it stays a survivor.
    A mutant that makes such a condition True, alone, is never equivalent."""
    qualified = "sglang.srt.disaggregation.decode.DecodeTransferQueue.resolve_deferred_releases"
    files = {
        "sglang/srt/disaggregation/decode.py":
            "class DecodeTransferQueue:\n    def resolve_deferred_releases(self):\n"
            "        for decode_req in self.queue:\n"
            "            if self.enable_host_receive and decode_req.host_staged:\n"
            "                self.held.append(decode_req)\n"
            "            if decode_req.done:\n                self.release(decode_req)\n",
        UTILS: "def get_kv_class(backend):\n    from sglang.srt.disaggregation.mooncake.conn import Manager\n    return Manager\n",
        "sglang/srt/disaggregation/mooncake/conn.py": "from sglang.srt.disaggregation.base.conn import Base\n"
                                                      "class Manager(Base):\n    pass\n",
        "sglang/srt/disaggregation/base/conn.py": "class Base:\n    supports_host_destination: bool = False\n",
    }

    def tree(**changed: str):
        root = tmp_path / str(len(list(tmp_path.iterdir())))
        for rel, text in {**files, **changed}.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        return materials.reader(root)

    def mutant(line: int, operator: str, before: str) -> dict:
        return {"function": qualified, "line": line, "operator": operator, "before": before}

    read = tree()
    equivalent = [mutant(4, "false", "self.enable_host_receive and decode_req.host_staged"),
                  mutant(4, "true", "self.enable_host_receive"), mutant(4, "negate", "decode_req.host_staged"),
                  mutant(4, "delete", "if self.enable_host_receive and decode_req.host_staged:"),
                  mutant(5, "delete", "self.held.append(decode_req)"), mutant(5, "return", "self.held.append(decode_req)"),
                  mutant(6, "insert:decode_req.host_staged", "decode_req.done")]
    assert all(conditions.premised_equivalent(m, read) for m in equivalent), \
        [m for m in equivalent if not conditions.premised_equivalent(m, read)]
    kept = [mutant(6, "true", "decode_req.done"), mutant(7, "delete", "self.release(decode_req)"),
            mutant(4, "true", "self.enable_host_receive and decode_req.host_staged"),
            mutant(6, "insert:decode_req.rid", "decode_req.done")]
    assert not any(conditions.premised_equivalent(m, read) for m in kept)
    supported = tree(**{"sglang/srt/disaggregation/base/conn.py": "class Base:\n    supports_host_destination = True\n"})
    assert not any(conditions.premised_equivalent(m, supported) for m in equivalent)
