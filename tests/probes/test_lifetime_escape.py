"""A failure the lifetime scene injects on its wire (a connection reset) that escapes the tree's own code
is the tree's behaviour: observed, charged to the tree's frame that let it through, and read by the duties
as the bug of #41404 (0.5.13's ``send_metadata`` has no failure path). A fault of our own stand-ins stays
an error. Hand-made tree code written to a temporary module; the real releases are in
test_later_defences_real.py (and the release line)."""

from __future__ import annotations

import sys
import types

import pytest

from probes import duties
from probes.case import Case, Places, run_case
from probes.lifetime import Wire
from probes.pages import Clock
from tests.probes import hand_tree

SOURCE = '''
def send_metadata(sockets):
    for sock in sockets:
        sock.send_multipart([b"7", b"metadata"])


def send_metadata_handled(sockets):
    try:
        send_metadata(sockets)
    except Exception:
        return "failed"
'''

class ZMQError(Exception):  # pyzmq's, as the wire raises it (pyzmq is the trees' dependency, not the host's)
    def __init__(self, errno: int, message: str) -> None:
        super().__init__(message)
        self.errno = errno


ENDPOINTS = ("tcp://192.0.2.11:16000", "tcp://192.0.2.12:16001")


@pytest.fixture()
def conn(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "zmq", types.SimpleNamespace(ZMQError=ZMQError, ECONNRESET=104))
    root, module = hand_tree.load(tmp_path, monkeypatch, "fake_conn", SOURCE)
    return Places(sglang_root=str(root), probes_dir=__import__("probes").__path__[0]), module


class _Scene:
    def __init__(self, journal, send, broken=False):
        self.wire = Wire(Clock())
        self.wire.resets[ENDPOINTS[1]] = None  # the send to prefill rank 1 fails
        self.sockets = [self.wire.socket(journal, "decode0", e) for e in ENDPOINTS]
        self.send, self.broken = send, broken

    def drive(self):
        if self.broken:  # our own stand-in at fault: a message to an endpoint the wire has no route for
            self.wire.deliver({"to": "tcp://nowhere:1", "frames": []})
        self.send(self.sockets)

    def effects(self):
        return {"wire": self.wire.effects()}


def _case(send, broken=False) -> Case:
    return Case(id="metadata-send-fails", site="default", role="bug", title="t", duties=("lifetime-failure-handled",),
                build=lambda journal: _Scene(journal, send, broken), requires=(), checks=duties.DUTIES)


def test_an_injected_reset_escaping_the_trees_send_is_observed_as_its_bug(conn):
    places, module = conn
    result = run_case(_case(module.send_metadata), places)
    assert result["outcome"] == "observed" and result["classification"] == "bug"
    escaped = result["effects"]["escaped"]
    assert escaped["type"] == "ZMQError" and escaped["message"] == "connection reset"
    assert escaped["frame"].startswith("fake_conn.py:") and escaped["frame"].endswith("in send_metadata")
    assert [m["fate"] for m in result["effects"]["wire"]] == ["pending", "failed to send"]


def test_a_tree_that_handles_the_reset_reads_clean(conn):
    places, module = conn
    result = run_case(_case(module.send_metadata_handled), places)
    assert result["outcome"] == "observed" and result["classification"] == "clean"
    assert "escaped" not in result["effects"]


def test_a_fault_of_our_own_stand_ins_stays_an_error(conn):
    places, module = conn
    result = run_case(_case(module.send_metadata, broken=True), places)
    assert result["outcome"] == "error" and result["error"]["where"] == "setup"
    assert result["error"]["frame"].startswith("probes/lifetime.py:")


def test_decodes_own_failed_send_is_read_by_the_duties_of_41404():
    """Every metadata-send-fails case declares that decode's failed send must not escape the tree's code;
    an effect naming the escape fails exactly that duty, whatever else the effects show."""
    for case_id, declared in duties.CASES["lifetime-failures"].items():
        assert ("lifetime-failure-handled" in declared) == case_id.startswith("metadata-send-fails"), case_id
    assert duties.FIX_OF["lifetime-failure-handled"] == 41404
    escaped = {"escaped": {"type": "ZMQError", "message": "connection reset",
                           "frame": "sglang/srt/disaggregation/mooncake/conn.py:1865 in send_metadata"}}
    assert duties.judge_duties(("lifetime-failure-handled",), escaped) == {"lifetime-failure-handled": False}
    assert duties.judge_duties(("lifetime-failure-handled",), {}) == {"lifetime-failure-handled": True}
