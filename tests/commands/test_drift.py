"""``diffprobe drift`` on hand-made trees (runner/evidence/drift.py, runner/commands/drift.py): which
functions of the module set changed, which a case ran every changed statement of, which the catalog
declares not probed; a bad catalog is one line and exit 2. The real 0.5.22 -> 0.5.23 list:
tests/commands/test_drift_real.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner import cli, errors
from runner.evidence import drift
from tests.helpers import case

DECODE = "sglang/srt/disaggregation/decode.py"
OLD = '''class Queue:
    def pop(self, reqs):
        """Pop what is done."""
        done = [r for r in reqs if r.done]
        return done

    def release(self, req):
        req.free()

    def plumbing(self):
        return 1


def helper(x):
    return x
'''
NEW = '''class Queue:
    def pop(self, reqs):
        """Pop what is done (held on every rank)."""
        done = [r for r in reqs if r.done]
        if any_rank_holds(done):
            return []
        return done

    def release(self, req):
        # a comment is not a change
        req.free()

    def plumbing(self):
        return 2


def helper(x):
    return x


def any_rank_holds(done):
    return bool(done)
'''
CATALOG = '''
[[modules]]
group = "disaggregation"
why = "the handoff"
paths = ["sglang/srt/disaggregation/*.py"]
functions = ["Queue.pop", "Queue.release", "any_rank_holds", "helper"]
'''


def _entries(cases=(), catalog: str = CATALOG, tmp_path: Path | None = None) -> list[drift.Entry]:
    path = tmp_path / "catalog.toml"
    path.write_text(catalog)
    loaded = drift.load(path)
    found = drift.changed({DECODE: OLD.encode()}, {DECODE: NEW.encode()}, loaded)
    return drift.reached(found, drift.fix_places({38935: {"sglang.srt.disaggregation.decode.Queue.pop": ()}}),
                         {"lifetime": list(cases)}, loaded)


def test_a_changed_or_added_function_is_listed_a_comment_or_an_unnamed_function_is_not(tmp_path):
    entries = _entries(tmp_path=tmp_path)
    assert [(e.function, e.change) for e in entries] == [("Queue.pop", "changed"), ("any_rank_holds", "added")]
    pop, added = entries
    assert added.statements == [(22, 22)]  # its body: the def line runs at import, never in a case
    assert pop.statements == [(5, 5), (6, 6)] and pop.not_run == [5, 6] and not pop.reached  # the new if and its return
    assert pop.reached_by == ["fix #38935"]  # named beside it: a pinned fix's code is not a probe of its new lines


def test_a_case_that_runs_past_the_new_defence_has_not_probed_it(tmp_path):
    past = case("c1", lines={DECODE: [[4, 5], [7, 7]]})  # the new if ran, its return never did
    [pop, added] = _entries([past], tmp_path=tmp_path)
    assert (pop.not_run, pop.reached) == ([6], False)
    both = case("c2", lines={DECODE: [[6, 6]], "sglang/other.py": [[1, 1]]})
    [pop, added] = _entries([past, both], tmp_path=tmp_path)
    assert pop.reached and pop.reached_by == ["fix #38935", "probe lifetime"] and not added.reached


def _declared(*pairs: tuple[str, str], reason: str = "a pure helper", tree: str = "h1:" + "A" * 43 + "=") -> str:
    """An [[unprobed]] entry for ``pairs`` (Class.method of DECODE, sha256), as --stub prints it plus a reason."""
    rows = "".join(f'  {{ place = "{DECODE}:{name}", sha256 = "{digest}" }},\n' for name, digest in pairs)
    return (f'[[unprobed]]\nreason = "{reason}"\nreviewed_in = "path:/b"\ntree_digest = "{tree}"\n'
            f"functions = [\n{rows}]\n")


def _digest(text: str, name: str) -> str:
    return drift.source_digest(text.encode(), drift.functions(text.encode())[name].lines)


def test_the_catalog_declares_what_is_not_probed_for_the_bytes_reviewed(tmp_path):
    declared = CATALOG + _declared(("any_rank_holds", _digest(NEW, "any_rank_holds")))
    entries = _entries(catalog=declared, tmp_path=tmp_path)
    assert [e.unprobed for e in entries] == [None, "a pure helper"] and entries[1].reviewed_other is None
    assert entries[1].sha256 == _digest(NEW, "any_rank_holds")
    # a digest of other bytes is no decision about these: listed again, the old reason kept beside it
    other = CATALOG + _declared(("any_rank_holds", "0" * 64))
    [_, added] = _entries(catalog=other, tmp_path=tmp_path)
    assert added.unprobed is None and added.reviewed_other.reason == "a pure helper"


def test_a_reviewed_function_changed_by_one_byte_resurfaces_with_its_old_reason(tmp_path):
    (tmp_path / "catalog.toml").write_text(CATALOG + _declared(("Queue.pop", _digest(NEW, "Queue.pop"))))
    loaded = drift.load(tmp_path / "catalog.toml")
    fixes = drift.fix_places({})

    def pop(text: str) -> drift.Entry:
        found = drift.changed({DECODE: OLD.encode()}, {DECODE: text.encode()}, loaded)
        return next(e for e in drift.reached(found, fixes, {}, loaded) if e.function == "Queue.pop")

    assert pop(NEW).unprobed == "a pure helper"
    for edited in (NEW.replace("return []", "return [ ]"),  # one byte, the same parse
                   NEW.replace("(held on every rank)", "(held on every rank.)"),  # its docstring
                   NEW.replace("        if any_rank_holds", "        # why\n        if any_rank_holds")):  # a comment
        again = pop(edited)
        assert again.unprobed is None and again.reviewed_other.reason == "a pure helper", edited
    # bytes around it do not count: a line above it, the function moved down
    assert pop("# a new first line\n" + NEW).unprobed == "a pure helper"


def test_a_group_shares_one_reason_with_one_digest_per_function(tmp_path):
    group = CATALOG + _declared(("Queue.pop", _digest(NEW, "Queue.pop")), ("any_rank_holds", "f" * 64), reason="one reason")
    pop, added = _entries(catalog=group, tmp_path=tmp_path)
    assert pop.unprobed == "one reason" and added.unprobed is None and added.reviewed_other.reason == "one reason"


def test_a_hostile_catalog_is_one_line(tmp_path):
    good = ("any_rank_holds", "a" * 64)
    bad = {
        "x = [": "not TOML",
        "[[modules]]\ngroup = 'g'\nwhy = 'w'\npaths = []\n": "modules.0.paths: List should have at least 1 item",
        CATALOG + _declared(("any_rank_holds", "A" * 64)): "unprobed.0.functions.0.sha256: String should match pattern",
        CATALOG + _declared(("any_rank_holds", "a" * 63)): "unprobed.0.functions.0.sha256: String should match pattern",
        CATALOG + _declared(good).replace(f"{DECODE}:", "decode.py:"): "unprobed.0.functions.0.place: Value error, must read sglang/FILE.py",
        CATALOG + _declared(good, reason="one\\ntwo"): "unprobed.0.reason: Value error, must be one printable line",
        CATALOG + _declared(good, reason=""): "unprobed.0.reason: Value error, must be one printable line",
        CATALOG + _declared(good, tree="sha256:abc"): "unprobed.0.tree_digest: String should match pattern",
        CATALOG + _declared(good).replace("functions = [\n", "functions = [\n]\nx = [\n"): "unprobed.0.functions: List should have at least 1 item",
        CATALOG + _declared(good) + _declared(good, reason="again"): f"unprobed place {DECODE}:any_rank_holds is listed twice",
        CATALOG + _declared(("Queue.plumbing", "a" * 64)): f"unprobed place {DECODE}:Queue.plumbing is in no group of the module set",
        CATALOG + _declared(good).replace(DECODE, "sglang/srt/other.py"): "unprobed place sglang/srt/other.py:any_rank_holds is in no group",
        CATALOG + _declared(good).replace('reason = ', 'place = "x"\nreason = '): "unprobed.0.place: Extra inputs are not permitted",
        CATALOG + "surprise = 1\n": "surprise: Extra inputs are not permitted",
    }
    for text, said in bad.items():
        (tmp_path / "bad.toml").write_text(text)
        with pytest.raises(errors.BadInput, match=said.replace("(", r"\(")):
            drift.load(tmp_path / "bad.toml")


def _tree(root: Path, text: str) -> str:
    for rel, body in {"sglang/__init__.py": "", DECODE: text}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)
    return f"path:{root}"


def test_the_command_lists_what_nothing_reaches_and_exits_1_then_0_once_each_is_declared(tmp_path, capsys):
    a, b = _tree(tmp_path / "a", OLD), _tree(tmp_path / "b", NEW)
    (tmp_path / "catalog.toml").write_text(CATALOG)
    common = ["--catalog", str(tmp_path / "catalog.toml"), "--cache-dir", str(tmp_path / "cache")]
    assert cli.main(["drift", a, b, *common]) == errors.DIFFERS
    out = capsys.readouterr().out
    assert "2 function(s) of the isolation modules changed; 0 with every changed statement run by a probe case" in out
    assert "2 unexplained" in out
    assert f"  {DECODE}:2 Queue.pop (changed, disaggregation): 0 of 2 changed statement(s) run by a case; not run: line 5, 6\n" in out
    assert f"  {DECODE}:21 any_rank_holds (added, disaggregation): 0 of 1 changed statement(s) run by a case; not run: line 22" in out
    # --stub: only the entry to paste, every field but the reason filled in
    assert cli.main(["drift", a, b, *common, "--stub", f"{DECODE}:Queue.*", "--stub", "*:any_rank_holds"]) == errors.OK
    stub = capsys.readouterr().out
    assert stub.startswith('[[unprobed]]\nreason = ""\nreviewed_in = "path:') and _digest(NEW, "Queue.pop") in stub
    (tmp_path / "catalog.toml").write_text(CATALOG + stub)
    with pytest.raises(errors.BadInput, match="reason"):  # the reviewer writes the reason, or nothing loads
        drift.load(tmp_path / "catalog.toml")
    (tmp_path / "catalog.toml").write_text(CATALOG + stub.replace('reason = ""', 'reason = "probed by #44 later \u202e"'))
    with pytest.raises(errors.BadInput):  # a reason is printable text: no bidirectional controls
        drift.load(tmp_path / "catalog.toml")
    (tmp_path / "catalog.toml").write_text(CATALOG + stub.replace('reason = ""', 'reason = "the rank agreement needs collectives"'))
    assert cli.main(["drift", a, b, *common]) == errors.OK
    out = capsys.readouterr().out
    assert "2 not probed by decision (reviewed), 0 unexplained" in out and "the rank agreement needs collectives" in out
    # one byte of a reviewed function changes in B: listed again, with the reason given for the bytes reviewed
    b2 = _tree(tmp_path / "b2", NEW.replace("return bool(done)", "return bool(done) "))
    assert cli.main(["drift", a, b2, *common]) == errors.DIFFERS
    out = capsys.readouterr().out
    assert "1 not probed by decision (reviewed), 1 unexplained (1 of them reviewed in another version)" in out
    [line] = [x for x in out.splitlines() if "any_rank_holds" in x]
    assert f"reviewed version differs (reviewed in {b}, sha256 {_digest(NEW, 'any_rank_holds')[:12]}, now " in line
    assert line.endswith("the rank agreement needs collectives")
    assert cli.main(["drift", a, b2, *common, "--stub", "*:any_rank_holds"]) == errors.OK  # re-review: the old reason shown
    restub = capsys.readouterr().out
    assert "# reviewed before for other bytes: the rank agreement needs collectives" in restub
    assert cli.main(["drift", a, b, *common, "--stub", "*:nothing_here"]) == errors.BAD_INPUT
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    a = _tree(tmp_path / "a", OLD)
    (tmp_path / "catalog.toml").write_text("[[modules]]\n")
    assert cli.main(["drift", a, a, "--catalog", str(tmp_path / "catalog.toml"), "--cache-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("diffprobe: error: isolation catalog ") and "modules.0.group: Field required" in err[0]
    for hostile, said in ((_declared(("any_rank_holds", "not-a-digest")), "sha256: String should match pattern"),
                          (_declared(("Queue.nowhere", "a" * 64)), "is in no group of the module set"),
                          (_declared(("Queue.pop\\u202e", "a" * 64)), "place: Value error, must read sglang/FILE.py")):
        (tmp_path / "catalog.toml").write_text(CATALOG + hostile)
        assert cli.main(["drift", a, a, "--catalog", str(tmp_path / "catalog.toml"), "--cache-dir", str(tmp_path / "c")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0] and err[0].isprintable(), err
    assert cli.main(["drift", a, "pypi:sglang>=1", "--cache-dir", str(tmp_path / "c")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_the_shipped_catalog_loads_and_names_each_boundary():
    shipped = drift.load(None)
    assert {m.group for m in shipped.modules} >= {"disaggregation", "scheduler admission", "allocator and release", "checksum",
                                                  "HiCache", "Mamba", "HiSparse", "transfer completion"}
    assert all(u.reviewed_in.startswith("pypi:sglang==") for u in shipped.unprobed)


def test_a_changed_signature_counts_as_its_first_statement_and_a_docstring_as_nothing(tmp_path):
    (tmp_path / "catalog.toml").write_text(CATALOG.replace('"Queue.pop", ', '"Queue.pop", "Queue.plumbing", '))
    loaded = drift.load(tmp_path / "catalog.toml")
    old = "class Queue:\n    def plumbing(self):\n        x = 1\n        return x\n"
    new = "class Queue:\n    def plumbing(self, strict=True):\n        x = 1\n        return x\n"
    [entry] = drift.changed({DECODE: old.encode()}, {DECODE: new.encode()}, loaded)
    assert entry.statements == [(3, 3)]  # a case that called it ran the new signature
    documented = old.replace("    def plumbing(self):\n", '    def plumbing(self):\n        """Now documented."""\n')
    assert drift.changed({DECODE: old.encode()}, {DECODE: documented.encode()}, loaded) == []


def test_a_review_moves_no_receipt_identity():
    """The catalog is read by drift alone: neither the judge's import closure nor any probe's holds drift or the catalog,
    so an [[unprobed]] entry (or a widened module set) leaves every receipt comparable and may land after evidence is
    regenerated. (The closure does see drift where something imports it: the command's does.)"""
    from runner.evidence import catalog

    ours = ("runner/evidence/drift.py", "runner/commands/drift.py", "runner/data/isolation.toml")
    assert "runner/evidence/drift.py" in catalog.closure(["runner.commands.drift"])
    for name, files in [("judge", catalog.judge_files()), *((p, catalog.probe_files(p)) for p in catalog.PROBES)]:
        assert not set(ours) & set(files), name
