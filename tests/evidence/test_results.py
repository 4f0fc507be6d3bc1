"""The receipts store: a receipt is reused only under its own key and only while its digest holds."""

from __future__ import annotations

import os

import orjson
import pytest

from runner.evidence import receipts
from runner.evidence import results
from runner.app.notices import PRINTED
from runner.store.cache import Store
from tests.helpers import PROBE, case, receipt


@pytest.fixture
def observed() -> receipts.Receipt:
    """A tree probe's receipt: host environment plus what a tree's environment records."""
    r = receipt("0.5.21", [case("a"), case("b", bug=True)])
    env = r.environment.model_copy(update={
        "interpreter_tag": "cp311", "lock_sha256": "1" * 64, "layer": "layer-1",
        "standins": receipts.Standins(declared={"triton": "x"}, used=[], tree_lacks=[], sha256="2" * 64)})
    return receipts.make(r.probe, r.source, env, r.cases, started_at=r.started_at, finished_at=r.finished_at,
                         materials=r.materials)


def _lookup(cache: Store, r: receipts.Receipt, key: str | None = None):
    return results.lookup(cache, r.source, r.probe.id, r.probe.sha256, key or results.receipt_key(r.environment))


def test_a_recorded_receipt_is_found_under_its_key_and_nothing_else(tmp_path, observed):
    cache = Store.at(tmp_path)
    key = results.receipt_key(observed.environment)
    assert _lookup(cache, observed) is None
    results.record(cache, observed, key)
    assert _lookup(cache, observed) == observed
    assert _lookup(cache, observed, key="f" * 64) is None  # another environment
    assert results.lookup(cache, observed.source, PROBE.id, "e" * 64, key) is None  # another probe version
    other_tree = observed.source.model_copy(update={"tree_digest": "h1:" + "B" * 43 + "="})
    assert results.lookup(cache, other_tree, PROBE.id, PROBE.sha256, key) is None  # another tree


def test_the_same_bytes_through_another_source_are_an_entry_of_their_own(tmp_path, observed):
    """A store receipt answers only for the source it names; another source of the same tree (a later
    commit that did not touch the package, a copy of a release) gets its own entry beside it, never
    in its place: a sweep naming commit B must not cost the next run naming commit A a probe run."""
    cache = Store.at(tmp_path)
    key = results.receipt_key(observed.environment)
    results.record(cache, observed, key)
    copy = observed.source.model_copy(update={"kind": "path", "source": "path:/elsewhere", "version": None,
                                              "artifact": None, "artifact_sha256": None, "path": "/elsewhere"})
    assert results.lookup(cache, copy, PROBE.id, PROBE.sha256, key) is None  # not observed through it
    via_copy = receipts.make(observed.probe, copy, observed.environment, observed.cases, started_at=observed.started_at,
                             finished_at=observed.finished_at, materials=observed.materials)
    results.record(cache, via_copy, key)
    assert _lookup(cache, observed) == observed and _lookup(cache, via_copy) == via_copy
    [entry] = (tmp_path / "results").iterdir()  # one tree, one environment: one directory, two entries
    assert len(list(entry.glob("*.json"))) == 2


def test_an_entry_moved_under_another_sources_name_is_dropped(tmp_path, observed):
    """A receipt copied to the name another source's entry would have does not answer for that source."""
    cache = Store.at(tmp_path)
    key = results.receipt_key(observed.environment)
    results.record(cache, observed, key)
    [path] = (tmp_path / "results").rglob("*.json")
    other = observed.source.model_copy(update={"version": "9.9.9", "source": "pypi:sglang==9.9.9"})
    assert results.lookup(cache, other, PROBE.id, PROBE.sha256, key) is None
    path.rename(results._path(cache, other, PROBE.id, PROBE.sha256, key))
    assert results.lookup(cache, other, PROBE.id, PROBE.sha256, key) is None


def test_an_entry_is_filed_under_the_trees_own_stored_name(tmp_path, observed):
    """One way from a tree digest to a file name (files.digest_name): the receipts store's entry
    starts with the name the tree store files the same tree under."""
    cache = Store.at(tmp_path)
    results.record(cache, observed, results.receipt_key(observed.environment))
    [entry] = (tmp_path / "results").iterdir()
    assert entry.name.endswith("-" + cache.tree(observed.source.tree_digest).name[:32])


def test_a_tampered_entry_is_dropped_not_reused(tmp_path, observed, capsys):
    cache = Store.at(tmp_path, notices=PRINTED)
    key = results.receipt_key(observed.environment)
    results.record(cache, observed, key)
    [path] = (tmp_path / "results").rglob("*.json")
    raw = orjson.loads(path.read_bytes())
    raw["cases"][1]["classification"] = "clean"  # a bug rewritten as clean, digest left as it was
    path.write_bytes(orjson.dumps(raw))
    assert _lookup(cache, observed) is None
    assert not path.exists() and "does not match" in capsys.readouterr().err


def test_an_entry_filed_under_the_wrong_key_is_dropped(tmp_path, observed):
    cache = Store.at(tmp_path)
    results.record(cache, observed, "9" * 64)  # filed under a key its environment does not give
    assert _lookup(cache, observed, key="9" * 64) is None


def test_timeouts_and_dead_harnesses_are_not_kept(tmp_path, observed):
    cache = Store.at(tmp_path)
    timed_out = receipts.make(observed.probe, observed.source, observed.environment, [case("a", outcome="timeout")],
                              started_at=observed.started_at, finished_at=observed.finished_at)
    results.record(cache, timed_out, results.receipt_key(timed_out.environment))
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").rglob("*.json"))


def test_gc_counts_and_evicts_receipts_store_entries(tmp_path, observed):
    from runner.store import gc

    cache = Store.at(tmp_path)
    results.record(cache, observed, results.receipt_key(observed.environment))
    [entry] = [e for e in gc.entries(cache) if e.kind == "results"]
    assert entry.path.parent == tmp_path / "results" and entry.size > 0
    os.utime(entry.path, (0, 0))  # last used long ago
    assert [e.path for e in gc.collect(cache, 0).removed] == [entry.path]
    assert not entry.path.exists() and _lookup(cache, observed) is None


def test_an_entry_written_before_a_field_was_added_is_probed_again(tmp_path, observed, capsys):
    """A stored receipt lacking a field the current model writes (an older format, sealed without it)
    is not reused: written into a bundle by today's models it would no longer match its digest."""
    cache = Store.at(tmp_path, notices=PRINTED)
    key = results.receipt_key(observed.environment)
    results.record(cache, observed, key)
    [path] = (tmp_path / "results").rglob("*.json")
    raw = orjson.loads(path.read_bytes())
    assert raw["source"].pop("image") is None  # a field the older format did not have, default None
    raw["digest"] = receipts.seal(raw)  # sealed as the older diffprobe sealed it
    path.write_bytes(orjson.dumps(raw))
    assert _lookup(cache, observed) is None
    assert "probing again" in capsys.readouterr().err and not path.exists()
