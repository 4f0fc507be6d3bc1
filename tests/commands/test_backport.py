"""backport in the fixture repository: the "PR" is 0.5.20 -> 0.5.21 (it carries #38935)."""

from pathlib import Path

import pytest

from runner import cli, errors
from runner.evidence import bundle
from runner.evidence.records import BackportRecord
from tests import forks
from tests.records import checked

pytestmark = pytest.mark.slow  # real releases, environments and SGLang imports

PINS = Path(__file__).resolve().parents[2] / "pins.toml"


@pytest.fixture(scope="module")
def pr_pins(upstream_repo, tmp_path_factory) -> Path:
    commits = upstream_repo["commits"]
    text = PINS.read_text()
    text = text.replace('base = "17ba2c2e7c7b81f31a8a9e693e7435ab262c16b4"', f'base = "{commits["0.5.20"]}"')
    text = text.replace('head = "8f3d6944b76c428d884582cb6c82a39db1465360"', f'head = "{commits["0.5.21"]}"')
    path = tmp_path_factory.mktemp("pins") / "pins.toml"
    path.write_text(text)
    return path


def _backport(upstream_repo, cache, pr_pins, out, *extra):
    return cli.main(["backport", "--pr", "38935", "--repo", str(upstream_repo["path"]), "--pins", str(pr_pins),
                     "--out", str(out), "--cache-dir", str(cache.root), *extra])


def _record(out) -> BackportRecord:
    return BackportRecord.model_validate(checked(out))


def test_fix_applied_onto_an_older_tree_behaves_like_head(upstream_repo, cache, pr_pins, tmp_path):
    out = tmp_path / "b"
    # the patched tree is not a release: its changed places the probes can reach are for a review to accept
    assert _backport(upstream_repo, cache, pr_pins, out, "--onto", "pypi:sglang==0.5.20") == errors.UNREVIEWED
    record = _record(out)
    assert record.applied == "applied cleanly" and record.behaves_like_head
    assert record.on_unreviewed and record.unreviewed and not record.rejected
    assert "sglang/srt/disaggregation/prefill.py" in record.files
    _, _, diffs = bundle.load(out)
    (d,) = diffs.values()
    assert d.verdict == "fix observed"  # the tree before the patch against the patched tree


def test_three_way_merge_when_context_moved(upstream_repo, cache, pr_pins, tmp_path, release_tree):
    """A vendor edit next to a hunk breaks plain application; the three-way merge still lands it."""
    context = ("        draft_token_to_kv_pool: Optional[KVCache],\n"
               "        req_to_metadata_buffer_idx_allocator: ReqToMetadataIdxAllocator,\n"
               "        metadata_buffers: MetadataBuffers,\n"
               "        tp_rank: int,\n")
    vendor = [(forks.PREFILL, context, context.replace("Optional[KVCache],", "Optional[KVCache],  # vendor", 1))]
    fork = forks.make(release_tree("0.5.20").root, tmp_path / "vendor", vendor)
    out = tmp_path / "b"
    assert _backport(upstream_repo, cache, pr_pins, out, "--onto", f"path:{fork}", "--accept-unreviewed") == 0
    assert _record(out).applied == "applied by three-way merge"


def test_already_applied_patch_is_detected(upstream_repo, cache, pr_pins, tmp_path):
    out = tmp_path / "b"
    assert _backport(upstream_repo, cache, pr_pins, out, "--onto", "pypi:sglang==0.5.21") == 0
    assert _record(out).applied == "already applied"


def test_conflicting_patch_is_a_clear_error(upstream_repo, cache, pr_pins, tmp_path, capsys):
    out = tmp_path / "b"
    assert _backport(upstream_repo, cache, pr_pins, out, "--onto", "pypi:sglang==0.5.19") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the patch conflicts with pypi:sglang==0.5.19" in err[0]
    assert not out.exists()


def test_applied_backport_missing_a_door_does_not_behave_like_head(upstream_repo, cache, pr_pins, tmp_path, release_tree):
    fork = forks.make(release_tree("0.5.21").root, tmp_path / "half", forks.WITHOUT_DECODE_GATE)
    out = tmp_path / "b"
    assert _backport(upstream_repo, cache, pr_pins, out, "--onto", f"path:{fork}", "--applied") == 1
    differing = [r.case for r in _record(out).rows if not r.same]
    assert sorted(differing) == sorted(forks.rejected_at("decode"))  # every rejected case at the missing door, and nothing else
