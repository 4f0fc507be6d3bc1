"""The one pipeline every command composes: resolve trees, build environments, run probes, seal
receipts. Resolution and environment builds run one at a time (they share caches and the network);
probe runs, the expensive part, run on threads, each driving its own process that imports SGLang
once for all of that tree's probes and runs its cases on the cores left to it (how many trees and
cases at once: runner/sandbox/share.py)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from rich.markup import escape

from runner import errors, ui
from runner.evidence import catalog, materials, pins, receipts, results
from runner.judge import conditions, fixcode, judging
from runner.sandbox import execute, share
from runner.sandbox.execute import DEFAULT_CASE_TIMEOUT
from runner.store import envs, intake, sources, specs
from runner.store import torch_source
from runner.store.cache import Store
from runner.store.torch_source import TorchSource
from runner.judge.observations import NOT_OBSERVED, Case
from runner.evidence.receipts import ProbeRef, Receipt
from runner.store.trees import TreeIdentity


@dataclass(frozen=True)
class ProbeOptions:
    """How probes run: the interpreter of the environments, parallel runs, per-case timeout, repeats."""

    python: str | None = None
    jobs: int | None = 1  # None: as many as the machine's cores and memory allow (runner/sandbox/share.py)
    case_timeout: int = DEFAULT_CASE_TIMEOUT
    repeat: int = 1  # run each tree's probes this many times; any difference in observations fails
    reuse: bool = True  # take receipts already observed from the receipts store (runner/evidence/results.py)
    # where a new dependency layer gets CPU torch, resolved at the command's entry (torch_source.candidates)
    torch: tuple[TorchSource, ...] = torch_source.DEFAULT
    unsandboxed: bool = False  # run trees' code without bubblewrap: the user's explicit choice (README, "Threat model")


@dataclass(frozen=True)
class Options:
    cache: Store
    probe: ProbeOptions = ProbeOptions()
    package_dir: str = "python/sglang"
    pinned_sha256: dict[str, str] = field(default_factory=dict)
    pinned_commits: tuple[str, ...] = ()
    bounds: intake.Bounds = intake.Bounds()  # what one tree may hold (--max-files, --max-file-size, --max-tree-size)
    probes: tuple[str, ...] = tuple(catalog.PROBES)  # what each tree is probed with: the pinned (or --fix) fixes' probes

    def sandboxed(self, tree: sources.Tree) -> bool:
        """Whether ``tree`` runs in the sandbox; refuses (exit 2) an unpinned tree where it cannot."""
        return execute.sandboxed_for(tree.identity, unsandboxed=self.probe.unsandboxed, pinned_sha256=self.pinned_sha256,
                                     pinned_commits=self.pinned_commits)


def probes_of(p: pins.Pins, fixes: list[int] | None = None) -> tuple[str, ...]:
    """The probes that witness these fixes (default: every pinned one), in the catalog's order: what
    each tree is probed with, so a pins file or ``--fix`` never runs a probe no fix asks for. (Kept
    out of runner/evidence: choosing what to run is not judging, and leaves evidence comparable.)"""
    wanted = {probe for n in (fixes or p.fixes) for probe in p.fix(n).probes}
    return tuple(probe for probe in catalog.PROBES if probe in wanted)


def probe_ref(probe: str, fix: int) -> ProbeRef:
    files = catalog.probe_files(probe)
    return ProbeRef(id=probe, fix=fix, sha256=catalog.digest(files), files=files)


def resolve(text: str, opts: Options) -> sources.Tree:
    with ui.step(f"resolve {escape(text)}", done=False):  # a download, an unpacking and hashing: a live line
        return sources.resolve(specs.parse(text), opts.cache, package_dir=opts.package_dir, pinned_sha256=opts.pinned_sha256,
                               bounds=opts.bounds)


def receipt_of(probe: ProbeRef, tree: sources.Tree, environment: envs.Env, run: execute.Run) -> Receipt:
    """The receipt of one probe run in one tree's environment, with the coverage of its fix's code read from
    the stored tree."""
    obs = run.observations
    if obs.probe != probe.id:
        raise ValueError(f"observations are for probe {obs.probe}, not {probe.id}")
    env = receipts.tree_environment(environment, python=obs.python, implementation=obs.implementation, platform=obs.platform,
                                    standins_used=obs.standins, isolation=run.isolation)
    return _judged(probe, tree, tree.identity, env, obs.cases, started_at=run.started_at, finished_at=run.finished_at,
                   materials=run.materials, import_result=obs.import_)


def rejudged(stored: Receipt, tree: sources.Tree) -> Receipt:
    """A stored receipt judged anew by this judge from its recorded observation: the same probe, source, times,
    materials, import result and cases' effects, lines and conditions; its duties, classifications and the coverage
    of the fix's code (read again from the stored tree) are this judge's, and it names the receipt it was judged from."""
    judge, files = catalog.judge()
    env = stored.environment.model_copy(update={"diffprobe_sha256": judge, "judge_files": files})
    return _judged(stored.probe, tree, stored.source, env, stored.cases, started_at=stored.started_at,
                   finished_at=stored.finished_at, materials=stored.materials, import_result=stored.import_result,
                   rejudged=receipts.Rejudged(receipt=stored.digest, judge=stored.environment.diffprobe_sha256))


def _judged(probe: ProbeRef, tree: sources.Tree, source: TreeIdentity, env: receipts.Environment, observed: list[Case], *,
            rejudged: receipts.Rejudged | None = None, **recorded) -> Receipt:
    """Seal an observation with the host's own judgement: each case from its effects, the fix's code from the tree."""
    cases = [judging.rejudge(probe.id, case) for case in observed]
    fix_code = fixcode.measure(probe.fix, materials.reader(tree.root), cases) if probe.fix is not None else None
    return receipts.make(probe, source, env, cases, fix_code=fix_code, rejudged=rejudged, **recorded)


# CPython before 3.13 keeps the AST constructor's recursion depth per interpreter, not per thread:
# two threads building ASTs at once can fail with "SystemError: AST constructor recursion depth
# mismatch" (python/cpython#106905; seen here under load). The host's readings of a tree that parse
# Python (a receipt's fix-code measure, the static scan and departures of ``on_tree``) take turns;
# they hold the GIL for most of their time anyway, while the probe runs they overlap with do not.
PARSING = threading.Lock()


def _same_or_fail(text: str, first: dict[str, execute.Run], again: dict[str, execute.Run], attempt: int) -> None:
    """--repeat: a probe that observes differently on the same tree cannot back a receipt."""
    for probe, run in first.items():
        before = {c.id: c.model_dump(exclude=set(NOT_OBSERVED)) for c in run.observations.cases}
        after = {c.id: c.model_dump(exclude=set(NOT_OBSERVED)) for c in again[probe].observations.cases}
        differing = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        if differing:
            raise errors.DiffprobeError.differs(
                f"{probe} on {text}: run {attempt} observed differently from run 1 (cases: {', '.join(differing)})")


def tally(receipt: Receipt) -> str:
    """A receipt's cases as the progress line counts them: not-applicable cases by that name, as the
    receipt and ``report`` say, not among the inconclusive ones (their classification)."""
    counts, absent = receipt.summary.classifications, receipt.summary.outcomes["not_applicable"]
    parts = [f"{counts['bug']} bug", f"{counts['clean']} clean"] + ([f"{absent} not applicable"] if absent else [])
    return ", ".join([*parts, f"{counts['inconclusive'] - absent} inconclusive"])


def probe_sources(
    plan: dict[str, list[str]], opts: Options, on_tree: Callable[[str, sources.Tree], None] | None = None,
) -> tuple[dict[str, sources.Tree], dict[tuple[str, str], Receipt]]:
    """``probe`` for callers that need not know what was reused (it is printed either way)."""
    done = probe(plan, opts, on_tree)
    return done.trees, done.receipts


@dataclass(frozen=True)
class Probing:
    trees: dict[str, sources.Tree]
    receipts: dict[tuple[str, str], Receipt]
    reused: set[tuple[str, str]]  # (source, probe) pairs not observed by this call
    rejudged: set[tuple[str, str]] = field(default_factory=set)  # of those, judged anew from a stored observation

    @property
    def runs(self) -> int:
        """Probe processes started: one per source with anything left to observe."""
        return len({text for text, probe in self.receipts if (text, probe) not in self.reused})


def _parsing(fn: Callable, *args):
    with PARSING:
        return fn(*args)


def probe(
    plan: dict[str, list[str]], opts: Options, on_tree: Callable[[str, sources.Tree], None] | None = None,
) -> Probing:
    """Receipts for every (source, probe) in ``plan`` (source text -> probe ids), and which of them
    were reused rather than observed by this call.

    Sources are resolved and their environments built in order on this thread, and each tree's
    probes start on the pool as soon as it is ready, so downloads overlap with probe runs;
    ``on_tree`` (host-side reading of a tree, say) runs in order on a thread of its own, once the tree's
    probe run has started (its harness imports SGLang meanwhile), while the pool works. A tree is
    probed once: a source whose tree digest an earlier source of the plan has shares its receipts,
    and a receipt in the receipts store (runner/evidence/results.py) is reused unless
    ``opts.probe.reuse`` is off or runs are repeated.
    """
    interp = envs.interpreter(opts.probe.python)
    torch = opts.probe.torch
    reuse = opts.probe.reuse and opts.probe.repeat == 1
    trees: dict[str, sources.Tree] = {}
    got: dict[tuple[str, str], Receipt] = {}
    reused: set[tuple[str, str]] = set()
    rejudged_here: set[tuple[str, str]] = set()
    first_of: dict[str, str] = {}  # tree digest (and what its source left out) -> the first source of the plan with that tree
    same: dict[str, str] = {}  # source -> the earlier source with its tree, whose receipts it shares

    portion = share.of(len(plan), opts.probe.jobs)
    if portion.note:
        ui.warn(portion.note)

    def one(text: str, environment: envs.Env, probes: list[str], key: str, sandboxed: bool,
            listed: list[dict]) -> dict[tuple[str, str], Receipt]:
        with ui.step(f"probing {escape(text)}: {', '.join(probes)}", done=False) as advance:  # live on a terminal: never silent
            advance("importing SGLang")  # until the harness counts its first cases
            runs = execute.run_probes(environment, probes, case_timeout=opts.probe.case_timeout, sandboxed=sandboxed,
                                      listed=listed, jobs=portion.cases, progress=lambda done, total: advance("cases", done, total))
        for attempt in range(2, opts.probe.repeat + 1):
            again = execute.run_probes(environment, probes, case_timeout=opts.probe.case_timeout, sandboxed=sandboxed,
                                       listed=listed, jobs=portion.cases)
            _same_or_fail(text, runs, again, attempt)
        fresh = {}
        for probe, run in runs.items():
            with PARSING:
                receipt = receipt_of(probe_ref(probe, run.observations.fix), trees[text], environment, run)
            results.record(opts.cache, receipt, key)
            ui.err.print(f"[green]✓[/] {probe} on {escape(text)}: {tally(receipt)}")
            fresh[(text, probe)] = receipt
        return fresh

    def reuse_one(text: str, probe: str, receipt: Receipt, why: str) -> None:
        got[(text, probe)] = receipt
        reused.add((text, probe))
        ui.err.print(f"[green]↺[/] {probe} on {escape(text)}: reused {why} (receipt {receipt.digest[:12]}, "
                     f"observed {receipt.started_at} via {escape(receipt.source.source)})")

    def rejudge_one(text: str, probe: str, stored: Receipt, key: str) -> None:
        with PARSING:
            receipt = rejudged(stored, trees[text])
        results.record(opts.cache, receipt, key)
        got[(text, probe)] = receipt
        reused.add((text, probe))
        rejudged_here.add((text, probe))
        ui.err.print(f"[green]↻[/] {probe} on {escape(text)}: re-judged from the stored observation (receipt "
                     f"{stored.digest[:12]}, observed {stored.started_at}, judged by {stored.environment.diffprobe_sha256[:12]}): "
                     f"{tally(receipt)}")

    pool = ThreadPoolExecutor(max_workers=portion.trees)
    # The shared layer is made ready on its own thread: checked (its seal) from the start when it is
    # built; built (a minute, cold) once the first tree is resolved and allowed to run, while the next
    # sources are resolved (downloaded) here. Every environment waits for it. ``on_tree`` (host-side
    # reading of a tree) runs on another thread, beside the probe runs.
    ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="layer")
    beside = ThreadPoolExecutor(max_workers=1, thread_name_prefix="on-tree")
    built = (opts.cache.layer(envs.layer_key(interp)) / "layer.json").is_file()
    layer = ahead.submit(envs.layer, opts.cache, interp, torch) if built and plan else None
    futures, read = [], []
    try:
        for text in plan:
            if text not in trees:
                trees[text] = resolve(text, opts)
            digest = trees[text].identity.tree_digest
            earlier = first_of.setdefault(f"{digest} {trees[text].identity.left_out}", text)  # what each left out is its own
            if earlier != text and set(plan[text]) <= set(plan[earlier]):  # the same bytes: one probe run serves both
                same[text] = earlier
                if on_tree:
                    read.append(beside.submit(_parsing, on_tree, text, trees[text]))
                continue
            sandboxed = opts.sandboxed(trees[text])  # before anything of the tree is built or run
            if not sandboxed:
                ui.err.print(f"[bold red]unsandboxed:[/] {escape(text)} runs without bubblewrap, with your rights")
            if layer is None:
                layer = ahead.submit(envs.layer, opts.cache, interp, torch)
                for later in plan:
                    if layer.done():
                        break
                    if later not in trees:
                        trees[later] = resolve(later, opts)
            layer.result()
            with ui.step(f"environment for {escape(text)}", done=False):
                environment = envs.env(trees[text], opts.cache, interp, torch)
            for note in environment.stamp.notes:
                ui.warn(f"{text}: {note}")
            key = results.env_key(environment)
            todo = []
            for probe in plan[text]:
                stored = results.lookup(opts.cache, trees[text].identity, probe, catalog.probe_digest(probe), key) if reuse else None
                if stored and stored.environment.isolation and stored.environment.isolation.sandboxed == sandboxed:
                    if results.judged_here(stored):
                        reuse_one(text, probe, stored, "from the receipts store")
                    else:
                        rejudge_one(text, probe, stored, key)
                else:
                    todo.append(probe)
            if todo:  # the conditions the tree's process records, read before ``on_tree`` takes its turn at parsing:
                # the probe run waits for them, the host's own reading of the tree can wait for the probe run
                listed = _parsing(conditions.wanted, materials.reader(environment.tree.root))
                futures.append(pool.submit(one, text, environment, todo, key, sandboxed, listed))
            if on_tree:
                read.append(beside.submit(_parsing, on_tree, text, trees[text]))
        for f in futures:
            got.update(f.result())
        for f in read:
            f.result()
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        ahead.shutdown(wait=False)
        beside.shutdown(wait=False, cancel_futures=True)
        execute.kill_all()
        raise
    pool.shutdown()
    ahead.shutdown()
    beside.shutdown()
    for text, earlier in same.items():
        for probe in plan[text]:
            reuse_one(text, probe, got[(earlier, probe)], f"the receipt of {escape(earlier)}, the same tree")
    if rejudged_here:
        ui.err.print(f"re-judged {len(rejudged_here)} receipt(s) from stored observations (no probe run): this judge "
                     f"{catalog.judge_digest()[:12]}")
    return Probing(trees, got, reused, rejudged_here)
