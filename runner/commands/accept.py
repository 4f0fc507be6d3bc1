"""``diffprobe accept``: the four acceptance gates of a live PD deployment, bound to the tree it runs.

Why: "upgraded" is not "passed isolation checks" (BRIEF, "Four acceptance gates"). What counts is the
code and the configuration actually running, so every gate reads the workers' own ``/server_info``
and the tree each one runs: gate 1 the pool against the context, gate 2 the tree audit (observed
behaviour), gates 3 and 4 the transfer and lifetime defences, which count only where the running
arguments enable them *and* the tree has them *and* they apply to the reported backend and device.
A setting the server does not report fails closed and names the missing field; an environment
variable (never reported by SGLang) is taken from ``--env`` (declared by the operator) or else from
the tree's default, each said as such.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from runner import errors, ui
from runner.commands import gate, options, pipeline, survey
from runner.evidence import bundle, pins, static
from runner.evidence.observations import Case
from runner.evidence.receipts import Receipt, ServerIdentity, host_environment, host_probe, make
from runner.evidence.records import Acceptance, GateResult
from runner.sandbox import execute
from runner.views.acceptance import GATES, KIND, print_gates

ROLES = ("prefill", "decode")
DEFERRED = "SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE"
DEFERRED_TIMEOUT = "SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE_TIMEOUT"
BATCH_LIMIT = "SGLANG_MOONCAKE_MAX_TRANSFER_BATCH_INDICES"
ENV_FINDING = {DEFERRED: "deferred-release", DEFERRED_TIMEOUT: "deferred-release-timeout", BATCH_LIMIT: "mooncake-batch-limit"}
NOT_BACKENDS = {"base", "common", "utils"}
CHECKSUM_DEVICES = (None, "cuda")  # the tree builds its checksum computer on torch.device("cuda:<gpu>")
LIMITS = [
    "the gates read one deployment at one moment: its /server_info, the tree each worker's version names "
    "(or --tree), and the operator's --env declarations; SGLang reports no environment variables",
    "gate 2 is CPU code-path evidence about the tree (see the tree receipts' limits), not the served model",
    "gates 3 and 4 show a defence is configured, present in the tree and applicable; not that its logs show it ran",
]


@dataclass(frozen=True)
class Worker:
    role: str
    url: str
    endpoint: str | None
    info: dict

    @property
    def version(self) -> str | None:
        v = self.info.get("version")
        return v if isinstance(v, str) else None


@dataclass(frozen=True)
class Setting:
    """One configuration value and where it came from; ``value`` None with ``known`` False: unreported."""

    name: str
    value: Any
    source: str
    known: bool = True

    def show(self) -> str:
        return f"{self.name}={self.value!r} ({self.source})" if self.known else f"{self.name}: {self.source}"


# --- the fleet -----------------------------------------------------------------------------------


def read_fleet(prefill: list[str], decode: list[str], timeout: int) -> list[Worker]:
    workers = []
    for role, urls in (("prefill", prefill), ("decode", decode)):
        for raw in urls:
            url = gate.base_url(raw)
            endpoint, info = gate.server_info(url, timeout)
            if endpoint is None:
                raise errors.DiffprobeError.differs(f"{url}: neither {' nor '.join(gate.INFO_PATHS)} answered with JSON: "
                                                    "nothing to accept (failing closed)")
            mode = info.get("disaggregation_mode")
            if mode != role:
                raise errors.BadInput(f"{url} was given as --{role} but reports disaggregation_mode {mode!r}")
            workers.append(Worker(role, url, endpoint, info))
    return workers


def trees_for(workers: list[Worker], given: list[str]) -> dict[str, str]:
    """Worker URL -> tree source: ``--tree URL=SOURCE`` per worker, ``--tree SOURCE`` for all, else the
    release each reports. A fleet of mixed versions is refused unless every worker's tree is given."""
    per_url: dict[str, str] = {}
    for_all = None
    for text in given:
        url, sep, source = text.partition("=")
        if sep and url.startswith(("http://", "https://")):
            per_url[gate.base_url(url)] = source
        elif for_all is None:
            for_all = text
        else:
            raise errors.BadInput(f"--tree {text!r}: a second tree for every worker; use --tree URL=SOURCE per worker")
    unknown = sorted(set(per_url) - {w.url for w in workers})
    if unknown:
        raise errors.BadInput(f"--tree {unknown[0]}=...: not a worker of this fleet")
    out = {}
    for w in workers:
        if w.url in per_url or for_all:
            out[w.url] = per_url.get(w.url) or for_all
        elif w.version is None:
            raise errors.BadInput(f"{w.url} reports no version: give its tree with --tree {w.url}=SOURCE")
        else:
            out[w.url] = f"pypi:sglang=={w.version}"
    versions = {w.version for w in workers}
    if len(set(out.values())) > 1 and not all(w.url in per_url for w in workers):
        raise errors.BadInput(f"mixed fleet ({', '.join(sorted(map(str, versions)))}): give every worker's tree with "
                              "--tree URL=SOURCE, or accept each part of the fleet on its own")
    return out


def tree_version(root: Path) -> str | None:
    """The version a tree declares: the generated ``_version.py`` of a wheel, else ``version.py``'s literal."""
    for name in ("_version.py", "version.py"):
        path = root / "sglang" / name
        m = re.search(r"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""",
                      path.read_text(errors="replace") if path.is_file() else "", re.MULTILINE)
        if m:
            return m.group(1)
    return None


# --- settings: reported, declared or the tree's default ------------------------------------------


def server_arg(w: Worker, name: str) -> Setting:
    if name in w.info:
        return Setting(name, w.info[name], f"reported by {w.url}")
    return Setting(name, None, f"not reported by {w.url}{w.endpoint}: failing closed", known=False)


def env_setting(name: str, declared: dict[str, str], findings: dict[str, static.Finding]) -> Setting:
    if name in declared:
        return Setting(name, declared[name], "declared by the operator with --env")
    f = findings.get(ENV_FINDING[name])
    if f and f.present and f.default is not None:
        return Setting(name, f.default, f"tree default, not reported by the server ({f.evidence[0].split(': ')[0]})")
    return Setting(name, None, "neither declared with --env nor defined in the tree: failing closed", known=False)


def truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"))


def number(value: Any) -> float | None:
    try:
        return float(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def backends(f: static.Finding) -> dict[str, str]:
    """Backend folder -> the line that shows it implements deferred release."""
    out = {}
    for line in f.evidence:
        parts = PurePosixPath(line.split(":", 1)[0]).parts
        if len(parts) > 4 and parts[3] not in NOT_BACKENDS:
            out.setdefault(parts[3], line)
    return out


# --- checks: each a list of (passed, what) --------------------------------------------------------

Check = tuple[bool, str]


def static_present(f: static.Finding) -> Check:
    return (True, f"{f.what}: present ({f.evidence[0]})") if f.present else (False, f"{f.what}: absent from the tree")


def checksum_in_force(w: Worker, f: dict[str, static.Finding]) -> list[Check]:
    on = server_arg(w, "disaggregation_enable_kv_checksum")
    device = server_arg(w, "device")
    checks = [(on.known and on.value is True, on.show()), static_present(f["kv-checksum"])]
    supported = device.known and device.value in CHECKSUM_DEVICES
    checks.append((supported, device.show() + ("" if supported else ": the tree computes the checksum on a CUDA "
                                               "device only; not a defence on this device")))
    return checks


def canary_in_force(w: Worker, f: dict[str, static.Finding]) -> list[Check]:
    mode = server_arg(w, "kv_canary")
    return [(mode.known and mode.value in ("log", "raise"), mode.show()), static_present(f["kv-canary"])]


def lifetime(w: Worker, f: dict[str, static.Finding], declared: dict[str, str]) -> list[Check]:
    backend = server_arg(w, "disaggregation_transfer_backend")
    deferred = env_setting(DEFERRED, declared, f)
    timeout = env_setting(DEFERRED_TIMEOUT, declared, f)
    implemented = backends(f["deferred-release-backends"])
    checks = [
        (deferred.known and truthy(deferred.value), deferred.show()),
        (backend.known and backend.value in implemented,
         backend.show() + (f": implements deferred release ({implemented[backend.value]})" if backend.value in implemented
                           else f": deferred release applies only to {', '.join(sorted(implemented)) or 'no backend'} in this tree")),
        static_present(f["drain-ack"]),
        ((number(timeout.value) or 0) > 0, timeout.show()),
    ]
    if backend.value == "mooncake":
        limit = env_setting(BATCH_LIMIT, declared, f)
        bounded = (number(limit.value) or 0) > 0
        checks.append((bounded, limit.show() + ("" if bounded else ": one synchronous all-layer batch per transfer, "
                                               "whose duration grows with the prompt and is not bounded by the release timeout")))
    return checks


def as_case(id: str, site: str, title: str, checks: list[Check]) -> Case:
    held = all(ok for ok, _ in checks)
    effects = {"checks": [{"held": ok, "what": what} for ok, what in checks],
               "summary": "; ".join(what for ok, what in checks if not ok) if not held else "in force"}
    return gate._observed(id, site, title, "any check not held", not held, effects)


# --- the four gates ------------------------------------------------------------------------------


def gate_receipt(n: int, w: Worker, cases: list[Case], started: str) -> Receipt:
    return make(host_probe(f"accept-gate-{n}", Path(__file__)),
                ServerIdentity(source=w.url, url=w.url, reported=gate.reported(w.endpoint, w.info)),
                host_environment(), cases, started_at=started, finished_at=execute.now())


def verdict(n: int, title: str, receipts: list[Receipt]) -> GateResult:
    failed = [f"{r.source.source} {c.id}: " + ((c.effects or {}).get("summary") or c.missing or (c.error and c.error.message) or c.outcome)
              for r in receipts for c in r.cases if c.classification != "clean"]
    passed = not failed and bool(receipts)
    return GateResult(gate=n, title=title, passed=passed, reasons=failed or [f"{len(receipts)} receipt(s), every check held"],
                      receipts=[bundle.receipt_name(r) for r in receipts])


def negative_case(args, pool: int, context: int) -> Case | None:
    """The write-up's negative case: a prompt under the context but over the pool must be refused (4xx)."""
    if pool + 1 >= context:
        return None
    length = pool + 1
    reply = gate.generate(gate.base_url(args.router), gate.filler(length, 0), 1, args.timeout)
    refused = 400 <= reply.status < 500 and not reply.answered
    effects = {"prompt_tokens": length, "pool_tokens": pool, "context_tokens": context, "status": reply.status,
               "answered": reply.answered, "summary": f"{length} tokens (over the pool, under the context): HTTP "
               f"{reply.status}, " + ("refused explicitly" if refused else "NOT REFUSED EXPLICITLY")}
    return gate._observed("pool-negative", "/generate", "a prompt over the pool but under the context is refused (4xx)",
                          "answered, or refused without a 4xx status", not refused, effects, reply.ms)


def cmd_accept(args) -> int:
    signers = options.signers(args)
    if args.negative and not args.router:
        raise errors.BadInput("--negative sends its prompt through the router: give --router URL")
    if args.canary is not None and not args.router:
        raise errors.BadInput("--canary sends its prompts through the router: give --router URL")
    target = bundle.out_path(args.out, KIND)
    started = execute.now()
    workers = read_fleet(args.prefill, args.decode, args.timeout)
    tree_of = trees_for(workers, args.tree)
    declared = declarations(args.env, workers)
    opts = pipeline.options(args, pins.load(options.path(args.pins)), options.probe(args))
    sources = list(dict.fromkeys(tree_of.values()))
    probed = {p.row.source: p for p in survey.probe(sources, opts)}
    findings = {s: {f.id: f for f in probed[s].row.static} for s in sources}
    roots = {s: pipeline.resolve(s, opts).root for s in sources}  # stored already: re-verified, not fetched
    for w in workers:
        said = tree_version(roots[tree_of[w.url]])
        if w.version and said and said != w.version:
            ui.warn(f"{w.url} reports version {w.version} but its tree {tree_of[w.url]} is {said}")

    receipts: list[Receipt] = []
    gates: list[GateResult] = []

    g1: list[Receipt] = []
    for w in (w for w in workers if w.role == "prefill"):
        cases = gate.pool(args, w.url, w.info, w.endpoint)
        found = gate.pool_size(w.info)
        context = cases[0].effects.get("context_tokens") if cases[0].effects else None
        if args.negative and found and context:
            neg = negative_case(args, found[1], context)
            if neg is None:
                ui.out.print(f"{w.url}: negative case not sent: the pool covers the context, no prompt lies between")
            else:
                cases.append(neg)
        g1.append(gate_receipt(1, w, cases, started))
    gates.append(verdict(1, GATES[1], g1))

    g2 = [r for s in sources for r in probed[s].receipts]
    open_fixes = [f"{s}: #{f.fix} {f.status}" + "".join(f" ({x.site} {x.status})" for x in f.sites if x.status != "fixed")
                  for s in sources for f in probed[s].row.fixes if f.status != "fixed"]
    gates.append(GateResult(gate=2, title=GATES[2],
                            passed=not open_fixes and bool(g2), reasons=open_fixes or [f"every fix fixed in {', '.join(sources)}"],
                            receipts=[bundle.receipt_name(r) for r in g2]))

    g3: list[Receipt] = []
    for w in workers:
        f = findings[tree_of[w.url]]
        cases = [as_case("kv-checksum-in-force", "server args + tree", "the handoff KV checksum is enabled, present and "
                         "supported here", checksum_in_force(w, f)),
                 as_case("kv-canary-in-force", "server args + tree", "the KV canary is enabled and present",
                         canary_in_force(w, f))]
        g3.append(gate_receipt(3, w, cases, started))
    # One defence in force on every worker is enough: the checksum guards the handoff, the canary the reads.
    by_defence = {cid: all(c.classification == "clean" for r in g3 for c in r.cases if c.id == cid)
                  for cid in ("kv-checksum-in-force", "kv-canary-in-force")}
    g3_fail = [] if any(by_defence.values()) else [
        f"{r.source.source} {c.id}: {c.effects['summary']}" for r in g3 for c in r.cases if c.classification != "clean"]
    if args.canary is not None:
        ns = argparse.Namespace(tokens=args.canary, plant_tokens=None, max_new_tokens=16, timeout=args.timeout)
        router = gate.base_url(args.router)
        endpoint, info = gate.server_info(router, args.timeout)
        canary = gate.canary(ns, router, info, endpoint)
        r = make(host_probe("accept-gate-3-canary", Path(__file__)),
                 ServerIdentity(source=router, url=router, reported=gate.reported(endpoint, info)),
                 host_environment(), canary, started_at=started, finished_at=execute.now())
        g3.append(r)
        g3_fail += [f"{router} {c.id}: {(c.effects or {}).get('summary') or c.error.message}" for c in canary
                    if c.classification != "clean"]
    gates.append(GateResult(gate=3, title=GATES[3],
                            passed=not g3_fail, reasons=g3_fail or [f"in force: {', '.join(k for k, v in by_defence.items() if v)}"],
                            receipts=[bundle.receipt_name(r) for r in g3]))

    g4 = [gate_receipt(4, w, [as_case("deferred-release-in-force", "server args + env + tree", "aborted transfers' pages "
                                      "are held until drained, on a backend that implements it",
                                      lifetime(w, findings[tree_of[w.url]], declared[w.url]))], started) for w in workers]
    gates.append(verdict(4, GATES[4], g4))

    receipts = g1 + g2 + g3 + g4
    accepted = all(g.passed for g in gates)
    record = Acceptance(
        workers={w.url: {"role": w.role, "endpoint": w.endpoint, "version": w.version, "tree": tree_of[w.url]} for w in workers},
        trees={s: probed[s].row.tree_digest for s in sources}, gates=gates, accepted=accepted)
    out = bundle.write(target, kind=KIND, created_at=started, receipts=receipts, differentials=[], pins_sha256=None,
                       limits=LIMITS, extra=record.model_dump(mode="json"), signers=signers)
    print_gates(record)
    ui.out.print(f"bundle: {out}  (check with: diffprobe verify {out})")
    return errors.OK if accepted else errors.DIFFERS


def declarations(given: list[str], workers: list[Worker]) -> dict[str, dict[str, str]]:
    """``--env [URL=]NAME=VALUE`` -> worker URL -> NAME -> VALUE (without URL: every worker)."""
    out: dict[str, dict[str, str]] = {w.url: {} for w in workers}
    for text in given:
        url, rest = ("", text)
        if text.startswith(("http://", "https://")):
            url, _, rest = text.partition("=")
            url = gate.base_url(url)
            if url not in out:
                raise errors.BadInput(f"--env {text!r}: {url} is not a worker of this fleet")
        name, sep, value = rest.partition("=")
        if not sep or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name):
            raise errors.BadInput(f"--env {text!r}: expected [URL=]NAME=VALUE as set on the workers")
        for target in [url] if url else out:
            out[target][name] = value
    return out


def register(sub) -> None:
    p = sub.add_parser("accept", help="the four acceptance gates of a live PD deployment, bound to the tree it runs")
    p.add_argument("--prefill", action="append", required=True, metavar="URL", help="a prefill worker (repeatable)")
    p.add_argument("--decode", action="append", required=True, metavar="URL", help="a decode worker (repeatable)")
    p.add_argument("--router", metavar="URL", help="the router, for --negative and --canary")
    p.add_argument("--tree", action="append", default=[], metavar="[URL=]SOURCE",
                   help="the tree a worker runs (a vendor build); default pypi:sglang==<reported version>")
    p.add_argument("--env", action="append", default=[], metavar="[URL=]NAME=VALUE",
                   help="an environment variable as set on every worker, or on the worker at URL (SGLang reports none)")
    p.add_argument("--context", type=int, metavar="N", help="context length when a worker reports none")
    p.add_argument("--headroom", default="1.25", metavar="X", help="required pool / context ratio (default 1.25)")
    p.add_argument("--negative", action="store_true",
                   help="also send a prompt over the pool but under the context through the router: must be refused (4xx)")
    p.add_argument("--canary", type=int, metavar="N", help="also run the sentinel check through the router at N and N+1 tokens")
    p.add_argument("--timeout", type=int, default=600, metavar="S", help="seconds per HTTP request (default 600)")
    p.add_argument("--out", metavar="DIR", help="bundle directory to create")
    options.probe_options(p)
    options.common(p)
    options.signing(p)
    p.set_defaults(func=cmd_accept)
