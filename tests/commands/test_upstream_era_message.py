"""A test speaking another era's wire format (issue 40): upstream's tests hand-build a peer's multipart
message (``[b"ABORT", room, ip, port]``) as the peer sent it on the day they were written. Against a
tree whose own producer of that message builds another number of frames, the tree answering it
differently says which era the test is of, not how the tree answers its own peers: "incompatible
(test era)", cause "message shape", naming the test's message and the tree's producer. Hand-made
trees of two eras (the older sends four frames inline, the newer builds five through a builder that
extends a list) and, beside each era case, a failure of the same look that stays a behaviour: a
message of the tree's own shape, a legacy message the test sends on purpose (its files also build
the tree's shape), a message handed to the test's own function, a producer the source leaves open.
Real wheels: test_upstream_era_real.py."""

from __future__ import annotations

import textwrap

import pytest

from runner.judge import upstream as judge
from runner.judge.pytest_records import INCOMPATIBLE
from tests.commands.test_upstream_targets import run_plugin

OLD = {"sglang/srt/peer.py": """
    class Manager:
        def __init__(self):
            self.sent = []

        def notify(self, sock, room, ip, port):
            sock.send_multipart([b"ABORT", str(room).encode(), ip.encode(), str(port).encode()])

        def handle(self, msg):
            if not msg or msg[0] != b"ABORT":
                return False
            if len(msg) >= 4:
                self.sent.append((msg[2].decode(), int(msg[3])))
            return True
"""}
# The newer era: a generation frame; a message without one is a peer that waits for nothing.
NEW = """
    TAG = b"ABORT"


    class Note:
        def __init__(self, room, ip=None, port=None, generation=None):
            self.room, self.ip, self.port, self.generation = room, ip, port, generation

        def to_zmq(self):
            frames = [TAG, str(self.room).encode()]
            if self.ip is not None:
                frames.extend([self.ip.encode(), str(self.port).encode()])
                if self.generation is not None:
                    frames.append(str(self.generation).encode())
            return frames


    class Manager:
        def __init__(self):
            self.sent = []

        def notify(self, sock, room, ip, port, generation):
            sock.send_multipart(Note(room, ip, port, generation).to_zmq())

        def handle(self, msg):
            if not msg or msg[0] not in (TAG, b"BOOTSTRAP"):
                return False
            if len(msg) >= 5{broken}:
                self.sent.append((msg[2].decode(), int(msg[3])))
            return True
"""
TREES = {
    "old": OLD,
    "new": {"sglang/srt/peer.py": NEW.format(broken="")},
    # the newer era with its answer broken: a message of its own shape is never acknowledged
    "broken": {"sglang/srt/peer.py": NEW.format(broken=" and False")},
    # the newer era whose builder extends by a list it was handed: its length the source leaves open
    "open": {"sglang/srt/peer.py": NEW.format(broken="").replace(
        "frames.extend([self.ip.encode(), str(self.port).encode()])", "frames.extend(self.address)")},
}
# Written in the older era: every ABORT it builds has four frames (or two, an older peer's).
OLD_ERA = textwrap.dedent("""
    from sglang.srt.peer import Manager


    def _abort(room=1):
        return [b"ABORT", str(room).encode(), b"10.0.0.1", b"5000"]


    def reply(msg):
        return False


    def test_acks_the_message_of_its_day():
        m = Manager()
        assert m.handle(_abort())
        assert m.sent == [("10.0.0.1", 5000)]


    def test_acks_a_message_written_inline():
        m = Manager()
        assert m.handle([b"ABORT", b"1", b"10.0.0.1", b"5000"])
        assert m.sent == [("10.0.0.1", 5000)]


    def test_an_older_peers_two_frames_are_claimed():
        assert Manager().handle([b"ABORT", b"1"])


    def test_its_own_handler():
        assert reply([b"ABORT", b"1", b"10.0.0.1", b"5000"])
""")
# Written in the newer era: it builds five frames, and a four-frame message on purpose (a legacy peer).
NEW_ERA = textwrap.dedent("""
    from sglang.srt.peer import Manager


    def test_acks_the_message_of_its_day():
        m = Manager()
        assert m.handle([b"ABORT", b"1", b"10.0.0.1", b"5000", b"7"])
        assert m.sent == [("10.0.0.1", 5000)]


    def test_a_legacy_peer_is_still_acknowledged():
        m = Manager()
        assert m.handle([b"ABORT", b"1", b"10.0.0.1", b"5000"])
        assert m.sent == [("10.0.0.1", 5000)]
""")

# The tree's own builder handed the older era's fields (three), and the newer era's (four).
STRUCT = textwrap.dedent("""
    from sglang.srt.peer import Manager, Note


    def test_acks_a_note():
        m = Manager()
        assert m.handle(Note(1, "10.0.0.1", 5000{generation}).to_zmq())
        assert m.sent == [("10.0.0.1", 5000)]
""")
FILES = {"old": OLD_ERA, "new": NEW_ERA, "struct-old": STRUCT.format(generation=""),
         "struct-new": STRUCT.format(generation=", 7")}


class Sides(dict):
    """Each (tree, test file) run once, when a test first needs it."""

    def __init__(self, tmp):
        super().__init__()
        self.tmp = tmp

    def __missing__(self, key):
        tree, era = key
        self[key] = run_plugin(self.tmp, f"{tree}-{era}", {p: textwrap.dedent(t) for p, t in TREES[tree].items()},
                               {f"test_{era.replace('-', '_')}_era.py": FILES[era]})
        return self[key]


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    return Sides(tmp_path_factory.mktemp("message"))


def _rows(sides, base: str, head: str, era: str):
    g = judge.grade(sides[base, era], sides[head, era])
    return {r.id.split("::")[1]: r for r in g.tests}, g


def test_a_message_of_the_older_wire_format_is_the_tests_era(sides):
    rows, g = _rows(sides, "old", "new", "old")
    row = rows["test_acks_the_message_of_its_day"]
    assert (row.base.status, row.grade, row.cause, row.head.kind) == (
        "passed", INCOMPATIBLE, "message shape", "AssertionError (message shape)")
    era = row.head.incompatible
    assert era.at == "test_old_era.py:15"  # the test's call handing the message over
    assert era.test == ("hands m.handle(_abort()) a b'ABORT' message of 4 frames built at test_old_era.py:6 "
                        "(the test's files build it of 2 or 4 frames only)")
    assert era.tree == "builds b'ABORT' messages of 5 frames only (sglang/srt/peer.py:10)"  # the builder, extended
    assert "neither a fix nor a regression" in row.reason
    inline = rows["test_acks_a_message_written_inline"]
    assert (inline.grade, inline.cause) == (INCOMPATIBLE, "message shape")
    assert inline.head.incompatible.test.startswith("hands m.handle([b'ABORT', b'1', b'10.0.0.1', b'5000']) a b'ABORT' "
                                                    "message of 4 frames built at test_old_era.py:21")
    assert g.verdict == "fix missing"  # from test_its_own_handler alone, failing on both trees
    assert not any("regression" in b for b in g.blockers)


def test_the_older_tree_reading_its_own_shape_passes(sides):
    rows, _ = _rows(sides, "old", "old", "old")
    assert {k: r.grade for k, r in rows.items()} == {
        "test_acks_the_message_of_its_day": "pass-to-pass", "test_acks_a_message_written_inline": "pass-to-pass",
        "test_an_older_peers_two_frames_are_claimed": "pass-to-pass", "test_its_own_handler": "fail-to-fail"}


@pytest.mark.parametrize("head", [
    "broken",  # the newer era's five frames, unanswered by a tree that builds five: the tree's behaviour
    "open",  # a producer whose length the source leaves open: nothing tells the test's era from the tree's
], ids=["own-shape-fails", "producer-length-open"])
def test_a_failure_the_source_cannot_lay_on_the_tests_era_stays_a_behaviour(sides, head):
    base, files = {"broken": ("new", "new"), "open": ("old", "old")}[head]
    rows, g = _rows(sides, base, head, files)
    row = rows["test_acks_the_message_of_its_day"]
    assert (row.grade, row.cause, row.head.incompatible) == ("pass-to-fail", "assertion", None)
    assert g.verdict == "regression"


def test_a_legacy_message_sent_on_purpose_stays_a_behaviour(sides):
    """The file builds the tree's five frames too: its four-frame message is a legacy peer on purpose,
    and a tree that stops answering it regressed (so far as the test says)."""
    rows, _ = _rows(sides, "old", "new", "new")
    row = rows["test_a_legacy_peer_is_still_acknowledged"]
    assert (row.base.status, row.grade, row.cause, row.head.incompatible) == ("passed", "pass-to-fail", "assertion", None)
    assert rows["test_acks_the_message_of_its_day"].grade == "pass-to-pass"


def test_a_message_handed_to_the_tests_own_function_is_not_the_trees(sides):
    rows, _ = _rows(sides, "old", "new", "old")
    row = rows["test_its_own_handler"]
    assert (row.grade, row.cause, row.head.incompatible) == ("fail-to-fail", "assertion", None)



def test_a_message_the_trees_builder_made_from_the_older_eras_fields_is_the_tests_era(sides):
    rows, g = _rows(sides, "new", "new", "struct-old")
    row = rows["test_acks_a_note"]
    assert (row.grade, row.cause) == (INCOMPATIBLE, "message shape")
    era = row.head.incompatible
    assert era.test == ("hands m.handle(Note(1, '10.0.0.1', 5000).to_zmq()) a message the tree's Note.to_zmq() built "
                        "from 3 arguments at test_struct_old_era.py:7 (the test's files build it from 3 only)")
    assert era.tree == "builds it from 4 arguments only (sglang/srt/peer.py:23)"  # Manager.notify, the sender
    assert g.verdict == "inconclusive"


def test_a_message_the_trees_builder_made_from_its_own_fields_that_fails_stays_a_behaviour(sides):
    rows, g = _rows(sides, "new", "broken", "struct-new")
    row = rows["test_acks_a_note"]
    assert (row.grade, row.cause, row.head.incompatible) == ("pass-to-fail", "assertion", None)
    assert g.verdict == "regression"
