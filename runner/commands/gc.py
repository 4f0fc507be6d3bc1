"""``diffprobe gc``: keep the store within a size budget (least recently used entries go first)
and remove what killed runs left behind."""

from __future__ import annotations

from runner import errors, ui
from runner.commands import options
from runner.store import gc


def _size(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


def cmd_gc(args) -> int:
    store = options.store(args)
    budget = gc.parse_size(args.max_size) if args.max_size else None
    done = gc.collect(store, budget, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for path in done.orphans:
        ui.out.print(f"{verb} {path} (left by a process that is gone)", markup=False)
    for entry in done.removed:
        ui.out.print(f"{verb} {entry.path} ({entry.kind}, {_size(entry.size)}, least recently used)", markup=False)
    for path in done.busy:
        ui.warn(f"kept {path}: in use (being built, or used within the hour)")
    if budget is not None:
        ui.out.print(f"store {store.root}: {_size(done.kept)} kept (budget {_size(budget)})", markup=False)
    return errors.OK


def register(sub) -> None:
    p = options.command(
        sub, "gc", "the store kept within a size budget, leftovers removed",
        about="Evicts least recently used store entries down to --max-size and removes what killed runs left behind.",
        example="diffprobe gc --max-size 20G --dry-run", ok="done (or, with --dry-run, said)")
    p.add_argument("--max-size", metavar="SIZE", help="keep at most this much (e.g. 20G, 500M); default: only remove leftovers")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    options.cache_dir(p)
    p.set_defaults(func=cmd_gc)
