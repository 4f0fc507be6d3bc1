"""The receipts store: a receipt already observed for (tree digest, probe digest, environment key)
is reused instead of probing the same bytes again, as asv reuses results by commit and environment.

A stored receipt is trusted only after re-checking it: its own digest, and that its tree, probe
and environment are the key it is filed under. A reused receipt is the original observation,
unchanged (its source names the tree it was first observed through, its times are the run's), and
every command says which receipts it reused.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from runner import __version__, ui
from runner.evidence.catalog import judge_digest
from runner.evidence.receipts import Environment, Receipt, seal
from runner.files import digest_name, sha256_bytes, write_atomic
from runner.store.cache import Store
from runner.store.envs import Env


def _key(interpreter_tag: str | None, lock: str | None, layer: str | None, standins: str | None, version: str,
         judge: str) -> str:
    fixed = {"interpreter_tag": interpreter_tag, "lock_sha256": lock, "layer": layer, "standins": standins,
             "diffprobe": version, "judge": judge}
    return sha256_bytes(orjson.dumps(fixed, option=orjson.OPT_SORT_KEYS))


def env_key(environment: Env) -> str:
    """What is fixed about where a run happens before it starts (asv's environment hash), and the
    judge: receipts of different diffprobe code are not comparable, so not reusable either."""
    stamp = environment.stamp
    return _key(stamp.interpreter.tag, stamp.lock_sha256, stamp.layer_key, stamp.standins.sha256, __version__, judge_digest())


def receipt_key(environment: Environment) -> str | None:
    """The key a receipt belongs under, from what it records (None: not a tree probe's)."""
    if environment.standins is None:
        return None
    return _key(environment.interpreter_tag, environment.lock_sha256, environment.layer, environment.standins.sha256,
                environment.diffprobe, environment.diffprobe_sha256)


def _path(cache: Store, tree_digest: str, probe: str, probe_sha256: str, key: str) -> Path:
    """``results/<environment>-<tree>/<probe>-<version>.json``: one entry per tree and environment,
    the unit ``diffprobe gc`` evicts."""
    return cache.results(f"{key[:24]}-{digest_name(tree_digest)[:32]}") / f"{probe}-{probe_sha256[:32]}.json"


def lookup(cache: Store, tree_digest: str, probe: str, probe_sha256: str, key: str) -> Receipt | None:
    """The stored receipt for this key if it checks out; a damaged or mismatched entry is dropped."""
    path = _path(cache, tree_digest, probe, probe_sha256, key)
    try:
        raw = orjson.loads(path.read_bytes())
        receipt = Receipt.model_validate(raw)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        ui.warn(f"receipts store entry {path} is damaged ({type(e).__name__}); probing again")
        path.unlink(missing_ok=True)
        return None
    ok = (seal(raw) == receipt.digest and getattr(receipt.source, "tree_digest", None) == tree_digest
          and receipt.probe.id == probe and receipt.probe.sha256 == probe_sha256
          and receipt_key(receipt.environment) == key)
    if not ok:
        ui.warn(f"receipts store entry {path} does not match its key or digest; probing again")
        path.unlink(missing_ok=True)
        return None
    cache.used(path.parent)
    return receipt


def record(cache: Store, receipt: Receipt, key: str) -> None:
    """File a fresh receipt under its key. Not kept: a receipt with a timeout or a harness that
    died, which may say more about the machine's load that day than about the tree."""
    if receipt.import_result.outcome != "ok" or any(
            c.outcome == "timeout" or (c.error is not None and c.error.where == "process") for c in receipt.cases):
        return
    path = _path(cache, receipt.source.tree_digest, receipt.probe.id, receipt.probe.sha256, key)
    write_atomic(path, orjson.dumps(receipt.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS))
