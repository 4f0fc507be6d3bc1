"""``diffprobe verify`` says each problem once: the first in its error line, the others above it."""

from __future__ import annotations

from runner import cli
from runner.evidence import bundle
from tests import helpers


def test_each_problem_is_printed_once(tmp_path, capsys):
    made = [helpers.receipt(v, [helpers.case("rejected", bug=v == "0.5.20")]) for v in ("0.5.20", "0.5.21")]
    root = bundle.write(tmp_path / "b", kind="audit", created_at="2026-12-04T00:00:00Z", receipts=made, differentials=[],
                        pins_sha256=None)
    for name in ("sglang-0.5.20.admission.json", "sglang-0.5.21.admission.json"):
        path = root / "receipts" / name
        path.write_bytes(path.read_bytes().replace(b'"duration_ms": 5', b'"duration_ms": 6'))
    capsys.readouterr()
    assert cli.main(["verify", str(root)]) == 1
    out, err = capsys.readouterr()
    printed = out + err
    problems = bundle.verify(root)
    assert len(problems) >= 2 and all(printed.count(p) == 1 for p in problems), printed
    assert err.splitlines()[-1].endswith(f"(and the {len(problems) - 1} more problem(s) above)")


def test_a_resealed_forgery_is_refused_naming_the_field(tmp_path, capsys):
    """Rewritten and sealed again, a receipt still fails its schema: the line says where."""
    import orjson

    from runner.evidence.receipts import seal
    from runner.files import sha256_file
    root = bundle.write(tmp_path / "b", kind="audit", created_at="2026-12-04T00:00:00Z",
                        receipts=[helpers.receipt("0.5.20", [helpers.case("rejected", bug=True)])], differentials=[], pins_sha256=None)
    path = root / "receipts" / "sglang-0.5.20.admission.json"
    raw = orjson.loads(path.read_bytes())
    raw["cases"][0]["role"] = "witness"
    raw["digest"] = seal(raw)
    path.write_bytes(orjson.dumps(raw))
    files = [p for p in root.rglob("*") if p.is_file() and p.name != bundle.MANIFEST]  # the manifest resealed too
    (root / bundle.MANIFEST).write_text(bundle._render({p.relative_to(root).as_posix(): sha256_file(p) for p in files}))
    [problem] = [p for p in bundle.verify(root) if "schema" in p]
    assert problem.startswith("receipts/sglang-0.5.20.admission.json: does not match its schema (cases.0.role: Input should be")
