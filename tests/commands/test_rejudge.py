"""Observations stored, verdicts derived: a receipt in the receipts store whose tree, source, probe closure and
environment match is judged anew by another judge from its recorded effects, never probed again; a changed probe
closure probes only that probe again; a tampered stored receipt is refused and probed again, never re-judged."""

from __future__ import annotations

import orjson
import pytest

from runner.app import pipeline
from runner.evidence import catalog, receipts
from runner.sandbox import execute
from runner.store.cache import Store
from tests.conftest import probe_options

SOURCE = "pypi:sglang==0.5.22"
PROBES = ["lifetime-peers", "lifetime-failures"]


class Probed(Exception):
    """A probe run was asked for: raised instead of running it."""


@pytest.fixture
def store(cache, tmp_path, monkeypatch):
    """The session's trees and environments, with a receipts store of this test's own."""
    monkeypatch.setattr(Store, "results", lambda self, name: self.dir("results", name) if self is not cache
                        else _own(tmp_path / "results" / name))
    return cache


def _own(path):
    path.mkdir(parents=True, exist_ok=True)
    return path


def _probing(monkeypatch) -> list[list[str]]:
    """Every probe run asked for from now on, each refused (``Probed``)."""
    asked: list[list[str]] = []

    def refused(environment, probes, **kwargs):
        asked.append(list(probes))
        raise Probed(probes)
    monkeypatch.setattr(execute, "run_probes", refused)
    return asked


def _another_judge(monkeypatch, digest: str) -> None:
    files = {"runner/judge/judging.py": digest}
    monkeypatch.setattr(catalog, "judge", lambda: (digest, files))
    monkeypatch.setattr(receipts, "judge", lambda: (digest, files))


def test_a_judge_only_edit_rejudges_stored_observations_without_probing(store, release_tree, monkeypatch, capsys):
    release_tree("0.5.22")
    first = pipeline.probe({SOURCE: PROBES}, probe_options(store))
    assert not first.reused  # observed here: this test's receipts store starts empty
    asked = _probing(monkeypatch)
    _another_judge(monkeypatch, "f" * 64)
    monkeypatch.setattr(pipeline.fixcode, "measure", lambda *a: None)  # the new judge's rule: no fix-code coverage
    capsys.readouterr()
    again = pipeline.probe({SOURCE: PROBES}, probe_options(store))
    assert asked == [] and again.rejudged == again.reused == {(SOURCE, p) for p in PROBES}
    assert "re-judged 2 receipt(s) from stored observations" in capsys.readouterr().err
    for p in PROBES:
        old, new = first.receipts[(SOURCE, p)], again.receipts[(SOURCE, p)]
        assert new.rejudged == receipts.Rejudged(receipt=old.digest, judge=old.environment.diffprobe_sha256)
        assert new.environment.diffprobe_sha256 == "f" * 64 and new.fix_code is None and old.fix_code is not None
        assert (new.started_at, new.finished_at, new.materials, new.import_result) == (
            old.started_at, old.finished_at, old.materials, old.import_result)
        assert [(c.id, c.effects, c.lines, c.duties) for c in new.cases] == [(c.id, c.effects, c.lines, c.duties) for c in old.cases]
        assert new.observation_digest == old.observation_digest and new.digest != old.digest
    # the re-judged receipts are what the store holds now: the same judge reuses them as they are
    third = pipeline.probe({SOURCE: PROBES}, probe_options(store))
    assert asked == [] and not third.rejudged and third.receipts == again.receipts


def test_a_changed_probe_is_probed_again_alone_and_a_tampered_entry_never_rejudged(store, release_tree, monkeypatch, capsys,
                                                                                  tmp_path):
    release_tree("0.5.22")
    pipeline.probe({SOURCE: PROBES}, probe_options(store))
    asked = _probing(monkeypatch)
    _another_judge(monkeypatch, "e" * 64)
    real = catalog.probe_digest
    monkeypatch.setattr(catalog, "probe_digest", lambda probe: "0" * 64 if probe == "lifetime-failures" else real(probe))
    with pytest.raises(Probed):
        pipeline.probe({SOURCE: PROBES}, probe_options(store))
    assert asked == [["lifetime-failures"]]
    assert "lifetime-peers on pypi:sglang==0.5.22: re-judged from the stored observation" in capsys.readouterr().err
    monkeypatch.setattr(catalog, "probe_digest", real)
    [entry] = [p for p in (tmp_path / "results").rglob("lifetime-peers-*.json")]
    raw = orjson.loads(entry.read_bytes())
    raw["cases"][0]["effects"] = {}  # an observation rewritten, its digest left as it was
    entry.write_bytes(orjson.dumps(raw))
    _another_judge(monkeypatch, "d" * 64)
    asked.clear()
    with pytest.raises(Probed):
        pipeline.probe({SOURCE: ["lifetime-peers"]}, probe_options(store))
    assert asked == [["lifetime-peers"]] and "does not match its key or digest; probing again" in capsys.readouterr().err
