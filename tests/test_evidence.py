"""What is committed under evidence/ stays true: current schemas, intact reference bundles, made by
this checkout's inputs."""

import functools

import orjson
import pytest

from runner.evidence import bundle, catalog, pins, schema
from runner.files import sha256_file
from tests.helpers import EVIDENCE, committed_bundles

REGENERATE = "run `.venv/bin/python evidence/regenerate.py` and commit evidence/"


def test_schema_files_are_current():
    rendered = schema.render()
    on_disk = {p.name: p.read_bytes() for p in (EVIDENCE / "schema").glob("*.json")}
    assert on_disk == rendered, "run `python -m runner.evidence.schema` and commit evidence/schema"


def test_bundles_are_committed():
    assert committed_bundles()


@pytest.mark.parametrize("root", committed_bundles())
def test_committed_bundles_verify(root):
    assert bundle.verify(root) == [], root
    index, receipts, diffs = bundle.load(root)
    if root.name.startswith("releases-"):  # the reference runs; the release line is checked in test_release_line
        assert index.kind == "run" and {d.verdict for d in diffs.values()} == {"fix observed"}
    else:
        assert index.kind == "sweep" and diffs


@functools.cache
def probe_digest(probe: str) -> str:
    return catalog.probe_digest(probe)


def stale(root) -> list[str]:
    """Each input a committed bundle's receipts name that is not this checkout's: the judge, a probe's
    version, the pins file, a pinned release's artifact (its tree). Read from what the receipts record
    (raw JSON: that they are well formed is ``test_committed_bundles_verify``'s); nothing is probed again
    (the slow tests do, and compare what they observe)."""
    index = orjson.loads((root / bundle.INDEX).read_bytes())
    found = []
    if index["pins_sha256"] is not None and index["pins_sha256"] != sha256_file(pins.default_path()):
        found.append(f"{root.name}: made with another pins.toml")
    pinned = pins.load().pinned_sha256
    for name in sorted(index["receipts"]):
        r = orjson.loads((root / name).read_bytes())
        probe, judge, source = r["probe"], r["environment"]["diffprobe_sha256"], r["source"]
        if judge != catalog.judge_digest():
            found.append(f"{name}: judged by another judge ({judge[:12]})")
        if probe["id"] in catalog.PROBES and probe["sha256"] != probe_digest(probe["id"]):
            found.append(f"{name}: another version of probe {probe['id']}")
        if source["kind"] == "pypi" and source["version"] in pinned and source["artifact_sha256"] != pinned[source["version"]]:
            found.append(f"{name}: another artifact than pins.toml's for {source['version']}")
    return found


@pytest.mark.parametrize("root", [pytest.param(p, id=p.name) for p in committed_bundles(marked=False)])
def test_committed_bundles_are_current(root):
    problems = stale(root)
    assert not problems, f"{len(problems)} stale input(s), first: {problems[0]}; {REGENERATE}"


def test_a_stale_input_is_named(tmp_path, monkeypatch):
    """The check itself: another judge, another probe version or pins file is found. Measured against the
    inputs the bundle records, so that it holds while committed evidence awaits its regeneration."""
    root = next(p for p in committed_bundles(marked=False) if p.name.startswith("releases-"))
    index = orjson.loads((root / bundle.INDEX).read_bytes())
    recorded = [orjson.loads((root / name).read_bytes()) for name in index["receipts"]]
    [judge] = {r["environment"]["diffprobe_sha256"] for r in recorded}
    versions = {r["probe"]["id"]: r["probe"]["sha256"] for r in recorded}
    real = sha256_file

    def current(judged: str = judge, handoff: str = versions["handoff"], pins_file: bool = True) -> None:
        probe_digest.cache_clear()
        monkeypatch.setattr(catalog, "judge_digest", lambda: judged)
        monkeypatch.setattr(catalog, "probe_digest", lambda probe: handoff if probe == "handoff" else versions[probe])
        monkeypatch.setitem(globals(), "sha256_file", (lambda path: index["pins_sha256"]) if pins_file else real)

    current()
    assert stale(root) == []
    current(judged="0" * 64)
    assert {line.split(": ", 1)[1] for line in stale(root)} == {f"judged by another judge ({judge[:12]})"}
    current(handoff="0" * 64)
    assert {line.split(": ", 1)[1] for line in stale(root)} == {"another version of probe handoff"}
    current(pins_file=False)
    edited = tmp_path / "pins.toml"
    edited.write_bytes(pins.default_path().read_bytes() + b"\n")
    monkeypatch.setattr(pins, "default_path", lambda: edited)
    assert stale(root) == [f"{root.name}: made with another pins.toml"]
    probe_digest.cache_clear()


def test_one_command_makes_every_committed_bundle():
    """evidence/regenerate.py names each committed bundle, with the command that made it."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("regenerate", EVIDENCE / "regenerate.py")
    regenerate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(regenerate)
    assert sorted(regenerate.BUNDLES) == [p.name for p in committed_bundles(marked=False)]
    for root in committed_bundles(marked=False):
        index = orjson.loads((root / bundle.INDEX).read_bytes())
        assert index["kind"] == regenerate.BUNDLES[root.name][0], root.name
