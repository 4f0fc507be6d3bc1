"""The deployment gates against a small local imitation of SGLang's HTTP API.

Leaky mode reports a short pool, answers prompts at or over the pool instantly (the 1-token
placeholder path) and builds that answer from the previous tenant's prompt; healthy mode has a
pool that covers the context, takes time proportional to the prompt, and rejects over-context
prompts with an error body. Every gate must fail on leaky and pass on healthy.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
import pytest

from runner import cli
from runner.evidence import bundle
from runner.evidence.receipts import Receipt
from tests.helpers import check_signed, key_pair
from tests.records import checked

# Every answer costs a fixed 40 ms (like a real server's scheduling and one decoded token), so an instant
# leaky answer stays within the tolerance of the shortest prompt's time even when a loaded machine adds
# tens of ms of noise to one side; 300 us a token keeps the healthy 250-token bucket well clear of it.
SECONDS_PER_REQUEST = 0.04
SECONDS_PER_TOKEN = 300e-6


@dataclass
class Fake:
    leaky: bool
    pool: int = 4000
    context: int | None = 2000
    pool_where: str = "top"  # top | states | none
    info_paths: tuple[str, ...] = ("/server_info", "/get_server_info")
    last_text: str = ""

    def info(self) -> dict:
        body = {"version": "0.5.21-fake", "context_length": self.context, "mem_fraction_static": 0.81,
                "disaggregation_mode": "prefill", "internal_states": [{"last_gen_throughput": 12.5}]}
        if self.pool_where == "top":
            body["max_total_num_tokens"] = self.pool
        elif self.pool_where == "states":
            body["internal_states"] = [{"memory_usage": {"kvcache": 1.5, "token_capacity": p}} for p in (self.pool + 8, self.pool)]
        return body

    def generate(self, req: dict) -> tuple[int, dict]:
        if "text" in req:
            self.last_text = req["text"]
            return 200, {"text": "noted", "meta_info": {"prompt_tokens": len(req["text"]) // 4}}
        n = len(req["input_ids"])
        time.sleep(SECONDS_PER_REQUEST)
        if self.leaky and n >= self.pool:
            return 200, {"text": "Sure. " + self.last_text[:120], "meta_info": {"prompt_tokens": n}}
        if self.context is not None and n > self.context:
            return 400, {"error": {"message": f"input of {n} tokens is longer than the context"}}
        time.sleep(n * SECONDS_PER_TOKEN)
        return 200, {"text": "a fresh answer", "meta_info": {"prompt_tokens": n}}


def serve(fake: Fake):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.reply(200, fake.info()) if self.path in fake.info_paths else self.reply(404, {"detail": "Not Found"})

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.reply(*fake.generate(req)) if self.path == "/generate" else self.reply(404, {"detail": "Not Found"})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return server


@pytest.fixture
def server():
    started = []

    def start(fake: Fake) -> str:
        s = serve(fake)
        started.append(s)
        return f"http://127.0.0.1:{s.server_address[1]}"

    yield start
    for s in started:
        s.shutdown()
        s.server_close()


def gate(args: list[str], out: Path, capsys) -> tuple[int, str, Receipt | None]:
    code = cli.main(["gate", *args, "--out", str(out)])
    text = capsys.readouterr()
    receipt = None
    if out.exists():
        assert bundle.verify(out) == []
        assert checked(out)["gate"] == args[0]
        (name,) = [p for p in (out / "receipts").iterdir()]
        receipt = Receipt.model_validate(orjson.loads(name.read_bytes()))
    return code, text.out + text.err, receipt


LEAKY = dict(leaky=True, pool=1000)
HEALTHY = dict(leaky=False, pool=4000)


@pytest.mark.parametrize("mode,expected", [(LEAKY, 1), (HEALTHY, 0)], ids=["leaky", "healthy"])
def test_pool_gate(server, tmp_path, capsys, mode, expected):
    code, out, receipt = gate(["pool", "--url", server(Fake(**mode))], tmp_path / "b", capsys)
    assert code == expected
    assert "max_total_num_tokens" in out and "/server_info" in out
    case = receipt.cases[0]
    assert case.classification == ("bug" if expected else "clean")
    assert case.effects["required_tokens"] == 2500 and case.effects["pool_tokens"] == mode["pool"]
    assert receipt.source.kind == "server" and receipt.source.reported["context_length"] == 2000
    assert "mem_fraction_static" not in receipt.source.reported  # floats never reach a receipt


def test_pool_gate_reads_ranks_from_the_older_endpoint(server, tmp_path, capsys):
    url = server(Fake(leaky=False, pool=2400, pool_where="states", info_paths=("/get_server_info",)))
    code, out, receipt = gate(["pool", "--url", url, "--headroom", "1"], tmp_path / "b", capsys)
    assert code == 0
    assert receipt.cases[0].effects["field"] == "internal_states[1].memory_usage.token_capacity"
    assert receipt.cases[0].effects["pool_tokens"] == 2400  # the smallest rank
    assert receipt.source.reported["endpoint"] == "/get_server_info"


def test_pool_gate_fails_closed_when_no_pool_is_exposed(server, tmp_path, capsys):
    code, out, receipt = gate(["pool", "--url", server(Fake(leaky=False, pool_where="none"))], tmp_path / "b", capsys)
    assert code == 1 and "failing closed" in out
    assert receipt.cases[0].outcome == "not_applicable" and receipt.cases[0].classification == "inconclusive"


def test_pool_gate_context_from_flag_when_server_reports_none(server, tmp_path, capsys):
    url = server(Fake(leaky=False, pool=4000, context=None))
    code, out, _ = gate(["pool", "--url", url, "--context", "4000"], tmp_path / "b", capsys)
    assert code == 1 and "--context" in out  # 4000 < 4000 x 1.25
    code, out, receipt = gate(["pool", "--url", url], tmp_path / "c", capsys)
    assert code == 2 and "pass --context" in out and receipt is None


@pytest.mark.parametrize("mode,expected", [(LEAKY, 1), (HEALTHY, 0)], ids=["leaky", "healthy"])
def test_canary_gate(server, tmp_path, capsys, mode, expected):
    code, out, receipt = gate(["canary", "--url", server(Fake(**mode)), "--tokens", "2000"], tmp_path / "b", capsys)
    assert code == expected
    by_id = {c.id: c for c in receipt.cases}
    assert by_id["canary-at-limit"].effects["prompt_tokens"] == 2000
    assert by_id["canary-over-limit"].effects["prompt_tokens"] == 2001
    if expected:
        assert all(c.effects["sentinel_in_body"] and c.effects["status"] == 200 for c in receipt.cases)
    else:  # the over-limit prompt is rejected explicitly; the verdict came from the body either way
        assert not any(c.effects["sentinel_in_body"] for c in receipt.cases)
        assert by_id["canary-over-limit"].effects["answered"] is False


@pytest.mark.parametrize("mode,expected", [(LEAKY, 1), (HEALTHY, 0)], ids=["leaky", "healthy"])
def test_latency_gate(server, tmp_path, capsys, mode, expected):
    code, out, receipt = gate(["latency", "--url", server(Fake(**mode)), "--tokens", "2000"], tmp_path / "b", capsys)
    assert code == expected, out
    assert [c.effects["prompt_tokens"] for c in receipt.cases] == [250, 1000, 2000]
    assert all(isinstance(ms, int) for c in receipt.cases for ms in c.effects["ms"])
    flagged = [c.effects["prompt_tokens"] for c in receipt.cases if c.classification == "bug"]
    assert flagged == ([1000, 2000] if expected else [])


def test_unreachable_server_is_infrastructure(tmp_path, capsys):
    s = serve(Fake(leaky=False))
    url = f"http://127.0.0.1:{s.server_address[1]}"
    s.shutdown()
    s.server_close()
    code, out, receipt = gate(["pool", "--url", url], tmp_path / "b", capsys)
    assert code == 3 and "unreachable" in out and "Traceback" not in out and receipt is None


@pytest.mark.parametrize("url", ["localhost:30000", "ftp://host/", "http://:80", "http://host:notaport"])
def test_bad_url_is_bad_input(tmp_path, capsys, url):
    code, out, receipt = gate(["canary", "--url", url, "--tokens", "10"], tmp_path / "b", capsys)
    assert code == 2 and "--url" in out and "Traceback" not in out and receipt is None


@pytest.mark.parametrize("gate_args", [["pool"], ["canary", "--tokens", "500"], ["latency", "--tokens", "2000"]],
                         ids=["pool", "canary", "latency"])
@pytest.mark.parametrize("mode", [LEAKY, HEALTHY], ids=["leaky", "healthy"])
def test_gate_bundle_signed_with_sign(server, tmp_path, capsys, gate_args, mode):
    """Signed whether the gate passes or fails (what it found is the other tests' business)."""
    private, public = key_pair(tmp_path / "keys")
    out = tmp_path / "b"
    code, text, _ = gate([*gate_args, "--url", server(Fake(**mode)), "--sign", str(private)], out, capsys)
    assert code in (0, 1), text
    check_signed(out, public, capsys)
