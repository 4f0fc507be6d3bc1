"""Gates against a running SGLang deployment (BRIEF: "Four acceptance gates", "Detection signals").

Why: the tree probes say what a release's code does; an operator also needs to know what the
deployment in front of them does. Each gate reads or drives the live server over HTTP (standard
library only), writes a receipt whose source is the server URL and what it reported, and exits 1
when its check fails or cannot be made (fail closed).

Request shape (SGLang's native ``POST /generate``, body ``GenerateReqInput``):
``{"input_ids": [...], "sampling_params": {"max_new_tokens": M, "temperature": 0}}``; a
non-streaming answer is ``{"text": ..., "meta_info": {...}}``, a rejection ``{"error": {...}}``.
``input_ids`` makes prompt lengths exact without the model's tokenizer: ids 1000..1999 exist in every
current vocabulary, and each prompt starts at its own offset so no two share a prefix (a radix-cache
hit would make a prefill look fast). The sentinel prompt is sent as ``text`` so the sentinel is
made of the model's own tokens. Point ``--url`` at the prefill worker for ``pool`` and at the router
for ``canary`` and ``latency``.
"""

from __future__ import annotations

import http.client
import math
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import orjson

from runner import errors, ui
from runner.commands import options
from runner.evidence import bundle
from runner.sandbox import execute
from runner.errors import BadInput, Infrastructure
from runner.evidence.observations import Case, CaseError
from runner.evidence.receipts import ServerIdentity, host_environment, host_probe, make
from runner.evidence.records import GateRecord

INFO_PATHS = ("/server_info", "/get_server_info")  # the second is the older, deprecated name
REPORTED = ("version", "model_path", "served_model_name", "context_length", "max_total_num_tokens",
            "max_req_input_len", "disaggregation_mode", "tp_size", "dp_size", "page_size")
POOL_IN_STATES = (("max_total_num_tokens",), ("memory_usage", "token_capacity"))
FILLER_BASE, FILLER_SPAN = 1000, 1000
LIMITS = [
    "a gate observes one live deployment at one moment, through its HTTP API; it reads no source code",
    "a passing canary or latency gate shows no leak for these prompts, not the absence of every leak",
]


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    ms: int

    def json(self) -> Any:
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return None

    @property
    def answered(self) -> bool:
        """A completion, judged by the body: a 200 that carries an error is still a rejection."""
        data = self.json()
        return isinstance(data, dict) and isinstance(data.get("text"), str) and "error" not in data


def base_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    try:
        parts.port
    except ValueError:
        raise BadInput(f"--url {url!r}: bad port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(f"--url {url!r}: expected http(s)://HOST[:PORT]")
    return url.rstrip("/")


def call(url: str, path: str, payload: dict | None = None, timeout: int = 600) -> Reply:
    """One HTTP request; any status comes back as a Reply, an unreachable server as exit 3."""
    data = None if payload is None else orjson.dumps(payload)
    req = urllib.request.Request(url + path, data=data, method="GET" if data is None else "POST",
                                 headers={} if data is None else {"Content-Type": "application/json"})
    start = time.perf_counter_ns()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, body = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        raise Infrastructure(f"{url}{path}: unreachable ({getattr(e, 'reason', e)})") from None
    return Reply(status, body, (time.perf_counter_ns() - start) // 1_000_000)


def server_info(url: str, timeout: int) -> tuple[str | None, dict]:
    for path in INFO_PATHS:
        reply = call(url, path, timeout=timeout)
        data = reply.json()
        if reply.status == 200 and isinstance(data, dict):
            return path, data
    return None, {}


def reported(endpoint: str | None, info: dict) -> dict:
    """What the server said about itself, without floats (receipts hold none)."""
    kept = {k: info[k] for k in REPORTED if k in info and (info[k] is None or isinstance(info[k], (int, str)))}
    return {"endpoint": endpoint, **kept}


def pool_size(info: dict) -> tuple[str, int] | None:
    """The KV pool in tokens: the scheduler's top-level field, else the smallest data-parallel rank's."""
    if _int(top := info.get("max_total_num_tokens")):
        return "max_total_num_tokens", top
    states = [s for s in info.get("internal_states") or [] if isinstance(s, dict)]
    for path in POOL_IN_STATES:
        values = [v for s in states if _int(v := _dig(s, path))]
        if values:
            return f"internal_states[*].{'.'.join(path)} (smallest of {len(values)} rank(s))", min(values)
    return None


def _dig(d: dict, path: tuple[str, ...]) -> Any:
    for key in path:
        d = d.get(key) if isinstance(d, dict) else None
    return d


def filler(length: int, offset: int) -> list[int]:
    return [FILLER_BASE + (offset + i) % FILLER_SPAN for i in range(length)]


def generate(url: str, prompt: list[int] | str, max_new_tokens: int, timeout: int) -> Reply:
    key = "text" if isinstance(prompt, str) else "input_ids"
    return call(url, "/generate", {key: prompt, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}},
                timeout)


def _ratio(text: str, flag: str) -> Fraction:
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise BadInput(f"{flag} {text!r}: expected a number such as 1.25") from None
    if value <= 0:
        raise BadInput(f"{flag} {text!r}: must be positive")
    return value


def _observed(id: str, site: str, title: str, signature: str, bug: bool, effects: dict, ms: int = 0) -> Case:
    return Case(id=id, site=site, role="bug", title=title, signature=signature, outcome="observed",
                classification="bug" if bug else "clean", effects=effects, duration_ms=ms)


# --- the three gates ----------------------------------------------------------------------------


def pool(args, url: str, info: dict, endpoint: str | None) -> list[Case]:
    """Gate 1: the pool read from the live worker covers the context with headroom."""
    found = pool_size(info)
    title = "the KV pool read from the live server covers the context with headroom"
    if found is None:
        tried = ", ".join(INFO_PATHS) if endpoint is None else endpoint
        return [Case(id="pool-covers-context", site="server info", role="bug", title=title,
                     signature="pool < context x headroom", outcome="not_applicable", classification="inconclusive",
                     missing=f"no pool size (max_total_num_tokens, internal_states[*].memory_usage.token_capacity) "
                             f"exposed by {tried}: failing closed", duration_ms=0)]
    field, tokens = found
    if _int(info.get("context_length")):
        context, source = info["context_length"], f"context_length from {endpoint}"
    elif args.context is not None:
        context, source = args.context, "--context"
    else:
        raise BadInput(f"{url}: the server reports no context_length; pass --context N")
    headroom = _ratio(args.headroom, "--headroom")
    required = math.ceil(context * headroom)
    short = tokens < required
    summary = (f"pool {tokens} tokens ({field} from {endpoint}) vs context {context} ({source}) x {args.headroom} "
               f"= {required}: " + (f"SHORT by {required - tokens}" if short else "covered"))
    effects = {"endpoint": endpoint, "field": field, "pool_tokens": tokens, "context_tokens": context,
               "context_from": source, "headroom": args.headroom, "required_tokens": required,
               "short_by": max(0, required - tokens), "summary": summary}
    return [_observed("pool-covers-context", f"{endpoint} {field}", title, "pool < context x headroom", short, effects)]


def canary(args, url: str, info: dict, endpoint: str | None) -> list[Case]:
    """Detection signal: a sentinel planted in a long prompt never surfaces in another response."""
    if args.tokens < 1:
        raise BadInput("--tokens must be a positive number of tokens")
    nonce = secrets.token_hex(8)
    sentinel = f"CANARY-{nonce}"
    sentence = f"Remember this access code: {sentinel}. "
    plant_tokens = args.plant_tokens or max(1, args.tokens // 2)
    planted = generate(url, sentence * max(1, plant_tokens * 4 // len(sentence)), 1, args.timeout)
    meta = (planted.json() or {}).get("meta_info") if planted.answered else None
    plant = {"sentinel": sentinel, "plant_status": planted.status, "plant_answered": planted.answered,
             "plant_prompt_tokens": meta.get("prompt_tokens") if isinstance(meta, dict) and _int(meta.get("prompt_tokens")) else None}
    offset = secrets.randbelow(FILLER_SPAN)
    cases = []
    for k, (name, length) in enumerate((("at-limit", args.tokens), ("over-limit", args.tokens + 1))):
        title = f"an unrelated {length}-token prompt ({name}) never returns the planted sentinel"
        signature = "either half of the sentinel's nonce in the response body (status ignored)"
        if not planted.answered:
            cases.append(Case(id=f"canary-{name}", site="/generate", role="bug", title=title, signature=signature,
                              outcome="error", classification="inconclusive", duration_ms=0,
                              error=CaseError(type="PlantNotAnswered", where="setup",
                                              message=f"the sentinel prompt was not answered (HTTP {planted.status}): failing closed")))
            continue
        reply = generate(url, filler(length, offset + k), args.max_new_tokens, args.timeout)
        leaked = any(half.encode() in reply.body for half in (nonce[:8], nonce[8:]))
        summary = (f"{length} tokens: HTTP {reply.status}, {'answered' if reply.answered else 'rejected'}, "
                   + ("SENTINEL IN BODY" if leaked else "no sentinel in body"))
        effects = {**plant, "prompt_tokens": length, "status": reply.status, "answered": reply.answered,
                   "sentinel_in_body": leaked, "body_bytes": len(reply.body), "ms": reply.ms, "summary": summary}
        cases.append(_observed(f"canary-{name}", "/generate", title, signature, leaked, effects, reply.ms))
    return cases


def latency(args, url: str, info: dict, endpoint: str | None) -> list[Case]:
    """Detection signal: a long prompt answered about as fast as a short one skipped its prefill."""
    if args.tokens < 64 or args.repeats < 1:
        raise BadInput("--tokens must be at least 64 and --repeats at least 1")
    tolerance = _ratio(args.tolerance, "--tolerance")
    buckets = sorted({args.tokens // 64, args.tokens // 8, args.tokens // 2, args.tokens})
    offset = secrets.randbelow(FILLER_SPAN)
    generate(url, filler(buckets[0], offset), 1, args.timeout)  # warm-up, not timed
    timed: dict[int, list[Reply]] = {}
    for length in buckets:
        timed[length] = [generate(url, filler(length, offset + 1 + len(timed) * args.repeats + r), 1, args.timeout)
                         for r in range(args.repeats)]
    short_len = buckets[0]
    short_ms = min(r.ms for r in timed[short_len])  # noise only adds time: the fastest repeat is the truest
    if not all(r.answered for r in timed[short_len]):
        raise Infrastructure(f"{url}: the shortest prompt ({short_len} tokens) was not answered; no baseline to time against")
    cases = []
    for length in buckets[1:]:
        replies = timed[length]
        fastest = min(r.ms for r in replies)
        answered = all(r.answered for r in replies)
        fast = answered and fastest <= tolerance * max(short_ms, 1)
        summary = (f"{length} tokens: fastest {fastest} ms vs {short_ms} ms for {short_len} tokens: "
                   + ("rejected explicitly" if not answered else "TOO FAST for its length" if fast else "slower, as expected"))
        effects = {"prompt_tokens": length, "ms": [r.ms for r in replies], "fastest_ms": fastest,
                   "shortest_tokens": short_len, "shortest_fastest_ms": short_ms, "answered": answered,
                   "statuses": [r.status for r in replies], "tolerance": args.tolerance, "summary": summary}
        cases.append(_observed(f"latency-{length}", "/generate", f"a {length}-token prompt takes longer to prefill than "
                               f"a {short_len}-token one", f"answered within {args.tolerance} x the shortest prompt's time",
                               fast, effects, sum(r.ms for r in replies)))
    return cases


GATES = {"pool": pool, "canary": canary, "latency": latency}


def cmd_gate(args) -> int:
    signers = options.signers(args)
    url = base_url(args.url)
    started = execute.now()
    endpoint, info = server_info(url, args.timeout)
    cases = GATES[args.gate](args, url, info, endpoint)
    receipt = make(host_probe(f"gate-{args.gate}", Path(__file__)),
                   ServerIdentity(source=url, url=url, reported=reported(endpoint, info)),
                   host_environment(), cases, started_at=started, finished_at=execute.now())
    out = bundle.write(bundle.out_path(args.out, f"gate-{args.gate}"), kind=f"gate-{args.gate}",
                       created_at=started, receipts=[receipt], differentials=[], pins_sha256=None, limits=LIMITS,
                       extra=GateRecord(gate=args.gate, url=url).model_dump(mode="json"), signers=signers)
    for case in cases:
        if case.outcome == "observed":
            mark = "[red]✗ FAIL[/]" if case.classification == "bug" else "[green]✓ pass[/]"
            ui.out.print(f"{mark} {case.id}: ", end="")
            ui.out.print(case.effects["summary"], markup=False)
        else:
            ui.out.print(f"[red]✗ FAIL[/] {case.id}: ", end="")
            ui.out.print(case.missing or case.error.message, markup=False)
    ui.out.print(f"bundle: {out}  (check with: diffprobe verify {out})")
    return errors.OK if all(c.classification == "clean" for c in cases) else errors.DIFFERS


def register(sub) -> None:
    gate = sub.add_parser("gate", help="check a running SGLang deployment: pool vs context, canary, prefill latency")
    gates = gate.add_subparsers(dest="gate", required=True, metavar="GATE")
    pl = gates.add_parser("pool", help="the KV pool read from the live server covers the context with headroom")
    pl.add_argument("--context", type=int, metavar="N", help="context length when the server reports none")
    pl.add_argument("--headroom", default="1.25", metavar="X", help="required pool / context ratio (default 1.25)")
    c = gates.add_parser("canary", help="a planted sentinel never surfaces in unrelated long prompts (limit, limit+1)")
    c.add_argument("--tokens", type=int, required=True, metavar="N", help="the limit: prompts of N and N+1 tokens are sent")
    c.add_argument("--plant-tokens", type=int, metavar="N", help="length of the sentinel prompt (default N/2, ~4 chars a token)")
    c.add_argument("--max-new-tokens", type=int, default=64, metavar="M", help="tokens generated per probe (default 64)")
    lat = gates.add_parser("latency", help="prefill time by prompt length; flag a long prompt answered as fast as a short one")
    lat.add_argument("--tokens", type=int, required=True, metavar="N", help="longest bucket; others are N/2, N/8, N/64")
    lat.add_argument("--repeats", type=int, default=3, metavar="R", help="requests per bucket, fastest taken (default 3)")
    lat.add_argument("--tolerance", default="1.5", metavar="X",
                     help="flag when a longer prompt's fastest time is within X times the shortest's (default 1.5)")
    for p in (pl, c, lat):
        p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
        p.add_argument("--out", metavar="DIR", help="bundle directory to create (must not exist or be empty)")
        p.add_argument("--timeout", type=int, default=600, metavar="S", help="seconds per HTTP request (default 600)")
        options.signing(p)
        p.set_defaults(func=cmd_gate)
