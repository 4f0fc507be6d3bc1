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

import math
import secrets
from fractions import Fraction
from pathlib import Path

from runner import errors, ui
from runner.app.server import FILLER_SPAN, INFO_PATHS, Reply, base_url, filler, generate, is_int, pool_size, reported, server_info
from runner.commands import options
from runner.evidence import bundle
from runner.sandbox import execute
from runner.errors import BadInput, Infrastructure
from runner.judge.observations import Case, CaseError
from runner.evidence.receipts import ServerIdentity, host_environment, host_probe, make
from runner.evidence.records import GateRecord

LIMITS = [
    "a gate observes one live deployment at one moment, through its HTTP API; it reads no source code",
    "a passing canary or latency gate shows no leak for these prompts, not the absence of every leak",
]


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


POOL_TITLE = "the KV pool read from the live server covers the context with headroom"


def pool(args, url: str, info: dict, endpoint: str | None) -> list[Case]:
    """Gate 1: the pool read from the live worker covers the context with headroom."""
    found = pool_size(info)
    if found is None:
        tried = ", ".join(INFO_PATHS) if endpoint is None else endpoint
        return [unread("pool-covers-context", f"no pool size (max_total_num_tokens, internal_states[*].memory_usage."
                                              f"token_capacity) exposed by {tried}: failing closed")]
    context, source = context_of(args, url, info, endpoint)
    return [pool_case("pool-covers-context", endpoint, *found, context, source, args.headroom)]


def unread(id: str, why: str, title: str = POOL_TITLE) -> Case:
    """A check that could not be made because the server did not say what it needs: fails closed."""
    return Case(id=id, site="server info", role="bug", title=title, signature="pool < context x headroom",
                outcome="not_applicable", classification="inconclusive", missing=why, duration_ms=0)


def context_of(args, url: str, info: dict, endpoint: str | None) -> tuple[int, str]:
    if is_int(info.get("context_length")):
        return info["context_length"], f"context_length from {endpoint}"
    if args.context is not None:
        return args.context, "--context"
    raise BadInput(f"{url}: the server reports no context_length; pass --context N")


def pool_case(id: str, endpoint: str | None, field: str, tokens: int, context: int, source: str, headroom_text: str,
              who: str = "") -> Case:
    """The pool ``field`` reports (``tokens``) against the context times the headroom."""
    headroom = _ratio(headroom_text, "--headroom")
    required = math.ceil(context * headroom)
    short = tokens < required
    summary = (f"{who}pool {tokens} tokens ({field} from {endpoint}) vs context {context} ({source}) x {headroom_text} "
               f"= {required}: " + (f"SHORT by {required - tokens}" if short else "covered"))
    effects = {"endpoint": endpoint, "field": field, "pool_tokens": tokens, "context_tokens": context,
               "context_from": source, "headroom": headroom_text, "required_tokens": required,
               "short_by": max(0, required - tokens), "summary": summary}
    return _observed(id, f"{endpoint} {field}", POOL_TITLE, "pool < context x headroom", short, effects)


def canary(args, url: str, info: dict, endpoint: str | None) -> list[Case]:
    """Detection signal: a sentinel planted in a long prompt never surfaces in another response."""
    if args.tokens < 1:
        raise BadInput("--tokens must be a positive number of tokens")
    nonce = secrets.token_hex(8)
    sentinel = f"CANARY-{nonce}"
    sentence = f"Remember this access code: {sentinel}. "
    plant_tokens = args.plant_tokens or max(1, args.tokens // 2)
    planted = generate(url, sentence * max(1, plant_tokens * 4 // len(sentence)), 1, args.timeout, args.ends)
    meta = (planted.json() or {}).get("meta_info") if planted.answered else None
    plant = {"sentinel": sentinel, "plant_status": planted.status, "plant_answered": planted.answered,
             "plant_prompt_tokens": meta.get("prompt_tokens") if isinstance(meta, dict) and is_int(meta.get("prompt_tokens")) else None}
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
        reply = generate(url, filler(length, offset + k), args.max_new_tokens, args.timeout, args.ends)
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
    generate(url, filler(buckets[0], offset), 1, args.timeout, args.ends)  # warm-up, not timed
    timed: dict[int, list[Reply]] = {}
    for length in buckets:
        timed[length] = [generate(url, filler(length, offset + 1 + len(timed) * args.repeats + r), 1, args.timeout, args.ends)
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
    endpoint, info = server_info(url, args.timeout, args.ends)
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
    gate = options.command(
        sub, "gate", "a live server passes one check: pool, canary or latency",
        about="Checks a running SGLang deployment over HTTP: the KV pool against the context, a planted canary, prefill latency.",
        example="diffprobe gate pool --url http://127.0.0.1:30000", ok="the gate passed", differs="the gate failed (or failed closed: named)")
    gates = gate.add_subparsers(dest="gate", required=True, metavar="GATE")
    codes = {"ok": "the gate passed", "differs": "the gate failed, or the server's answer failed it closed (the line says which)"}
    pl = options.command(gates, "pool", "the KV pool read from the live server covers the context with headroom",
                         example="diffprobe gate pool --url http://127.0.0.1:30000 --headroom 1.25", **codes)
    pl.add_argument("--context", type=int, metavar="N", help="context length when the server reports none")
    pl.add_argument("--headroom", default="1.25", metavar="X", help="required pool / context ratio (default 1.25)")
    c = options.command(gates, "canary", "a planted sentinel never surfaces in unrelated long prompts (limit, limit+1)",
                        example="diffprobe gate canary --url http://127.0.0.1:30000 --tokens 32768", **codes)
    c.add_argument("--tokens", type=int, required=True, metavar="N", help="the limit: prompts of N and N+1 tokens are sent")
    c.add_argument("--plant-tokens", type=int, metavar="N", help="length of the sentinel prompt (default N/2, ~4 chars a token)")
    c.add_argument("--max-new-tokens", type=int, default=64, metavar="M", help="tokens generated per probe (default 64)")
    lat = options.command(gates, "latency", "prefill time grows with prompt length: a long prompt answered as fast as a short one is flagged",
                          example="diffprobe gate latency --url http://127.0.0.1:30000 --tokens 32768", **codes)
    lat.add_argument("--tokens", type=int, required=True, metavar="N", help="longest bucket; others are N/2, N/8, N/64")
    lat.add_argument("--repeats", type=int, default=3, metavar="R", help="requests per bucket, fastest taken (default 3)")
    lat.add_argument("--tolerance", default="1.5", metavar="X",
                     help="flag when a longer prompt's fastest time is within X times the shortest's (default 1.5)")
    for p in (pl, c, lat):
        p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
        options.out(p, "gate-GATE")
        options.http_deadlines(p, whole_command=False)
        options.signing(p)
        p.set_defaults(func=cmd_gate, ends=None)
