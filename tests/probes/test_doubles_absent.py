"""Doubles never stand in for the tree's code, and answer reads by name as Python would.

These are the mechanics of ``probes/doubles.py`` and ``probes/case.py`` on hand-made classes written
to a temporary module (the rules read the class's source); real trees are in test_single_duty_mutants.
"""

from __future__ import annotations

import pytest

from probes import duties
from probes.case import Case, Places, run_case
from probes.doubles import Absent, Double, DoubleGap, Journal, strict_subject
from tests.probes import hand_tree

SOURCE = '''
class Scheduler:
    def __init__(self):
        self.server_args = None

    def retire(self, req):
        self.retired_by_tree = req
        return "retired"

    def door(self, req):
        return self.retire_unadmitted_request(req)

    def tolerant_door(self, req):
        return getattr(self, "retire_unadmitted_request", None)

    def abort_sender(self, sender):
        sender.abort()
'''


@pytest.fixture()
def tree_module(tmp_path, monkeypatch):
    return hand_tree.load(tmp_path, monkeypatch, "fake_scheduler", SOURCE)


def test_read_by_name_of_an_unmodelled_member_is_pythons_default_and_noted():
    journal = Journal()
    double = Double(journal, "kv_manager")
    assert getattr(double, "enable_checksum", 0) == 0
    assert not hasattr(double, "other")
    assert journal.gaps == [] and len(journal.absent) == 2 and "kv_manager.enable_checksum" in journal.absent[0]
    with pytest.raises(DoubleGap):
        double.enable_checksum  # a plain read is a gap of our model
    assert len(journal.gaps) == 1


def test_a_method_the_class_lacks_is_absent_never_supplied(tree_module):
    _, module = tree_module
    journal = Journal()
    subject = strict_subject(module.Scheduler, journal, "scheduler", retire_unadmitted_request=lambda req: "made up")
    with pytest.raises(Absent) as caught:
        subject.door("r1")
    assert caught.value.tree_lacks and isinstance(caught.value, AttributeError)
    assert journal.gaps == [] and "class has no such member" in journal.absent[0]
    assert subject.tolerant_door("r1") is None  # getattr with a default: as in production


def test_an_attribute_the_class_assigns_is_a_gap_not_an_absence(tree_module):
    _, module = tree_module
    journal = Journal()
    subject = strict_subject(module.Scheduler, journal, "scheduler")
    with pytest.raises(DoubleGap):
        subject.server_args
    assert len(journal.gaps) == 1


def test_spies_record_and_run_the_trees_own_method(tree_module):
    _, module = tree_module
    journal = Journal()
    journal.live = True
    subject = strict_subject(module.Scheduler, journal, "scheduler", spies=("retire", "not_there"),
                             retired_by_tree=None)
    assert subject.retire("r1") == "retired" and subject.retired_by_tree == "r1"
    assert [e["call"] for e in journal.calls("scheduler")] == ["retire"]
    with pytest.raises(Absent):
        subject.not_there


class _Scene:
    def __init__(self, run):
        self.run = run

    def drive(self):
        self.run()

    def effects(self):
        return {"request": {"rid": "r"}}


def _case(build) -> Case:
    return Case(id="c", site="prefill-result", role="bug", title="t", duties=("result-returns",),
                build=build, requires=(), checks=duties.DUTIES)


def test_a_scripted_failure_escaping_the_tree_is_the_bug_not_inconclusive(tree_module):
    root, module = tree_module
    places = Places(sglang_root=str(root), probes_dir=__import__("probes").__path__[0])

    def build(journal):
        sender = Double(journal, "kv_sender", abort=journal.method("kv_sender", "abort", raises=RuntimeError("down")))
        subject = strict_subject(module.Scheduler, journal, "scheduler")
        return _Scene(lambda: subject.abort_sender(sender))

    result = run_case(_case(build), places)
    assert result["outcome"] == "observed" and result["classification"] == "bug"
    escaped = result["effects"]["escaped"]
    assert escaped["type"] == "RuntimeError" and escaped["frame"].startswith("fake_scheduler.py:")


def test_a_missing_method_escaping_the_tree_is_observed(tree_module):
    root, module = tree_module
    places = Places(sglang_root=str(root), probes_dir=__import__("probes").__path__[0])

    def build(journal):
        subject = strict_subject(module.Scheduler, journal, "scheduler")
        return _Scene(lambda: subject.door("r"))

    result = run_case(_case(build), places)
    assert result["outcome"] == "observed" and result["classification"] == "bug"
    assert result["effects"]["escaped"]["type"] == "Absent"


def test_a_gap_stays_an_error_of_the_double(tree_module):
    root, module = tree_module
    places = Places(sglang_root=str(root), probes_dir=__import__("probes").__path__[0])

    def build(journal):
        subject = strict_subject(module.Scheduler, journal, "scheduler")
        return _Scene(lambda: subject.server_args)

    result = run_case(_case(build), places)
    assert result["outcome"] == "error" and result["error"]["where"] == "double"
