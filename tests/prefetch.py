"""Fill a test cache ahead of the tests: the shared layer, the releases the slow tests use, and each
release's environment.

Run by tests/conftest.py as its own process at the start of a large test run (output to a log, so
nothing it prints lands in a test's captured output): the layer is built on one thread while the
releases download on two others (I/O); then each release's environment is built (a virtualenv and
the tree's byte-code: ~9 s of CPU for the first, then only the modules the byte-code store lacks),
in the order given, on the core the tests leave idle while
they wait on one probe process. The store's build locks and scratch directories make it safe beside
the tests, which wait for what they need (``conftest.prefetch``; an environment's build lock).

    python -m tests.prefetch CACHE_DIR VERSION...
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

from runner.store import envs, sources, specs
from runner.store.cache import Store


def main(root: str, versions: list[str]) -> None:
    cache, interp = Store.at(root), envs.interpreter(None)
    failed = 0

    def done(job):
        nonlocal failed
        try:
            return job.result()
        except Exception as e:  # the test that needs it meets the same failure, in its own words
            print(f"prefetch: {e}", file=sys.stderr)
            failed += 1

    with ThreadPoolExecutor(max_workers=3) as pool:
        layer = pool.submit(envs.layer, cache, interp)
        trees = [pool.submit(sources.resolve, specs.PypiSpec(version=v), cache) for v in versions]
        if done(layer) is not None:
            for job in trees:
                tree = done(job)
                if tree is not None:
                    done(pool.submit(envs.env, tree, cache, interp))
        else:
            for job in trees:
                done(job)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
