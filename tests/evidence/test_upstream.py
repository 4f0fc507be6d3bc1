"""The upstream-tests formats against their committed JSON schemas: outcomes files written by the
real pytest plugin (``probes/pytest_outcomes.py``) and the record an upstream-tests bundle carries
validate, with jsonschema, against ``evidence/schema/`` (that those files are the models' current
schemas is ``tests/test_evidence.py``'s check)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import orjson
import pytest

from runner.commands import upstream_tests
from runner.app.upstream_layout import UpstreamFile
from runner.evidence import catalog, schema
from runner.evidence.upstream import UpstreamTestsRecord
from runner.judge.pytest_records import Outcomes

# Upstream's style without SGLang: every outcome the plugin records, subtests, a mock's assertion,
# a stand-in fallen through, and a module the environment lacks.
MIXED = '''\
import types
import unittest
from unittest.mock import MagicMock

import pytest


def test_passes():
    assert 1 + 1 == 2


def test_asserts():
    assert [1] == [2]


def test_mock_assertion():
    MagicMock().retire.assert_called_once()


def test_stub_fall_through():
    types.SimpleNamespace(queue=[]).scheduler


def test_missing_module():
    import diffprobe_no_such_module  # noqa: F401


@pytest.mark.skip(reason="on GPU only")
def test_skipped():
    pass


@pytest.mark.xfail(reason="known")
def test_expected_failure():
    assert False


class TestSub(unittest.TestCase):
    def test_sub(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertLess(i, 2)
'''
NOT_COLLECTING = "import diffprobe_no_such_module  # noqa: F401\n\n\ndef test_never():\n    pass\n"


def _schema(name: str) -> dict:
    return orjson.loads((schema.DIR / f"{name}.schema.json").read_bytes())


def _outcomes(tmp_path: Path, name: str, source: str) -> dict:
    """What the plugin writes for ``source``, run as upstream-tests runs it (``python -I``, its
    own rootdir), here with the host's interpreter: pytest is all it needs."""
    tests = tmp_path / name.removesuffix(".py")
    tests.mkdir()
    (tests / "pytest.ini").write_text("[pytest]\n")
    (tests / name).write_text(source)
    out = tmp_path / f"{name}.outcomes.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))}
    subprocess.run([sys.executable, "-I", str(catalog.probes_dir() / upstream_tests.PLUGIN), "--out", str(out),
                    "--root", str(tests), str(tests / name)], cwd=tests, env=env, capture_output=True, timeout=120)
    return orjson.loads(out.read_bytes())


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("outcomes")
    return {"mixed": _outcomes(tmp, "test_mixed.py", MIXED), "broken": _outcomes(tmp, "test_broken.py", NOT_COLLECTING)}


def test_real_outcomes_files_validate_against_the_committed_schema(written):
    validator = jsonschema.Draft202012Validator(_schema("pytest-outcomes"))
    for doc in written.values():
        validator.validate(doc)
        Outcomes.model_validate(doc)
    mixed, broken = written["mixed"], written["broken"]
    outcomes = {r["id"].split("::", 1)[1]: r["outcome"] for r in mixed["results"]}
    assert {"passed", "failed", "skipped", "xfailed"} <= set(outcomes.values())  # the file is not a trivial one
    assert any(r["parent"] for r in mixed["results"])  # subtests
    origins = {r["exception"]["origin"] for r in mixed["results"] if r["exception"]}
    assert {"test", "environment"} <= origins
    assert broken["collection_errors"] and not broken["results"]


def test_the_schema_refuses_what_the_model_refuses(written):
    """The schema is as strict as the host: a field out of place or an unknown outcome fails both."""
    validator = jsonschema.Draft202012Validator(_schema("pytest-outcomes"))
    mixed = written["mixed"]
    bad = [mixed | {"extra": 1}, mixed | {"schema": "diffprobe.pytest-outcomes/1"},
           mixed | {"results": [mixed["results"][0] | {"outcome": "flaky"}]}]
    for doc in bad:
        assert list(validator.iter_errors(doc))
        with pytest.raises(ValueError):
            Outcomes.model_validate(doc)


def test_an_upstream_tests_record_validates_against_the_committed_schema(written):
    """The record graded from the real outcomes, made as the command makes it."""
    run = type("Run", (), {"code": 1})()
    base = upstream_tests.Side("base", "pypi:sglang==0.5.20", None, Outcomes.model_validate(written["broken"]), run)
    head = upstream_tests.Side("head", "pypi:sglang==0.5.21", None, Outcomes.model_validate(written["mixed"]), run)
    test = UpstreamFile("test_mixed.py", "local:/x/test_mixed.py", MIXED.encode(), {"conftest.py": b""}, ("test_mixed.py::test_passes",))
    extra = upstream_tests.record(test, base.text, head.text, upstream_tests.grade(base, head, test.declared))
    doc = orjson.loads(orjson.dumps(extra.model_dump(mode="json", by_alias=True)))
    jsonschema.Draft202012Validator(_schema("upstream-tests")).validate(doc)
    assert doc["tests"]["from"] == "local:/x/test_mixed.py" and doc["grading"]["tests"]
    assert UpstreamTestsRecord.model_validate(doc) == extra


def test_the_record_redacts_the_sources_its_grading_names(written):
    """The judge's grading names each side's source as given (the judge imports no redaction); the
    record a bundle keeps redacts them, as made and as read."""
    secret = "git+https://alice:ghp_S3CRET@git.example/sglang.git@abc123"
    run = type("Run", (), {"code": 1})()
    side = upstream_tests.Side("base", secret, None, Outcomes.model_validate(written["mixed"]), run)
    test = UpstreamFile("test_mixed.py", "local:/x/test_mixed.py", MIXED.encode(), {}, ())
    made = upstream_tests.record(test, "b", "h", upstream_tests.grade(side, side))
    doc = made.model_dump(mode="json", by_alias=True)
    assert "S3CRET" not in orjson.dumps(doc).decode() and made.grading.base.source.startswith("git+https://***@")
    doc["grading"]["head"]["source"] = secret
    assert "S3CRET" not in UpstreamTestsRecord.model_validate(doc).grading.head.source
