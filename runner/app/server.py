"""A live SGLang server over HTTP, standard library only: its ``server_info`` (what it reports about itself, where
its KV pool is) and ``/generate``, each call bounded in time and size. What ``gate`` and ``accept``'s fleet ask of it."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

import orjson

from runner.errors import BadInput, DiffprobeError, Infrastructure

INFO_PATHS = ("/server_info", "/get_server_info")  # the second is the older, deprecated name
REPORTED = ("version", "model_path", "served_model_name", "context_length", "max_total_num_tokens",
            "max_req_input_len", "disaggregation_mode", "tp_size", "dp_size", "page_size")
POOL_IN_STATES = (("max_total_num_tokens",), ("memory_usage", "token_capacity"))
FILLER_BASE, FILLER_SPAN = 1000, 1000
MAX_BODY = 64 << 20  # a server_info or completion larger than this is not one


def is_int(v: Any) -> bool:
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


def call(url: str, path: str, payload: dict | None = None, timeout: float = 600, ends: float | None = None) -> Reply:
    """One HTTP request, the whole of it (connect, headers, body) within ``timeout`` seconds and
    before ``ends`` (``time.monotonic()``, the whole command's deadline). Any status comes back as a
    Reply; an unreachable server is exit 3; a server too slow for the deadline, or whose answer
    outgrows ``MAX_BODY``, fails closed (exit 1) with one line naming it.

    A socket timeout bounds each read, not the request: a server that drips a byte a second never
    trips it. So a timer cuts the connection at the deadline, whatever it is blocked in."""
    start = time.monotonic()
    whole = ends is not None and ends - start < timeout
    limit = (ends - start) if whole else timeout
    if limit <= 0:
        raise too_slow(url, path, timeout, whole)
    parts = urllib.parse.urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname, parts.port, timeout=limit)
    cut = threading.Event()
    timer = threading.Timer(limit, _cut, (conn, cut))
    timer.daemon = True
    data = None if payload is None else orjson.dumps(payload)
    try:
        timer.start()
        conn.request("GET" if data is None else "POST", parts.path + path, body=data,
                     headers={} if data is None else {"Content-Type": "application/json"})
        response = conn.getresponse()
        body = bytearray()
        while chunk := response.read1(1 << 16):  # one read at a time, so the cut is seen between reads
            body += chunk
            if len(body) > MAX_BODY:
                raise DiffprobeError.differs(f"{url}{path}: an answer over {MAX_BODY >> 20} MiB: failing closed")
        if cut.is_set():  # the cut reads as an end of the answer
            raise too_slow(url, path, timeout, whole)
        if response.length:
            raise http.client.IncompleteRead(bytes(body), response.length)
        status = response.status
    except (OSError, http.client.HTTPException, ValueError) as e:
        if cut.is_set() or time.monotonic() - start >= limit:
            raise too_slow(url, path, timeout, whole) from None
        raise Infrastructure(f"{url}{path}: unreachable ({getattr(e, 'reason', None) or e or type(e).__name__})") from None
    finally:
        timer.cancel()
        conn.close()
    return Reply(status, bytes(body), int((time.monotonic() - start) * 1000))


def _cut(conn: http.client.HTTPConnection, cut: threading.Event) -> None:
    cut.set()
    if conn.sock is not None:
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_RDWR)


def too_slow(url: str, path: str, timeout: float, whole: bool) -> DiffprobeError:
    why = "the whole command's deadline (--deadline) passed" if whole else f"no complete answer within {timeout:g} s (--timeout, per whole request)"
    return DiffprobeError.differs(f"{url}{path}: {why}: failing closed")


def server_info(url: str, timeout: float, ends: float | None = None) -> tuple[str | None, dict]:
    for path in INFO_PATHS:
        reply = call(url, path, timeout=timeout, ends=ends)
        data = reply.json()
        if reply.status == 200 and isinstance(data, dict):
            return path, data
    return None, {}


def reported(endpoint: str | None, info: dict) -> dict:
    """What the server said about itself, without floats (receipts hold none)."""
    kept = {k: info[k] for k in REPORTED if k in info and (info[k] is None or isinstance(info[k], (int, str)))}
    return {"endpoint": endpoint, **kept}


def rank_pools(info: dict) -> list[tuple[str | None, int | None]]:
    """Each data-parallel rank's KV pool in tokens, from its own entry of ``internal_states``:
    (field, tokens), or (None, None) for a rank that reports no integer pool (a float, a string or
    a missing field is not read). Where a rank reports more than one field, the smaller counts."""
    states = info.get("internal_states")
    out: list[tuple[str | None, int | None]] = []
    for state in states if isinstance(states, list) else []:
        found = [(".".join(path), v) for path in POOL_IN_STATES if is_int(v := _dig(state, path))]
        out.append(min(found, key=lambda f: f[1]) if found else (None, None))
    return out


def pool_size(info: dict) -> tuple[str, int] | None:
    """The smallest KV pool the server reports: the scheduler's top-level field (rank 0's) and each
    rank's own. A short rank behind a healthy rank 0 is the one judged."""
    found = [("max_total_num_tokens", top)] if is_int(top := info.get("max_total_num_tokens")) else []
    found += [(f"internal_states[{rank}].{field}", tokens) for rank, (field, tokens) in enumerate(rank_pools(info))
              if tokens is not None]
    return min(found, key=lambda f: f[1]) if found else None


def _dig(d: dict, path: tuple[str, ...]) -> Any:
    for key in path:
        d = d.get(key) if isinstance(d, dict) else None
    return d


def filler(length: int, offset: int) -> list[int]:
    return [FILLER_BASE + (offset + i) % FILLER_SPAN for i in range(length)]


def generate(url: str, prompt: list[int] | str, max_new_tokens: int, timeout: float, ends: float | None = None) -> Reply:
    key = "text" if isinstance(prompt, str) else "input_ids"
    return call(url, "/generate", {key: prompt, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}},
                timeout, ends)


