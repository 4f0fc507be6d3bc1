"""The fleet ``diffprobe accept`` judges, and where each value it judges comes from.

Every worker's ``/server_info`` (each whole request within ``--timeout`` and the whole ``--deadline``),
every data-parallel rank's own state in it, the tree each worker runs, and for each value its source:
a worker's own report (``SGLANG_EXPOSE_OWN_ENV_VARS``: ``internal_states[r].env_vars``), else
``--env`` (per worker beats every worker, whatever the order), else the tree's default. Nothing the
tree parses is parsed here: each tree's own code reads its workers' values in its sandbox
(``runner/sandbox/server_config.py``), and a value it would not read is not read.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner import errors
from runner.app import pipeline
from runner.app import server
from runner.evidence import static
from runner.evidence.records import AcceptedValue
from runner.sandbox import server_config
from runner.sandbox.server_config import Answers
from runner.store import envs

ROLES = ("prefill", "decode")
DEFERRED = "SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE"
DEFERRED_TIMEOUT = "SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE_TIMEOUT"
BATCH_LIMIT = "SGLANG_MOONCAKE_MAX_TRANSFER_BATCH_INDICES"
ENV_NAMES = (DEFERRED, DEFERRED_TIMEOUT, BATCH_LIMIT)
# The reported server arguments the gates read, each checked against the tree's ServerArgs declaration.
FIELDS = ("disaggregation_enable_kv_checksum", "device", "kv_canary", "disaggregation_transfer_backend", "tp_size",
          "pp_size", "dp_size", "enable_dp_attention", "page_size", "kv_cache_dtype")
LAYOUT = ("tp_size", "pp_size", "dp_size", "enable_dp_attention", "page_size", "kv_cache_dtype")

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

    @property
    def states(self) -> list[dict] | None:
        """Each data-parallel rank's own state, or None when the worker reports none that can be read."""
        s = self.info.get("internal_states")
        return s if isinstance(s, list) and s and all(isinstance(x, dict) for x in s) else None

    def ranks(self) -> list[int | None]:
        """The ranks whose own values are judged; [None]: only the worker's top level can be read."""
        return list(range(len(self.states))) if self.states else [None]

    def name(self, rank: int | None = None) -> str:
        return f"{self.role} {self.url}" + ("" if rank is None else f" rank {rank}")


@dataclass(frozen=True)
class Setting:
    """One value a gate judges and where it came from; ``known`` False: it cannot be read (fail closed)."""

    name: str
    value: Any
    source: str
    known: bool = True
    note: str = ""

    def show(self) -> str:
        text = f"{self.name}={self.value!r} ({self.source})" if self.known else f"{self.name}: {self.source}"
        return text + (f"; {self.note}" if self.note else "")


@dataclass(frozen=True)
class EnvRead:
    """Where one environment value of one rank comes from, before the tree reads it."""

    worker: Worker
    rank: int | None
    name: str
    raw: str | None
    source: str  # a records.ValueSource
    detail: str
    warnings: tuple[str, ...] = ()
    unreadable: str | None = None  # the worker's report is not one: why


@dataclass
class Fleet:
    """The fleet, what each tree's code made of its reports, and every environment value judged."""

    workers: list[Worker]
    tree_of: dict[str, str]
    answers: dict[str, Answers]  # tree source -> its answers
    findings: dict[str, dict[str, static.Finding]]
    declared: dict[str, dict[str, tuple[str, str]]]
    values: list[AcceptedValue] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def of(self, w: Worker) -> Answers:
        return self.answers[self.tree_of[w.url]]


# --- the fleet -----------------------------------------------------------------------------------


def read_fleet(prefill: list[str], decode: list[str], timeout: int, ends: float) -> list[Worker]:
    workers = []
    for role, urls in (("prefill", prefill), ("decode", decode)):
        for raw in urls:
            url = server.base_url(raw)
            endpoint, info = server.server_info(url, timeout, ends)
            if endpoint is None:
                raise errors.DiffprobeError.differs(f"{url}: neither {' nor '.join(server.INFO_PATHS)} answered with JSON: "
                                                    "nothing to accept (failing closed)")
            mode = info.get("disaggregation_mode")
            if mode != role:
                raise errors.BadInput(f"{url} was given as --{role} but reports disaggregation_mode {mode!r}")
            worker = Worker(role, url, endpoint, info)
            for rank, state in enumerate(worker.states or []):  # each rank reports its own role too
                if state.get("disaggregation_mode", role) != role:
                    raise errors.BadInput(f"{url} was given as --{role} but its rank {rank} reports disaggregation_mode "
                                          f"{state['disaggregation_mode']!r}")
            workers.append(worker)
    return workers


def trees_for(workers: list[Worker], given: list[str]) -> dict[str, str]:
    """Worker URL -> tree source: ``--tree URL=SOURCE`` per worker, ``--tree SOURCE`` for all, else the
    release each reports. A fleet of mixed versions is refused unless every worker's tree is given."""
    per_url: dict[str, str] = {}
    for_all = None
    for text in given:
        url, sep, source = text.partition("=")
        if sep and url.startswith(("http://", "https://")):
            per_url[server.base_url(url)] = source
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


def declarations(given: list[str], workers: list[Worker]) -> dict[str, dict[str, tuple[str, str]]]:
    """``--env [URL=]NAME=VALUE`` -> worker URL -> NAME -> (VALUE, for whom). A declaration for one
    worker beats one for every worker, whichever comes first; the same name declared twice for the
    same workers with different values is refused."""
    every: dict[str, str] = {}
    per: dict[str, dict[str, str]] = {}
    urls = {w.url for w in workers}
    for text in given:
        url, rest = "", text
        if text.startswith(("http://", "https://")):
            url, _, rest = text.partition("=")
            url = server.base_url(url)
            if url not in urls:
                raise errors.BadInput(f"--env {text!r}: {url} is not a worker of this fleet")
        name, sep, value = rest.partition("=")
        if not sep or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name):
            raise errors.BadInput(f"--env {text!r}: expected [URL=]NAME=VALUE as set on the workers")
        target = per.setdefault(url, {}) if url else every
        if target.get(name, value) != value:
            raise errors.BadInput(f"--env {text!r}: {name} is already declared as {target[name]!r} for "
                                  f"{url or 'every worker'}")
        target[name] = value
    out = {}
    for w in workers:
        out[w.url] = {n: (v, "--env for every worker") for n, v in every.items()}
        out[w.url].update({n: (v, f"--env for {w.url}") for n, v in per.get(w.url, {}).items()})
    return out


# --- where each value comes from ------------------------------------------------------------------


def env_read(w: Worker, rank: int | None, name: str, declared: dict[str, tuple[str, str]]) -> EnvRead:
    """The worker's own report of its environment (every rank its own) counts; else a declaration;
    else the tree's default. A report that is not a map of names to strings is not read."""
    state = w.states[rank] if rank is not None and w.states else None
    decl = declared.get(name)
    who = w.name(rank)
    if state is not None and "env_vars" in state:
        reported = state["env_vars"]
        if not (isinstance(reported, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in reported.items())):
            return EnvRead(w, rank, name, None, "reported by the worker", f"{who} internal_states env_vars",
                           unreadable=f"{who} reports env_vars that are not a map of names to strings: failing closed")
        raw = reported.get(name)
        detail = f"{who} internal_states env_vars" + ("" if raw is not None else ": not set there, so the tree's default")
        said = [] if decl is None or decl[0] == raw else [
            f"{name}: {decl[1]} declares {decl[0]!r}, but {who} reports " + ("it unset" if raw is None else repr(raw))
            + "; the worker's own report counts"]
        return EnvRead(w, rank, name, raw, "reported by the worker", detail, tuple(said))
    if decl is not None:
        return EnvRead(w, rank, name, decl[0], "declared", decl[1])
    return EnvRead(w, rank, name, None, "tree default",
                   f"neither reported by {w.url} (SGLANG_EXPOSE_OWN_ENV_VARS off) nor declared with --env")


def env_setting(read: EnvRead, fleet: Fleet) -> Setting:
    """What the tree's own ``Envs`` field reads from ``read``, recorded with where it came from."""
    tree = fleet.tree_of[read.worker.url]
    answer = None if read.unreadable else fleet.of(read.worker).env_of(read.name, read.raw)
    given = "" if read.raw is None else f", set to {read.raw!r}"
    if read.unreadable or answer is None or answer.kind is None or answer.error:
        why = read.unreadable or (f"the tree's Envs cannot read it ({answer.error if answer else 'not asked'}): failing closed")
        setting = Setting(read.name, None, f"{read.source}: {read.detail}{given}; {why}", known=False)
        value, parsed_by, warned = "not read", f"Envs of {tree}", []
    else:
        warned = [f"the tree's {answer.kind} warns: {w}" for w in answer.warnings]
        setting = Setting(read.name, answer.value, f"{read.source}: {read.detail}{given}; read by the tree's {answer.kind}",
                          note="; ".join(warned))
        value, parsed_by = repr(answer.value), f"{answer.kind} of {tree}"
    fleet.values.append(AcceptedValue(worker=read.worker.url, rank=read.rank, name=read.name, raw=read.raw, value=value,
                                      source=read.source, detail=read.detail, parsed_by=parsed_by,  # type: ignore[arg-type]
                                      warnings=[*read.warnings, *warned]))
    return setting


def server_arg(w: Worker, rank: int | None, name: str, answers: Answers) -> Setting:
    """A reported server argument: the rank's own state where it carries the field, else the
    worker's top level; counted only as the type the tree's ServerArgs declares for it."""
    state = w.states[rank] if rank is not None and w.states else None
    if state is not None and name in state:
        value, where = state[name], f"reported by {w.name(rank)}"
    elif name in w.info:
        value, where = w.info[name], f"reported by {w.url}{w.endpoint}"
    else:
        return Setting(name, None, f"not reported by {w.url}{w.endpoint}: failing closed", known=False)
    check = answers.value_of(name, value)
    if check is None or check.valid is not True:
        why = check.why if check else "not checked"
        return Setting(name, value, f"{where}, but not as the tree's ServerArgs declares it: {why}: failing closed",
                       known=False)
    return Setting(name, value, where)


def reported_values(workers: list[Worker]) -> list[list]:
    """Every (field, value) of FIELDS the workers report, at their top level and in each rank's state."""
    seen: dict[str, list] = {}
    for w in workers:
        for where in [w.info, *(w.states or [])]:
            for name in FIELDS:
                if name in where:
                    seen.setdefault(f"{name}\0{where[name]!r}\0{type(where[name]).__name__}", [name, where[name]])
    return list(seen.values())


def layout(w: Worker, answers: Answers) -> tuple[dict | None, str]:
    """The layout a worker reports, read as its tree declares it; None and why when it cannot be read."""
    got = {name: server_arg(w, None, name, answers) for name in LAYOUT}
    if not got["tp_size"].known:
        return None, got["tp_size"].show()
    bad = [s.show() for s in got.values() if s.name != "tp_size" and s.value is not None and not s.known]
    if bad:
        return None, bad[0]
    return {name: s.value for name, s in got.items()}, ", ".join(f"{k} {v}" for k, v in
                                                                   ((n, got[n].value) for n in LAYOUT) if v is not None)


def ask_trees(fleet: Fleet, opts: pipeline.Options, trees: dict, deadline: int, ends: float) -> None:
    """Each tree's own reading of everything its workers report (in its sandbox, within the deadline)."""
    interp = envs.interpreter(opts.probe.python)
    torch = opts.probe.torch
    for source, tree in trees.items():
        mine = [w for w in fleet.workers if fleet.tree_of[w.url] == source]
        reads = {(r.name, r.raw) for w in mine for rank in w.ranks() for name in ENV_NAMES
                 if not (r := env_read(w, rank, name, fleet.declared[w.url])).unreadable}
        decoders = [w for w in fleet.workers if w.role == "decode" and fleet.tree_of[w.url] == source]
        questions = {
            "env": sorted(reads, key=lambda nr: (nr[0], nr[1] or "")),
            "fields": list(FIELDS),
            "values": reported_values(fleet.workers if decoders else mine),
            "layouts": [{name: w.info.get(name) for name in LAYOUT} for w in fleet.workers] if decoders else [],
            "backends": sorted({b for w in mine if isinstance(b := w.info.get("disaggregation_transfer_backend"), str)
                                and re.fullmatch(r"[a-z0-9_]+", b)}),
        }
        environment = envs.env(tree, opts.cache, interp, torch)
        left = int(ends - time.monotonic())
        try:
            fleet.answers[source] = server_config.ask(environment, questions, sandboxed=opts.sandboxed(tree),
                                                      timeout=max(1, min(server_config.TIMEOUT, left)))
        except errors.Infrastructure:
            past(ends, deadline, "the trees' reading of the workers' configuration")
            raise



def past(ends: float, deadline: int, during: str) -> None:
    """Fail closed once the whole command's deadline (``--deadline``, ``deadline`` seconds) has passed."""
    if time.monotonic() >= ends:
        raise errors.DiffprobeError.differs(f"the whole accept's deadline (--deadline {deadline} s) passed during "
                                            f"{during}: failing closed, not accepted")
