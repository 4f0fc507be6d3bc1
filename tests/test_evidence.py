"""What is committed under evidence/ stays true: current schemas, intact reference bundles."""

from pathlib import Path

from runner.evidence import bundle, schema

EVIDENCE = Path(__file__).resolve().parent.parent / "evidence"


def test_schema_files_are_current():
    rendered = schema.render()
    on_disk = {p.name: p.read_bytes() for p in (EVIDENCE / "schema").glob("*.json")}
    assert on_disk == rendered, "run `python -m runner.evidence.schema` and commit evidence/schema"


def test_committed_bundles_verify():
    bundles = [p for p in EVIDENCE.iterdir() if (p / bundle.MANIFEST).is_file()]
    assert bundles
    for root in bundles:
        assert bundle.verify(root) == [], root
        index, receipts, diffs = bundle.load(root)
        if root.name.startswith("releases-"):  # the reference runs; the release line is checked in test_release_line
            assert index.kind == "run" and {d.verdict for d in diffs.values()} == {"fix observed"}
        else:
            assert index.kind == "sweep" and diffs
