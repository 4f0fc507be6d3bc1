"""``diffprobe accept``: the four acceptance gates of a live PD deployment, bound to the tree it runs.

Why: "upgraded" is not "passed isolation checks" (BRIEF, "Four acceptance gates"). What counts is the
code and the configuration actually running, so every gate reads each worker's own ``/server_info``,
every data-parallel rank's own state in it (``internal_states``), and the tree each worker runs:
gate 1 the pool of every rank against the context, gate 2 the tree audit (observed behaviour),
gates 3 and 4 the transfer and lifetime defences, which count only where the running arguments
enable them *and* the tree has them *and* they apply to the reported backend, device and layout.

Every value the tree parses is parsed by the tree's own code, in its sandbox
(``probes/server_config.py``): environment values by its ``Envs`` fields, reported server arguments
against its ``ServerArgs`` declarations, a prefill<->decode pair by its checksum comparability rule.
An environment value counts from the worker's own report (``SGLANG_EXPOSE_OWN_ENV_VARS``: its
``internal_states`` carry ``env_vars``), else from ``--env`` (per worker beats every worker), else
the tree's default, each recorded as such. Whatever the server does not say, says in a form the
tree would not read, or says too slowly (``--timeout`` per whole request, ``--deadline`` for the
whole command), fails closed and names the worker and the rank. The fleet and where each value
comes from: ``runner/app/fleet.py``; this module holds the checks and the four gates.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path, PurePosixPath
from typing import Any

from probes.duties import FIX_CODE
from probes.duties_lifetime import site as lifetime_site
from runner import errors, fixids, ui
from runner.app import pipeline, server, survey
from runner.commands import gate, options
from runner.app.fleet import (BATCH_LIMIT, DEFERRED, DEFERRED_TIMEOUT, Fleet, Worker, ask_trees, declarations, env_read,
                              env_setting, layout, past, read_fleet, server_arg, tree_version, trees_for)
from runner.evidence import bundle, pins, static
from runner.judge import judging
from runner.judge.fixcode import backend_of
from runner.judge.observations import Case
from runner.evidence.receipts import Receipt, ServerIdentity, host_environment, host_probe, make
from runner.evidence.records import Acceptance, GateResult
from runner.sandbox import execute, server_config
from runner.store import specs
from runner.views.acceptance import GATES, KIND, print_gates

NOT_BACKENDS = {"base", "common", "utils"}
CHECKSUM_DEVICES = (None, "cuda")  # the tree builds its checksum computer on torch.device("cuda:<gpu>")
CANARY_MODES = ("log", "raise")
# Which gate a fix of the tree audit backs. Gate 2: the admission door and the prefill cleanup (every
# fix not listed). Gates 3 and 4: the later defences, once their probes observe them by behaviour
# (issue #24); a fix listed here and pinned is judged, from the tree's receipts, in its gate beside
# the configuration checks, and its receipts back that gate.
GATE_OF_FIX = {39500: 3, 41023: 4, 41404: 4, 40645: 4, 41402: 4, 4: 3, 5: 4, 1: 4, 2: 4, 3: 3}
# A later defence whose code is one KV-transfer backend's (L3: NIXL's completion rule) is judged only on a worker
# that runs that backend, or whose backend cannot be read (failing closed).
BACKEND_OF_FIX = {3: "nixl"}
LIMITS = [
    "the gates read one deployment at one moment: its /server_info with every data-parallel rank's own state, "
    "the tree each worker's version names (or --tree), and the operator's --env declarations where a worker does "
    "not report its own environment (SGLANG_EXPOSE_OWN_ENV_VARS)",
    "gate 2 is CPU code-path evidence about the tree (see the tree receipts' limits), not the served model",
    "gates 3 and 4 show a defence is configured, present in the tree and applicable; not that its logs show it ran",
    "a pair's checksum comparability is the tree's own rule over a stand-in model shape cut by each side's reported "
    "TP, PP, page size and KV dtype; a model whose KV does not shard by TP (MLA) may compare where this says not",
]


# --- checks: each a list of (passed, what) --------------------------------------------------------

Check = tuple[bool, str]


def backends(f: static.Finding) -> dict[str, str]:
    """Backend folder -> the line that shows it implements deferred release."""
    out = {}
    for line in f.evidence:
        parts = PurePosixPath(line.split(":", 1)[0]).parts
        if len(parts) > 4 and parts[3] not in NOT_BACKENDS:
            out.setdefault(parts[3], line)
    return out


def static_present(f: static.Finding) -> Check:
    return (True, f"{f.what}: present ({f.evidence[0]})") if f.present else (False, f"{f.what}: absent from the tree")


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def checksum_in_force(w: Worker, rank: int | None, fleet: Fleet) -> list[Check]:
    answers, f = fleet.of(w), fleet.findings[fleet.tree_of[w.url]]
    on = server_arg(w, rank, "disaggregation_enable_kv_checksum", answers)
    device = server_arg(w, rank, "device", answers)
    checks = [(on.known and on.value is True, on.show()), static_present(f["kv-checksum"])]
    supported = device.known and device.value in CHECKSUM_DEVICES
    checks.append((supported, device.show() + ("" if supported or not device.known else ": the tree computes the checksum "
                                               "on a CUDA device only; not a defence on this device")))
    return checks


def canary_in_force(w: Worker, rank: int | None, fleet: Fleet) -> list[Check]:
    mode = server_arg(w, rank, "kv_canary", fleet.of(w))
    f = fleet.findings[fleet.tree_of[w.url]]
    return [(mode.known and mode.value in CANARY_MODES, mode.show()), static_present(f["kv-canary"])]


def pair_comparable(p: Worker, d: Worker, fleet: Fleet) -> list[Check]:
    """Gate 3 per pair: can decode's tree verify the checksum this prefill sends? Its own rule says,
    over both sides' reported layouts; a pair it admits unverified is no defence."""
    answers = fleet.of(d)
    (lp, said_p), (ld, said_d) = layout(p, answers), layout(d, answers)
    if lp is None or ld is None:
        return [(False, f"prefill {p.url} <-> decode {d.url}: a layout that cannot be read ("
                        f"{said_p if lp is None else said_d}): failing closed")]
    checks: list[Check] = []
    sp, sd = answers.layouts[fleet.workers.index(p)], answers.layouts[fleet.workers.index(d)]
    if answers.rule:
        if sp.signature is None or sd.signature is None:
            checks.append((False, f"the tree's {answers.rule} did not answer ({sp.error or sd.error}): failing closed"))
        else:
            same = sp.signature == sd.signature
            checks.append((same, f"the tree's {answers.rule}: prefill {p.url} {sp.signature:#x} ({said_p}) vs decode "
                                 f"{d.url} {sd.signature:#x} ({said_d}): " + (
                               "comparable" if same else "NOT comparable: decode admits this pair's handoffs unverified")))
        backend = server_arg(d, None, "disaggregation_transfer_backend", answers)
        own = answers.backends.get(backend.value) if backend.known else None
        if own is None or own.own_rule is None:
            checks.append((False, f"{backend.show()}: whether its KV manager verifies every comparable peer is not known"
                                  f"{f' ({own.error})' if own and own.error else ''}: failing closed"))
        elif own.own_rule:
            checks.append((False, f"{backend.show()}: its KV manager ({', '.join(own.managers)}) has its own "
                                  "should_verify_kv_checksum, not evaluated here: failing closed"))
        else:
            checks.append((True, f"{backend.show()}: its KV manager verifies every comparable peer (the base rule)"))
    elif sp.cut is None or sd.cut is None:
        checks.append((False, f"the tree did not cut this pair's layouts ({sp.error or sd.error}): failing closed"))
    else:
        differ = [k for k in sp.cut if sp.cut[k] != sd.cut.get(k)]
        checks.append((not differ, "the tree has no comparability rule (no kv_layout_signature): decode compares every "
                                   "digest; " + ("both sides digest the same layout" if not differ else
                                                 f"prefill {p.url} ({said_p}) and decode {d.url} ({said_d}) differ in "
                                                 f"{', '.join(differ)}: digests over other bytes never verify")))
    return checks


def lifetime(w: Worker, rank: int | None, fleet: Fleet) -> list[Check]:
    f = fleet.findings[fleet.tree_of[w.url]]
    backend = server_arg(w, rank, "disaggregation_transfer_backend", fleet.of(w))
    deferred, timeout, limit = (env_setting(env_read(w, rank, name, fleet.declared[w.url]), fleet)
                                for name in (DEFERRED, DEFERRED_TIMEOUT, BATCH_LIMIT))
    implemented = backends(f["deferred-release-backends"])
    checks = [
        (deferred.known and deferred.value is True, deferred.show()),
        (backend.known and backend.value in implemented,
         backend.show() + (f": implements deferred release ({implemented[backend.value]})" if backend.value in implemented
                           else f": deferred release applies only to {', '.join(sorted(implemented)) or 'no backend'} in this tree")),
        static_present(f["drain-ack"]),
        (timeout.known and (number(timeout.value) or 0) > 0, timeout.show()),
    ]
    if backend.value == "mooncake":
        bounded = limit.known and (number(limit.value) or 0) > 0
        checks.append((bounded, limit.show() + ("" if bounded else ": one synchronous all-layer batch per transfer, "
                                               "whose duration grows with the prompt and is not bounded by the release timeout")))
    return checks


def as_case(id: str, site: str, title: str, checks: list[Check]) -> Case:
    held = all(ok for ok, _ in checks)
    effects = {"checks": [{"held": ok, "what": what} for ok, what in checks],
               "summary": "; ".join(what for ok, what in checks if not ok) if not held else "in force"}
    return gate._observed(id, site, title, "any check not held", not held, effects)


def suffix(rank: int | None) -> str:
    return "" if rank is None else f"-rank-{rank}"


# --- the four gates ------------------------------------------------------------------------------


def gate_receipt(n: int, w: Worker, cases: list[Case], started: str) -> Receipt:
    return make(host_probe(f"accept-gate-{n}", Path(__file__)),
                ServerIdentity(source=w.url, url=w.url, reported=server.reported(w.endpoint, w.info)),
                host_environment(), cases, started_at=started, finished_at=execute.now())


def failures(receipts: list[Receipt], roles: dict[str, str], skip: set[str] = frozenset()) -> list[str]:
    """One line per case that did not hold: the worker (role and URL), the case (its rank) and why."""
    return [f"{roles.get(r.source.source, '')} {r.source.source} {c.id}: ".lstrip()
            + ((c.effects or {}).get("summary") or c.missing or (c.error and c.error.message) or c.outcome)
            for r in receipts for c in r.cases if c.classification != "clean" and c.id not in skip]


def verdict(n: int, receipts: list[Receipt], roles: dict[str, str], extra: list[Receipt] = (), extra_fail: list[str] = ()) -> GateResult:
    failed = failures(receipts, roles) + list(extra_fail)
    passed = not failed and bool(receipts)
    return GateResult(gate=n, title=GATES[n], passed=passed, reasons=failed or [f"{len(receipts)} receipt(s), every check held"],
                      receipts=[bundle.receipt_name(r) for r in [*receipts, *extra]])


def pool_gate(args, fleet: Fleet, started: str, ends: float) -> list[Receipt]:
    """Gate 1: every rank of every worker, the smallest judged; a worker whose ranks cannot be read fails closed."""
    out = []
    smallest: tuple[int, int] | None = None  # (pool, context) of the shortest prefill rank
    for w in fleet.workers:
        context, source = gate.context_of(args, w.url, w.info, w.endpoint)
        states = w.states
        dp, attention = (server_arg(w, None, name, fleet.of(w)) for name in ("dp_size", "enable_dp_attention"))
        if states is None:
            cases = [gate.unread("pool-ranks", f"{w.name()} reports no per-rank state (internal_states) in {w.endpoint}: "
                                               "its ranks' pools cannot be read, failing closed")]
        elif "dp_size" in w.info and not dp.known:
            cases = [gate.unread("pool-ranks", f"{w.name()}: {dp.show()}: how many ranks it has is not known")]
        elif dp.known and dp.value != len(states) and attention.value is not True:  # DP attention: one state per group
            cases = [gate.unread("pool-ranks", f"{w.name()} reports dp_size {dp.value} but {len(states)} rank state(s) in "
                                               f"{w.endpoint}: the other ranks' pools cannot be read, failing closed")]
        else:
            cases = []
            top = w.info.get("max_total_num_tokens")
            for rank, (where, tokens) in enumerate(server.rank_pools(w.info)):
                if tokens is None:
                    cases.append(gate.unread(f"pool-rank-{rank}", f"{w.name(rank)} reports no integer pool "
                                                                  "(memory_usage.token_capacity): failing closed"))
                    continue
                own, own_source = rank_context(w, rank, context, source)
                case = gate.pool_case(f"pool-rank-{rank}", w.endpoint, f"internal_states[{rank}].{where}", tokens,
                                      own, own_source, args.headroom, who=f"rank {rank}: ")
                if server.is_int(top) and top != tokens:
                    case.effects["summary"] += f" (the top-level max_total_num_tokens says {top})"
                cases.append(case)
                if w.role == "prefill" and (smallest is None or tokens < smallest[0]):
                    smallest = (tokens, own)
        if args.negative and w is last_prefill(fleet.workers) and smallest:
            neg = negative_case(args, *smallest, ends)
            if neg is None:
                ui.out.print("negative case not sent: every prefill rank's pool covers the context, no prompt lies between")
            else:
                cases.append(neg)
        out.append(gate_receipt(1, w, cases, started))
    return out


def rank_context(w: Worker, rank: int, context: int, source: str) -> tuple[int, str]:
    """The context a rank admits: its own where its state reports one (a rank's state carries its
    resolved server arguments, which ``/set_internal_state`` changes rank by rank), else the worker's.
    A rank whose context outgrew the top level's is judged by its own."""
    own = (w.states or [])[rank].get("context_length") if w.states and rank < len(w.states) else None
    if server.is_int(own) and own != context:
        return own, f"internal_states[{rank}].context_length from {w.endpoint} (its top level says {context})"
    return context, source


def last_prefill(workers: list[Worker]) -> Worker:
    return [w for w in workers if w.role == "prefill"][-1]


def negative_case(args, pool: int, context: int, ends: float) -> Case | None:
    """The write-up's negative case: a prompt under the context but over the pool must be refused (4xx)."""
    if pool + 1 >= context:
        return None
    length = pool + 1
    reply = server.generate(server.base_url(args.router), server.filler(length, 0), 1, args.timeout, ends)
    refused = 400 <= reply.status < 500 and not reply.answered
    effects = {"prompt_tokens": length, "pool_tokens": pool, "context_tokens": context, "status": reply.status,
               "answered": reply.answered, "summary": f"{length} tokens (over the smallest prefill rank's pool, under the "
               f"context) through the router: HTTP {reply.status}, " + ("refused explicitly" if refused else "NOT REFUSED EXPLICITLY")}
    return gate._observed("pool-negative", "/generate", "a prompt over the pool but under the context is refused (4xx)",
                          "answered, or refused without a 4xx status", not refused, effects, reply.ms)


def running_configuration(fix: int, w: Worker, fleet: Fleet) -> tuple[str | None, str]:
    """Which configuration of a later defence's probe cases (their site: judging.CONFIGURATIONS) worker ``w``
    runs, read on every rank, and why; None: no probed configuration is the one it runs, or the defence's
    backend is not the one it runs."""
    backend = BACKEND_OF_FIX.get(fix)
    if backend is not None:
        used = [server_arg(w, r, "disaggregation_transfer_backend", fleet.of(w)) for r in w.ranks()]
        if all(s.known and s.value != backend for s in used):
            return None, f"it runs the {used[0].value} backend, not {backend}, whose code the defence is"
    elif GATE_OF_FIX[fix] == 3:
        on = all(server_arg(w, r, "disaggregation_enable_kv_checksum", fleet.of(w)).value is True for r in w.ranks())
        return ("with-kv-checksum", "the checksum on") if on else (None, "the checksum off (the canary must cover the handoff)")
    reads = [env_read(w, r, DEFERRED, fleet.declared[w.url]) for r in w.ranks()]
    if all(read.raw is None for read in reads):
        return "default", f"{DEFERRED} as the tree defaults it"
    values = [fleet.of(w).env_of(DEFERRED, read.raw) for read in reads]
    if all(v is not None and v.value is True for v in values):
        return "with-deferred-release", f"{DEFERRED} switched on"
    if backend is not None and all(v is not None and v.value is False for v in values):
        # gate 3 does not ask for the deferred release: a defence of its own is judged with it off too
        return "without-deferred-release", f"{DEFERRED} switched off"
    return None, f"{DEFERRED} not on on every rank: no probed configuration is the one it runs"


def audit_gates(probed: dict, fleet: Fleet) -> dict[int, tuple[list[Receipt], list[str]]]:
    """The tree audit's receipts and its not-fixed fixes, by the gate each fix backs; every reason names
    the workers that run the tree. A later defence (gates 3 and 4) is judged in the configuration each
    worker runs (its cases' site), never by its status over configurations the deployment does not use."""
    out: dict[int, tuple[list[Receipt], list[str]]] = {n: ([], []) for n in (2, 3, 4)}
    for source, p in probed.items():
        mine = [w for w in fleet.workers if fleet.tree_of[w.url] == source]
        runs = ", ".join(w.name() for w in mine)
        for r in p.receipts:
            out[GATE_OF_FIX.get(r.probe.fix, 2)][0].append(r)
        for f in p.row.fixes:
            if f.fix not in GATE_OF_FIX:
                if f.status != "fixed":
                    out[2][1].append(f"{source} (run by {runs}): {fixids.label(f.fix)} {f.status}" + "".join(
                        f" ({x.site} {x.status})" for x in f.sites if x.status != "fixed"))
                continue
            for w in mine:
                site, why = running_configuration(f.fix, w, fleet)
                if site is None:  # the defence is off on this worker: the fix is not what guards it
                    # gate 3 asks for the checksum or the canary; without the checksum this fix is not used.
                    # gate 4: deferred release is not on on some rank, and gate 4's own check of that rank
                    # (deferred-release-in-force) fails it, naming the rank and where its value comes from
                    continue
                for at, lacking in backend_sites(f, site, w, fleet):
                    shown = judging.at_site(f, at) if lacking is None else None
                    if shown is None or shown.status != "fixed":
                        out[GATE_OF_FIX[f.fix]][1].append(
                            f"{source} (run by {w.name()}, {why}): {fixids.label(f.fix)} "
                            + (f"{shown.status} in that configuration" if shown else lacking or
                               "not probed in that configuration: failing closed") + (f" ({at})" if at != site else ""))
    return out


def code_backends(fix: int) -> set[str]:
    """The KV-transfer backends whose own modules the fix's code (FIX_CODE) names: empty where it is all shared code."""
    return {b for name in FIX_CODE.get(fix, ()) if (b := backend_of(name)) in judging.KV_BACKENDS}


def backend_sites(fs: judging.FixStatus, site: str, w: Worker, fleet: Fleet) -> list[tuple[str, str | None]]:
    """The sites of ``fs`` that judge worker ``w`` in configuration ``site``, each with why it cannot be judged (None:
    it can): per backend its ranks run, the fix's ``<site>-<backend>`` site where its cases ran over that backend,
    else the configuration's own (Mooncake's) site, unless the fix's code is partly backends' own and not this
    backend's (its cases never ran the code this worker runs: failing closed); every site where a rank's backend
    cannot be read (gate 4 fails that rank on it too)."""
    present = {s.site for s in fs.sites}
    own = {b: at for b in judging.OTHER_BACKENDS if (at := lifetime_site({"config": site, "backend": b})) in present}
    used = [server_arg(w, r, "disaggregation_transfer_backend", fleet.of(w)) for r in w.ranks()]
    if not all(s.known for s in used):
        return [(at, None) for at in (site, *own.values())]
    code = code_backends(fs.fix)
    out: dict[str, str | None] = {}
    for backend in dict.fromkeys(s.value for s in used):
        if backend in own:
            out[own[backend]] = None
        elif not code or backend in code:
            out[site] = None
        else:
            out[site] = (f"not probed over {backend}: its code is partly {' and '.join(sorted(code))}'s own, and no "
                         f"case ran {backend}'s: failing closed")
    return list(out.items())


def other_code(workers: list[Worker], tree_of: dict[str, str], declared: dict[str, str | None]) -> list[str]:
    """One line per worker whose reported version is not the one its tree declares: the tree audit
    (gates 2 to 4) is then of code the worker says it does not run, and fails closed. A worker or a
    tree that states no version cannot be checked, and is taken as given."""
    out = []
    for w in workers:
        said = declared.get(tree_of[w.url])
        if w.version and said and said != w.version:
            out.append(f"{w.name()} reports version {w.version!r}, but its tree {tree_of[w.url]} declares {said!r}: "
                       "the audit is not of the code it runs (give its own tree with --tree URL=SOURCE): failing closed")
    return out


def transfer_gate(args, fleet: Fleet, started: str, ends: float, roles: dict[str, str],
                  audit: tuple[list[Receipt], list[str]]) -> tuple[GateResult, list[Receipt]]:
    """Gate 3: the handoff checksum on every rank of every worker *and* comparable on every
    prefill<->decode pair by the tree's own rule, or else the KV canary on every rank; the other
    alternative is then not used. The tree audit's behaviour for the transfer defences (issue #24)
    joins here through ``audit``: its receipts back the gate and a not-fixed fix fails it."""
    receipts = []
    checksum_ids, canary_ids = set(), set()
    for w in fleet.workers:
        cases = []
        for rank in w.ranks():
            cases.append(as_case(f"kv-checksum-in-force{suffix(rank)}", "server args + tree", "the handoff KV checksum is "
                                 "enabled, present and supported here", checksum_in_force(w, rank, fleet)))
            cases.append(as_case(f"kv-canary-in-force{suffix(rank)}", "server args + tree", "the KV canary is enabled and "
                                 "present", canary_in_force(w, rank, fleet)))
        if w.role == "decode":
            for i, p in enumerate(x for x in fleet.workers if x.role == "prefill"):
                cases.append(as_case(f"kv-checksum-pair-{i}", "server args + tree rule", f"the checksum prefill {p.url} "
                                     f"sends is one this decode can verify", pair_comparable(p, w, fleet)))
        checksum_ids |= {c.id for c in cases if c.id.startswith("kv-checksum")}
        canary_ids |= {c.id for c in cases if c.id.startswith("kv-canary")}
        receipts.append(gate_receipt(3, w, cases, started))
    checksum_ok, canary_ok = (all(c.classification == "clean" for r in receipts for c in r.cases if c.id in ids)
                              for ids in (checksum_ids, canary_ids))
    unused = sorted(canary_ids) if checksum_ok else sorted(checksum_ids) if canary_ok else []
    failed = [] if (checksum_ok or canary_ok) else failures(receipts, roles)
    extra = list(audit[0])
    if args.canary is not None:
        ns = argparse.Namespace(tokens=args.canary, plant_tokens=None, max_new_tokens=16, timeout=args.timeout, ends=ends)
        router = server.base_url(args.router)
        endpoint, info = server.server_info(router, args.timeout, ends)
        canary = gate.canary(ns, router, info, endpoint)
        r = make(host_probe("accept-gate-3-canary", Path(__file__)),
                 ServerIdentity(source=router, url=router, reported=server.reported(endpoint, info)),
                 host_environment(), canary, started_at=started, finished_at=execute.now())
        extra.append(r)
        failed += failures([r], {router: "router"})
    failed += audit[1]
    used = ("the handoff checksum, on every rank and every prefill<->decode pair comparable by the tree's rule"
            if checksum_ok else "the KV canary, on every rank" if canary_ok else "")
    return GateResult(gate=3, title=GATES[3], passed=not failed and bool(receipts), reasons=failed or [f"in force: {used}"],
                      receipts=[bundle.receipt_name(r) for r in [*receipts, *extra]], unused=unused), [*receipts, *extra]


def lifetime_gate(fleet: Fleet, started: str, roles: dict[str, str],
                  audit: tuple[list[Receipt], list[str]]) -> tuple[GateResult, list[Receipt]]:
    """Gate 4: deferred release in force on every rank of every worker. The tree audit's behaviour for
    the lifetime defences (issue #24) joins here through ``audit``, as in gate 3."""
    receipts = [gate_receipt(4, w, [as_case(f"deferred-release-in-force{suffix(rank)}", "server args + env + tree",
                                            "aborted transfers' pages are held until drained, on a backend that implements it",
                                            lifetime(w, rank, fleet)) for rank in w.ranks()], started)
                for w in fleet.workers]
    return verdict(4, receipts, roles, audit[0], audit[1]), [*receipts, *audit[0]]


def cmd_accept(args) -> int:
    ends = time.monotonic() + args.deadline
    signers = options.signers(args)
    if args.negative and not args.router:
        raise errors.BadInput("--negative sends its prompt through the router: give --router URL")
    if args.canary is not None and not args.router:
        raise errors.BadInput("--canary sends its prompts through the router: give --router URL")
    target = bundle.out_path(args.out, KIND)
    started = execute.now()
    workers = read_fleet(args.prefill, args.decode, args.timeout, ends)
    tree_of = trees_for(workers, args.tree)
    for w in workers:
        gate.context_of(args, w.url, w.info, w.endpoint)  # bad input before any tree is fetched
    opts = options.resolved(args, pins.load(options.path(args.pins)), options.probe(args))
    sources = list(dict.fromkeys(tree_of.values()))
    probed = {p.row.source: p for p in survey.probe(sources, opts)}
    past(ends, args.deadline, "the tree audit")
    trees = {s: pipeline.resolve(s, opts) for s in sources}  # stored already: re-verified, not fetched
    unbound = other_code(workers, tree_of, {s: tree_version(t.root) for s, t in trees.items()})
    fleet = Fleet(workers, tree_of, {}, {s: {f.id: f for f in probed[s].row.static} for s in sources},
                  declarations(args.env, workers))
    ask_trees(fleet, opts, trees, args.deadline, ends)
    roles = {w.url: w.role for w in workers}

    audit = audit_gates(probed, fleet)
    for n in (2, 3, 4):  # what backs them is the tree's code, which these workers say they do not run
        audit[n][1].extend(unbound)
    g1 = pool_gate(args, fleet, started, ends)
    gates = [verdict(1, g1, roles)]
    g2, open_fixes = audit[2]
    gates.append(GateResult(gate=2, title=GATES[2], passed=not open_fixes and bool(g2),
                            reasons=open_fixes or [f"every fix fixed in {', '.join(sources)}, run by every worker"],
                            receipts=[bundle.receipt_name(r) for r in g2]))
    g3_result, g3 = transfer_gate(args, fleet, started, ends, roles, audit[3])
    g4_result, g4 = lifetime_gate(fleet, started, roles, audit[4])
    gates += [g3_result, g4_result]
    for line in dict.fromkeys(w for v in fleet.values for w in v.warnings if "the worker's own report counts" in w):
        ui.warn(line)
        fleet.warnings.append(line)

    accepted = all(g.passed for g in gates)
    record = Acceptance(
        workers={w.url: {"role": w.role, "endpoint": w.endpoint, "version": w.version, "tree": tree_of[w.url],
                         "ranks": len(w.states or [])} for w in workers},
        trees={s: probed[s].row.tree_digest for s in sources}, gates=gates, accepted=accepted, values=fleet.values,
        warnings=fleet.warnings, deadlines={"request": args.timeout, "accept": args.deadline},
        reader_sha256=server_config.entry_sha256())
    receipts = list({bundle.receipt_name(r): r for r in [*g1, *g2, *g3, *g4]}.values())
    out = bundle.write(target, kind=KIND, created_at=started, receipts=receipts, differentials=[], pins_sha256=None,
                       limits=LIMITS, extra=record.model_dump(mode="json"), signers=signers)
    print_gates(record)
    ui.out.print(f"bundle: {out}  (check with: diffprobe verify {out})")
    return errors.OK if accepted else errors.DIFFERS


def register(sub) -> None:
    p = options.command(
        sub, "accept", "a live PD deployment passes the four acceptance gates",
        about="Checks the four acceptance gates of a live PD deployment, each bound to the tree and configuration each worker runs.",
        example="diffprobe accept --prefill http://p0:30000 --decode http://d0:30001 --router http://r:8000 --negative",
        ok="accepted: every gate passed", differs="a gate failed or could not run (each gate's line says why)")
    p.add_argument("--prefill", action="append", required=True, metavar="URL", help="a prefill worker (repeatable)")
    p.add_argument("--decode", action="append", required=True, metavar="URL", help="a decode worker (repeatable)")
    p.add_argument("--router", metavar="URL", help="the router, for --negative and --canary")
    p.add_argument("--tree", action="append", default=[], metavar="[URL=]SOURCE",
                   help="the tree a worker runs (a vendor build), on every worker or on the one at URL; default "
                        f"pypi:sglang==<reported version>; SOURCE: {specs.SYNTAX}")
    p.add_argument("--env", action="append", default=[], metavar="[URL=]NAME=VALUE",
                   help="an environment variable as set on every worker, or on the worker at URL (which wins over every "
                        "worker's, in any order); a worker that reports its own (SGLANG_EXPOSE_OWN_ENV_VARS) wins over both")
    p.add_argument("--context", type=int, metavar="N", help="context length when a worker reports none")
    p.add_argument("--headroom", default="1.25", metavar="X", help="required pool / context ratio (default 1.25)")
    p.add_argument("--negative", action="store_true",
                   help="also send a prompt over the smallest prefill rank's pool but under the context through the "
                        "router: must be refused (4xx)")
    p.add_argument("--canary", type=int, metavar="N", help="also run the sentinel check through the router at N and N+1 tokens")
    options.http_deadlines(p, whole_command=True)
    options.out(p, KIND)
    options.probe_options(p)
    options.common(p)
    options.signing(p)
    p.set_defaults(func=cmd_accept)
