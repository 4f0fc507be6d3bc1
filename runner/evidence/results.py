"""The receipts store: a receipt already observed for (tree digest, probe digest, environment key)
through a source is reused instead of probing the same bytes from that source again, as asv reuses
results by commit and environment.

Observations are stored, verdicts derived: the key holds what decides what a run observes (tree, source,
probe closure, environment), never the judge. A stored receipt of another judge is judged anew from its
recorded observation (``pipeline.rejudged``), so an edit of the judge alone costs no probe run.

A receipt answers only for the source it names (the same commit, artifact or directory): the same
bytes through another source are another entry beside it, never a replacement, so a sweep that
names commit A and then commit B of one tree does not cost the next run naming A a probe run.

A stored receipt is trusted only after re-checking it: its own digest, and that its tree, probe
and environment are the key it is filed under. A reused receipt is the original observation,
unchanged (its source names the tree it was first observed through, its times are the run's), and
every command says which receipts it reused.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from runner import __version__
from runner.evidence import catalog
from runner.evidence.receipts import Environment, Receipt, seal
from runner.files import digest_name, sha256_bytes, write_atomic
from runner.store.cache import Store
from runner.store.envs import Env
from runner.store.trees import TreeIdentity


def _key(interpreter_tag: str | None, lock: str | None, layer: str | None, standins: str | None, version: str) -> str:
    fixed = {"interpreter_tag": interpreter_tag, "lock_sha256": lock, "layer": layer, "standins": standins,
             "diffprobe": version}
    return sha256_bytes(orjson.dumps(fixed, option=orjson.OPT_SORT_KEYS))


def env_key(environment: Env) -> str:
    """What is fixed about where a run happens before it starts (asv's environment hash). Not the judge: what
    it derives is derived again from a stored observation (``judged_here`` says whether that is needed)."""
    stamp = environment.stamp
    return _key(stamp.interpreter.tag, stamp.lock_sha256, stamp.layer_key, stamp.standins.sha256, __version__)


def receipt_key(environment: Environment) -> str | None:
    """The key a receipt belongs under, from what it records (None: not a tree probe's)."""
    if environment.standins is None:
        return None
    return _key(environment.interpreter_tag, environment.lock_sha256, environment.layer, environment.standins.sha256,
                environment.diffprobe)


def judged_here(receipt: Receipt) -> bool:
    """Whether this diffprobe's judge derived the receipt's verdicts (else they are derived again before use)."""
    return receipt.environment.diffprobe_sha256 == catalog.judge_digest()


# What names a source's bytes: a receipt of the same tree through another source does not answer for this one.
SOURCE_FIELDS = ("kind", "commit", "artifact_sha256", "path", "version", "left_out", "image")


def same_source(a: TreeIdentity, b: TreeIdentity) -> bool:
    """Whether two identities name the same commit, artifact or directory (what each left out included)."""
    return all(getattr(a, f, None) == getattr(b, f, None) for f in SOURCE_FIELDS)


def _path(cache: Store, source: TreeIdentity, probe: str, probe_sha256: str, key: str) -> Path:
    """``results/<environment>-<tree>/<probe>-<version>-<source>.json``: one directory per tree and
    environment, the unit ``diffprobe gc`` evicts, and in it one entry per probe version and source."""
    fields = source.model_dump(mode="json")  # an image identity is a model of its own
    named = sha256_bytes(orjson.dumps({f: fields.get(f) for f in SOURCE_FIELDS}, option=orjson.OPT_SORT_KEYS))
    directory = cache.results(f"{key[:24]}-{digest_name(source.tree_digest)[:32]}")
    return directory / f"{probe}-{probe_sha256[:32]}-{named[:16]}.json"


def lookup(cache: Store, source: TreeIdentity, probe: str, probe_sha256: str, key: str) -> Receipt | None:
    """The stored receipt of this source's tree for this key if it checks out; a damaged or
    mismatched entry is dropped, and so is one this diffprobe would write with other bytes (written
    before a field was added to a format): a bundle holds receipts as the current models write
    them, and a reused receipt must seal to its digest there too."""
    path = _path(cache, source, probe, probe_sha256, key)
    try:
        raw = orjson.loads(path.read_bytes())
        receipt = Receipt.model_validate(raw)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        cache.notices.warn(f"receipts store entry {path} is damaged ({type(e).__name__}); probing again")
        path.unlink(missing_ok=True)
        return None
    ok = (seal(raw) == receipt.digest == seal(receipt.model_dump(mode="json")) and isinstance(receipt.source, TreeIdentity)
          and receipt.source.tree_digest == source.tree_digest and same_source(receipt.source, source)
          and receipt.probe.id == probe and receipt.probe.sha256 == probe_sha256
          and receipt_key(receipt.environment) == key)
    if not ok:
        cache.notices.warn(f"receipts store entry {path} does not match its key or digest; probing again")
        path.unlink(missing_ok=True)
        return None
    cache.used(path.parent)
    return receipt


def record(cache: Store, receipt: Receipt, key: str) -> bool:
    """File a receipt under its key (whether it was filed). Not kept: a receipt with a timeout or a harness that
    died, which may say more about the machine's load that day than about the tree."""
    if receipt.import_result.outcome != "ok" or any(
            c.outcome == "timeout" or (c.error is not None and c.error.where == "process") for c in receipt.cases):
        return False
    path = _path(cache, receipt.source, receipt.probe.id, receipt.probe.sha256, key)
    write_atomic(path, orjson.dumps(receipt.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS))
    return True


def of_tree(cache: Store, tree_digest: str) -> list[Receipt]:
    """Every stored receipt of one tree, in any environment and of any probe version, that checks out
    (its digest, the tree it names): what was observed of that tree, read without probing (drift's
    coverage). A damaged entry is skipped, not dropped: ``lookup`` is the one that evicts."""
    out = []
    for path in sorted(cache.dir("results").glob(f"*-{digest_name(tree_digest)[:32]}/*.json")):
        try:
            raw = orjson.loads(path.read_bytes())
            receipt = Receipt.model_validate(raw)
        except (OSError, ValueError):
            continue
        if seal(raw) == receipt.digest and isinstance(receipt.source, TreeIdentity) and receipt.source.tree_digest == tree_digest:
            out.append(receipt)
    return out
