"""Access to the tree's SGLang, by feature detection only.

Releases differ in names, signatures and required context; the probes ask the tree what it has
(``hasattr``, ``inspect.signature``) and never compare version strings. SGLang modules are only
reached through here, after the harness imported them once in the parent process.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import sys
from array import array
from collections.abc import Iterator
from typing import Any

from .plain import plain

BOOTSTRAP_HOST = "192.0.2.10"  # TEST-NET-1: never a real peer
BOOTSTRAP_PORT = 8998
BOOTSTRAP_ROOM = 4242


class Missing(Exception):
    """The tree lacks an API a case needs; ``args[0]`` names it."""


def module(name: str) -> Any:
    return sys.modules.get(name) or importlib.import_module(name)


def resolve(api: str) -> Any:
    """Resolve ``pkg.mod.Obj.attr`` or ``pkg.mod.Obj.method(param)``; raise :class:`Missing`.

    A module that exists but fails to import raises its own error: that is not an absent API.
    """
    path, _, param = api.partition("(")
    parts = path.split(".")
    cut = next((n for n in range(len(parts), 0, -1) if _is_module(".".join(parts[:n]))), 0)
    if not cut:
        raise Missing(api)
    obj = module(".".join(parts[:cut]))
    for attr in parts[cut:]:
        if not hasattr(obj, attr):
            raise Missing(api)
        obj = getattr(obj, attr)
    if param and not accepts(obj, param.rstrip(")")):
        raise Missing(api)
    return obj


def _is_module(name: str) -> bool:
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def accepts(func: Any, param: str) -> bool:
    return param in inspect.signature(func).parameters


def torch() -> Any:
    """SGLang's own tensor library, for the few fields its APIs type as tensors."""
    return module("torch")


def publish_defaults() -> None:
    """Install default server configuration where the tree reads it from a runtime context.

    Newer trees read knobs (decode allocation policy, radix-cache switch) through
    ``get_disagg()`` / ``get_memory()``; the defaults are what a stock server would publish.
    """
    context = module("sglang.srt.runtime_context")
    if not hasattr(context, "publish"):
        return
    server_args = resolve("sglang.srt.server_args.ServerArgs")
    if hasattr(context, "reset_context"):
        context.reset_context()
    context.publish(server_args(model_path="dummy"), role="scheduler")


@contextlib.contextmanager
def tp_rank_zero() -> Iterator[None]:
    """Some calls log on TP rank 0 only, and no TP process group exists on CPU."""
    context = module("sglang.srt.runtime_context")
    parallel = getattr(context, "get_parallel", None)
    if parallel is None or not hasattr(parallel(), "override"):
        yield
        return
    with parallel().override(tp_rank=0):
        yield


def make_req(rid: str, prompt_len: int, mode_name: str) -> Any:
    """A real ``Req`` with a PD bootstrap address, as the tokenizer would hand it over."""
    req_cls = resolve("sglang.srt.managers.schedule_batch.Req")
    sampling = resolve("sglang.srt.sampling.sampling_params.SamplingParams")
    modes = resolve("sglang.srt.disaggregation.utils.DisaggregationMode")
    wanted = {
        "rid": rid,
        "origin_input_text": "",
        "origin_input_ids": array("q", range(prompt_len)),
        "sampling_params": sampling(max_new_tokens=8),
        "bootstrap_host": BOOTSTRAP_HOST,
        "bootstrap_port": BOOTSTRAP_PORT,
        "bootstrap_room": BOOTSTRAP_ROOM,
        "disagg_mode": getattr(modes, mode_name),
    }
    accepted = inspect.signature(req_cls).parameters
    return req_cls(**{key: value for key, value in wanted.items() if key in accepted})


def reject_at_intake(req: Any, message: str) -> None:
    """What the scheduler does to an over-long prompt: ``set_finish_with_abort``."""
    with tp_rank_zero():
        req.set_finish_with_abort(message)


def abort_reason() -> Any:
    """The finish reason an ``AbortReq`` leaves on a request that is already running."""
    return resolve("sglang.srt.managers.schedule_batch.FINISH_ABORT")("Aborted by AbortReq.", 503)


def request_state(req: Any) -> dict[str, Any]:
    """The request fields both fixes are about, read the same way on every tree."""
    return {
        "rid": req.rid,
        "prompt_tokens": len(req.origin_input_ids),
        "finished": bool(req.finished()),
        "to_finish": plain(req.to_finish),
        "finished_reason": plain(req.finished_reason),
        "pending_bootstrap": bool(getattr(req, "pending_bootstrap", False)),
        "metadata_buffer_index": int(req.metadata_buffer_index),
        "holds_kv": bool(req.kv.holds_kv),
        "holds_mamba": bool(req.kv.holds_mamba),
        "has_kv_sender": getattr(req, "disagg_kv_sender", None) is not None,
        "output_ids": plain(req.output_ids),
    }
