"""Does every release's environment import what the probes drive? The whole release line, measured.

    python bench/eras_imports.py [--releases 0.4.5..0.5.23] [--cache-dir DIR] [--json FILE]

For each release on the package index in the range (the same listing ``sweep --releases`` uses):
resolve it (download counted apart), build its diffprobe environment (shared layer + thin venv),
and run the environment's import check (``diffprobe env``'s acceptance test: the probed modules,
imported from the tree and nowhere else). Prints one line per release and totals: which import,
which fail and why (first failing module and its error), which stand-ins each touched, seconds.
Sequential on purpose: the import times are per fresh interpreter on an otherwise shared machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.commands.sweep import releases_between  # noqa: E402
from runner.sandbox.import_check import import_check  # noqa: E402
from runner.store import envs, sources, specs  # noqa: E402
from runner.store.cache import Store  # noqa: E402


def one(version: str, cache: Store, interp: envs.Interpreter) -> dict:
    row: dict = {"release": version}
    t0 = time.monotonic()
    tree = sources.resolve(specs.PypiSpec(version=version), cache)
    t1 = time.monotonic()
    environment = envs.env(tree, cache, interp)
    t2 = time.monotonic()
    check = import_check(environment, tree)
    t3 = time.monotonic()
    failed = {m: v for m, v in check.modules.items() if v != "ok"}
    row.update(
        ok=check.ok, failed=failed, outside=check.outside, files=len(check.files),
        standins=sorted({s if s.startswith(("sglang.", "torch.")) else s.split(".")[0] for s in check.standins}),
        resolve_s=round(t1 - t0, 1), env_s=round(t2 - t1, 1), import_s=round(t3 - t2, 1),
        import_ms_in_child=check.duration_ms,
    )
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--releases", default="0.4.5..0.5.23", metavar="FIRST..LAST")
    ap.add_argument("--cache-dir", metavar="DIR")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args()
    cache = Store.at(args.cache_dir)
    first, _, last = args.releases.partition("..")
    versions = releases_between(first, last, cache)
    interp = envs.interpreter(None)
    t0 = time.monotonic()
    envs.layer(cache, interp)  # built (or found) once, timed apart
    layer_s = time.monotonic() - t0
    rows = []
    for version in versions:
        try:
            row = one(version, cache, interp)
        except Exception as e:  # a release that cannot even be resolved or built is a row, not the end
            row = {"release": version, "ok": False, "failed": {"(environment)": f"{type(e).__name__}: {e}"}}
        rows.append(row)
        why = "" if row["ok"] else "  " + "; ".join(f"{m}: {v}" for m, v in list(row["failed"].items())[:1])
        timing = f"resolve {row.get('resolve_s', '-')}s env {row.get('env_s', '-')}s import {row.get('import_s', '-')}s"
        print(f"{version:14} {'OK  ' if row['ok'] else 'FAIL'} {timing:40} {','.join(row.get('standins', []))}{why}",
              flush=True)
    ok = sum(r["ok"] for r in rows)
    print(f"\n{ok}/{len(rows)} releases import every probed module ({len(versions)} listed in {args.releases}); "
          f"layer {layer_s:.1f}s; resolve {sum(r.get('resolve_s', 0) for r in rows):.0f}s, "
          f"envs {sum(r.get('env_s', 0) for r in rows):.0f}s, imports {sum(r.get('import_s', 0) for r in rows):.0f}s")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
