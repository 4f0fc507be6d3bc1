"""Trees between releases: an upstream main commit reads as its code says (issue 40, item 5).

Upstream main between 0.5.16 and 0.5.17 (e.g. 9c483cc of 2026-07-24, the package of a vendor fork)
has config namespaces (``get_disagg()``...) but no ``runtime_context.publish``: its scheduler fills
the context through ``set_global_server_args_for_scheduler`` -> ``get_context().set_server_args``,
which projects the namespaces, as 0.5.15 and 0.5.16 fill the server arguments ``get_server_args()``
reads. Probes that published only through ``publish`` left such a tree unconfigured: #36988's
yielded-result guards escaped ``release_kv_cache`` with "Global server args is not set yet!" (a
"regression" on the main commit), and every #39500 case failed set-up with "config namespace 'disagg'
not published" ("inconclusive").

The fixture is a git repository laid out like upstream, built at run time from real release wheels
(never committed): the v0.5.16 tag holds 0.5.16's package; the main commit after it holds 0.5.17's,
edited to carry that era's shape (its context module without ``publish``, every importer taking it
under another name). Both are audited as git commits and must read as their code says, the reason
on screen.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from runner import cli
from tests import gitrepo

pytestmark = pytest.mark.slow  # real releases, environments and SGLang imports

RUNTIME_CONTEXT = "sglang/srt/runtime_context.py"
IMPORTS_PUBLISH = re.compile(r"^(\s*from sglang\.srt\.runtime_context import .*\b)publish$", re.M)
YIELDED_GUARDS = ("healthy-yielded-result", "healthy-yielded-optimistic-mid-range", "healthy-yielded-optimistic-overlap")
SET_UP_FAULTS = ("Global server args is not set yet!", "not published")


def main_of_july(release_root: Path, dest: Path) -> Path:
    """0.5.17's package as upstream main had it before ``publish``: the context module has no such
    name (the function is kept under a private one, so each importer still runs the same code)."""
    shutil.copytree(release_root / "sglang", dest / "sglang", ignore=shutil.ignore_patterns("*.so"))
    context = dest / RUNTIME_CONTEXT
    text = context.read_text()
    assert text.count("\ndef publish(") == 1
    context.write_text(text.replace("\ndef publish(", "\ndef _publish("))
    edited = 0
    for path in (dest / "sglang").rglob("*.py"):
        source = path.read_text()
        changed, n = IMPORTS_PUBLISH.subn(r"\1_publish as publish", source)
        if n:
            path.write_text(changed)
            edited += n
    assert edited >= 5  # the scheduler, the DP controller, the server-args shims...
    return dest


@pytest.fixture(scope="module")
def upstream(release_tree, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    work = tmp_path_factory.mktemp("between")
    july = main_of_july(release_tree("0.5.17").root, work / "july")
    repo = work / "repo"
    shas = gitrepo.build(repo, [gitrepo.Step("v0.5.16", package=release_tree("0.5.16").root, tag="v0.5.16"),
                                gitrepo.Step("main 2026-07-24", package=july)])
    return repo, shas


@pytest.fixture(scope="module")
def audited(upstream, cache, tmp_path_factory):
    """(exit code, screen, {case id: case}) of ``audit --fix 36988 --fix 39500`` per commit label."""
    repo, shas = upstream
    done: dict[str, tuple[int, str, dict]] = {}

    def get(label: str, capsys) -> tuple[int, str, dict]:
        if label not in done:
            out = tmp_path_factory.mktemp("audit") / "bundle"
            capsys.readouterr()
            code = cli.main(["audit", f"git+{repo}@{shas[label]}", "--fix", "36988", "--fix", "39500",
                             "--out", str(out), "--cache-dir", str(cache.root)])
            screen = capsys.readouterr().out
            cases = {}
            for receipt in sorted((out / "receipts").glob("*.json")):
                probe = json.loads(receipt.read_text())
                cases.update({(probe["probe"]["id"], c["id"]): c for c in probe["cases"]})
            done[label] = (code, screen, cases)
        return done[label]

    return get


def _set_up_faults(cases: dict) -> list[str]:
    found = []
    for key, case in cases.items():
        told = json.dumps([case.get("error"), (case.get("effects") or {}).get("escaped")])
        found += [f"{key}: {fault}" for fault in SET_UP_FAULTS if fault in told]
    return found


@pytest.mark.parametrize("label", ["v0.5.16", "main 2026-07-24"])
def test_a_tree_whose_context_takes_server_args_without_publish_reads_as_its_code_says(label, audited, capsys):
    code, screen, cases = audited(label, capsys)
    print(screen)
    assert _set_up_faults(cases) == []
    # the guards run the tree's own release of a yielded optimistic request, reading its server args
    for guard in YIELDED_GUARDS:
        case = cases[("prefill-cleanup", guard)]
        assert (case["role"], case["classification"]) == ("guard", "clean"), (guard, case["duties"], case["effects"])
    # every handoff case is set up: observed, or not applicable for an API the tree lacks (named); a tree
    # without the checksum option shows the unwritten read
    handoff = {cid: c for (probe, cid), c in cases.items() if probe == "handoff"}
    assert handoff and all(c["outcome"] == "observed" or (c["outcome"] == "not_applicable" and c["missing"])
                           for c in handoff.values()), {cid: (c["outcome"], c["error"]) for cid, c in handoff.items()}
    assert handoff["short-handoff"]["classification"] == "bug"
    assert handoff["full-handoff"]["classification"] == "clean"
    verdicts = {line.split()[0]: line.split()[1:3] for line in screen.splitlines() if line.startswith("#")}
    assert verdicts["#36988"][:2] == ["not", "fixed"], screen
    assert verdicts["#39500"][:2] == ["not", "fixed"], screen
