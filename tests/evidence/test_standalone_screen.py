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
