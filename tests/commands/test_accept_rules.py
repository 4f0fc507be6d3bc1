"""``accept``'s own mechanics, without a tree: where each value comes from (reported by the worker,
declared, tree default; per worker beats every worker), every rank's pool, the pair rule's use of
the tree's answer, and the deadlines (a worker that drips its answer ends within it, in one line).

The tree's answers here are hand-made (the runner's mechanics); the same judgments with real trees'
answers are in test_accept.py.
"""

from __future__ import annotations

import argparse
import json
import socket
import socketserver
import threading
import time

import pytest

from runner import cli, errors
from runner.app import pipeline, survey
from runner.app import server as live
from runner.commands import accept
from runner.app import fleet as fleets
from runner.sandbox import server_config
from runner.sandbox.server_config import Answers

P, D, D2 = "http://10.0.0.1:30000", "http://10.0.0.2:30000", "http://10.0.0.3:30000"
TREE = "pypi:sglang==0.5.23"
DEFERRED, LIMIT = fleets.DEFERRED, fleets.BATCH_LIMIT


def worker(role: str, url: str, states: list[dict] | None = None, **top) -> fleets.Worker:
    info = {"disaggregation_mode": role, "context_length": 8192, "dp_size": len(states or [{}]), **top}
    if states is not None:
        info["internal_states"] = states
    return fleets.Worker(role, url, "/server_info", info)


def answers(env: dict | None = None, values: list | None = None, rule: str | None = None, signatures: list | None = None,
            backends: dict | None = None, cuts: list | None = None) -> Answers:
    """A tree's answers: ``env`` (name, raw) -> value; every value in ``values`` valid."""
    a = Answers(env=[{"name": n, "raw": r, "kind": "EnvBool" if isinstance(v, bool) else "EnvInt", "value": v}
                     for (n, r), v in (env or {}).items()],
                fields={}, values=[{"field": f, "valid": True, "why": "as declared"} for f, _ in values or []],
                server_args_error=None, rule=rule, shape={},
                layouts=[{"signature": s} for s in signatures or []] + [{"signature": None, "cut": c} for c in cuts or []],
                backends=backends or {})
    a._checked.update({(f, server_config._key(v)): x for (f, v), x in zip(values or [], a.values)})
    return a


def fleet_of(workers, declared=None, tree_answers=None) -> fleets.Fleet:
    counts = [["dp_size", n] for n in range(1, 4)]
    return fleets.Fleet(workers, {w.url: TREE for w in workers}, {TREE: tree_answers or answers(values=counts)}, {},
                        {w.url: (declared or {}).get(w.url, {}) for w in workers})


# --- --env: per worker beats every worker, whatever the order ----------------------------------------


@pytest.mark.parametrize("order", ["global first", "per-worker first"])
def test_a_per_worker_declaration_beats_one_for_every_worker_in_any_order(order):
    ws = [worker("prefill", P), worker("decode", D)]
    given = [f"{DEFERRED}=1", f"{D}={DEFERRED}=0"]
    declared = fleets.declarations(given if order == "global first" else given[::-1], ws)
    assert declared[P][DEFERRED] == ("1", "--env for every worker")
    assert declared[D][DEFERRED] == ("0", f"--env for {D}")


def test_the_same_name_declared_twice_with_different_values_is_refused():
    ws = [worker("decode", D)]
    with pytest.raises(errors.BadInput, match="already declared as '1' for every worker"):
        fleets.declarations([f"{DEFERRED}=1", f"{DEFERRED}=0"], ws)
    assert fleets.declarations([f"{DEFERRED}=1", f"{DEFERRED}=1"], ws)[D][DEFERRED][0] == "1"


# --- where an environment value comes from ------------------------------------------------------------


def test_the_workers_own_report_wins_over_a_declaration_and_says_so():
    w = worker("decode", D, [{"env_vars": {DEFERRED: "0"}}, {"env_vars": {}}])
    decl = {DEFERRED: ("1", "--env for every worker")}
    r0, r1 = (fleets.env_read(w, rank, DEFERRED, decl) for rank in (0, 1))
    assert (r0.raw, r0.source) == ("0", "reported by the worker") and "rank 0" in r0.detail
    assert "declares '1', but decode http://10.0.0.2:30000 rank 0 reports '0'" in r0.warnings[0]
    assert (r1.raw, r1.source) == (None, "reported by the worker") and "not set there, so the tree's default" in r1.detail
    assert "reports it unset" in r1.warnings[0]


def test_declared_then_tree_default_where_the_worker_reports_nothing():
    w = worker("prefill", P, [{}])
    assert fleets.env_read(w, 0, DEFERRED, {DEFERRED: ("0", f"--env for {P}")}).source == "declared"
    default = fleets.env_read(w, 0, DEFERRED, {})
    assert (default.raw, default.source) == (None, "tree default") and "SGLANG_EXPOSE_OWN_ENV_VARS off" in default.detail


@pytest.mark.parametrize("reported", [["SGLANG_X=1"], {DEFERRED: 0}, "DEFERRED=0"])
def test_an_environment_report_that_is_not_a_map_of_strings_is_not_read(reported):
    w = worker("decode", D, [{"env_vars": reported}])
    read = fleets.env_read(w, 0, DEFERRED, {DEFERRED: ("1", "--env for every worker")})
    assert read.unreadable and "not a map of names to strings" in read.unreadable
    setting = fleets.env_setting(read, fleet_of([w]))
    assert not setting.known and "failing closed" in setting.show()


def test_the_value_is_the_trees_reading_and_every_value_is_recorded_with_its_source():
    w = worker("decode", D, [{"env_vars": {LIMIT: "1e5"}}, {}])
    tree = answers(env={(LIMIT, "1e5"): 0, (LIMIT, None): 0})
    tree.env[0].warnings.append('Invalid value for X: "1e5" is not a valid integer value, using default "0"')
    fleet = fleet_of([w], tree_answers=tree)
    s0, s1 = (fleets.env_setting(fleets.env_read(w, rank, LIMIT, {}), fleet) for rank in (0, 1))
    assert s0.value == 0 and "the tree's EnvInt warns" in s0.show() and "set to '1e5'" in s0.show()
    assert s1.value == 0 and "tree default" in s1.show()
    assert [(v.rank, v.raw, v.value, v.source) for v in fleet.values] == [
        (0, "1e5", "0", "reported by the worker"), (1, None, "0", "tree default")]
    assert fleet.values[0].parsed_by == f"EnvInt of {TREE}"


def test_a_value_the_tree_does_not_declare_fails_closed():
    w = worker("decode", D, [{}])
    setting = fleets.env_setting(fleets.env_read(w, 0, DEFERRED, {}), fleet_of([w], tree_answers=answers()))
    assert not setting.known and "the tree's Envs cannot read it" in setting.show()


# --- reported server arguments are read as the tree declares them ---------------------------------------


def test_a_ranks_own_server_argument_counts_and_an_unchecked_one_fails_closed():
    w = worker("decode", D, [{"disaggregation_enable_kv_checksum": False}, {}], disaggregation_enable_kv_checksum=True)
    tree = answers(values=[["disaggregation_enable_kv_checksum", True], ["disaggregation_enable_kv_checksum", False]])
    own, top = (fleets.server_arg(w, rank, "disaggregation_enable_kv_checksum", tree) for rank in (0, 1))
    assert own.value is False and "rank 0" in own.source and top.value is True and "/server_info" in top.source
    lying = worker("decode", D, [{}], disaggregation_enable_kv_checksum="true")
    s = fleets.server_arg(lying, 0, "disaggregation_enable_kv_checksum", tree)
    assert not s.known and "not as the tree's ServerArgs declares it" in s.show()


def test_reported_values_covers_every_rank_and_keeps_types_apart():
    ws = [worker("decode", D, [{"tp_size": 2}, {"tp_size": 2.0}], tp_size=True)]
    assert sorted(map(repr, fleets.reported_values(ws))) == sorted(map(repr, [["tp_size", True], ["tp_size", 2],
                                                                              ["tp_size", 2.0], ["dp_size", 2]]))


# --- gate 1: every rank of every worker ----------------------------------------------------------------


def pool_args(**kw) -> argparse.Namespace:
    return argparse.Namespace(context=None, headroom="1.25", negative=False, router=None, timeout=5, **kw)


def judged(fleet: fleets.Fleet) -> dict[str, list[tuple[str, str, str]]]:
    receipts = accept.pool_gate(pool_args(), fleet, "2026-11-30T00:00:00Z", time.monotonic() + 60)
    return {r.source.source: [(c.id, c.classification, (c.effects or {}).get("summary") or c.missing) for c in r.cases]
            for r in receipts}


def cap(n):
    return {"memory_usage": {"token_capacity": n}}


def test_a_short_rank_behind_a_healthy_rank_0_fails_gate_1_by_its_rank():
    w = worker("prefill", P, [cap(40000), cap(9000)], max_total_num_tokens=40000)
    [(id0, c0, _), (id1, c1, why)] = judged(fleet_of([w]))[P]
    assert (id0, c0, id1, c1) == ("pool-rank-0", "clean", "pool-rank-1", "bug")
    assert why.startswith("rank 1: pool 9000 tokens (internal_states[1].memory_usage.token_capacity")
    assert "SHORT by 1240" in why and "the top-level max_total_num_tokens says 40000" in why
    assert live.pool_size(w.info) == ("internal_states[1].memory_usage.token_capacity", 9000)


@pytest.mark.parametrize("states,says", [
    (None, "reports no per-rank state (internal_states)"),
    ([], "reports no per-rank state (internal_states)"),
    (["rank 0"], "reports no per-rank state (internal_states)"),
    ([cap(40000), {"memory_usage": {"token_capacity": 1e5}}], "rank 1 reports no integer pool"),
    ([cap(40000), {"memory_usage": {"token_capacity": "40000"}}], "rank 1 reports no integer pool"),
])
def test_a_worker_whose_ranks_cannot_be_read_fails_closed_naming_it(states, says):
    w = fleets.Worker("decode", D, "/server_info", {"disaggregation_mode": "decode", "context_length": 8192,
                                                     "max_total_num_tokens": 40000, "internal_states": states})
    cases = judged(fleet_of([w]))[D]
    assert any(c == "inconclusive" and says in why and D in why for _, c, why in cases)


def test_fewer_rank_states_than_data_parallel_ranks_fails_closed():
    w = worker("decode", D, [cap(40000)], dp_size=2)
    [(_, c, why)] = judged(fleet_of([w]))[D]
    assert c == "inconclusive" and "reports dp_size 2 but 1 rank state(s)" in why


@pytest.mark.parametrize("dp", ["2", 2.0, None])
def test_a_rank_count_not_as_the_tree_declares_it_fails_closed(dp):
    w = worker("decode", D, [cap(40000)], dp_size=dp)
    [(_, c, why)] = judged(fleet_of([w]))[D]
    assert c == "inconclusive" and "dp_size" in why and "not as the tree's ServerArgs declares it" in why


def test_with_dp_attention_the_ranks_answer_as_one_group():
    w = worker("decode", D, [cap(40000)], dp_size=2, enable_dp_attention=True)
    tree = answers(values=[["dp_size", 2], ["enable_dp_attention", True]])
    [(_, c, _)] = judged(fleet_of([w], tree_answers=tree))[D]
    assert c == "clean"


# --- the tree audit: gate 2's reasons name the workers; the later defences' fixes back gates 3 and 4 ----


def test_the_audit_backs_each_gate_with_its_fixes_and_names_the_workers_running_the_tree():
    from types import SimpleNamespace as NS

    from runner.judge.judging import FixStatus, SiteStatus

    ws = [worker("prefill", P), worker("decode", D), worker("decode", D2)]
    fleet = fleet_of(ws)
    not_fixed = FixStatus(fix=38935, status="not fixed", sites=[
        SiteStatus(fix=38935, site="prefill-door", status="not fixed", cases={}),
        SiteStatus(fix=38935, site="decode-door", status="fixed", cases={})])
    later = FixStatus(fix=41023, status="not fixed", sites=[  # the later defences' sites are configurations
        SiteStatus(fix=41023, site="default", status="not fixed", cases={}),
        SiteStatus(fix=41023, site="with-deferred-release", status="fixed", cases={})])
    receipts = [NS(probe=NS(fix=fix)) for fix in (36988, 38935, 41023, 39500)]
    probed = {TREE: NS(receipts=receipts, row=NS(fixes=[FixStatus(fix=36988, status="fixed", sites=[]), not_fixed, later]))}
    audit = accept.audit_gates(probed, fleet)
    assert [len(audit[n][0]) for n in (2, 3, 4)] == [2, 1, 1]
    assert audit[2][1] == [f"{TREE} (run by prefill {P}, decode {D}, decode {D2}): #38935 not fixed (prefill-door not fixed)"]
    # judged per worker in the configuration it runs (here the tree's default: no worker reports or declares it)
    assert audit[4][1] == [f"{TREE} (run by {w}, SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE as the tree defaults "
                           f"it): #41023 not fixed in that configuration" for w in (f"prefill {P}", f"decode {D}", f"decode {D2}")]
    assert audit[3][1] == []


def test_a_later_defence_is_judged_in_the_configuration_each_worker_runs():
    from types import SimpleNamespace as NS

    from runner.judge.judging import FixStatus, SiteStatus

    ws = [worker("prefill", P), worker("decode", D)]
    fleet = fleet_of(ws)
    off_by_default = FixStatus(fix=39500, status="not fixed", sites=[
        SiteStatus(fix=39500, site="default", status="not fixed", cases={}),
        SiteStatus(fix=39500, site="with-kv-checksum", status="fixed", cases={})])
    probed = {TREE: NS(receipts=[], row=NS(fixes=[off_by_default]))}
    # the checksum is off: gate 3 rests on the canary; the checksum's default-configuration status is not its verdict
    assert accept.audit_gates(probed, fleet)[3][1] == []
    # a fix never probed in the configuration a worker runs fails closed
    bare = FixStatus(fix=41404, status="fixed", sites=[SiteStatus(fix=41404, site="with-deferred-release", status="fixed",
                                                                   cases={})])
    reasons = accept.audit_gates({TREE: NS(receipts=[], row=NS(fixes=[bare]))}, fleet)[4][1]
    assert len(reasons) == 2 and all("not probed in that configuration: failing closed" in r for r in reasons)
    # deferred release switched off on a worker: no probed configuration is the one it runs, and gate 4's own
    # check of each rank (deferred-release-in-force) fails it there, so the audit adds no second reason for it
    off = fleet_of(ws, declared={D: {DEFERRED: ("0", f"--env for {D}")}}, tree_answers=answers(env={(DEFERRED, "0"): False}))
    [reason] = accept.audit_gates({TREE: NS(receipts=[], row=NS(fixes=[bare]))}, off)[4][1]
    assert reason.startswith(f"{TREE} (run by prefill {P}, ") and "not probed in that configuration" in reason


@pytest.mark.parametrize("backend,deferred,reads", [
    ("mooncake", None, None),  # NIXL's own completion rule is not what a Mooncake worker runs
    ("nixl", None, "default"),
    ("nixl", ("1", True), "with-deferred-release"),
    ("nixl", ("0", False), "without-deferred-release"),  # gate 3 does not ask for the deferred release
    (None, None, "default"),  # a backend not reported: judged, failing closed
])
def test_a_backends_own_defence_is_judged_only_where_that_backend_runs(backend, deferred, reads):
    from types import SimpleNamespace as NS

    from runner.judge.judging import FixStatus, SiteStatus

    top = {"disaggregation_transfer_backend": backend} if backend else {}
    ws = [worker("prefill", P, [{}], **top), worker("decode", D, [{}], **top)]
    values = [["dp_size", 1], ["disaggregation_transfer_backend", backend]] if backend else [["dp_size", 1]]
    declared = {w.url: {DEFERRED: (deferred[0], "--env for every worker")} for w in ws} if deferred else None
    env = {(DEFERRED, deferred[0]): deferred[1]} if deferred else None
    fleet = fleet_of(ws, declared=declared, tree_answers=answers(env=env, values=values))
    lacking = FixStatus(fix=3, status="not fixed", sites=[
        SiteStatus(fix=3, site=site, status="not fixed", cases={})
        for site in ("default", "with-deferred-release", "without-deferred-release")])
    audit = accept.audit_gates({TREE: NS(receipts=[NS(probe=NS(fix=3))], row=NS(fixes=[lacking]))}, fleet)
    assert len(audit[3][0]) == 1 and audit[2] == ([], []) and audit[4] == ([], [])  # L3 backs gate 3, its receipt too
    if reads is None:
        assert audit[3][1] == []
    else:
        assert len(audit[3][1]) == 2 and all(r.endswith("L3 not fixed in that configuration") for r in audit[3][1])
        assert accept.running_configuration(3, ws[0], fleet)[0] == reads


LACKING = "not probed over {}: its code is partly {}'s own, and no case ran {}'s: failing closed"


@pytest.mark.parametrize("backend,fails_on", [
    ("mooncake", []),  # NIXL's half of a fix is not what a Mooncake worker runs
    ("nixl", ["#40645 not fixed in that configuration (default-nixl)"]),  # nor Mooncake's what a NIXL one does
    # a backend no case ran over, whose own code the fix's names not: its half never ran
    ("mori", ["#40645 " + LACKING.format("mori", "mooncake and nixl", "mori")]),
    (None, ["#40645 not fixed in that configuration (default-nixl)"]),  # not reported: it may run either, each judged
])
def test_a_fix_probed_over_two_backends_is_judged_on_the_one_each_worker_runs(backend, fails_on):
    from runner.judge.judging import FixStatus, SiteStatus

    halves = FixStatus(fix=40645, status="not fixed", sites=[  # 0.5.21: Mooncake's half in, NIXL's not
        SiteStatus(fix=40645, site="default", status="fixed", cases={}),
        SiteStatus(fix=40645, site="default-nixl", status="not fixed", cases={})])
    assert [r.split(": ", 1)[1] for r in _audited(halves, backend)] == fails_on * 2


def _audited(fs, backend: str | None) -> list[str]:
    """Gate 4's audit reasons for ``fs`` on a prefill and a decode worker that report ``backend`` (None: nothing)."""
    from types import SimpleNamespace as NS

    top = {"disaggregation_transfer_backend": backend} if backend else {}
    ws = [worker("prefill", P, [{}], **top), worker("decode", D, [{}], **top)]
    values = [["dp_size", 1], ["disaggregation_transfer_backend", backend]] if backend else [["dp_size", 1]]
    return accept.audit_gates({TREE: NS(receipts=[], row=NS(fixes=[fs]))}, fleet_of(ws, tree_answers=answers(values=values)))[4][1]


@pytest.mark.parametrize("fix,backend,lacking", [
    (41404, "nixl", "mooncake"),  # its code is partly Mooncake's own, and its cases ran Mooncake alone
    (41402, "mori", "mooncake"),
    (41404, "mooncake", None),
    (41023, "nixl", None),  # all shared code: what its cases ran, every backend runs
])
def test_a_fix_whose_code_is_partly_one_backends_is_not_taken_for_another_backend(fix, backend, lacking):
    from runner.judge.judging import FixStatus, SiteStatus

    fixed = FixStatus(fix=fix, status="fixed", sites=[SiteStatus(fix=fix, site="default", status="fixed", cases={})])
    reasons = [r.split(": ", 1)[1] for r in _audited(fixed, backend)]
    assert reasons == ([f"#{fix} " + LACKING.format(backend, lacking, backend)] * 2 if lacking else [])


# --- gate 3: the pair rule is the tree's -------------------------------------------------------------


def pair_fleet(tp_p: int, tp_d: int, tree: Answers) -> tuple[fleets.Worker, fleets.Worker, fleets.Fleet]:
    p = worker("prefill", P, [{}], tp_size=tp_p, disaggregation_transfer_backend="mooncake")
    d = worker("decode", D, [{}], tp_size=tp_d, disaggregation_transfer_backend="mooncake")
    return p, d, fleet_of([p, d], tree_answers=tree)


VALUES = [["tp_size", 1], ["tp_size", 2], ["dp_size", 1], ["disaggregation_transfer_backend", "mooncake"]]


@pytest.mark.parametrize("signatures,comparable", [([7, 7], True), ([7, 9], False)])
def test_a_pair_is_comparable_exactly_when_the_trees_rule_says_so(signatures, comparable):
    tree = answers(values=VALUES, rule="sglang.srt.disaggregation.utils.kv_layout_signature", signatures=signatures,
                   backends={"mooncake": {"own_rule": False}})
    p, d, fleet = pair_fleet(2, 2 if comparable else 1, tree)
    checks = accept.pair_comparable(p, d, fleet)
    assert checks[0][0] is comparable and "kv_layout_signature" in checks[0][1] and P in checks[0][1] and D in checks[0][1]
    assert checks[1] == (True, checks[1][1]) and "verifies every comparable peer" in checks[1][1]


@pytest.mark.parametrize("own", [{"own_rule": True, "managers": ["VendorKVManager"]}, {"own_rule": None, "error": "ImportError"}])
def test_a_backend_with_a_rule_of_its_own_or_unknown_fails_closed(own):
    tree = answers(values=VALUES, rule="r", signatures=[7, 7], backends={"mooncake": own})
    p, d, fleet = pair_fleet(2, 2, tree)
    assert accept.pair_comparable(p, d, fleet)[1][0] is False


@pytest.mark.parametrize("tp_d,ok", [(2, True), (1, False)])
def test_without_a_rule_in_the_tree_only_pairs_cut_alike_verify(tp_d, ok):
    cuts = [{"attn_tp": 2, "page_size": 1}, {"attn_tp": tp_d, "page_size": 1}]
    p, d, fleet = pair_fleet(2, tp_d, answers(values=VALUES, cuts=cuts))
    [(held, what)] = accept.pair_comparable(p, d, fleet)
    assert held is ok and "no comparability rule" in what and (ok or "differ in attn_tp" in what)


def test_without_a_rule_a_layout_the_tree_did_not_cut_fails_closed():
    p, d, fleet = pair_fleet(2, 2, answers(values=VALUES, signatures=[None], cuts=[{"attn_tp": 2}]))  # prefill: no cut
    [(held, what)] = accept.pair_comparable(p, d, fleet)
    assert not held and "did not cut" in what


def test_an_unreadable_layout_fails_the_pair_closed():
    p, d, fleet = pair_fleet(2, 2, answers(values=VALUES[2:], cuts=[{}, {}]))  # tp_size 2 not as the tree declares it
    [(held, what)] = accept.pair_comparable(p, d, fleet)
    assert not held and "a layout that cannot be read" in what


# --- deadlines: a worker that drips its answer ends within them, in one line ------------------------------


class Answering(socketserver.ThreadingTCPServer):
    """A worker on a local port: reads each request, then ``answer`` writes to it until it returns, ``stop``
    is set or the client goes away. One server for the drips here and the floods in test_accept_attacks.py."""

    daemon_threads = allow_reuse_address = True

    def __init__(self):
        self.stop = threading.Event()
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(inner):
                inner.request.recv(65536)
                try:
                    server.answer(inner.request)
                except OSError:
                    pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def answer(self, request: socket.socket) -> None:
        raise NotImplementedError

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.stop.set()
        self.shutdown()
        self.server_close()


def started(kind: type[Answering]):
    """A fixture's body: it yields ``start``, which makes a ``kind`` server of its arguments; each one made
    is closed when the test ends."""
    made = []

    def start(*args, **kwargs) -> Answering:
        made.append(kind(*args, **kwargs))
        return made[-1]

    yield start
    for server in made:
        server.close()


class Drip(Answering):
    """Answers every request with ``head`` at once, then one byte of ``tail`` every ``every`` seconds."""

    def __init__(self, head: bytes, tail: bytes, every: float = 0.2):
        self.head, self.tail, self.every = head, tail, every
        super().__init__()

    def answer(self, request: socket.socket) -> None:
        request.sendall(self.head)
        for i in range(len(self.tail)):
            if self.stop.wait(self.every):
                return
            request.sendall(self.tail[i:i + 1])


BODY = b'{"disaggregation_mode": "prefill", "version": "0.5.23", "padding": "' + b"x" * 200 + b'"}'
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY)


@pytest.fixture
def drip():
    yield from started(Drip)


def failed_within(server: Answering, timeout: float, seconds: float) -> errors.DiffprobeError:
    """The error a request to ``server`` with ``timeout`` fails with, which must come within ``seconds``."""
    start = time.monotonic()
    with pytest.raises(errors.DiffprobeError) as e:
        live.call(server.url, "/server_info", timeout=timeout)
    assert time.monotonic() - start < seconds
    return e.value


@pytest.mark.parametrize("head,tail", [(HEAD, BODY), (b"", HEAD + BODY)], ids=["body", "headers"])
def test_a_request_ends_at_its_deadline_however_slowly_the_server_drips(drip, head, tail):
    failed = failed_within(drip(head, tail), timeout=1, seconds=2.5)
    assert failed.exit_code == errors.DIFFERS and "no complete answer within 1 s" in failed.message


def test_the_whole_commands_deadline_bounds_each_request(drip):
    server = drip(HEAD, BODY)
    with pytest.raises(errors.DiffprobeError, match="the whole command's deadline"):
        live.call(server.url, "/server_info", timeout=60, ends=time.monotonic() + 1)
    with pytest.raises(errors.DiffprobeError, match="the whole command's deadline"):
        live.call(server.url, "/server_info", timeout=60, ends=time.monotonic() - 1)


def test_a_prompt_answer_is_read_whole(drip):
    reply = live.call(drip(HEAD + BODY, b"").url, "/server_info", timeout=5)
    assert reply.status == 200 and reply.json()["version"] == "0.5.23"


def test_an_answer_too_large_fails_closed(drip, monkeypatch):
    monkeypatch.setattr(live, "MAX_BODY", 64)
    with pytest.raises(errors.DiffprobeError, match="an answer over 0 MiB"):
        live.call(drip(HEAD + BODY, b"").url, "/server_info", timeout=5)


@pytest.mark.parametrize("flags", [["--timeout", "1"], ["--deadline", "1"]])
def test_accept_against_a_slow_worker_ends_within_its_deadline_in_one_line(drip, capsys, tmp_path, flags):
    slow = drip(HEAD, BODY)
    start = time.monotonic()
    code = cli.main(["accept", "--prefill", slow.url, "--decode", slow.url, "--out", str(tmp_path / "a"), *flags])
    took = time.monotonic() - start
    err = capsys.readouterr().err
    assert code == errors.DIFFERS and took < 3, (code, took)
    assert "Traceback" not in err and "accepted" not in err.replace("not accepted", "")
    assert len([line for line in err.splitlines() if line.strip()]) == 1 and slow.url in err and "failing closed" in err
    assert not (tmp_path / "a").exists()


def test_the_whole_deadline_covers_the_tree_audit(drip, capsys, tmp_path, monkeypatch):
    """Past the deadline after the audit: one line, exit 1, no bundle; nothing of the tree is fetched."""
    def answer(role: str) -> bytes:
        body = json.dumps({"disaggregation_mode": role, "version": "0.5.23", "context_length": 8192}).encode()
        return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    prefill, decode = drip(answer("prefill"), b""), drip(answer("decode"), b"")
    monkeypatch.setattr(survey, "probe", lambda texts, opts: time.sleep(1.5) or [])
    monkeypatch.setattr(pipeline, "resolve", lambda *a: pytest.fail("a tree was resolved past the deadline"))
    code = cli.main(["accept", "--prefill", prefill.url, "--decode", decode.url, "--deadline", "1", "--out", str(tmp_path / "a")])
    err = capsys.readouterr().err
    assert code == errors.DIFFERS and "deadline (--deadline 1 s) passed during the tree audit: failing closed" in err, err
    assert "Traceback" not in err and not (tmp_path / "a").exists()


def test_a_server_that_closes_without_answering_is_unreachable_not_slow(drip):
    with pytest.raises(errors.Infrastructure, match="unreachable"):
        live.call(drip(b"", b"").url, "/server_info", timeout=5)


def test_nothing_listening_is_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(errors.Infrastructure, match="unreachable"):
        live.call(f"http://127.0.0.1:{port}", "/server_info", timeout=5)


def test_an_answer_cut_short_of_its_length_is_not_read_as_whole(drip):
    with pytest.raises(errors.Infrastructure, match="unreachable"):
        live.call(drip(HEAD + BODY[:20], b"").url, "/server_info", timeout=5)
