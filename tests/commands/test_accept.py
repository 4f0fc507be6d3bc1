"""``diffprobe accept`` against fleets of fake workers whose ``/server_info`` is generated from a real
release's own ``ServerArgs`` (field names and defaults of the version claimed, read once per release
in that release's environment), top level and every data-parallel rank's state alike, as 0.5.21+
report them. The tree audit is real (once per release for the module), and so is each tree's reading
of the fleet's values (probes/server_config.py in the release's sandbox: its EnvInt, EnvBool,
EnvFloat, ServerArgs and checksum comparability rule), asked once per distinct question.

Two releases: 0.5.23 (the tree has a comparability rule) and 0.5.22 (it has none). Several faults
sit in one fleet, each on its own worker or rank, and every judgment is checked against the worker,
rank and source it names. Gate 2's wording for a tree that lacks a fix is test_accept_rules'.
"""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console

from runner import cli, ui
from runner.app import survey
from runner.sandbox import execute, server_config
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

import sys
with open(sys.argv[1], "w") as out:
    json.dump(defaults(ServerArgs, {}), out)
"""

CONTEXT = 8192
POOL = 4 * CONTEXT
DEFERRED = "SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE"
LIMIT = "SGLANG_MOONCAKE_MAX_TRANSFER_BATCH_INDICES"
BOUNDED = f"{LIMIT}=65536"


@pytest.fixture(scope="module")
def server_args(request, release_tree, cache, interp):
    """version -> the release's ServerArgs defaults, as its own code declares them (once per release,
    in its sandbox like all of a tree's code)."""
    got: dict[str, dict] = {}

    def get(version: str) -> dict:
        if version not in got:
            environment = envs.env(release_tree(version), cache, interp)
            with execute.run_dir() as work_dir:
                out = work_dir / "out" / "defaults.json"
                run = execute.run_isolated([str(environment.python), "-I", "-B", "-c", DEFAULTS, str(out)], work_dir=work_dir,
                                           timeout=300, read_only=environment.read_only, hidden=environment.hidden,
                                           sandboxed=tools.sandboxed(request))
                assert run.code == 0, run.log_tail
                got[version] = json.loads(execute.read_result(out))
        return got[version]

    return get


@pytest.fixture(scope="module", autouse=True)
def once_per_release(request, warm):
    """Each release's tree audit runs once for the module (when more than one test runs, both releases
    are probed first, two at a time: ``warm``; the audits reuse their receipts), and each tree answers
    each distinct set of questions once (the fleets are what vary here, not the trees)."""
    if sum(getattr(item, "module", None) is request.module for item in request.session.items) > 1:
        warm(["pypi:sglang==0.5.23", "pypi:sglang==0.5.22"])
    real_probe, real_ask, probed, asked = survey.probe, server_config.ask, {}, {}
    mp = pytest.MonkeyPatch()
    mp.setattr(survey, "probe", lambda texts, opts: [probed.setdefault(t, real_probe([t], opts)[0]) for t in texts])

    def ask(environment, questions, **kw):
        key = (str(environment.root), json.dumps(questions, sort_keys=True))
        if key not in asked:
            asked[key] = real_ask(environment, questions, **kw)
        answers = asked[key]
        copy = answers.model_copy()
        copy._checked.update(answers._checked)
        return copy

    mp.setattr(server_config, "ask", ask)
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


HEALTHY = {"context_length": CONTEXT, "disaggregation_enable_kv_checksum": True, "device": "cuda", "tp_size": 1,
           "disaggregation_transfer_backend": "mooncake", "max_req_input_len": CONTEXT - 8}


@pytest.fixture
def fleet(server_args):
    """``make(version, prefill=[spec...], decode=[spec...])`` -> {"prefill": [urls], "decode": [urls], "router": url}.
    A spec is a dict of top-level overrides, with ``ranks``: a list of per-rank overrides (default one
    rank) and ``pools``: each rank's token capacity (default POOL). Each rank's state carries the
    resolved server arguments, as 0.5.21+ report them, then its overrides."""
    servers = []

    def make(version: str, prefill=({},), decode=({},)) -> dict:
        defaults = server_args(version)
        urls: dict = {"prefill": [], "decode": []}
        for role, specs in (("prefill", prefill), ("decode", decode)):
            for spec in specs:
                spec = dict(spec)
                ranks = spec.pop("ranks", None) or [{}]
                pools = spec.pop("pools", None) or [POOL] * len(ranks)
                top = {**defaults, "version": version, "disaggregation_mode": role, **HEALTHY, "dp_size": len(ranks), **spec}
                states = [{**{k: v for k, v in top.items() if k in defaults}, "memory_usage": {"token_capacity": pool},
                           **rank} for rank, pool in zip(ranks, pools)]
                info = {**top, "max_total_num_tokens": pools[0], "internal_states": states}
                server = gates_serve(Worker(info, min(pools)))
                servers.append(server)
                urls[role].append(f"http://127.0.0.1:{server.server_address[1]}")
        server = gates_serve(Worker({"version": version}, POOL))
        servers.append(server)
        urls["router"] = f"http://127.0.0.1:{server.server_address[1]}"
        return urls

    yield make
    for s in servers:
        s.shutdown()


def accept(cache, urls, tmp_path, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "accept"
    args = ["accept", *[a for u in urls["prefill"] for a in ("--prefill", u)], *[a for u in urls["decode"] for a in ("--decode", u)],
            "--router", urls["router"], "--cache-dir", str(cache.root), "--out", str(out), *extra]
    code = cli.main(args)
    record = checked(out) if (out / "bundle.json").exists() else {}
    return code, record


def failed(record: dict) -> dict[int, list[str]]:
    return {g["gate"]: g["reasons"] for g in record["gates"] if not g["passed"]}


def value(record: dict, url: str, rank: int | None, name: str) -> dict:
    [v] = [v for v in record["values"] if v["worker"] == url and v["rank"] == rank and v["name"] == name]
    return v


def test_healthy_0523_fleet_of_two_ranks_is_accepted_and_the_unused_canary_is_not_a_bug(cache, fleet, tmp_path, capsys, monkeypatch):
    private, public = key_pair(tmp_path / "keys")
    two = {"ranks": [{}, {}], "pools": [POOL, POOL + 64]}
    urls = fleet("0.5.23", prefill=[two], decode=[two])
    code, record = accept(cache, urls, tmp_path, "--env", BOUNDED, "--negative", "--sign", str(private))
    assert code == 0, failed(record)
    assert record["accepted"] and [g["gate"] for g in record["gates"]] == [1, 2, 3, 4]
    check_signed(tmp_path / "accept", public, capsys)  # gate receipts, the tree audit's, and the verdict
    assert {w["tree"] for w in record["workers"].values()} == {"pypi:sglang==0.5.23"}
    assert {w["ranks"] for w in record["workers"].values()} == {2}
    g3 = record["gates"][2]
    assert g3["unused"] == ["kv-canary-in-force-rank-0", "kv-canary-in-force-rank-1"]
    assert "comparable by the tree's rule" in g3["reasons"][0]
    limit = value(record, urls["decode"][0], 1, LIMIT)
    assert (limit["raw"], limit["value"], limit["source"], limit["parsed_by"]) == (
        "65536", "65536", "declared", "EnvInt of pypi:sglang==0.5.23")
    deferred = value(record, urls["prefill"][0], 0, DEFERRED)
    assert (deferred["raw"], deferred["value"], deferred["source"]) == (None, "True", "tree default")

    shown = gates.of(verified.gather(tmp_path / "accept"))
    assert [g.status for g in shown.gates] == ["passed"] * 4 and shown.accepted
    words = {(b.who, line.text.split(":")[0]): line.word for b in shown.gates[2].backing for line in b.lines if not line.depth}
    decode = f"decode worker {urls['decode'][0]}"
    assert words[(decode, "kv-canary-in-force-rank-1")] == "not used"
    assert words[(decode, "kv-checksum-in-force-rank-1")] == "clean" and words[(decode, "kv-checksum-pair-0")] == "clean"
    buf = io.StringIO()
    monkeypatch.setattr(ui, "out", Console(file=buf, width=250, highlight=False, soft_wrap=True))
    assert cli.main(["report", str(tmp_path / "accept")]) == 0
    out = buf.getvalue()
    assert "acceptance: accepted (all four gates passed)" in out and not re.search(r"(?<!no )bug observed", out)
    assert "not used kv-canary-in-force-rank-0: the gate rests on the other alternative" in out


def issue_fleet(version: str) -> dict:
    """The issue's fleet, each fault on its own worker: P0 a short rank 1 behind a healthy rank 0;
    D0 reports its own environment (deferred release off); D1 runs another TP than the prefill."""
    return dict(prefill=[{"ranks": [{}, {}], "pools": [POOL, CONTEXT]}],
                decode=[{"ranks": [{"env_vars": {DEFERRED: "0"}}]}, {"tp_size": 2}])


@pytest.mark.parametrize("version", ["0.5.23", "0.5.22"])
def test_the_issues_fleet_is_judged_worker_by_worker_and_rank_by_rank(cache, fleet, tmp_path, capsys, version):
    urls = fleet(version, **issue_fleet(version))
    (p0,), (d0, d1) = urls["prefill"], urls["decode"]
    code, record = accept(cache, urls, tmp_path, "--env", f"{d1}={DEFERRED}=0", "--env", f"{DEFERRED}=1",
                          "--env", f"{LIMIT}=1e5")
    assert code == 1 and not record["accepted"]
    why = failed(record)
    assert set(why) == ({1, 3, 4} if version == "0.5.23" else {1, 2, 3, 4})
    # gate 2: a defence of 0.5.23 every backend runs, which 0.5.22 lacks; L3 is NIXL's own, and this fleet runs
    # Mooncake: it fails no gate here
    assert [r.split(": ", 1)[1] for r in why.get(2, [])] == ([] if version == "0.5.23" else ["L6 not fixed (retracted-resume not fixed)"])
    assert not any(": L3 " in r for reasons in why.values() for r in reasons)
    # gate 1: the short rank, by worker and rank, although the top level covers the context
    [short] = why[1]
    assert short.startswith(f"prefill {p0} pool-rank-1: rank 1: pool 8192 tokens") and "SHORT by 2048" in short
    assert "the top-level max_total_num_tokens says 32768" in short
    # gate 3: only the pair whose layouts differ, by the tree's rule where it has one
    pairs = [r for r in why[3] if "kv-checksum-pair" in r]
    assert len(pairs) == 1 and pairs[0].startswith(f"decode {d1} kv-checksum-pair-0")
    if version == "0.5.23":
        assert "kv_layout_signature" in pairs[0] and "NOT comparable: decode admits this pair's handoffs unverified" in pairs[0]
    else:
        assert "no comparability rule" in pairs[0] and "differ in attn_tp" in pairs[0]
    # gate 4: the worker's own report wins (with a warning), the per-worker --env beats the later global
    # one, and 1e5 is what the tree's EnvInt makes of it (0: one unbounded batch) on every rank
    reported = value(record, d0, 0, DEFERRED)
    assert (reported["raw"], reported["value"], reported["source"]) == ("0", "False", "reported by the worker")
    assert any(f"{DEFERRED}: --env for every worker declares '1', but decode {d0} rank 0 reports '0'" in w
               for w in record["warnings"])
    declared = value(record, d1, 0, DEFERRED)
    assert (declared["raw"], declared["value"], declared["source"], declared["detail"]) == (
        "0", "False", "declared", f"--env for {d1}")
    assert value(record, p0, 1, DEFERRED)["value"] == "True"
    off = [r for r in why[4] if f"{DEFERRED}=False" in r]
    assert sorted(r.split(" deferred-release")[0] for r in off) == sorted([f"decode {d0}", f"decode {d1}"])
    assert "reported by the worker" in next(r for r in off if d0 in r)
    limits = [value(record, url, rank, LIMIT) for url, rank in ((p0, 0), (p0, 1), (d1, 0))]
    assert {(v["raw"], v["value"], v["source"]) for v in limits} == {("1e5", "0", "declared")}
    assert all('"1e5" is not a valid integer value' in v["warnings"][0] for v in limits)
    unset = value(record, d0, 0, LIMIT)  # D0 reports its environment, without the limit: the tree's default
    assert (unset["raw"], unset["value"], unset["source"]) == (None, "0", "reported by the worker")
    assert f"declares '1e5', but decode {d0} rank 0 reports it unset" in unset["warnings"][0]
    assert len([r for r in why[4] if f"{LIMIT}=0" in r and "one synchronous" in r]) == 4
    assert "the worker's own report counts" in capsys.readouterr().err


def test_mixed_ranks_mixed_sources_and_malformed_reports_fail_closed_by_rank(cache, fleet, tmp_path):
    """Decode rank 0 reports deferred release on, rank 1 reports its environment without it (the
    tree default), and says its checksum is "true"; the prefill reports nothing of its environment
    (declared); a second prefill's rank 1 reports its pool as 1e5 tokens, a float."""
    urls = fleet("0.5.23",
                 prefill=[{}, {"ranks": [{}, {"memory_usage": {"token_capacity": 1e5}}]}],
                 decode=[{"ranks": [{"env_vars": {DEFERRED: "true", LIMIT: "65536"}},
                                    {"env_vars": {LIMIT: "65536"}, "disaggregation_enable_kv_checksum": "true"}]}])
    (p0, p1), (d0,) = urls["prefill"], urls["decode"]
    code, record = accept(cache, urls, tmp_path, "--env", BOUNDED, "--env", f"{p0}={DEFERRED}=no")
    assert code == 1
    why = failed(record)
    assert why[1] == [f"prefill {p1} pool-rank-1: prefill {p1} rank 1 reports no integer pool "
                      "(memory_usage.token_capacity): failing closed"]
    assert [r.split(": ")[0] for r in why[3] if "kv-checksum-in-force" in r] == [f"decode {d0} kv-checksum-in-force-rank-1"]
    assert "not as the tree's ServerArgs declares it" in next(r for r in why[3] if "kv-checksum-in-force-rank-1" in r)
    assert [r.split(": ")[0] for r in why[4]] == [f"prefill {p0} deferred-release-in-force-rank-0"]
    sources = {(v["worker"], v["rank"]): (v["raw"], v["value"], v["source"]) for v in record["values"] if v["name"] == DEFERRED}
    assert sources[(p0, 0)] == ("no", "False", "declared")
    assert sources[(p1, 1)] == (None, "True", "tree default")
    assert sources[(d0, 0)] == ("true", "True", "reported by the worker")
    assert sources[(d0, 1)] == (None, "True", "reported by the worker")
    assert "not set there, so the tree's default" in value(record, d0, 1, DEFERRED)["detail"]


def test_the_canary_carries_gate_3_where_the_checksum_cannot(cache, fleet, tmp_path):
    """Checksum on, but one decode's TP differs and the other runs on an NPU: the canary on every rank
    passes gate 3, and the checksum's cases are the alternative not used."""
    canary = {"kv_canary": "log"}
    urls = fleet("0.5.23", prefill=[canary], decode=[{**canary, "tp_size": 2}, {**canary, "device": "npu"}])
    code, record = accept(cache, urls, tmp_path, "--env", BOUNDED)
    assert code == 0, failed(record)
    g3 = record["gates"][2]
    assert g3["reasons"] == ["in force: the KV canary, on every rank"]
    assert set(g3["unused"]) == {"kv-checksum-in-force-rank-0", "kv-checksum-pair-0"}
    shown = gates.of(verified.gather(tmp_path / "accept"))
    assert shown.gates[2].status == "passed" and not shown.gates[2].problems


def test_mixed_fleet_is_refused(cache, tmp_path, fleet, capsys):
    a, b = fleet("0.5.23"), fleet("0.5.22")
    code = cli.main(["accept", "--prefill", a["prefill"][0], "--decode", b["decode"][0], "--cache-dir", str(cache.root),
                     "--out", str(tmp_path / "x")])
    assert code == 2 and "mixed fleet" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_report_shows_the_four_gates_beside_the_steps(cache, fleet, tmp_path, monkeypatch):
    """``report`` on a real acceptance: each gate's word, the worker, rank and tree digest behind it,
    and a failing gate named with its failing check; the page renders offline in a real browser."""
    urls = fleet("0.5.23", decode=[{"disaggregation_transfer_backend": None}])
    code, record = accept(cache, urls, tmp_path, "--env", BOUNDED)
    assert code == 1
    root = tmp_path / "accept"
    shown = gates.of(verified.gather(root))
    assert [g.status for g in shown.gates] == ["passed", "passed", "failed", "failed"] and not shown.accepted
    digest = record["trees"]["pypi:sglang==0.5.23"]
    assert all(b.tree_digest == digest for g in shown.gates for b in g.backing)
    # gate 4 is backed by each worker's configuration and by the tree audit's lifetime probes (one backer: the tree)
    assert {b.who for b in shown.gates[3].backing} == {f"prefill worker {urls['prefill'][0]}",
                                                        f"decode worker {urls['decode'][0]}",
                                                        f"audit of the tree run by {', '.join(sorted([*urls['prefill'], *urls['decode']]))}"}

    buf = io.StringIO()
    monkeypatch.setattr(ui, "out", Console(file=buf, width=250, highlight=False, soft_wrap=True))
    page = tmp_path / "r.html"
    assert cli.main(["report", str(root), "--all", "--html", str(page)]) == 0
    out = buf.getvalue()
    assert out.index("The incident's seven steps") < out.index("The four acceptance gates")
    assert "acceptance: not accepted (gate 3 failed, gate 4 failed)" in out and f"tree pypi:sglang==0.5.23 {digest}" in out
    assert "not held disaggregation_transfer_backend: reported by" in out and "deferred-release-in-force-rank-0" in out
    html = page.read_text()
    assert_self_contained(parse(html))
    tools.need("chromium")  # the browser half
    dom, asked = chromium(tmp_path, page.as_uri(), "--dump-dom")
    assert asked == []
    text = visible_text(dom)
    assert "The four acceptance gates" in text and "not accepted (gate 3 failed, gate 4 failed)" in text
    assert all(title in text for title in (g.title for g in shown.gates))
