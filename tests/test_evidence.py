"""What is committed under evidence/ stays true: current schemas, intact reference bundles."""

import pytest

from runner.evidence import bundle, schema
from tests.helpers import EVIDENCE, committed_bundles


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
