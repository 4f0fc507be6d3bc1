"""Identities are drawn by what code decides: the judge's is its import closure, each probe's its own.
Checked on a copy of the project with one file edited (the identities are read from files, so a copy
has the identities its own bytes give): an edit outside a closure moves nothing, one inside moves
exactly the identities whose closure holds it, and bundles made on either side of an edit that moves
nothing compare as the same observations."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runner import cli
from runner.evidence import bundle, catalog, receipts
from tests.helpers import ROOT, case, receipt
from probes import registry

PROBES = [*catalog.PROBES, catalog.UPSTREAM_TESTS[0]]
# Storage, signing, formats, views, commands: none of it decides a verdict.
OUTSIDE = ["runner/store/cache.py", "runner/evidence/dsse.py", "runner/views/status.py", "runner/evidence/bundle.py",
           "runner/evidence/receipts.py", "runner/app/pipeline.py", "runner/files.py", "probes/server_config.py"]


@pytest.fixture
def copy(tmp_path) -> Path:
    for package in ("runner", "probes"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def identities(root: Path) -> dict[str, str]:
    return {"judge": catalog.digest(catalog.judge_files(root))} | {p: catalog.probe_digest(p, root) for p in PROBES}


def edit_docstring(path: Path) -> None:
    text = path.read_text()
    start = text.index('"""') + 3
    path.write_text(text[:start] + "Edited. " + text[start:])


def test_a_copy_has_the_identities_of_the_project(copy):
    assert identities(copy) == identities(ROOT)
    assert catalog.judge() == (identities(ROOT)["judge"], catalog.judge_files())


def test_the_judge_is_its_package_and_the_probes_code_it_imports():
    """Nothing of storage, formats, signing, views or commands: runner/judge, the package file above it, and
    the probes' registry, duty tables (one per fix), case spaces, coverage, fix-code and condition reading."""
    files = catalog.judge_files()
    assert {f for f in files if not f.startswith("runner/judge/")} == {
        "runner/__init__.py", "probes/__init__.py", "probes/duties.py", "probes/space.py", "probes/coverage.py",
        "probes/fixcode.py", "probes/conditions.py", "probes/registry.py", "probes/effects.py", "probes/duties_lifetime.py",
        *(f"probes/duties_{entry.fix}.py" for entry in registry.PROBES)}
    assert {f"runner/judge/{p.name}" for p in (ROOT / "runner" / "judge").glob("*.py")} <= set(files)


@pytest.mark.parametrize("edited", OUTSIDE)
def test_an_edit_outside_every_closure_moves_no_identity(copy, edited):
    before = identities(copy)
    edit_docstring(copy / edited)
    assert identities(copy) == before


@pytest.mark.parametrize("edited", ["runner/judge/judging.py", "runner/judge/observations.py", "probes/duties.py",
                                    "probes/space.py"])
def test_an_edit_to_the_judges_code_moves_the_judge(copy, edited):
    before = identities(copy)
    edit_docstring(copy / edited)
    assert identities(copy)["judge"] != before["judge"]


def test_editing_the_lifetime_probe_moves_only_the_probes_built_on_it(copy):
    """The lifetime module is the scene of the lifetime probes and of handoff, handoff-slot, nixl-completion and
    lifetime-restore (which import it): exactly those move; admission, prefill-cleanup, upstream-tests and the judge do not."""
    before = identities(copy)
    edit_docstring(copy / "probes" / "lifetime.py")
    after = identities(copy)
    moved = {k for k in before if before[k] != after[k]}
    assert moved == {"lifetime-default", "lifetime-drain", "lifetime-peers", "lifetime-failures", "lifetime-hisparse",
                     "lifetime-ranks", "lifetime-flush", "handoff", "handoff-slot", "nixl-completion",
                     "lifetime-restore"}


def test_editing_one_probe_module_moves_that_probe_alone(copy):
    before = identities(copy)
    edit_docstring(copy / "probes" / "lifetime_drain.py")
    after = identities(copy)
    assert {k for k in before if before[k] != after[k]} == {"lifetime-drain"}


def test_the_harness_and_what_it_loads_by_name_are_every_probes(copy):
    """The harness loads its own modules with ``import_module(f"{PACKAGE}.name")``: they are followed too."""
    assert all("probes/mutation.py" in catalog.probe_files(p) and "probes/harness.py" in catalog.probe_files(p)
               for p in catalog.PROBES)
    before = identities(copy)
    edit_docstring(copy / "probes" / "mutation.py")
    after = identities(copy)
    assert {k for k in before if before[k] != after[k]} == set(catalog.PROBES)


def test_an_import_in_a_function_is_followed_and_one_for_type_checking_is_not(copy):
    """Files actually imported: a function's import runs when called; ``if TYPE_CHECKING:`` never runs."""
    judging = copy / "runner" / "judge" / "judging.py"
    judging.write_text(judging.read_text() + "\n\nif TYPE_CHECKING:\n    from runner.evidence import dsse\n")
    assert not any(f.startswith("runner/evidence/") for f in catalog.judge_files(copy))
    judging.write_text(judging.read_text() + "\n\ndef late():\n    from runner.store import cache\n")
    assert {"runner/store/__init__.py", "runner/store/cache.py"} <= set(catalog.judge_files(copy))


def _bundle(out: Path, root: Path, monkeypatch) -> Path:
    """A run bundle whose receipts carry the identities ``root``'s files give."""
    monkeypatch.setattr(receipts, "judge", lambda: (catalog.digest(files := catalog.judge_files(root)), files))
    files = catalog.probe_files("admission", root)
    probe = receipts.ProbeRef(id="admission", fix=38935, sha256=catalog.digest(files), files=files)
    made = [receipt(v, [case("rejected", bug=v == "0.5.20"), case("valid", role="guard")], probe) for v in ("0.5.20", "0.5.21")]
    return bundle.write(out, kind="run", created_at="2026-12-04T00:00:00Z", receipts=made, differentials=[], pins_sha256=None)


@pytest.mark.parametrize("edited, same", [("runner/store/cache.py", True), ("runner/evidence/dsse.py", True),
                                          ("runner/views/status.py", True), ("runner/judge/judging.py", False)])
def test_bundles_on_either_side_of_an_edit_compare(copy, tmp_path, monkeypatch, capsys, edited, same):
    # Another version of the admission probe than this checkout's: verify checks its receipts' hand-made
    # cases for consistency only, as it does any receipt of another probe version.
    edit_docstring(copy / "probes" / "admission.py")
    old = _bundle(tmp_path / "old", copy, monkeypatch)
    edit_docstring(copy / edited)
    new = _bundle(tmp_path / "new", copy, monkeypatch)
    capsys.readouterr()
    code = cli.main(["compare", str(old), str(new)])
    out = capsys.readouterr().out
    if same:
        assert code == 0 and "same observations" in out
    else:
        assert code != 0 and "judges differ" in out


def test_one_registry_names_every_probe_for_the_host_the_harness_and_the_duty_tables():
    """probes/registry.py is the one list: the host's catalog, the harness's modules and the duty tables are read
    from it, each probe module declares the id and fix of its row, and each row's fix has the table of its space."""
    import importlib

    from probes import duties, harness, registry
    ids = [e.id for e in registry.PROBES]
    assert list(catalog.PROBES) == ids == list(harness.PROBE_MODULES) == list(duties.SPACES)
    for entry in registry.PROBES:
        probe = importlib.import_module(f"probes.{entry.module}").PROBE
        assert (probe.id, probe.fix) == (entry.id, entry.fix)
        assert duties.TABLES[entry.fix].SPACE is duties.SPACES[entry.id]
        assert f"probes/duties_{entry.fix}.py" in catalog.judge_files() and f"probes/{entry.module}.py" in catalog.probe_files(entry.id)


@pytest.mark.parametrize("edited, moved", [
    ("registry.py", {"judge", *catalog.PROBES}),
    ("duties_41402.py", {"judge", "lifetime-peers"}),
    ("duties_41023.py", {"judge", "lifetime-default", "lifetime-drain", "lifetime-peers", "lifetime-failures",
                         "lifetime-hisparse", "lifetime-ranks", "lifetime-flush"}),
    ("duties_lifetime.py", {"judge", "lifetime-default", "lifetime-drain", "lifetime-peers", "lifetime-failures", "handoff",
                            "handoff-slot", "lifetime-hisparse", "lifetime-ranks", "lifetime-flush", "nixl-completion",
                            "lifetime-restore"}),  # the scene's configurations (lifetime.py) are named there
    ("duties_1.py", {"judge", "lifetime-ranks"}),
    ("duties_2.py", {"judge", "lifetime-flush"}),
    ("duties_3.py", {"judge", "nixl-completion"}),
    ("duties_6.py", {"judge", "lifetime-restore"}),
])
def test_a_duty_table_moves_the_judge_and_only_the_probes_it_judges(copy, edited, moved):
    """A probe's cases are judged by its own fix's table (probes/case.py holds no other), so one table's edit moves
    the judge (which composes them all) and the probes that import it; the registry, which the harness reads to
    find every probe, moves them all."""
    before = identities(copy)
    edit_docstring(copy / "probes" / edited)
    after = identities(copy)
    assert {k for k in before if before[k] != after[k]} == moved
