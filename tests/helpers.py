"""Hand-made receipts for testing the runner's own mechanics (no SGLang involved)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner import cli, errors
from runner.app import pipeline
from runner.commands import options
from runner.commands.sweep import version_key
from runner.evidence import attest, bundle, dsse, pins, receipts
from runner.judge.observations import Case
from runner.store.sources import TreeIdentity

ROOT = Path(__file__).resolve().parent.parent  # the project checkout
EVIDENCE = ROOT / "evidence"

PROBE = receipts.ProbeRef(id="admission", fix=38935, sha256="a" * 64, files={"admission.py": "b" * 64})


def case(case_id: str, role: str = "bug", outcome: str = "observed", bug: bool = False, **extra) -> Case:
    classification = ("bug" if bug else "clean") if outcome == "observed" else "inconclusive"
    fields = dict(
        id=case_id, site="prefill-door", role=role, title=f"{case_id} title", signature="a rejected request got a sender",
        outcome=outcome, classification=classification, duration_ms=5,
        effects={"senders": [{"rid": case_id}] if bug else [], "queue": []} if outcome == "observed" else None,
        error={"type": "AttributeError", "message": "x", "where": "double", "frame": None} if outcome == "error" else None,
        missing="sglang.x.y" if outcome == "not_applicable" else None,
    )
    fields.update(extra)
    return Case(**fields)


def tree(version: str) -> TreeIdentity:
    return TreeIdentity(kind="pypi", source=f"pypi:sglang=={version}", version=version, artifact=f"sglang-{version}.whl",
                        artifact_sha256="c" * 64, tree_digest=f"h1:{version}AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", files=3)


def receipt(version: str, cases: list[Case], probe: receipts.ProbeRef = PROBE) -> receipts.Receipt:
    return receipts.make(probe, tree(version), receipts.host_environment(), cases,
                         started_at="2026-11-30T00:00:00Z", finished_at="2026-11-30T00:00:01Z",
                         materials={"sglang/__init__.py": "d" * 64})


def key_pair(directory: Path) -> tuple[Path, Path]:
    """(private, public) Ed25519 key files, as ``diffprobe keygen`` writes them."""
    private, public, _ = dsse.generate(directory)
    return private, public


def standalone():
    """The stand-alone verifier shipped in evidence/ (no diffprobe code), loaded as a module."""
    import importlib.util
    import sys
    if "verify_bundle" not in sys.modules:
        spec = importlib.util.spec_from_file_location("verify_bundle", ROOT / "evidence" / "verify_bundle.py")
        sys.modules["verify_bundle"] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules["verify_bundle"]


def check_signed(root: Path, public: Path, capsys) -> None:
    """A bundle a command signed: an envelope per receipt and one for the bundle, ``verify --key`` with
    the signer's key passes and so does the stand-alone verifier, with another key both refuse it
    (diffprobe with exit 1 and one line)."""
    _, receipts, _ = bundle.load(root)
    assert sorted(p.name for p in (root / "attestations").iterdir()) == sorted(
        [attest.envelope_name(n).removeprefix(attest.DIR) for n in receipts] + ["bundle.intoto.json"])
    capsys.readouterr()
    assert cli.main(["verify", str(root), "--key", str(public)]) == 0
    assert "every attestation carries valid signatures" in capsys.readouterr().out
    assert standalone().main([str(root), "--key", str(public)]) == 0
    _, other = key_pair(root.parent / f"{root.name}-other-key")
    assert standalone().main([str(root), "--key", str(other)]) == 1
    assert cli.main(["verify", str(root), "--key", str(other)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "signed only by key(s) not given" in err[0]


def pins_38935(dest: Path, base: str, head: str) -> Path:
    """The project's pins with #38935's base and head moved to commits of a fixture repository."""
    text = (ROOT / "pins.toml").read_text()
    text = text.replace('base = "17ba2c2e7c7b81f31a8a9e693e7435ab262c16b4"', f'base = "{base}"')
    text = text.replace('head = "8f3d6944b76c428d884582cb6c82a39db1465360"', f'head = "{head}"')
    dest.write_text(text)
    return dest


INCIDENT = (36988, 38935)  # the incident's two fixes: what a test narrowed by ``--fix`` usually checks


def fix_args(fixes: tuple[int, ...] = INCIDENT) -> list[str]:
    """``--fix N`` for each of ``fixes``: a command probing only their probes."""
    return [a for n in fixes for a in ("--fix", str(n))]


def audit_exit(version: str, fixes: tuple[int, ...] = ()) -> int:
    """What ``audit`` of release ``version`` (narrowed to ``fixes`` by ``--fix``, if any) must exit with
    by the project's pins: 0 only when each such pinned fix's first release is at or before it (a later
    defence still missing is exit 1)."""
    pinned = pins.load().fixes
    carried = all(version_key(pinned[n].releases.with_) <= version_key(version) for n in (fixes or pinned))
    return errors.OK if carried else errors.DIFFERS


def committed_bundles(marked: bool = True) -> list:
    """The bundles committed under evidence/, as test parameters: a release line (hundreds of receipts
    with their lines: a minute of CPU to load, verify and render) in the slow tier, so that the fast
    tier stays seconds; the reference runs in the fast one. ``marked=False``: the directories alone."""
    found = sorted(p for p in EVIDENCE.glob("[!.]*") if (p / bundle.MANIFEST).is_file())
    if not marked:
        return found
    return [pytest.param(p, id=p.name, marks=[pytest.mark.slow] if p.name.startswith("release-line-") else [])
            for p in found]


def table_hunks(table: dict) -> list[dict]:
    """A hunk table ``{id: (function, old, new, *expectations)}`` as ``mutate --hunks`` reads it."""
    return [{"id": h, "function": f, "old": old, "new": new} for h, (f, old, new, *_) in table.items()]


def mutate_hunks(version: str, fix: int | str, hunks: list[dict], root: Path, cache_root: Path) -> dict:
    """``mutate --hunks`` of ``pypi:sglang==version`` for one fix (one SGLang import for every hunk, each
    ``{id, function, old, new}``), written under ``root``: the mutation report."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "hunks.json").write_text(json.dumps([{k: h[k] for k in ("id", "function", "old", "new")} for h in hunks]))
    cli.main(["mutate", f"pypi:sglang=={version}", "--fix", str(fix), "--hunks", str(root / "hunks.json"),
              "--out", str(root / "out"), "--cache-dir", str(cache_root)])
    return json.loads(next((root / "out" / "mutation").glob("*.json")).read_text())


def mutants_by_id(report: dict) -> dict:
    """A mutation report's mutants by hunk id."""
    return {m["id"]: m for m in report["mutants"]}


def hunk_trials(tmp_path_factory, cache_root: Path):
    """``get(version, fix, table)``: one ``mutate --hunks`` of the table per release and fix, kept for the
    module (one SGLang import for all its hunks): {hunk id: its mutant in the report}."""
    done: dict[tuple[str, str], dict] = {}

    def get(version: str, fix: int | str, table: dict) -> dict:
        if (version, str(fix)) not in done:
            report = mutate_hunks(version, fix, table_hunks(table), tmp_path_factory.mktemp(f"hunks-{version}-{fix}"),
                                  cache_root)
            done[(version, str(fix))] = mutants_by_id(report)
        return done[(version, str(fix))]

    return get


def check_hunk_reads(mutants: dict, table: dict) -> None:
    """Each hunk of ``{id: (function, old, new, reads, ..., duty)}`` reads ``reads``, and the reason names
    ``duty`` (None: an equivalent rewrite, or a hunk whose reason is not asserted)."""
    for hunk, row in table.items():
        m, reads, duty = mutants[hunk], row[3], row[-1]
        assert m["reads"] == reads, (hunk, m["status"], m["why"])
        if duty is not None:
            assert duty in m["why"], (hunk, m["why"])


def probed(cache, versions: tuple[str, ...], probes: list[str], case_timeout: float) -> dict:
    """The named probes run on each release, two trees at once: {(version, probe id): receipt}."""
    opts = pipeline.Options(cache=cache, probe=options.ProbeOptions(jobs=2, case_timeout=case_timeout))
    _, got = pipeline.probe_sources({f"pypi:sglang=={v}": list(probes) for v in versions}, opts)
    return {(text.split("==")[1], probe): receipt for (text, probe), receipt in got.items()}
