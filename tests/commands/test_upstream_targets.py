"""The test's target missing from the tree: what the plugin says a test asked for (by import,
``mock.patch`` or its own attribute access) and what the host, reading the tree's source by name,
finds the tree lacks. Hand-made trees and the host's own pytest: the mechanics, not SGLang (the
real releases are in test_upstream_targets_real.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner.commands import upstream_tests
from runner.commands.upstream_tests import Outcomes, Side
from runner.evidence import catalog
from runner.judge.pytest_records import INCOMPATIBLE
from runner.judge.targets import Code, Source

PLUGIN = Path(catalog.__file__).resolve().parents[2] / "probes" / "pytest_outcomes.py"


def tree(root: Path, files: dict[str, str]) -> Path:
    for path, text in {"sglang/__init__.py": "", "sglang/srt/__init__.py": "", **files}.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(textwrap.dedent(text))
    return root


# --- the tree's source, read by name ------------------------------------------------------------

SOURCE = {
    "sglang/srt/door.py": """
        from dataclasses import dataclass
        from sglang.srt.base import Base, Outside as Reexported
        from .helpers import shared_helper
        import torch

        class Queue(Base):
            __slots__ = ("slotted",)
            kind = "prefill"

            def __init__(self):
                self.items = []

            def add(self, req):
                self.items.append(req)

        class FromOutside(torch.nn.Module):
            pass

        @dataclass
        class Record:
            rid: str

        if True:
            def conditional():
                pass
        """,
    "sglang/srt/base.py": """
        from external import Outside

        class Base:
            def release(self):
                pass
        """,
    "sglang/srt/helpers.py": "def shared_helper(): pass\n",
    "sglang/srt/starry.py": "from sglang.srt.helpers import *\n",
    "sglang/srt/lazy.py": "def __getattr__(name):\n    raise AttributeError(name)\n",
    "sglang/srt/ns/leaf.py": "x = 1\n",  # a namespace package: no __init__.py
}


@pytest.mark.parametrize("name, lacks", [
    ("sglang.srt.door.Queue.add", None),
    ("sglang.srt.door.Queue.items", None),  # assigned on self in a method
    ("sglang.srt.door.Queue.slotted", None),  # named in __slots__
    ("sglang.srt.door.Queue.kind", None),
    ("sglang.srt.door.Queue.release", None),  # from a base in the tree
    ("sglang.srt.door.Queue.retire", "sglang.srt.door.Queue.retire"),
    ("sglang.srt.door.Record.rid", None),
    ("sglang.srt.door.Record.other", "sglang.srt.door.Record.other"),
    ("sglang.srt.door.conditional", None),
    ("sglang.srt.door.shared_helper", None),
    ("sglang.srt.door.retire_unadmitted", "sglang.srt.door.retire_unadmitted"),
    ("sglang.srt.gone", "sglang.srt.gone"),
    ("sglang.srt.gone.deeper.name", "sglang.srt.gone"),
    ("sglang.srt.ns.leaf.x", None),
    ("sglang.srt.ns.missing", "sglang.srt.ns.missing"),
    ("sglang.srt.door.FromOutside.forward", None),  # a base from outside the tree: cannot tell
    ("sglang.srt.door.Reexported.anything", None),  # re-exported from outside the tree: cannot tell
    ("sglang.srt.door.Queue.add.__wrapped__", None),  # a function's attributes: cannot tell
    ("sglang.srt.starry.anything", None),  # a star import: cannot tell
    ("sglang.srt.lazy.anything", None),  # a module __getattr__: cannot tell
    ("notsglang.x", None),
])
def test_a_name_is_missing_only_when_the_source_certainly_lacks_it(tmp_path, name, lacks):
    assert Source(tree(tmp_path, SOURCE)).lacks(name) == lacks


def test_a_module_that_does_not_parse_cannot_tell(tmp_path):
    source = Source(tree(tmp_path, {"sglang/srt/broken.py": "def (:\n"}))
    assert source.lacks("sglang.srt.broken.x") is None


# --- what the plugin says a test asked for ------------------------------------------------------

TESTS = '''
import types
from unittest import mock

from sglang.srt import door


def test_patch_a_function_the_tree_lacks():
    with mock.patch("sglang.srt.door.retire"):
        pass


def test_patch_object_a_method_the_tree_lacks():
    with mock.patch.object(door.Queue, "retire"):
        pass


@mock.patch("sglang.srt.door.Queue.retire")
def test_patch_decorator_a_method_the_tree_lacks(retire):
    pass


def test_read_an_attribute_the_class_lacks():
    door.Queue.retire


def test_read_an_attribute_an_instance_lacks():
    door.Queue().retire()


def test_import_a_module_the_tree_lacks():
    import sglang.srt.gone  # noqa: F401


def test_import_a_name_the_tree_lacks():
    from sglang.srt.door import retire  # noqa: F401


def test_the_trees_own_code_raising_is_the_trees():
    door.touch(door.Queue())


def test_a_stub_stays_a_stub():
    door.Queue().add(types.SimpleNamespace()).rid


def test_retire():
    q = door.Queue()
    q.add("r")
    q.retire("r")
    assert q.items == []
'''

BASE = {"sglang/srt/door.py": """
    class Queue:
        def __init__(self):
            self.items = []

        def add(self, req):
            self.items.append(req)
            return req

    def touch(q):
        return q.missing
    """}
HEAD = {"sglang/srt/door.py": BASE["sglang/srt/door.py"] + """
    def retire():
        pass

    def _retire(self, req):
        self.items.remove(req)

    Queue.retire = _retire
    """}


def run_plugin(tmp_path: Path, name: str, files: dict[str, str], tests: dict[str, str]) -> Side:
    """The plugin under the host's own pytest, with a hand-made tree importable as ``sglang``."""
    root = tree(tmp_path / name / "tree", files)
    tests_dir = tmp_path / name / "tests"
    tests_dir.mkdir(parents=True)
    (tests_dir / "pytest.ini").write_text("[pytest]\n")
    for path, text in tests.items():
        (tests_dir / path).write_text(text)
    out = tmp_path / name / "outcomes.json"
    subprocess.run([sys.executable, "-B", str(PLUGIN), "--out", str(out), "--root", str(tests_dir),
                    str(tests_dir / next(iter(tests)))], cwd=tests_dir, capture_output=True, timeout=120,
                   env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    outcomes = Outcomes.model_validate_json(out.read_bytes())
    return Side(name, f"path:{name}", None, outcomes, type("Run", (), {"code": 1})(),
                Code(Source(root), {path: text.encode() for path, text in tests.items()}))


@pytest.fixture(scope="module")
def base_and_head(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("targets")
    return (run_plugin(tmp, "base", BASE, {"test_door.py": TESTS}),
            run_plugin(tmp, "head", HEAD, {"test_door.py": TESTS}), tmp)


def test_the_plugin_names_what_the_test_asked_for_and_how(base_and_head):
    base, _, _ = base_and_head
    wanted = {r.id.split("::")[1]: r.exception.wanted for r in base.outcomes.results if r.exception}
    said = {k: (w.name, w.how) if w else None for k, w in wanted.items()}
    assert said == {
        "test_patch_a_function_the_tree_lacks": ("sglang.srt.door.retire", "mock.patch"),
        "test_patch_object_a_method_the_tree_lacks": ("sglang.srt.door.Queue.retire", "mock.patch"),
        "test_patch_decorator_a_method_the_tree_lacks": ("sglang.srt.door.Queue.retire", "mock.patch"),
        "test_read_an_attribute_the_class_lacks": ("sglang.srt.door.Queue.retire", "attribute"),
        "test_read_an_attribute_an_instance_lacks": ("sglang.srt.door.Queue.retire", "attribute"),
        "test_import_a_module_the_tree_lacks": ("sglang.srt.gone", "import"),
        "test_import_a_name_the_tree_lacks": ("sglang.srt.door.retire", "import"),
        "test_the_trees_own_code_raising_is_the_trees": None,  # raised inside the tree: the tree's failure
        "test_a_stub_stays_a_stub": None,
        "test_retire": ("sglang.srt.door.Queue.retire", "attribute"),
    }
    assert wanted["test_import_a_name_the_tree_lacks"].at.startswith("test_door.py:")
    assert wanted["test_patch_decorator_a_method_the_tree_lacks"].at is None  # the decorator ran outside the test


def test_the_host_grades_a_missing_target_as_another_era_at_base_never_fail_to_pass(base_and_head):
    base, head, tmp = base_and_head
    rows = {r.id.split("::")[1]: r for r in upstream_tests.grade(base, head).tests}
    for name in ("test_patch_a_function_the_tree_lacks", "test_patch_object_a_method_the_tree_lacks",
                 "test_patch_decorator_a_method_the_tree_lacks", "test_retire"):
        assert (rows[name].grade, rows[name].cause) == (INCOMPATIBLE, "target missing"), name
        assert rows[name].base.kind.endswith("(target missing)") and "the tree lacks sglang.srt.door" in rows[name].base.detail
        assert rows[name].reason.startswith("fails at base (") and "passes at head: the test is of another era" in rows[name].reason
        assert rows[name].base.incompatible.tree.startswith("the tree lacks sglang.srt.door")
    assert rows["test_the_trees_own_code_raising_is_the_trees"].base.cause == "sglang"
    assert rows["test_a_stub_stays_a_stub"].base.cause == "stub"
    assert rows["test_import_a_module_the_tree_lacks"].head.cause == "target missing"
    assert Source(tmp / "head" / "tree").lacks("sglang.srt.door.Queue.retire") is None  # bound by `Queue.retire = ...`


def test_a_file_whose_import_the_base_lacks_fails_there_for_that_reason(tmp_path):
    """The whole file does not collect at base because the tree lacks the name it imports: every
    test fails at base with that reason (SWE-bench: missing from the base's log, so failed), and the
    test is of another era there: never fail-to-pass. The same file with an import of a third-party module the
    environment lacks, or with a syntax error in its helper, never ran at base."""
    collect = "from sglang.srt.door import retire\n\n\ndef test_retire_exists():\n    assert retire() is None\n"
    base = run_plugin(tmp_path, "base", BASE, {"test_collect.py": collect})
    head = run_plugin(tmp_path, "head", HEAD, {"test_collect.py": collect})
    (error,) = base.outcomes.collection_errors
    assert error.exception.wanted.name == "sglang.srt.door.retire"
    g = upstream_tests.grade(base, head)
    (row,) = g.tests
    assert (row.grade, row.cause, row.base.status) == (INCOMPATIBLE, "target missing", "failed")
    assert row.base.detail.startswith("the tree lacks sglang.srt.door.retire (import of sglang.srt.door.retire at test_collect.py:1")
    assert g.base.collection_errors == ["ImportError (target missing)"] and g.verdict == "passes"
    for broken, origin in (("import not_installed_anywhere\n", "environment"), ("import helper_syntax\n", "test")):
        other = run_plugin(tmp_path, f"base-{origin}", BASE,
                           {"test_collect.py": broken + collect, "helper_syntax.py": "def (:\n"})
        (row,) = upstream_tests.grade(other, head).tests
        assert (row.grade, row.base.status, row.base.kind) == ("never ran", "never ran", "not collected"), origin
