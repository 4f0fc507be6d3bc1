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
MAX_INPUT_LEN = 1018  # the longest prompt the scheduler accepts with a 1024-token KV pool


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
    ``get_disagg()`` / ``get_memory()``, and the server arguments through ``get_server_args()``;
    the defaults are what a stock server would publish."""
    publish_config()


def publish_config(**options: Any) -> str | None:
    """Publish the stock server configuration with ``options`` set, as the tree's own start-up
    installs it in its runtime context, and name the way it was installed (None: the tree has no
    runtime context holding server arguments, and reads none from one).

    The era is read from the context module itself: ``publish(server_args, role=...)`` where it has
    it (0.5.17 on); before that, the context's own ``set_server_args`` slot, which the scheduler
    fills through ``set_global_server_args_for_scheduler`` and which ``get_server_args()`` and, on
    the main branch between 0.5.16 and 0.5.17, the config namespaces (``get_disagg()``...) read."""
    context = _runtime_context()
    publish, process = getattr(context, "publish", None), getattr(context, "get_context", None)
    if publish is None and not (process is not None and hasattr(process(), "set_server_args")):
        return None
    cls = resolve("sglang.srt.server_args.ServerArgs")
    if hasattr(context, "reset_context"):
        context.reset_context()
    server_args = cls(model_path="dummy", **options)  # built on the fresh context, as before this helper
    if publish is not None:
        publish(server_args, role="scheduler")
        return f"{context.__name__}.publish"
    process().set_server_args(server_args)
    return f"{context.__name__}.get_context().set_server_args"


def _runtime_context() -> Any:
    """``sglang.srt.runtime_context`` where the tree has it (earlier trees read globals), else None."""
    name = "sglang.srt.runtime_context"
    return module(name) if _is_module(name) else None


@contextlib.contextmanager
def tp_rank_zero() -> Iterator[None]:
    """Some calls log on TP rank 0 only, and no TP process group exists on CPU.

    The rank is read from the runtime context (which can override it) and, in trees that have
    not moved every caller there yet, from ``get_tensor_model_parallel_rank`` as imported into
    ``schedule_batch``, which asserts that a group exists: for the call, that name answers 0,
    as a single-process server would.
    """
    with contextlib.ExitStack() as stack:
        parallel = getattr(_runtime_context(), "get_parallel", None)
        if parallel is not None and hasattr(parallel(), "override"):
            stack.enter_context(parallel().override(tp_rank=0))
        batch = module("sglang.srt.managers.schedule_batch")
        rank = getattr(batch, "get_tensor_model_parallel_rank", None)
        if rank is not None:
            batch.get_tensor_model_parallel_rank = lambda: 0
            stack.callback(setattr, batch, "get_tensor_model_parallel_rank", rank)
        yield


def kv_poll() -> Any:
    """The transfer poll states (``disaggregation.base``; in the first PD trees ``disaggregation.conn``)."""
    try:
        return resolve("sglang.srt.disaggregation.base.KVPoll")
    except Missing:
        return resolve("sglang.srt.disaggregation.conn.KVPoll")


def transfer_backend() -> Any:
    """A real (non-fake) transfer backend label, or None where the tree has a single transport."""
    try:
        backends = resolve("sglang.srt.disaggregation.utils.TransferBackend")
    except Missing:
        return None
    return next(member for member in backends if member.name != "FAKE")


def route_kv_endpoints(door_module: Any, get_kv_class: Any) -> None:
    """Make a door module build its KV senders and receivers through ``get_kv_class``.

    Where the module looks the class up (``get_kv_class(backend, KVClassType.X)``) that name is
    replaced; the first PD trees named ``KVSender`` / ``KVReceiver`` directly instead.
    """
    if hasattr(door_module, "get_kv_class"):
        door_module.get_kv_class = get_kv_class
        return
    direct = [(name, role) for name, role in (("KVSender", "sender"), ("KVReceiver", "receiver")) if hasattr(door_module, name)]
    if not direct:
        raise Missing(f"{door_module.__name__}.get_kv_class")
    for name, role in direct:
        setattr(door_module, name, get_kv_class(None, role))


def batch_result_class() -> Any:
    """``GenerationBatchResult`` (in ``managers.utils``; earlier defined in ``managers.scheduler``)."""
    try:
        return resolve("sglang.srt.managers.utils.GenerationBatchResult")
    except Missing:
        return resolve("sglang.srt.managers.scheduler.GenerationBatchResult")


def batch_result(cls: Any, next_token_ids: Any) -> Any:
    """The result of a prefill forward that sampled ``next_token_ids`` and asked for no logprobs.

    Older result classes declare every field without a default: those carry nothing here
    (None; ``False`` for a flag, 0 for the batch id)."""
    required = {
        name: (False if "bool" in str(param.annotation) else 0 if str(param.annotation) == "int" else None)
        for name, param in inspect.signature(cls).parameters.items()
        if param.default is inspect.Parameter.empty and name != "next_token_ids"
    }
    if "logits_output" in required:  # read unconditionally by those trees: a forward's output, no extras
        required["logits_output"] = logits_output()
    return cls(next_token_ids=next_token_ids, **required)


def logits_output() -> Any:
    """A real ``LogitsProcessorOutput`` that carries nothing (no hidden states, no logprobs)."""
    cls = resolve("sglang.srt.layers.logits_processor.LogitsProcessorOutput")
    required = [n for n, p in inspect.signature(cls).parameters.items() if p.default is inspect.Parameter.empty]
    return cls(**dict.fromkeys(required))


def set_middle_chunks(req: Any, count: int) -> None:
    """How many of the request's chunk results are still to come before its last one
    (``inflight_middle_chunks``; earlier the ``is_chunked`` counter)."""
    for field in ("inflight_middle_chunks", "is_chunked"):
        if hasattr(req, field):
            setattr(req, field, count)
            return
    raise Missing("sglang.srt.managers.schedule_batch.Req.inflight_middle_chunks")


def ran_middle_chunk(req: Any) -> None:
    """The request's extend range is that of a middle chunk that ran: it ends inside the input (``extend_range``;
    later ``extend_end``)."""
    _extend_to(req, max(len(req.origin_input_ids) // 2, 1))


def launch_last_chunk(req: Any) -> None:
    """The request's last chunk was launched (its extend range reaches the end of the input) while its
    middle chunk's result is still to be processed: overlap scheduling runs one batch ahead
    (``extend_range``; later ``extend_end``)."""
    _extend_to(req, len(req.origin_input_ids))


def _extend_to(req: Any, end: int) -> None:
    if hasattr(req, "set_extend_range"):
        req.set_extend_range(max(end - 1, 0), end)
    elif hasattr(req, "extend_end"):
        req.extend_end = end
    else:
        raise Missing("sglang.srt.managers.schedule_batch.Req.extend_range")


def ask_sampling_mask(req: Any) -> None:
    """The request asked for its sampling mask (``return_sampling_mask``, where requests have one)."""
    if not hasattr(req, "return_sampling_mask"):
        raise Missing("sglang.srt.managers.schedule_batch.Req.return_sampling_mask")
    req.return_sampling_mask = True


def sampling_mask_status(ok: bool) -> Any:
    """What the sampler reports for a token inside (``OK``) or outside (``INVALID``) its captured support."""
    status = resolve("sglang.srt.layers.logits_processor.SamplingMaskStatus")
    return status.OK if ok else status.INVALID


def discard_output(req: Any) -> None:
    """What the unified radix cache leaves on a request whose external KV load failed: its output is
    discarded (``discard_output_reason``) and not inserted into the radix tree."""
    if not hasattr(req, "discard_output_reason"):
        raise Missing("sglang.srt.managers.schedule_batch.Req.discard_output_reason")
    req.skip_radix_cache_insert = True
    req.discard_output_reason = resolve("sglang.srt.managers.schedule_batch.FINISH_ABORT")(
        "External KV cache load failed", 503)


def overlap_prefill(prefill: Any) -> bool:
    """Whether the tree runs its PD prefill worker with overlap scheduling at all: trees with an
    overlap loop (``event_loop_overlap_disagg_prefill``, 0.4.5.post3 on) send a middle chunk's KV
    from result processing; before it, the one (normal) loop sends it from ``process_prefill_chunk``
    ahead of the next forward, and result processing only counts the chunk down."""
    return hasattr(prefill.SchedulerDisaggregationPrefillMixin, "event_loop_overlap_disagg_prefill")


def server_defaults(*names: str) -> dict[str, Any]:
    """The stock server's value of each option the tree's ``ServerArgs`` declares (the others are left
    out, so reading them stays a gap)."""
    fields = getattr(resolve("sglang.srt.server_args.ServerArgs"), "__dataclass_fields__", {})
    return {name: fields[name].default for name in names if name in fields}


def single_rank_polls(module_: Any, journal: Any) -> None:
    """A transfer poll all-reduced over the attention CP/TP groups of a one-rank deployment is each
    sender's own poll: where a module calls ``poll_and_all_reduce_attn_cp_tp_group`` (no process
    group exists on CPU), it answers so, recorded."""
    name = "poll_and_all_reduce_attn_cp_tp_group"
    if hasattr(module_, name):
        setattr(module_, name, journal.method("collective", name, lambda pollers, *groups: [p.poll() for p in pollers]))


def worker_results(logits: Any, next_token_ids: list[int]) -> dict[str, Any]:
    """What the overlap worker's ``resolve_batch_result`` / ``resolve_last_batch_result`` hand back
    for a finished forward, shaped like the tree's own ``TpModelWorkerClient`` returns them
    (``logits_output, next_token_ids`` and, in later trees, ``can_run_cuda_graph``)."""
    import ast
    import textwrap

    try:
        client = resolve("sglang.srt.managers.tp_worker_overlap_thread.TpModelWorkerClient")
    except Missing:
        return {}
    answers = {}
    for name in ("resolve_batch_result", "resolve_last_batch_result"):
        method = getattr(client, name, None)
        if method is None:
            continue
        returns = [n.value for n in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(method)))) if isinstance(n, ast.Return)]
        width = len(returns[-1].elts) if returns and isinstance(returns[-1], ast.Tuple) else 2
        answers[name] = (logits, next_token_ids, False)[:width]
    return answers


def make_req(rid: str, prompt_len: int, mode_name: str, room: int = BOOTSTRAP_ROOM) -> Any:
    """A real ``Req`` with a PD bootstrap address (its bootstrap room ``room``), as the tokenizer would hand it over."""
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
        "bootstrap_room": room,
        "disagg_mode": getattr(modes, mode_name),
    }
    accepted = inspect.signature(req_cls).parameters
    req = req_cls(**{key: value for key, value in wanted.items() if key in accepted})
    for key in ("bootstrap_host", "bootstrap_port", "bootstrap_room"):
        if key not in accepted and hasattr(req, key):  # first PD trees: a field set after construction
            setattr(req, key, wanted[key])
    return req


def reject_at_intake(req: Any, message: str) -> None:
    """What the tree's scheduler does to an over-long prompt at intake.

    Where ``Req.set_finish_with_abort`` exists, the scheduler calls it with the length check's
    message. Before it existed, the scheduler's length check (``validate_input_length``) set
    ``finished_reason`` itself and the scheduler then cut the prompt to one token and the
    generation budget to zero, inline in ``handle_generate_request``; the same two assignments
    are made here, after the tree's own check.
    """
    if hasattr(req, "set_finish_with_abort"):
        with tp_rank_zero():
            req.set_finish_with_abort(message)
        return
    check = resolve("sglang.srt.managers.utils.validate_input_length")
    if not check(req, MAX_INPUT_LEN, False):
        raise AssertionError("the tree's length check accepted an over-long prompt")
    req.origin_input_ids = [0]
    req.sampling_params.max_new_tokens = 0


def mark_abort(req: Any) -> None:
    """What an ``AbortReq`` leaves on a request that is already running ("abort method 3"):
    a pending ``to_finish`` where the tree has it, before that the ``to_abort`` flag."""
    if hasattr(req, "to_finish"):
        req.to_finish = abort_reason()
    elif hasattr(req, "to_abort"):
        req.to_abort = True
    else:
        raise Missing("sglang.srt.managers.schedule_batch.Req.to_finish")


def abort_reason() -> Any:
    """The finish reason an ``AbortReq`` leaves on a request that is already running."""
    return resolve("sglang.srt.managers.schedule_batch.FINISH_ABORT")("Aborted by AbortReq.", 503)


# --- where a request holds its KV -----------------------------------------------------------------
# Newer trees keep a request's KV bookkeeping in ``req.kv`` (an object with ``holds_kv``); some
# earlier ones keep an optional ``req.kv`` record of allocated lengths beside ``req.req_pool_idx``;
# earlier still, the fields sit on the request itself. The probes ask the request which it has.


def _kv_holder(req: Any) -> Any:
    """The object that carries ``req_pool_idx``."""
    kv = getattr(req, "kv", None)
    return kv if hasattr(kv, "req_pool_idx") else req


def _kv_record_cls(req: Any) -> Any:
    """The optional per-request KV record (``req.kv``) of trees that keep ``req_pool_idx`` on the
    request, or None."""
    if _kv_holder(req) is not req or not hasattr(req, "kv"):
        return None
    return getattr(module("sglang.srt.managers.schedule_batch"), "ReqKvInfo", None)


def holds_kv(req: Any) -> bool:
    holder = _kv_holder(req)
    if hasattr(holder, "holds_kv"):
        return bool(holder.holds_kv)
    return holder.req_pool_idx is not None


def holds_mamba(req: Any) -> bool:
    holder = _kv_holder(req)
    if hasattr(holder, "holds_mamba"):
        return bool(holder.holds_mamba)
    return getattr(holder, "mamba_pool_idx", None) is not None


def give_kv(req: Any, length: int, row: int = 1) -> None:
    """The request holds a KV row of ``length`` tokens (row ``row`` of req_to_token), as after its prefill forward."""
    holder = _kv_holder(req)
    holder.req_pool_idx = row
    record = _kv_record_cls(req)
    if record is not None:
        fields = inspect.signature(record).parameters
        req.kv = record(**{k: v for k, v in (("kv_allocated_len", length), ("swa_evicted_seqlen", 0)) if k in fields})
    elif hasattr(holder, "kv_allocated_len"):
        holder.kv_allocated_len = length
    if hasattr(holder, "kv_committed_len"):  # its forward committed all of it (nothing over-allocated)
        holder.kv_committed_len = length


def give_mamba(req: Any) -> None:
    """The request holds a Mamba state slot; trees without Mamba state lack the field."""
    holder = _kv_holder(req)
    if not hasattr(holder, "mamba_pool_idx"):
        raise Missing("sglang.srt.managers.schedule_batch.Req.mamba_pool_idx")
    holder.mamba_pool_idx = torch().tensor([3])


def drop_kv(req: Any) -> None:
    """What the tree cache does when it takes a request's KV row and Mamba slot back."""
    holder = _kv_holder(req)
    holder.req_pool_idx = None
    if hasattr(holder, "mark_kv_released"):
        holder.mark_kv_released()
    elif _kv_record_cls(req) is not None:
        req.kv = None
    elif hasattr(holder, "kv_allocated_len"):
        holder.kv_allocated_len = 0
    if hasattr(holder, "mamba_pool_idx"):
        holder.mamba_pool_idx = None


def _backup_field(req: Any) -> str | None:
    """Where ``offload_kv_cache`` keeps the host copy of a retracted request's KV: a
    ``retraction_backup`` field where the request declares one, before that ``kv_cache_cpu``
    (set only by the offload); None for trees that never back retracted KV up."""
    if hasattr(_kv_holder(req), "retraction_backup"):
        return "retraction_backup"
    return "kv_cache_cpu" if hasattr(type(req), "offload_kv_cache") else None


def give_retraction_backup(req: Any, backup: Any) -> None:
    """The request owns a host copy of its KV taken at retraction."""
    field = _backup_field(req)
    if field is None:
        raise Missing("sglang.srt.managers.schedule_batch.Req.offload_kv_cache")
    setattr(_kv_holder(req), field, backup)


def retraction_backup(req: Any) -> Any:
    """The host copy of the request's KV taken at retraction, or None (also where the tree has none)."""
    field = _backup_field(req)
    return None if field is None else getattr(_kv_holder(req), field, None)


def request_state(req: Any) -> dict[str, Any]:
    """The request fields both fixes are about, read the same way on every tree.

    A tree that marks a running request's abort with ``to_abort`` (before ``to_finish``) also
    reports that flag.
    """
    state = {
        "rid": req.rid,
        "prompt_tokens": len(req.origin_input_ids),
        "finished": bool(req.finished()),
        "to_finish": plain(getattr(req, "to_finish", None)),
        "finished_reason": plain(req.finished_reason),
        "pending_bootstrap": bool(getattr(req, "pending_bootstrap", False)),
        "metadata_buffer_index": int(req.metadata_buffer_index),
        "holds_kv": holds_kv(req),
        "holds_mamba": holds_mamba(req),
        "has_kv_sender": getattr(req, "disagg_kv_sender", None) is not None,
        "output_ids": plain(req.output_ids),
    }
    if not hasattr(req, "to_finish") and hasattr(req, "to_abort"):
        state["to_abort"] = bool(req.to_abort)
    return state
