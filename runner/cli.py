"""The ``diffprobe`` command. Each subcommand composes the same pipeline with other inputs."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback

import orjson

from pathlib import Path
from typing import NoReturn

from runner import __version__, errors, ui
from runner.commands import backport, gate, model, options, pipeline, report, sweep, upstream_tests
from runner.evidence import bundle, compare, pins, receipts
from runner.sandbox import execute
from runner.store import envs, sources, specs
from runner.views import summary
from runner.store.cache import Cache
from runner.files import sha256_file


_common, _env_options, _path = options.common, options.env_options, options.path


def _resolve_tree(args, text: str) -> sources.Tree:
    return pipeline.resolve(text, pipeline.options(args, pins.load(_path(args.pins))))


def cmd_resolve(args) -> int:
    tree = _resolve_tree(args, args.source)
    out = tree.identity.model_dump(mode="json", exclude_none=True)
    out["local_path"] = str(tree.root)
    sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n")
    return errors.OK


def cmd_env(args) -> int:
    cache = Cache.at(args.cache_dir)
    tree = _resolve_tree(args, args.source)
    interp = envs.interpreter(args.python)
    environment = envs.env(tree, cache, interp)
    for note in environment.stamp.notes:
        ui.warn(note)
    with ui.step(f"import check in {environment.root.name}"):
        check = envs.import_check(environment, tree)
    if args.json:
        payload = {"environment": str(environment.root), "stamp": environment.stamp.model_dump(mode="json"),
                   "tree": tree.identity.model_dump(mode="json", exclude_none=True), "check": check.model_dump(mode="json")}
        sys.stdout.write(orjson.dumps(payload, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n")
    else:
        _print_check(tree, environment, check)
    if not check.ok:
        failed = [m for m, v in check.modules.items() if v != "ok"]
        what = f"{failed[0]}: {check.modules[failed[0]]}" if failed else f"sglang imported from outside the tree: {check.outside[0]}"
        raise errors.Infrastructure(f"import check failed: {what}")
    return errors.OK


def _print_check(tree, environment, check) -> None:
    from rich.table import Table

    o = ui.out
    o.print(f"[bold]tree[/]        {tree.identity.source}  {tree.identity.tree_digest}  ({tree.identity.files} files)")
    o.print(f"[bold]environment[/] {environment.root}")
    o.print(f"[bold]python[/]      {environment.stamp.interpreter.implementation} {environment.stamp.interpreter.version}"
            f"  layer {environment.stamp.layer_key} (lock sha256 {environment.stamp.lock_sha256[:16]}…)")
    table = Table("module", "import", box=None)
    for name, verdict in check.modules.items():
        table.add_row(name, "[green]ok[/]" if verdict == "ok" else f"[red]{verdict}[/]")
    o.print(table)
    o.print(f"imported {len(check.files)} sglang files, all from {tree.root}" if not check.outside
            else f"[red]sglang files from outside the tree:[/] {check.outside}")
    for f in sorted(check.files)[:: max(1, len(check.files) // 8)][:8]:
        o.print(f"  {check.files[f][:16]}…  {f}")
    o.print(f"  … ({len(check.files)} in all; --json lists every file with its sha256)")
    roots = sorted({s.split('.')[0] if not s.startswith("sglang.") else s for s in check.standins})
    declared = environment.stamp.standins.declared
    o.print(f"stand-ins used: {', '.join(roots) or 'none'}  (declared: {', '.join(declared)})")
    if environment.stamp.standins.tree_lacks:
        o.print(f"compiled modules this tree lacks (stand-ins if imported): {', '.join(environment.stamp.standins.tree_lacks)}")
    o.print(f"import took {check.duration_ms / 1000:.1f} s")


def cmd_run(args) -> int:
    """Reproduce the evidence bundle: base and head of each pinned fix, every witnessing probe."""
    pins_path = _path(args.pins) or pins.default_path()
    p = pins.load(pins_path)
    out = bundle.out_path(args.out, "run")
    numbers = args.pr or sorted(p.fixes)
    fixes = {n: p.fix(n) for n in numbers}
    repo = specs.check_git_url(args.repo) if args.repo else p.upstream
    sides: dict[int, tuple[str, str]] = {}
    extra_refs: dict[str, list[str]] = {}
    for n, fix in fixes.items():
        if args.via == "releases":
            sides[n] = (f"pypi:sglang=={fix.releases.without}", f"pypi:sglang=={fix.releases.with_}")
        else:
            sides[n] = (f"git+{repo}@{fix.base}", f"git+{repo}@{fix.head}")
            for text in sides[n]:  # PR heads of squash merges live only under refs/pull/N/head
                extra_refs.setdefault(text, []).append(f"refs/pull/{n}/head")
    opts = pipeline.options(args, p)
    started = execute.now()
    plan: dict[str, list[str]] = {}
    for n, fix in fixes.items():
        for text in sides[n]:
            plan.setdefault(text, []).extend(pr for pr in fix.probes if pr not in plan.get(text, []))
    _, got = pipeline.probe_sources(plan, opts, extra_refs)
    diffs = []
    for n, fix in fixes.items():
        base, head = sides[n]
        diffs.append(receipts.differential(
            n, fix.title, fix.probes,
            [(bundle.receipt_name(got[(base, pr)]), got[(base, pr)]) for pr in fix.probes],
            [(bundle.receipt_name(got[(head, pr)]), got[(head, pr)]) for pr in fix.probes],
            fix.expect,
        ))
    out = bundle.write(
        out, kind="run", created_at=started,
        receipts=list({bundle.receipt_name(r): r for r in got.values()}.values()), differentials=diffs, pins_sha256=sha256_file(pins_path),
        extra={"via": args.via, "fixes": numbers, "repo": repo if args.via == "commits" else None},
    )
    summary.differentials(diffs)
    ui.out.print(f"bundle: {out}  (check with: diffprobe verify {out}  or  cd {out} && sha256sum -c {bundle.MANIFEST})")
    return errors.OK if all(d.as_expected for d in diffs) else errors.DIFFERS


def cmd_verify(args) -> int:
    root = Path(args.bundle)
    problems = bundle.verify(root)
    if problems:
        for line in problems:
            ui.out.print(f"[red]✗[/] {line}", markup=True)
        raise bundle.Tampered(f"{root}: tampered or damaged ({len(problems)} problem(s))")
    _, rs, ds = bundle.load(root)
    ui.out.print(f"[green]✓[/] {root}: intact ({len(rs)} receipts, {len(ds)} differentials, every digest recomputed)")
    return errors.OK


def cmd_compare(args) -> int:
    differences = compare.compare(Path(args.a), Path(args.b))
    for line in differences:
        ui.out.print(line, markup=False)
    if not differences:
        ui.out.print("same observations")
    return errors.DIFFERS if differences else errors.OK


# Modules with a ``register(subparsers, add_common_options)`` function, each adding its commands.
EXTENSIONS = [model, gate, report, sweep, upstream_tests, backport]


class _Parser(argparse.ArgumentParser):
    """A usage mistake is bad input like any other: one line and exit 2, not a usage block.
    Subcommand parsers are made of this class too (argparse uses the parent's class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(errors.BAD_INPUT, f"diffprobe: error: {self.prog}: {errors.one_line(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="diffprobe", description=__doc__)
    parser.add_argument("--version", action="version", version=f"diffprobe {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("resolve", help="resolve a source to its identity (kind, commit/artifact, tree digest, path)")
    p.add_argument("source", help="git+URL_OR_PATH@REV | pypi:sglang==VERSION | path:DIR")
    _common(p)
    p.set_defaults(func=cmd_resolve)

    p = sub.add_parser("env", help="build or reuse a source's probe environment and check its imports")
    p.add_argument("source")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    _common(p)
    _env_options(p)
    p.set_defaults(func=cmd_env)

    p = sub.add_parser("run", help="reproduce the evidence bundle from pins.toml (base and head of each fix)")
    p.add_argument("--via", choices=["releases", "commits"], default="releases",
                   help="trees from the release brackets on PyPI, or the pinned commits of a git repository")
    p.add_argument("--repo", metavar="URL|PATH", help="git repository for --via commits (default: the pinned upstream)")
    p.add_argument("--pr", type=int, action="append", metavar="N", help="only this fix (repeatable)")
    p.add_argument("--out", metavar="DIR", help="bundle directory to create (must not exist or be empty)")
    _probe_options(p)
    _common(p)
    _env_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("verify", help="recompute a bundle's manifest and every receipt digest")
    p.add_argument("bundle")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("compare", help="observation-level differences between two bundles or receipts")
    p.add_argument("a")
    p.add_argument("b")
    p.set_defaults(func=cmd_compare)

    for module in EXTENSIONS:  # commands that live in their own modules register themselves
        module.register(sub, _common)
    return parser


def _probe_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-j", "--jobs", type=errors.positive_int, default=1, metavar="N", help="probe runs in parallel (default 1)")
    p.add_argument("--case-timeout", type=errors.positive_int, default=execute.DEFAULT_CASE_TIMEOUT, metavar="S",
                   help=f"seconds before a probe case is killed (default {execute.DEFAULT_CASE_TIMEOUT})")
    p.add_argument("--repeat", type=errors.positive_int, default=1, metavar="N",
                   help="run each tree's probes N times; exit 1 if any observation differs")


class Terminated(KeyboardInterrupt):
    """SIGTERM takes the same way out as Ctrl-C: probe groups killed, partial entries removed."""

    signum = signal.SIGTERM


def _terminate(signum: int, frame) -> NoReturn:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return args.func(args)
    except errors.DiffprobeError as e:
        ui.err.print(f"diffprobe: error: {e.message}", markup=False)
        if e.detail:  # only infrastructure failures carry detail: the tail of what failed, indented
            ui.err.print("\n".join(f"    {line}" for line in e.detail.splitlines()), markup=False, style="dim")
        return e.exit_code
    except KeyboardInterrupt as e:
        ui.err.print("diffprobe: interrupted; completed entries are kept, partial ones were discarded", markup=False)
        return 128 + getattr(e, "signum", signal.SIGINT)
    except Exception as e:  # a bug of ours: still one line, the traceback only on request
        if os.environ.get("DIFFPROBE_DEBUG"):
            traceback.print_exc()
        ui.err.print(f"diffprobe: internal error: {type(e).__name__}: {e} (set DIFFPROBE_DEBUG=1 for a traceback)", markup=False)
        return errors.INFRASTRUCTURE
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
