"""Fill a test cache ahead of the tests: the shared layer and the releases the slow tests use.

Run by tests/conftest.py as its own process at the start of a large test run (output to a log, so
nothing it prints lands in a test's captured output): the layer is built on one thread while the
releases download on two others (I/O). The store's build locks and scratch directories make it safe
beside the tests, which wait for what they need (``conftest.prefetch``).

    python -m tests.prefetch CACHE_DIR VERSION...
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

from runner.store import envs, sources, specs
from runner.store.cache import Store


def main(root: str, versions: list[str]) -> None:
    cache = Store.at(root)
    with ThreadPoolExecutor(max_workers=3) as pool:
        jobs = [pool.submit(envs.layer, cache, envs.interpreter(None))]
        jobs += [pool.submit(sources.resolve, specs.PypiSpec(version=v), cache) for v in versions]
        failed = 0
        for job in jobs:
            try:
                job.result()
            except Exception as e:  # the test that needs it meets the same failure, in its own words
                print(f"prefetch: {e}", file=sys.stderr)
                failed += 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
