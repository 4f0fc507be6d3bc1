"""The one pipeline every command composes: resolve trees, build environments, run probes, seal
receipts. Resolution and environment builds run one at a time (they share caches and the network);
probe runs, the expensive part, run on ``workers`` threads, each driving its own process."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from runner import catalog, envs, execute, receipts, sources, specs, ui
from runner.cache import Cache
from runner.files import sha256_file
from runner.receipts import ProbeRef, Receipt


@dataclass
class Options:
    cache: Cache
    python: str | None = None
    workers: int = 1
    case_timeout: int = execute.DEFAULT_CASE_TIMEOUT
    package_dir: str = "python/sglang"
    pinned_sha256: dict[str, str] = field(default_factory=dict)


def probe_ref(probe: str, fix: int) -> ProbeRef:
    files = {p.name: sha256_file(p) for p in catalog.probe_files(probe)}
    return ProbeRef(id=probe, fix=fix, sha256=catalog.probe_digest(probe), files=files)


def resolve_all(texts: list[str], opts: Options, extra_refs: dict[str, list[str]] | None = None) -> dict[str, sources.Tree]:
    trees = {}
    for text in dict.fromkeys(texts):
        trees[text] = sources.resolve(specs.parse(text), opts.cache, package_dir=opts.package_dir,
                                      pinned_sha256=opts.pinned_sha256, extra_refs=(extra_refs or {}).get(text, []))
    return trees


def probe_all(trees: dict[str, sources.Tree], pairs: list[tuple[str, str]], opts: Options) -> dict[tuple[str, str], Receipt]:
    """Receipts for each (source text, probe id) pair."""
    interp = envs.interpreter(opts.python)
    environments = {}
    for text in dict.fromkeys(t for t, _ in pairs):
        environments[text] = envs.env(trees[text], opts.cache, interp)
        for note in environments[text].stamp.notes:
            ui.warn(f"{text}: {note}")

    by_tree: dict[str, list[str]] = {}
    for text, probe in dict.fromkeys(pairs):
        by_tree.setdefault(text, []).append(probe)

    def one(text: str) -> dict[tuple[str, str], Receipt]:
        runs = execute.run_probes(environments[text], by_tree[text], case_timeout=opts.case_timeout)
        got = {}
        for probe, run in runs.items():
            receipt = receipts.build(probe_ref(probe, run.observations.fix), trees[text].identity, environments[text], run)
            counts = receipt.summary.classifications
            ui.err.print(f"[green]✓[/] {probe} on {text}: {counts['bug']} bug, {counts['clean']} clean, "
                         f"{counts['inconclusive']} inconclusive")
            got[(text, probe)] = receipt
        return got

    with ui.step(f"probe {len(by_tree)} tree(s) with {opts.workers} worker(s)", total=len(by_tree)):
        pool = ThreadPoolExecutor(max_workers=max(1, opts.workers))
        try:
            results = list(pool.map(one, by_tree))
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            execute.kill_all()
            raise
        pool.shutdown()
    return {pair: receipt for got in results for pair, receipt in got.items()}
