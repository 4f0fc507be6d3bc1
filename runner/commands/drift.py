"""``diffprobe drift A B``: the functions of the isolation-relevant modules that changed from tree A to
tree B and that no pinned fix's code or probe case reaches (runner/evidence/drift.py), each named, and
those the catalog says are deliberately not probed, each with its reason."""

from __future__ import annotations

import fnmatch
import sys
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
    if args.stub:
        return _stub(args, loose, new)
    differs = [e for e in loose if e.reviewed_other]
    ui.out.print(Text(errors.printable(
        f"drift {args.a} -> {args.b}: {len(entries)} function(s) of the isolation modules changed; "
        f"{sum(e.reached for e in entries)} with every changed statement run by a probe case ({len(receipts)} receipt(s) "
        f"of {args.b}), {len(declared)} not probed by decision (reviewed), {len(loose)} unexplained"
        + (f" ({len(differs)} of them reviewed in another version)" if differs else "")), style="bold"))
    for e in loose:
        was = (f"; reviewed version differs (reviewed in {e.reviewed_other.reviewed_in}, sha256 "
               f"{dict((f.place, f.sha256) for f in e.reviewed_other.functions)[e.place][:12]}, now {e.sha256[:12]}): "
               f"{e.reviewed_other.reason}") if e.reviewed_other else ""
        ui.out.print(Text(errors.printable(f"  {e.file}:{e.lines[0]} {e.function} ({e.change}, {e.group}): {_ran(e)}{was}")))
    if declared:
        ui.out.print(Text("not probed, by decision (reviewed: the catalog's reasons, its bytes the ones read):", style="bold"))
        for e in declared:
            ui.out.print(Text(errors.printable(f"  {e.file}:{e.lines[0]} {e.function} ({e.change}, {e.group}): {_ran(e)}; "
                                               f"{e.unprobed}")))
    if args.all:
        ui.out.print(Text("reached:", style="bold"))
        for e in entries:
            if e.reached:
                ui.out.print(Text(errors.printable(f"  {e.file}:{e.lines[0]} {e.function} ({e.change}): {', '.join(e.reached_by)}")))
    stale = sorted(set(catalog.reviewed()) - {e.place for e in entries})
    if stale:
        ui.out.print(Text(errors.printable(f"{len(stale)} entry(ies) of the catalog's unprobed list did not change here "
                                           f"(first: {stale[0]})"), style="dim"))
    if loose:
        ui.out.print(Text(f"probe them, or review each and declare it in the catalog's [[unprobed]] with a one-line reason "
                          f"(--stub PLACE prints the entry to paste, digests filled in; "
                          f"{errors.printable(str(options.path(args.catalog) or drift.DEFAULT))})", style="dim"))
    return errors.DIFFERS if loose else errors.OK


def _stub(args, loose: list[drift.Entry], new) -> int:
    """The [[unprobed]] entry to paste for the unexplained functions whose place matches a --stub glob: the reviewer
    writes the reason. Only the TOML goes to stdout."""
    chosen = [e for e in loose if any(fnmatch.fnmatchcase(e.place, g) for g in args.stub)]
    if not chosen:
        raise errors.BadInput(f"--stub {errors.printable(' '.join(args.stub))}: no unexplained function of {args.b} matches "
                              f"(a place reads sglang/FILE.py:Class.method; globs allowed)")
    sys.stdout.write(drift.stub(chosen, args.b, new.identity.tree_digest))
    sys.stdout.flush()
    return errors.OK


def register(sub) -> None:
    p = options.command(
        sub, "drift", "isolation code changed between two trees that no case runs",
        about="Lists the functions of the isolation-relevant modules (disaggregation, scheduler admission, allocator and "
              "release, checksum, HiCache, Mamba and HiSparse paths: runner/data/isolation.toml) that differ from A to B "
              "and that neither a pinned fix's code nor a recorded probe case of B reaches, and those the catalog declares "
              "deliberately not probed, each with its one-line reason. A declaration pins the sha256 of each function's "
              "source as reviewed: once the function's bytes differ it is unexplained again, its old reason shown. "
              "Read from the trees' bytes; nothing runs.",
        example="diffprobe drift pypi:sglang==0.5.22 pypi:sglang==0.5.23",
        ok="nothing unexplained: every changed function is reached or declared not probed for the bytes reviewed "
           "(with --stub: the entry printed)",
        differs="changed functions nothing reaches and the catalog does not explain (each named)")
    options.source(p, "a", what="the older tree")
    options.source(p, "b", what="the newer tree, whose receipts (the receipts store's, and --receipts) count as coverage")
    p.add_argument("--catalog", metavar="FILE", help="the module set and the unprobed list (default: runner/data/isolation.toml)")
    p.add_argument("--receipts", metavar="BUNDLE", action="append",
                   help="a bundle whose receipts of B count as coverage too (repeatable; each verified)")
    p.add_argument("--all", action="store_true", help="list the reached functions too, with what reaches each")
    p.add_argument("--stub", metavar="PLACE", action="append",
                   help="print only the [[unprobed]] entry to paste for the unexplained functions matching PLACE "
                        "(sglang/FILE.py:Class.method, a glob; repeatable: one entry, one reason, one digest per function); "
                        "the reviewer fills in the reason")
    options.common(p)
    p.set_defaults(func=cmd_drift)
