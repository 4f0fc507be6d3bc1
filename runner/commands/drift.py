"""``diffprobe drift A B``: the functions of the isolation-relevant modules that changed from tree A to
tree B and that no pinned fix's code or probe case reaches (runner/evidence/drift.py), each named, and
those the catalog says are deliberately not probed, each with its reason."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text

from runner import errors, ui
from runner.app import pipeline
from runner.commands import options
from runner.evidence import bundle, drift, pins, results
from runner.evidence.receipts import Receipt
from runner.files import tree_files
from probes.duties import FIX_CODE


def _read(root: Path, catalog: drift.Catalog) -> dict[str, bytes]:
    """The tree's Python files that some group of the catalog names."""
    return {rel: (root / rel).read_bytes() for rel in tree_files(root)
            if rel.endswith(".py") and catalog.names(rel)}


def _receipts(digest: str, bundles: list[str], opts: pipeline.Options) -> list[Receipt]:
    """What was observed of the tree: its receipts in the receipts store, and in each bundle given (verified)."""
    found = results.of_tree(opts.cache, digest)
    for path in bundles:
        found += [r for r in bundle.load(Path(path))[1].values() if getattr(r.source, "tree_digest", None) == digest]
    return found


def _ran(e: drift.Entry) -> str:
    """How far the cases ran it: how many changed statements, which not (their first lines), and who ran the rest."""
    shown = ", ".join(map(str, e.not_run[:5])) + (f" and {len(e.not_run) - 5} more" if len(e.not_run) > 5 else "")
    return (f"{len(e.statements) - len(e.not_run)} of {len(e.statements)} changed statement(s) run by a case"
            + (f" ({', '.join(e.reached_by)})" if e.reached_by else "") + (f"; not run: line {shown}" if e.not_run else ""))


def cmd_drift(args) -> int:
    catalog = drift.load(options.path(args.catalog))
    pinned = pins.load(options.path(args.pins))
    opts = options.resolved(args, pinned)
    old, new = pipeline.resolve(args.a, opts), pipeline.resolve(args.b, opts)
    entries = drift.changed(_read(old.root, catalog), _read(new.root, catalog), catalog)
    receipts = _receipts(new.identity.tree_digest, args.receipts or [], opts)
    cases: dict[str, list] = {}
    for r in receipts:
        cases.setdefault(r.probe.id, []).extend(r.cases)
    fixes = drift.fix_places({n: FIX_CODE[n] for n in pinned.fixes if n in FIX_CODE})
    entries = drift.reached(entries, fixes, cases, catalog)
    loose = [e for e in entries if not e.reached and e.unprobed is None]
    declared = [e for e in entries if not e.reached and e.unprobed is not None]
    ui.out.print(Text(errors.printable(
        f"drift {args.a} -> {args.b}: {len(entries)} function(s) of the isolation modules changed; "
        f"{sum(e.reached for e in entries)} with every changed statement run by a probe case ({len(receipts)} receipt(s) "
        f"of {args.b}), {len(declared)} not probed by decision, {len(loose)} unexplained"), style="bold"))
    for e in loose:
        ui.out.print(Text(errors.printable(f"  {e.file}:{e.lines[0]} {e.function} ({e.change}, {e.group}): {_ran(e)}")))
    if declared:
        ui.out.print(Text("not probed, by decision (the catalog's reasons):", style="bold"))
        for e in declared:
            ui.out.print(Text(errors.printable(f"  {e.file}:{e.lines[0]} {e.function} ({e.change}, {e.group}): {_ran(e)}; "
                                               f"{e.unprobed}")))
    if args.all:
        ui.out.print(Text("reached:", style="bold"))
        for e in entries:
            if e.reached:
                ui.out.print(Text(errors.printable(f"  {e.file}:{e.lines[0]} {e.function} ({e.change}): {', '.join(e.reached_by)}")))
    stale = sorted({u.place for u in catalog.unprobed} - {e.place for e in entries})
    if stale:
        ui.out.print(Text(errors.printable(f"{len(stale)} entry(ies) of the catalog's unprobed list did not change here "
                                           f"(first: {stale[0]})"), style="dim"))
    if loose:
        ui.out.print(Text(f"probe them, or declare each in the catalog's [[unprobed]] with a one-line reason "
                          f"({errors.printable(str(options.path(args.catalog) or drift.DEFAULT))})", style="dim"))
    return errors.DIFFERS if loose else errors.OK


def register(sub) -> None:
    p = options.command(
        sub, "drift", "isolation code changed between two trees that no case runs",
        about="Lists the functions of the isolation-relevant modules (disaggregation, scheduler admission, allocator and "
              "release, checksum, HiCache, Mamba and HiSparse paths: runner/data/isolation.toml) that differ from A to B "
              "and that neither a pinned fix's code nor a recorded probe case of B reaches, and those the catalog declares "
              "deliberately not probed, each with its one-line reason. Read from the trees' bytes; nothing runs.",
        example="diffprobe drift pypi:sglang==0.5.22 pypi:sglang==0.5.23",
        ok="nothing unexplained: every changed function is reached or declared not probed",
        differs="changed functions nothing reaches and the catalog does not explain (each named)")
    options.source(p, "a", what="the older tree")
    options.source(p, "b", what="the newer tree, whose receipts (the receipts store's, and --receipts) count as coverage")
    p.add_argument("--catalog", metavar="FILE", help="the module set and the unprobed list (default: runner/data/isolation.toml)")
    p.add_argument("--receipts", metavar="BUNDLE", action="append",
                   help="a bundle whose receipts of B count as coverage too (repeatable; each verified)")
    p.add_argument("--all", action="store_true", help="list the reached functions too, with what reaches each")
    options.common(p)
    p.set_defaults(func=cmd_drift)
