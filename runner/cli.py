"""The ``diffprobe`` command. Each subcommand composes the same pipeline with other inputs."""

from __future__ import annotations

import argparse
import os
import sys
import traceback

import orjson

from runner import __version__, envs, errors, pins, sources, specs, ui
from runner.cache import Cache


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache-dir", metavar="DIR", help="cache root (default: $DIFFPROBE_CACHE or ~/.cache/diffprobe)")
    p.add_argument("--pins", metavar="FILE", help="pins.toml to use (default: the project's own)")


def _env_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--python", metavar="EXE", help="interpreter for the probe environments (default: the running one)")


def _resolve_tree(args, text: str) -> sources.Tree:
    spec = specs.parse(text)
    p = pins.load(_path(args.pins))
    return sources.resolve(
        spec, Cache.at(args.cache_dir), package_dir=p.package_dir,
        pinned_sha256={v: r.sha256 for v, r in p.releases.items() if r.sha256},
    )


def _path(value):
    from pathlib import Path

    return Path(value) if value else None


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="diffprobe", description=__doc__)
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
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except errors.DiffprobeError as e:
        ui.err.print(f"diffprobe: error: {e.message}", markup=False)
        if e.detail:
            ui.err.print(e.detail, markup=False, style="dim")
        return e.exit_code
    except KeyboardInterrupt:
        ui.err.print("diffprobe: interrupted; completed entries are kept, partial ones were discarded", markup=False)
        return 130
    except Exception as e:  # a bug of ours: still one line, the traceback only on request
        if os.environ.get("DIFFPROBE_DEBUG"):
            traceback.print_exc()
        ui.err.print(f"diffprobe: internal error: {type(e).__name__}: {e} (set DIFFPROBE_DEBUG=1 for a traceback)", markup=False)
        return errors.INFRASTRUCTURE


if __name__ == "__main__":
    sys.exit(main())
