"""evidence/regenerate.py seeds the receipts store from the committed bundles it replaces: a verified bundle's
receipts of this checkout's probe versions are filed under their environments' keys (where the command finds them and
judges them anew), a receipt of another probe version is not, and a bundle that does not verify gives none."""

from __future__ import annotations

import importlib.util

import pytest

from runner.app import pipeline
from runner.evidence import bundle, receipts, results
from runner.store.cache import Store
from tests.helpers import EVIDENCE, PROBE, case, receipt


@pytest.fixture(scope="module")
def regenerate():
    spec = importlib.util.spec_from_file_location("regenerate", EVIDENCE / "regenerate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tree_receipt(version: str, probe: receipts.ProbeRef) -> receipts.Receipt:
    """A tree probe's receipt judged by another judge (its duties are that judge's: verify checks them for
    consistency only), as a committed bundle holds them after an edit of the judge."""
    r = receipt(version, [case("a"), case("b", bug=True)], probe)
    env = r.environment.model_copy(update={
        "diffprobe_sha256": "c" * 64, "interpreter_tag": "cp311", "lock_sha256": "1" * 64, "layer": "layer-1",
        "standins": receipts.Standins(declared={}, used=[], tree_lacks=[], sha256="2" * 64)})
    return receipts.make(r.probe, r.source, env, r.cases, started_at=r.started_at, finished_at=r.finished_at,
                         materials=r.materials)


@pytest.fixture
def committed(tmp_path):
    current, stale = _tree_receipt("0.5.21", pipeline.probe_ref("admission", 38935)), _tree_receipt("0.5.20", PROBE)
    root = bundle.write(tmp_path / "committed", kind="run", created_at="2026-12-04T00:00:00Z", receipts=[current, stale],
                        differentials=[], pins_sha256=None)
    return root, current


def test_a_verified_bundles_current_receipts_are_filed_where_the_command_finds_them(regenerate, committed, tmp_path):
    root, current = committed
    cache = Store.at(tmp_path / "cache")
    assert regenerate.seed(root, cache) == 1  # the receipt of another probe version would be probed again anyway
    found = results.lookup(cache, current.source, "admission", current.probe.sha256, results.receipt_key(current.environment))
    assert found == current and not results.judged_here(found)


def test_a_tampered_bundle_seeds_nothing(regenerate, committed, tmp_path, capsys):
    root, current = committed
    path = root / bundle.receipt_name(current)
    path.write_bytes(path.read_bytes().replace(b'"senders"', b'"sendxrs"'))  # an observation rewritten
    cache = Store.at(tmp_path / "cache")
    assert regenerate.seed(root, cache) == 0
    assert "does not verify" in capsys.readouterr().err and not list((tmp_path / "cache").rglob("results/**/*.json"))
