"""Fleets that lie in ways test_accept_rules.py does not list (issue #25 as a class): ranks that
disagree with their worker (context, role), a worker that runs other code than its tree, and HTTP
answers built to hang or flood the reader (headers without end, a chunked body without end, a
stream of interim answers, a redirect). Each ends as the gates demand, within its deadline, in one
line, never "accepted". Hand-made answers, fast; no tree.
"""

from __future__ import annotations

import json
import socket
import time

import pytest

from runner import cli, errors
from runner.app import server as live
from runner.commands import accept
from runner.app import fleet as fleets
from tests.commands.test_accept_rules import D, P, Answering, cap, failed_within, fleet_of, judged, started, worker


# --- ranks that disagree with their worker ---------------------------------------------------------


def test_a_rank_whose_own_context_outgrew_the_workers_is_judged_by_its_own():
    """Each rank's state carries its resolved server arguments (``/set_internal_state`` changes them
    rank by rank): rank 1 admits 65 536 tokens while the top level says 8 192. Its pool covers the
    top level's context with headroom, not its own."""
    w = worker("prefill", P, [cap(20000), {**cap(20000), "context_length": 65536}], context_length=8192)
    [(_, c0, _), (_, c1, why)] = judged(fleet_of([w]))[P]
    assert (c0, c1) == ("clean", "bug")
    assert "vs context 65536 (internal_states[1].context_length" in why and "its top level says 8192" in why


def test_a_rank_reporting_another_role_than_its_worker_is_refused(monkeypatch):
    """Given as prefill, the top level says prefill, rank 1 says decode: which worker is it?"""
    info = {"disaggregation_mode": "prefill", "internal_states": [{"disaggregation_mode": "prefill"},
                                                                  {"disaggregation_mode": "decode"}]}
    monkeypatch.setattr(live, "server_info", lambda url, timeout, ends=None: ("/server_info", info))
    with pytest.raises(errors.BadInput, match="its rank 1 reports disaggregation_mode 'decode'"):
        fleets.read_fleet([P], [], 5, time.monotonic() + 10)


# --- a worker that runs other code than its tree ------------------------------------------------------


def test_a_worker_reporting_another_version_than_its_tree_fails_the_tree_gates():
    """``--tree pypi:sglang==0.5.23`` for a fleet whose decode reports 0.5.20: the audit (gates 2 to 4)
    is of code that worker does not run. Once a warning, and the fleet was accepted on 0.5.23's audit."""
    ws = [worker("prefill", P, version="0.5.23"), worker("decode", D, version="0.5.20"), worker("decode", "http://d3", version=None)]
    tree_of = {w.url: "pypi:sglang==0.5.23" for w in ws}
    [line] = accept.other_code(ws, tree_of, {"pypi:sglang==0.5.23": "0.5.23"})
    assert line.startswith(f"decode {D} reports version '0.5.20'") and "failing closed" in line
    assert accept.other_code(ws, tree_of, {"pypi:sglang==0.5.23": None}) == []  # a tree stating none: taken as given


# --- HTTP answers built to hang or flood ---------------------------------------------------------------


class Flood(Answering):
    """Answers every request with ``head``, then ``chunk`` again and again (every ``every`` seconds)
    until the client goes away."""

    def __init__(self, head: bytes, chunk: bytes = b"", every: float = 0.0):
        self.head, self.chunk, self.every = head, chunk, every
        super().__init__()

    def answer(self, request: socket.socket) -> None:
        request.sendall(self.head)
        while self.chunk and not self.stop.wait(self.every):
            request.sendall(self.chunk)


@pytest.fixture
def flood():
    yield from started(Flood)


OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize("head, chunk", [
    (OK + b"X-Big: " + b"a" * 100_000 + b"\r\n\r\n{}", b""),  # one header line over http.client's 64 KiB
    (OK + b"".join(b"X-%d: 1\r\n" % i for i in range(200)) + b"\r\n{}", b""),  # more headers than it reads
    (b"HTTP/1.1 200 OK\r\nX-Slow: ", b"a"),  # a header line without end, fast
    (b"", b"HTTP/1.1 100 Continue\r\n\r\n"),  # interim answers without end
], ids=["huge-header", "too-many-headers", "endless-header-line", "endless-100-continue"])
def test_an_answer_without_an_end_in_its_headers_ends_within_the_request_deadline(flood, head, chunk):
    failed = failed_within(flood(head, chunk), timeout=1.5, seconds=3)
    assert failed.exit_code in (errors.DIFFERS, errors.INFRASTRUCTURE) and "\n" not in failed.message


def test_a_chunked_body_without_end_fails_closed_at_the_size_bound(flood, monkeypatch):
    monkeypatch.setattr(live, "MAX_BODY", 1 << 20)
    server = flood(OK + b"Transfer-Encoding: chunked\r\n\r\n", b"4000\r\n" + b"x" * 0x4000 + b"\r\n")
    with pytest.raises(errors.DiffprobeError, match="an answer over 1 MiB: failing closed") as e:
        live.call(server.url, "/server_info", timeout=10)
    assert e.value.exit_code == errors.DIFFERS


def test_a_chunked_body_dripping_without_end_fails_closed_at_the_deadline(flood):
    server = flood(OK + b"Transfer-Encoding: chunked\r\n\r\nffffffffffff\r\n", b"x", every=0.05)
    assert "no complete answer within 1 s" in str(failed_within(server, timeout=1, seconds=2.5))  # as match= reads it


def test_a_redirect_is_not_followed_and_the_worker_fails_closed(flood, capsys, tmp_path):
    """Both info paths answer 302 to somewhere else: nothing to accept, one line, exit 1, no bundle."""
    body = json.dumps({"disaggregation_mode": "prefill", "version": "0.5.23", "context_length": 8192}).encode()
    elsewhere = flood(OK + b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    moved = flood(b"HTTP/1.1 302 Found\r\nLocation: %s/server_info\r\nContent-Length: 0\r\n\r\n" % elsewhere.url.encode())
    assert live.call(moved.url, "/server_info", timeout=5).status == 302
    code = cli.main(["accept", "--prefill", moved.url, "--decode", moved.url, "--out", str(tmp_path / "a"), "--deadline", "10"])
    err = capsys.readouterr().err
    assert code == errors.DIFFERS and "neither /server_info nor /get_server_info answered with JSON" in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1 and not (tmp_path / "a").exists()
