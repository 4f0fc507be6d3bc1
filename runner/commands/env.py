"""``diffprobe env``: build or reuse a source's probe environment and prove where its imports come from."""

from __future__ import annotations

import sys

import orjson
from rich.markup import escape
from rich.table import Table

from runner import errors, ui
from runner.commands import options, resolve
from runner.evidence import pins
from runner.sandbox.import_check import import_check
from runner.store import envs, torch_source
from runner.store.cache import read_model


def cmd_env(args) -> int:
    cache = options.store(args)
    torch = options.torch(args)  # a bad source fails before any download
    tree = resolve.tree(args, args.source)
    sandboxed = options.resolved(args, pins.load(options.path(args.pins)), options.probe_of_env(args)).sandboxed(tree)
    interp = envs.interpreter(args.python)
    environment = envs.env(tree, cache, interp, torch)
    for note in environment.stamp.notes:
        ui.warn(note)
    with ui.step(f"import check in {environment.root.name}"):
        check = import_check(environment, tree, sandboxed=sandboxed)
    layer = read_model(environment.layer / "layer.json", envs.LayerStamp)
    if args.json:
        payload = {"environment": str(environment.root), "stamp": environment.stamp.model_dump(mode="json"),
                   "layer": layer.model_dump(mode="json", exclude={"packages"}) if layer else None,
                   "tree": tree.identity.model_dump(mode="json", exclude_none=True), "check": check.model_dump(mode="json")}
        sys.stdout.write(errors.printable_json(orjson.dumps(payload, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()) + "\n")
    else:
        _print_check(tree, environment, check, layer)
    if not check.ok:
        failed = [m for m, v in check.modules.items() if v != "ok"]
        what = f"{failed[0]}: {check.modules[failed[0]]}" if failed else f"sglang imported from outside the tree: {check.outside[0]}"
        raise errors.Infrastructure(f"import check failed: {what}")
    return errors.OK


def _print_check(tree, environment, check, layer: envs.LayerStamp | None) -> None:
    o = ui.out
    o.print(f"[bold]tree[/]        {tree.identity.source}  {tree.identity.tree_digest}  ({tree.identity.files} files)")
    o.print(f"[bold]environment[/] {environment.root}")
    o.print(f"[bold]python[/]      {environment.stamp.interpreter.implementation} {environment.stamp.interpreter.version}"
            f"  layer {environment.stamp.layer_key} (lock sha256 {environment.stamp.lock_sha256[:16]}…)")
    made = environment.stamp.bytecode
    o.print(f"[bold]byte-code[/]   of {made.modules} modules when built: {made.copied} copied from the byte-code store, "
            f"the rest from {made.compiled} distinct source(s) compiled")
    if layer:
        o.print(escape(f"torch       {layer.torch.version} from {torch_source.describe(layer.torch.source)}: "
                       f"{layer.torch.url} (sha256 {layer.torch.sha256[:16]}…)"))
    table = Table("module", "import", box=None)
    for name, verdict in check.modules.items():
        table.add_row(name, "[green]ok[/]" if verdict == "ok" else f"[red]{verdict}[/]")
    o.print(table)
    o.print(f"imported {len(check.files)} sglang files, all from {tree.root}" if not check.outside
            else f"[red]sglang files from outside the tree:[/] {check.outside}")
    for f in sorted(check.files)[:: max(1, len(check.files) // 8)][:8]:
        o.print(f"  {check.files[f][:16]}…  {f}")
    o.print(f"  … ({len(check.files)} in all; --json lists every file with its sha256)")
    roots = sorted({s if s.startswith(("sglang.", "torch.")) else s.split('.')[0] for s in check.standins})
    declared = environment.stamp.standins.declared
    o.print(f"stand-ins used: {', '.join(roots) or 'none'}  (declared: "
            f"{', '.join(sorted({_declared_name(d) for d in declared}))})")
    if environment.stamp.standins.tree_lacks:
        o.print(f"compiled modules this tree lacks (stand-ins if imported): {', '.join(environment.stamp.standins.tree_lacks)}")
    o.print(f"import took {check.duration_ms / 1000:.1f} s")


def _declared_name(name: str) -> str:
    if name.startswith("torch."):  # moved torch queries: one entry for the module they live on
        return name.rsplit(".", 1)[0] + ".*"
    return name if name.startswith("sglang.") else name.split(".")[0]


def register(sub) -> None:
    p = options.command(
        sub, "env", "a source's environment builds and imports from the tree",
        about="Builds or reuses the probe environment of a source and checks that every import comes from the tree.",
        example="diffprobe env pypi:sglang==0.5.21", ok="the environment is ready and its imports check")
    options.source(p, what="the tree whose environment to build")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    options.common(p)
    options.env_options(p)
    p.set_defaults(func=cmd_env)
