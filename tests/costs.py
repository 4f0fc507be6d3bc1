"""The order test modules run in: quick modules first, then the costliest first.

pytest-xdist's ``loadscope`` hands whole modules to workers in queue order, by default the modules
with most tests first, whatever they cost: at the start both workers took modules whose first test
waits ~90 s for the shared layer, and a long module taken last ran alone at the end. Modules that
need no real release go first (they run while tests/prefetch.py builds the layer), then the others
by their CPU seconds in ``costs.json`` (longest first, the classic bound for the tail; a module not
listed there yet counts as the costliest). Only an order: every test runs either way.

    python -m tests.costs TIMES.jsonl   # refresh costs.json from a whole run's ``pytest --times``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COSTS = Path(__file__).with_name("costs.json")


def order(items: list, slow) -> None:
    """Reorder ``items`` in place, module by module (a module's own order kept); ``slow(item)``:
    whether it needs a real release."""
    costs = json.loads(COSTS.read_text()) if COSTS.exists() else {}
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)

    def key(name: str) -> tuple[bool, float]:
        return any(slow(i) for i in modules[name]), -costs.get(name, float("inf"))

    items[:] = [item for name in sorted(modules, key=key) for item in modules[name]]


def main(times: str) -> None:
    totals: dict[str, float] = {}
    for line in Path(times).read_text().splitlines():
        row = json.loads(line)
        module = row["test"].split("::")[0]
        totals[module] = totals.get(module, 0.0) + row["cpu"]
    COSTS.write_text(json.dumps({m: round(s, 1) for m, s in sorted(totals.items())}, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
