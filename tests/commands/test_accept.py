"""``diffprobe accept`` against fleets of fake workers whose ``/server_info`` is generated from the real
release tree's own ``ServerArgs`` (field names and defaults of the version claimed), read in that
release's diffprobe environment. The tree audit is real: the release's probes run once per release.
"""

from __future__ import annotations

import io
import json
import subprocess
from http.server import ThreadingHTTPServer

import pytest
from rich.console import Console

from runner import cli, ui
from runner.commands import survey
from runner.store import envs
from runner.views.report import gates, verified
from tests.commands.test_gates import serve as gates_serve
from tests.helpers import check_signed, key_pair
from tests import tools
from tests.records import checked
from tests.views.test_report import assert_self_contained, chromium, parse, visible_text

pytestmark = pytest.mark.slow

# Runs inside the release's environment: every ServerArgs field with its declared default, nested
# records flattened (0.5.20 declares a dataclass, later trees msgspec records in arg groups).
DEFAULTS = r"""
import dataclasses, json
from sglang.srt.server_args import ServerArgs

def fields(cls):
    try:
        import msgspec
        if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
            return [(f.name, f.default, f.default_factory, msgspec.NODEFAULT) for f in msgspec.structs.fields(cls)]
    except ImportError:
        pass
    if dataclasses.is_dataclass(cls):
        return [(f.name, f.default, f.default_factory, dataclasses.MISSING) for f in dataclasses.fields(cls)]
    return []

def defaults(cls, out):
    for name, default, factory, missing in fields(cls):
        value = default if default is not missing else (factory() if factory is not missing else None)
        if fields(type(value)):
            defaults(type(value), out)
            continue
        try:
            json.dumps(value)
            out[name] = value
        except TypeError:
            out[name] = repr(value)
    return out

print(json.dumps(defaults(ServerArgs, {})))
"""

CONTEXT = 8192


@pytest.fixture(scope="module")
def server_args(release_tree, cache, interp):
    """version -> the release's ServerArgs defaults, as its own code declares them."""
    got: dict[str, dict] = {}

    def get(version: str) -> dict:
        if version not in got:
            environment = envs.env(release_tree(version), cache, interp)
            out = subprocess.run([str(environment.python), "-I", "-B", "-c", DEFAULTS], capture_output=True, text=True,
                                 timeout=300, check=True)
            got[version] = json.loads(out.stdout.strip().splitlines()[-1])
        return got[version]

    return get


@pytest.fixture(scope="module", autouse=True)
def audit_once():
    """Each release's tree audit runs once for the module (the gates are what vary here)."""
    real, memo = survey.probe, {}
    mp = pytest.MonkeyPatch()
    mp.setattr(survey, "probe", lambda texts, opts: [memo.setdefault(t, real([t], opts)[0]) for t in texts])
    yield
    mp.undo()


class Worker:
    """One fake worker for test_gates' server: its /server_info and a /generate that refuses over the pool."""

    info_paths = ("/server_info",)

    def __init__(self, info: dict, pool: int):
        self._info, self.pool = info, pool

    def info(self) -> dict:
        return self._info

    def generate(self, req: dict) -> tuple[int, dict]:
        n = len(req.get("input_ids") or req.get("text", "")) // (1 if "input_ids" in req else 4)
        if n > self.pool:
            return 400, {"error": {"message": f"input of {n} tokens exceeds the KV pool"}}
        return 200, {"text": "a fresh answer", "meta_info": {"prompt_tokens": n}}


def serve(worker: Worker) -> tuple[str, ThreadingHTTPServer]:
    server = gates_serve(worker)
    return f"http://127.0.0.1:{server.server_address[1]}", server


@pytest.fixture
def fleet(server_args):
    """A 1P1D fleet of ``version``, healthy unless ``prefill``/``decode`` override reported fields."""
    servers = []

    def make(version: str, pool: int = 4 * CONTEXT, prefill: dict | None = None, decode: dict | None = None,
             drop: tuple[str, ...] = ()) -> dict[str, str]:
        urls = {}
        for role, extra in (("prefill", prefill), ("decode", decode)):
            info = {**server_args(version), "version": version, "disaggregation_mode": role, "context_length": CONTEXT,
                    "disaggregation_enable_kv_checksum": True, "device": "cuda", "max_total_num_tokens": pool,
                    "max_req_input_len": CONTEXT - 8, "internal_states": [{"max_total_num_tokens": pool}], **(extra or {})}
            for key in drop:
                info.pop(key, None)
            urls[role], server = serve(Worker(info, pool))
            servers.append(server)
        urls["router"], server = serve(Worker({"version": version}, pool))
        servers.append(server)
        return urls

    yield make
    for s in servers:
        s.shutdown()


BOUNDED = "SGLANG_MOONCAKE_MAX_TRANSFER_BATCH_INDICES=65536"


def accept(cache, urls, tmp_path, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "accept"
    code = cli.main(["accept", "--prefill", urls["prefill"], "--decode", urls["decode"], "--router", urls["router"],
                     "--cache-dir", str(cache.root), "--out", str(out), *extra])
    record = checked(out) if (out / "bundle.json").exists() else {}
    return code, record


def failed(record: dict) -> dict[int, list[str]]:
    return {g["gate"]: g["reasons"] for g in record["gates"] if not g["passed"]}


def test_healthy_0522_fleet_is_accepted(cache, fleet, tmp_path, capsys):
    private, public = key_pair(tmp_path / "keys")
    code, record = accept(cache, fleet("0.5.22"), tmp_path, "--env", BOUNDED, "--negative", "--sign", str(private))
    assert code == 0, failed(record)
    assert record["accepted"] and [g["gate"] for g in record["gates"]] == [1, 2, 3, 4]
    check_signed(tmp_path / "accept", public, capsys)  # gate receipts, the tree audit's, and the verdict
    assert {w["tree"] for w in record["workers"].values()} == {"pypi:sglang==0.5.22"}


def test_short_pool_fails_gate_1(cache, fleet, tmp_path):
    code, record = accept(cache, fleet("0.5.22", pool=CONTEXT), tmp_path, "--env", BOUNDED)
    assert code == 1 and list(failed(record)) == [1]
    assert "SHORT" in failed(record)[1][0]


def test_checksum_enabled_but_unsupported_fails_gate_3(cache, fleet, tmp_path):
    urls = fleet("0.5.22", prefill={"device": "npu"}, decode={"device": "npu"})
    code, record = accept(cache, urls, tmp_path, "--env", BOUNDED)
    assert code == 1 and list(failed(record)) == [3]
    assert any("device='npu'" in r and "CUDA" in r for r in failed(record)[3])


def test_deferred_release_off_on_decode_fails_gate_4(cache, fleet, tmp_path):
    urls = fleet("0.5.22")
    code, record = accept(cache, urls, tmp_path, "--env", BOUNDED,
                          "--env", f"{urls['decode']}=SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE=0")
    assert code == 1 and list(failed(record)) == [4]
    [reason] = failed(record)[4]
    assert reason.startswith(urls["decode"]) and "DEFERRED_DECODE_KV_RELEASE='0' (declared" in reason


def test_unbounded_mooncake_batches_fail_gate_4_from_the_tree_default(cache, fleet, tmp_path):
    code, record = accept(cache, fleet("0.5.22"), tmp_path)
    assert code == 1 and list(failed(record)) == [4]
    assert all("MAX_TRANSFER_BATCH_INDICES='0' (tree default" in r for r in failed(record)[4])


def test_unreported_setting_fails_closed_naming_the_field(cache, fleet, tmp_path):
    urls = fleet("0.5.22", drop=("disaggregation_transfer_backend",))
    code, record = accept(cache, urls, tmp_path, "--env", BOUNDED)
    assert code == 1 and 4 in failed(record)
    assert all("disaggregation_transfer_backend: not reported" in r for r in failed(record)[4])


def test_fleet_running_0520_fails_admission_transfer_and_lifetime(cache, fleet, tmp_path):
    code, record = accept(cache, fleet("0.5.20"), tmp_path, "--env", BOUNDED)
    assert code == 1 and set(failed(record)) == {2, 3, 4}
    assert any("#38935 not fixed" in r for r in failed(record)[2])
    assert any("absent from the tree" in r for r in failed(record)[3])


def test_mixed_fleet_is_refused(cache, server_args, tmp_path, fleet, capsys):
    a, b = fleet("0.5.22"), fleet("0.5.20")
    code = cli.main(["accept", "--prefill", a["prefill"], "--decode", b["decode"], "--cache-dir", str(cache.root),
                     "--out", str(tmp_path / "x")])
    assert code == 2 and "mixed fleet" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_report_shows_the_four_gates_beside_the_steps(cache, fleet, tmp_path, monkeypatch):
    """``report`` on a real acceptance: each gate's word, the worker and tree digest behind it, and a
    failing gate named with its failing check; the page renders offline in a real browser."""
    urls = fleet("0.5.22", drop=("disaggregation_transfer_backend",))
    code, record = accept(cache, urls, tmp_path, "--env", BOUNDED)
    assert code == 1
    root = tmp_path / "accept"
    shown = gates.of(verified.gather(root))
    assert [g.status for g in shown.gates] == ["passed", "passed", "passed", "failed"] and not shown.accepted
    digest = record["trees"]["pypi:sglang==0.5.22"]
    assert all(b.tree_digest == digest for g in shown.gates for b in g.backing)
    assert {b.who for b in shown.gates[3].backing} == {f"prefill worker {urls['prefill']}", f"decode worker {urls['decode']}"}

    buf = io.StringIO()
    monkeypatch.setattr(ui, "out", Console(file=buf, width=250, highlight=False, soft_wrap=True))
    page = tmp_path / "r.html"
    assert cli.main(["report", str(root), "--html", str(page)]) == 0
    out = buf.getvalue()
    assert out.index("The incident's seven steps") < out.index("The four acceptance gates")
    assert "acceptance: not accepted (gate 4 failed)" in out and f"tree pypi:sglang==0.5.22 {digest}" in out
    assert "not held disaggregation_transfer_backend: not reported" in out
    html = page.read_text()
    assert_self_contained(parse(html))
    tools.need("chromium")  # the browser half
    dom, asked = chromium(tmp_path, page.as_uri(), "--dump-dom")
    assert asked == []
    text = visible_text(dom)
    assert "The four acceptance gates" in text and "not accepted (gate 4 failed)" in text
    assert all(title in text for title in (g.title for g in shown.gates))
