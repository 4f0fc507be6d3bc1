"""What the stand-alone verifier (evidence/verify_bundle.py) tells a stranger: without its two libraries
one line naming what to install (exit 2); a summary line; FAILED explained as the tree's recorded
result, not a failed check; a matching --tree confirmed."""

from __future__ import annotations

import subprocess
import sys

from tests.evidence.test_attest_forgeries import STANDALONE, _write, parties  # noqa: F401 (a fixture)


def _run(*argv: str, hide: str = "") -> subprocess.CompletedProcess:
    guard = (f"import runpy, sys; sys.modules.update({hide}runner=None, probes=None, tests=None); "
             f"sys.argv = ['verify_bundle.py'] + sys.argv[1:]; runpy.run_path({str(STANDALONE)!r}, run_name='__main__')")
    return subprocess.run([sys.executable, "-c", guard, *argv], capture_output=True, text=True)


def test_missing_libraries_are_one_line_naming_what_to_install(tmp_path):
    done = _run(str(tmp_path), "--key", str(tmp_path / "k.pub"), hide="securesystemslib=None, ")
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stdout == ""
    assert done.stderr.splitlines() == ["verify_bundle: error: the module securesystemslib is missing: "
                                        "pip install 'securesystemslib[crypto]' in-toto-attestation"]


def test_failed_is_explained_and_a_summary_line_closes(parties, tmp_path):
    root = _write(tmp_path / "b", [parties["signer"].signer])
    done = _run(str(root), "--key", str(parties["signer"].public))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    failed = [line for line in lines if ": FAILED" in line]
    assert failed and all("FAILED (recorded: a case showed the bug or could not be judged)" in line for line in failed)
    assert lines[-1].startswith("VERIFIED: ") and "1 receipt(s) record PASSED, 1 FAILED" in lines[-1]
    assert "not outcomes of this check: every check passed" in lines[-1]


def test_confinement_is_in_each_statement_and_an_unsandboxed_run_is_a_warning(parties, tmp_path):
    """Attestations say how each tree's code ran (sandbox, interpreter, layer), as report and compare do:
    in each receipt's Statement, once per way in the bundle's, and the stand-alone verifier shows it,
    with a warning line for a run outside the sandbox."""
    from runner.evidence import bundle, receipts, statements
    from tests import helpers

    boxed = receipts.Isolation(sandbox="bubblewrap", version="0.8.0", namespaces=["user", "pid", "net"])
    made = []
    for version, isolation in (("0.5.20", receipts.Isolation(sandbox="none")), ("0.5.21", boxed)):
        r = helpers.receipt(version, [helpers.case("rejected", bug=version == "0.5.20")])
        env = r.environment.model_copy(update={"isolation": isolation, "layer": "layer-1", "interpreter_tag": "cp311"})
        made.append(receipts.make(r.probe, r.source, env, r.cases, started_at=r.started_at, finished_at=r.finished_at,
                                  materials=r.materials))
    named = [(bundle.receipt_name(r), r) for r in made]
    entries = [e for r in made for e in statements.receipt_statement("r", "e" * 64, r)["predicate"]["configuration"]
               if e["name"] == "environment/confinement"]
    assert [(e["annotations"]["sandboxed"], e["annotations"]["sandbox"], e["annotations"]["dependencyLayer"]) for e in entries] == [
        (False, "none", "layer-1"), (True, "bubblewrap 0.8.0", "layer-1")]
    assert entries[1]["annotations"]["namespaces"] == ["user", "pid", "net"] and entries[0]["digest"] != entries[1]["digest"]
    whole = statements.bundle_statement({}, dict(named), {}, ("v", "0" * 64), {}, ("bundle.json", "t"))
    assert [e["annotations"]["sandbox"] for e in whole["predicate"]["configuration"] if e["name"] == "environment/confinement"] == [
        "none", "bubblewrap 0.8.0"]
    diff = receipts.differential(38935, "t", ["admission"], named[:1], named[1:], "fix observed")
    root = bundle.write(tmp_path / "b", kind="run", created_at="2026-12-04T00:00:00Z", receipts=made, differentials=[diff],
                        pins_sha256=None, signers=[parties["signer"].signer])
    done = _run(str(root), "--key", str(parties["signer"].public))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any("0.5.21" in line and "confined: bubblewrap 0.8.0, CPython" in line for line in lines)
    assert any("0.5.20" in line and "UNSANDBOXED: none, CPython" in line for line in lines)
    assert [line for line in lines if line.startswith("WARNING")] == [
        f"WARNING a tree's code ran outside the sandbox, with its user's rights: UNSANDBOXED: none, {entries[0]['annotations']['interpreter']}, layer layer-1"]
