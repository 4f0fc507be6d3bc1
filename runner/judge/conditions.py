"""The atomic conditions of the fix's code, as the host reads them from the stored tree, and what the cases
made of them.

A line of the fix's code runs whichever way its condition goes, so line coverage cannot tell a fix whose
duty holds on every input from one that holds only on the inputs the cases happened to build. Each atomic
condition of the fix's code (``probes/conditions.py``: parts of boolean expressions, comparisons, tests,
calls used as tests) is listed here from the stored bytes, sent to the tree's process as data (it rewrites
just those functions to record them), and judged from the cases' records: a "fixed" rests on every one
seen both true and false, or on a reason checked here (a constant; a condition on an input no probe can
build, declared in :data:`REASONS` with its exact text).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from probes import conditions, fixcode
from probes.duties import EQUIVALENT, FIX_CODE, mutant_key
from runner.judge.observations import Case

TEXT = 120  # a condition's text in a receipt, at most


class Condition(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    at: str = Field(description="file:line:col of its first character (file relative to the directory holding sglang/)")
    kind: Literal["truth", "tested", "value"] = Field(description="probes/conditions.py: only its truth is used; "
                                                                  "tested and maybe returned; its value is used")
    text: str = Field(description="its source, as the stored tree has it (at most 120 characters)")
    seen: list[bool] = Field([], description="the values the cases' processes recorded it taking")
    reason: str | None = Field(None, description="why it need not go both ways, checked on the host; null: it must")
    equivalent: list[bool] = Field([], description="the values a mutant replacing it by that constant is declared "
                                                   "equivalent for (duty tables' EQUIVALENT): seeing only such a "
                                                   "value is enough, since the tree behaves as if it always took it")

    @property
    def line(self) -> str:
        """``file:line``."""
        return self.at.rsplit(":", 1)[0]

    def one_way(self) -> str | None:
        """As a verdict names it (``condition `X` at file:line never false``), or None when seen both ways or
        explained."""
        missing = self.missing()
        if not missing:
            return None
        never = "never true or false" if len(missing) == 2 else f"never {str(missing[0]).lower()}"
        return f"condition `{self.text}` at {self.line} {never}"

    def missing(self) -> list[bool]:
        """The values no case saw it take (none when a reason explains it)."""
        if self.reason is not None:
            return []
        return [v for v in (False, True) if v not in self.seen and (not v) not in self.equivalent]


# Conditions on an input no probe can build, each with why, keyed by (function as FIX_CODE names it, the tests of
# the ``if``/``while`` statements around it from the outside in, joined by " / ", its text): each part must match
# the stored tree's exactly, so a changed condition, or one moved under another test, is never excused by an old
# reason, and the same text elsewhere in the function is not excused by it either.
_D = "sglang.srt.disaggregation.decode.SchedulerDisaggregationDecodeMixin"
_P = "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin"
_C, _M = "sglang.srt.disaggregation.common.conn", "sglang.srt.disaggregation.mooncake.conn"
_INJECTED = ("a test-only fault injection (SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB, read by upstream's CI): no "
             "deployment sets it, and the duties are about real mismatches, which the cases build")
_HOLDS = ("only a request not aborted at its final result reaches this test (is_aborted was false above), and such a "
          "request still holds its KV, Mamba state or metadata buffer: only an abort or a bootstrap failure (which "
          "aborts it) gives them up, so the retire path never finds it holding nothing here")
_M = "sglang.srt.disaggregation.mooncake.conn.MooncakeKVManager"
_WORKER_CRASHED = (
    "the test of the worker's last-resort handler (it poisons the chunk's room, then re-raises: the transfer thread "
    "dies). kv_chunk is None there only when queue.get() itself raised, and the tree's FastQueue.get "
    "(disaggregation/common/utils.py) waits on a Condition until its deque is non-empty and pops it: it raises nothing "
    "an `except Exception` takes, so the test is never false; its true side needs the worker's own code to raise on a "
    "chunk (a defect of the tree: its NOTE says the handler goes once the thread is bug-free), which no case fabricates")
_IN_CI = "true only in upstream's CI, where a mismatch raises to fail the test run; a deployment never runs it"
REASONS: dict[tuple[str, str, str], str] = {
    (f"{_M}.transfer_worker", "True", "kv_chunk is not None"): _WORKER_CRASHED,
    (f"{_D}._verify_kv_checksums", "", "mismatch_prob > 0"): _INJECTED,
    (f"{_D}._verify_kv_checksums", "", "prealloc_queue.kv_checksum_mismatch_injector.random() < mismatch_prob"):
        _INJECTED,
    (f"{_D}._handle_kv_checksum_mismatch", "", "is_in_ci()"): _IN_CI,
    (f"{_D}._handle_kv_checksum_mismatch", "", "envs.SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB.get() == 0"):
        _INJECTED,
    (f"{_D}._handle_kv_checksum_mismatch", "", "self.metrics_reporter.enable_metrics"):
        "decides only whether a metrics counter is incremented: no duty is about metrics (mutate leaves them alone too)",
    (f"{_P}.process_batch_result_disagg_prefill", "req.inflight_middle_chunks <= 0 / sampling_mask_finish_reason is not None",
     "self._retire_aborted_prefill_result(req)"): _HOLDS,
    (f"{_P}.process_batch_result_disagg_prefill", "req.inflight_middle_chunks <= 0 / req.grammar is not None / is_aborted(req)",
     "self._retire_aborted_prefill_result(req)"): _HOLDS,
    # #40645 (0.5.21): the sender's clear() and the prefill bootstrap thread
    (f"{_C}.CommonKVSender.clear", "", "hasattr(self.kv_mgr, '_deferred_ack_targets')"):
        "never false on the tree's own objects: every KV sender is a CommonKVSender subclass (Mooncake, Ascend, NIXL, "
        "Mori) built on its backend's KV manager in PREFILL mode, and CommonKVManager.__init__, which each of those "
        "managers calls, sets _deferred_ack_targets there unconditionally; only a manager from outside the tree lacks it",
    (f"{_C}.CommonKVSender.clear", "hasattr(self.kv_mgr, '_deferred_ack_targets')",
     "hasattr(self.kv_mgr, '_staging_outstanding')"):
        "false only on the Mori backend's manager (Mooncake, Ascend and NIXL set _staging_outstanding in PREFILL mode; "
        "Mori never does), and mori/conn.py imports the ROCm `mori` library at import, which is not on PyPI and no CPU "
        "environment can build: no probe can make a Mori sender",
    (f"{_M}.start_prefill_thread", "", "self._stopped"):
        "the bootstrap thread's own loop test: it turns true only once teardown() discards the manager in a P<->D role "
        "switch (--enable-pd-role-switch), stopping its transfer workers and closing its engine registrations and "
        "sockets, and then the thread returns without reading another message; every message a case delivers reaches "
        "a live manager, and no acknowledgement, registration or release is decided by this test",
}
# Decode-side host (HiCache) receive: a request staged into host memory instead of decode's device pages. Its
# conditions are explained only where the stored tree shows no backend supports it (``PREMISES``, checked below):
# a tree with a backend that does gets no reason, and its cases must build the state.
_Q = "sglang.srt.disaggregation.decode.DecodeTransferQueue"
_HOST = ("decode-side host receive: no transfer backend of this tree supports host KV destinations (every "
         "supports_host_destination its backends define is False), so its decode refuses "
         "--disaggregation-decode-host-receive-threshold below 1 at start-up (\"Transfer backend does not support "
         "decode host KV destinations\") and never stages a request to host memory: enable_host_receive and "
         "host_staged are never true in a server that runs")
# A backend's hook explained only where the stored tree shows every definition of it answers True (``PREMISES``).
_VERIFY = ("a backend's hook that no KV manager of this tree answers False: every should_verify_kv_checksum its "
           "backends define (BaseKVManager's, and any override) returns True for every peer, so no manager the tree "
           "builds skips a peer; a prefill layout decode cannot compare is told apart by the layout signature, which "
           "the cases vary (incomparable-layout)")
REASONS[(f"{_D}._verify_kv_checksums", "", "kv_manager.should_verify_kv_checksum(_bootstrap_addr(req))")] = _VERIFY
_FAILED = "poll == KVPoll.Failed"
_FAILED_OR_RESTORE = "poll == KVPoll.Failed or hicache_restore_status == HiCacheRestoreResult.FAILED"
_HOST_STAGED = "self.enable_host_receive and decode_req.host_staged"
REASONS.update({
    (f"{_Q}.pop_transferred", _FAILED, "requires_host_drain"): _HOST,
    (f"{_Q}.pop_transferred", _FAILED_OR_RESTORE, "requires_host_drain"): _HOST,
    **{(f"{_Q}._defer_release", "", text): _HOST for text in (
        "self.enable_host_receive", "decode_req.host_staged", "self._is_host_destination(decode_req)")},
    **{(f"{_Q}.resolve_deferred_releases", "", text): _HOST for text in (
        "self.enable_host_receive", "req.host_staged", "decode_req.host_staged", "self._is_host_destination(decode_req)")},
    (f"{_Q}.resolve_deferred_releases", _HOST_STAGED, "next(host_ready)"): _HOST,
})
# L2 (0.5.23): the decode scheduler's idleness counts pending deferred releases; the tests around that one statement
_S = "sglang.srt.managers.scheduler.Scheduler"
REASONS.update({
    (f"{_S}.is_fully_idle", "", "for_health_check"):
        "true only where a health-check request asks whether it can ride on running work (process_input_requests' "
        "is_fully_idle(for_health_check=True)): that reading skips every queue by design and clears nothing; "
        "flush_cache, whose answer clears the pools the held pages are in, and every other caller pass it false",
    (f"{_S}.is_fully_idle", "not for_health_check", "self.disaggregation_mode == DisaggregationMode.DECODE"):
        "false only on a prefill scheduler, which holds no decode transfer queue and so no deferred decode release: "
        "pages held for a write that may still land exist on decode alone, where the cases flush",
})
HANDED_ON = "its value is handed on, not tested (`x or y` gives y whatever its truth): it decides nothing here"
_PACKAGE = "sglang.srt.disaggregation"


@functools.lru_cache(maxsize=16)
def parsed(text: str) -> ast.Module:
    """A module's source, parsed once while it is among the last ones asked for: the host reads the same files of
    the fix's code for the conditions the tree's process records (:func:`wanted`) and again for each receipt
    (``fixcode.measure``, the backends' premises). Shared between its readers: none of them changes a node."""
    return ast.parse(text)


def locate(read: Callable[[str], str | None], qualified: str) -> tuple[str, ast.FunctionDef] | None:
    """``probes/fixcode.py``'s ``locate`` (the same candidates, the same definition found) over :func:`parsed`."""
    for rel, qualname in fixcode.candidates(qualified):
        text = read(rel)
        node = fixcode.function_node(parsed(text), qualname) if text is not None else None
        if node is not None:
            return rel, node
    return None


def _modules(module: ast.AST) -> list[str]:
    """The modules of the disaggregation package ``module`` imports from (absolute names)."""
    return [n.module for n in ast.walk(module) if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module
            and (n.module == _PACKAGE or n.module.startswith(_PACKAGE + "."))]


@functools.lru_cache(maxsize=256)
def _only(text: str, name: str, value: bool) -> tuple[bool, tuple[str, ...]]:
    """Of one module's source: whether every ``name`` it defines (an attribute, or a property or method) is the
    constant ``value``, and the modules of the package it imports from. SyntaxError: not shown."""
    module = parsed(text)
    for node in ast.walk(module):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            returns = [r.value for r in ast.walk(node) if isinstance(r, ast.Return)]
            if not returns or not all(isinstance(v, ast.Constant) and v.value is value for v in returns):
                return False, ()
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and any(
                (t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else None)
                == name for t in (node.targets if isinstance(node, ast.Assign) else [node.target])):
            if not (isinstance(node.value, ast.Constant) and node.value.value is value):
                return False, ()
    return True, tuple(_modules(module))


def backends_answer(read: Callable[[str], str | None], name: str, value: bool) -> bool:
    """A premise read from the stored tree: every transfer backend its ``get_kv_class`` imports, and every module of
    the disaggregation package those import in turn, defines ``name`` (if at all) as the constant ``value`` (an
    attribute, or a property or method returning it). Unreadable or unparsable: not shown."""
    def text_of(module: str) -> str | None:
        base = module.replace(".", "/")
        return next((t for rel in (f"{base}.py", f"{base}/__init__.py") if (t := read(rel)) is not None), None)

    try:
        utils = text_of(f"{_PACKAGE}.utils")
        chooser = [n for n in parsed(utils).body if isinstance(n, ast.FunctionDef) and n.name == "get_kv_class"] \
            if utils is not None else []
        if not chooser:
            return False
        todo, seen = _modules(chooser[-1]), set()
        while todo:
            module = todo.pop()
            if module in seen:
                continue
            seen.add(module)
            text = text_of(module)
            if text is None:
                continue
            only, imported = _only(text, name, value)
            if not only:
                return False
            todo += imported
    except (SyntaxError, ValueError, RecursionError):
        return False
    return bool(seen)


# Reasons that hold only where the stored tree shows their premise (reason -> its check over the tree's files).
PREMISES: dict[str, Callable[[Callable[[str], str | None]], bool]] = {
    _HOST: functools.partial(backends_answer, name="supports_host_destination", value=False),
    _VERIFY: functools.partial(backends_answer, name="should_verify_kv_checksum", value=True),
}


# Reasons that say their condition is false in every server of the tree (where their premise is shown): a mutant
# that makes it False changes nothing, and a statement that runs only when it is true never runs. By reason (each
# condition it explains is never true), or by the condition itself where its reason covers others that are not (the
# injection's probability is never above 0, so its `== 0` test is always true: not listed).
NEVER_TRUE = frozenset({_HOST})
NEVER_TRUE_CONDITIONS = frozenset({
    (f"{_D}._verify_kv_checksums", "", "mismatch_prob > 0"),
    (f"{_D}._verify_kv_checksums", "", "prealloc_queue.kv_checksum_mismatch_injector.random() < mismatch_prob"),
    (f"{_D}._handle_kv_checksum_mismatch", "", "is_in_ci()"),
})


def never_true(qualified: str, read: Callable[[str], str | None]) -> tuple[ast.FunctionDef | None, dict[str, str]]:
    """A function of the fix's code as the stored tree has it, and its conditions a ``NEVER_TRUE`` reason explains
    there (its premise shown on the tree's files): text -> reason. What ``mutate`` takes as equivalent by that reason
    (``premised_equivalent``): the same inputs no server of the tree builds, checked the same way."""
    try:
        found = fixcode.locate(read, qualified)
    except (SyntaxError, ValueError, RecursionError):
        return None, {}
    if found is None:
        return None, {}
    shown: dict[str, bool] = {}
    texts: dict[str, str] = {}
    for (function, around, text), reason in REASONS.items():
        if function != qualified or (reason not in NEVER_TRUE and (function, around, text) not in NEVER_TRUE_CONDITIONS):
            continue
        if reason not in shown:
            shown[reason] = reason not in PREMISES or PREMISES[reason](read)
        if shown[reason]:
            texts[text] = reason
    return found[1], texts


def _never(node: ast.expr, texts: dict[str, str]) -> str | None:
    """The reason ``node`` is never true: it is such a condition, or an ``and`` of which one operand is."""
    if (reason := texts.get(ast.unparse(node))) is not None:
        return reason
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return next((r for v in node.values if (r := _never(v, texts)) is not None), None)
    return None


def premised_equivalent(mutant: dict, read: Callable[[str], str | None]) -> str | None:
    """Why a mutant of the fix's code is equivalent on this tree by a ``NEVER_TRUE`` reason shown on it (``never_true``):
    it makes a never-true condition False, or changes (True, negated) an operand of an ``and`` another operand of
    which is never true, or inserts ``and not X`` for a never-true X (``and True``), or changes only a statement that
    runs when a never-true test holds (that ``if`` deleted, or a statement of its body). None: no such reason."""
    fn, texts = never_true(mutant["function"], read)
    if fn is None or not texts:
        return None
    before, line, operator = mutant["before"], int(mutant["line"]), mutant["operator"]
    parents = {id(child): node for node in ast.walk(fn) for child in ast.iter_child_nodes(node)}
    said = "which is never true in a server of this tree"
    if operator.startswith("insert:") and (reason := texts.get(operator.split(":", 1)[1])) is not None:
        return f"inserts `and not {operator.split(':', 1)[1]}`, {said} (the test gains `and True`): {reason}"
    for node in ast.walk(fn):
        if isinstance(node, ast.expr) and getattr(node, "lineno", None) == line and ast.unparse(node) == before:
            if operator == "false" and (reason := _never(node, texts)) is not None:
                return f"`{before}` is never true in a server of this tree, so making it False changes nothing: {reason}"
            parent = parents.get(id(node))
            if operator in ("true", "negate") and isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And):
                other = next((r for v in parent.values if v is not node and (r := _never(v, texts)) is not None), None)
                if other is not None:
                    return f"an operand of `{ast.unparse(parent)}`, another operand of which is never true: {other}"
        if isinstance(node, ast.If) and node.body and (reason := _never(node.test, texts)) is not None:
            last = max(n.end_lineno or n.lineno for n in node.body)
            if node.body[0].lineno <= line <= last or (operator == "delete" and line == node.lineno
                                                      and before == f"if {ast.unparse(node.test)}:"):
                return f"runs only when `{ast.unparse(node.test)}`, {said}: {reason}"
    return None


def listed(qualified: str, path: str, fn: ast.FunctionDef, names: tuple[str, ...],
           read: Callable[[str], str | None] | None = None) -> list[Condition]:
    """The atomic conditions of the fix's code in ``fn`` (its statements' own parts and those of every statement
    enclosing one: they decide whether it runs), in source order. A condition needs no reason to go both ways
    when it is a literal, or a value handed on that nobody tests here (the last operand of ``x = a or b``; a
    comparison, or anything a ``return`` hands back, decides and needs both). A reason with a premise
    (``PREMISES``) explains only where ``read`` (the stored tree's files) shows it."""
    parents = {id(node): parent for node, parent, *_ in fixcode.walk(fn) if parent is not None}
    found: dict[tuple[int, int, int, int], Condition] = {}
    shown: dict[str, bool] = {}

    def premised(reason: str | None) -> str | None:
        if reason is None or reason not in PREMISES:
            return reason
        if reason not in shown:
            shown[reason] = read is not None and PREMISES[reason](read)
        return reason if shown[reason] else None
    for stmt in fixcode.deciding(fn, names):
        around = " / ".join(ast.unparse(n.test) for n in reversed(list(_enclosing(stmt, parents, fn))))
        for node, kind in conditions.classify(stmt):
            text = ast.unparse(node)
            if constant(node):
                reason = "a constant"
            elif kind == conditions.VALUE and not isinstance(node, ast.Compare) and not isinstance(stmt, ast.Return):
                reason = HANDED_ON
            else:
                reason = premised(REASONS.get((qualified, around, text)))
            found.setdefault(conditions.position(node), Condition(
                at=conditions.key(path, node), kind=kind, text=text[:TEXT], reason=reason,
                equivalent=_equivalent(qualified, node, parents.get(id(node)))))
    return [found[p] for p in sorted(found)]


def _equivalent(qualified: str, node: ast.expr, parent: ast.AST | None) -> list[bool]:
    """The values ``node`` could be replaced by with behaviour kept, as the duty tables declare mutants equivalent
    (``mutate`` replaces a condition, or ``not`` of one, by True or False)."""
    found = [v for v in (False, True) if mutant_key(qualified, str(v).lower(), ast.unparse(node)) in EQUIVALENT]
    if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
        found += [v for v in (False, True) if mutant_key(qualified, str(not v).lower(), ast.unparse(parent)) in EQUIVALENT]
    return sorted(set(found))


def _enclosing(stmt: ast.stmt, parents: dict[int, ast.AST], fn: ast.FunctionDef):
    """The ``if`` and ``while`` statements around ``stmt`` in ``fn``, from the inside out."""
    node = parents.get(id(stmt))
    while node is not None and node is not fn:
        if isinstance(node, (ast.If, ast.While)):
            yield node
        node = parents.get(id(node))


def constant(node: ast.AST) -> bool:
    """A literal (``True``, ``{}``, ``(1, "a")``): it goes one way by construction."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Dict):
        return all(k is not None and constant(k) for k in node.keys) and all(constant(v) for v in node.values)
    return isinstance(node, (ast.List, ast.Tuple, ast.Set)) and all(constant(e) for e in node.elts)


def wanted(read: Callable[[str], str | None]) -> list[dict]:
    """What the tree's process records (``probes/conditions.py`` install): every function of every fix's code
    the stored tree defines, with the atomic conditions of each fix's slice of it (one entry per function)."""
    by_function: dict[str, dict] = {}
    for fix_code in FIX_CODE.values():
        for qualified, names in fix_code.items():
            try:
                found = locate(read, qualified)
            except (SyntaxError, ValueError, RecursionError):
                continue
            if found is None:
                continue
            path, fn = found
            entry = by_function.setdefault(qualified, {"function": qualified, "file": path, "conditions": {}})
            for node, kind in conditions.atoms(fixcode.deciding(fn, names)):
                if not constant(node):
                    entry["conditions"][conditions.position(node)] = {
                        "at": conditions.key(path, node), "position": list(conditions.position(node)), "kind": kind}
    return [{**entry, "conditions": [entry["conditions"][p] for p in sorted(entry["conditions"])]}
            for entry in by_function.values()]


def of_change(qualified: str, names: tuple[str, ...], read: Callable[[str], str | None], old: str, new: str,
              label: str) -> tuple[list[Condition], list[dict]]:
    """The atomic conditions a change (``mutate --hunks``: ``old`` made ``new``) writes into a function of the fix's
    code (those on the lines of its new text), read from the stored tree as the harness makes the change
    (``fixcode.changed``): the host's list (each named ``label: file:line:col``, columns of the dedented source)
    and what the harness records them by. The function's other conditions are the audit's (the cases that reach
    the change need not drive them). Nothing for a change that does not apply (the harness says unappliable)."""
    try:
        found = locate(read, qualified)
        if found is None:
            return [], []
        text = read(found[0]) or ""
        fn = fixcode.changed(text, found[1], old, new)
    except (SyntaxError, ValueError, IndexError, RecursionError):
        return [], []
    if fn is None or not isinstance(fn, ast.FunctionDef):
        return [], []
    path, node = found
    segment = "".join(text.splitlines(keepends=True)[node.lineno - 1 : node.end_lineno])
    start = node.lineno + segment[: segment.index(old)].count("\n")
    lines = range(start, start + new.rstrip("\n").count("\n") + 1)
    named = [c.model_copy(update={"at": f"{label}: {c.at}"}) for c in listed(qualified, path, fn, names, read)
             if int(c.at.split(":")[-2]) in lines]
    wanted = [{"at": f"{label}: {conditions.key(path, atom)}", "position": list(conditions.position(atom)), "kind": kind}
              for atom, kind in conditions.atoms(fixcode.deciding(fn, names)) if not constant(atom) and atom.lineno in lines]
    return named, wanted


def judged(found: list[Condition], cases: Iterable[Case]) -> list[Condition]:
    """``found`` with ``seen`` as the cases' records give it: what ``verify`` derives again from a receipt."""
    values: dict[str, set[bool]] = {}
    for case in cases:
        for at, took in (case.conditions or {}).items():
            values.setdefault(at, set()).update(took)
    return [c.model_copy(update={"seen": sorted(values.get(c.at, ()))}) for c in found]
