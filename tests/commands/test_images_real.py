"""Images of a real release: 0.5.22's wheel installed into a layer as pip lays it out, over a layer
with the interpreter. Pushed to a real registry on loopback (Debian's docker-registry, started and
stopped here) with skopeo and audited by digest: the release's verdicts, the image named. The same
image from the registry, from an OCI layout and from a docker-archive skopeo wrote is one tree, the
release's. A later layer that whites out the fix's module and puts another in its place is what is
probed: not fixed. One release; two probe runs (the image, and the whiteout image narrowed by --fix)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner import cli
from runner.evidence import bundle
from runner.evidence.records import SweepRecord
from runner.store import specs, sources
from runner.store.cache import Store
from runner.views import verdict
from tests import forks, helpers, tools
from tests import images as build
from tests.commands.test_sweep import EXPECTED, as_expected

pytestmark = pytest.mark.slow
VERSION = "0.5.22"
PREFILL = f"{build.SITE}/{forks.PREFILL}"


@pytest.fixture(scope="module")
def wheel(release_tree, cache) -> Path:
    return cache.download(f"sglang-{VERSION}") / release_tree(VERSION).identity.artifact


@pytest.fixture(scope="module")
def image(tmp_path_factory, wheel) -> build.Built:
    return build.oci(tmp_path_factory.mktemp("image") / "layout", [build.python_layer(), build.wheel_layer(wheel)],
                     tag=VERSION)


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    tools.need("docker-registry")
    tools.need("skopeo")
    with build.registry(tmp_path_factory.mktemp("registry")) as address:
        yield address


def push(image: build.Built, registry: str, name: str = "vendor/sglang") -> str:
    return build.push(image, registry, name, VERSION)


def audit(source: str, out: Path, cache: Store, *extra: str) -> tuple[int, SweepRecord, dict]:
    code = cli.main(["audit", source, "--out", str(out), "--cache-dir", str(cache.root), *extra])
    index, receipts, _ = bundle.load(out)
    return code, SweepRecord.model_validate(index.extra), receipts


def test_an_image_pulled_by_digest_audits_as_its_release(image, registry, tmp_path, cache, release_tree, capsys):
    private, public = helpers.key_pair(tmp_path / "key")
    code, record, receipts = audit(push(image, registry), tmp_path / "audit", cache, "--sign", str(private))
    (row,) = record.rows
    _, lines = verdict.of_record("audit", record.model_dump(mode="json"), receipts.values())
    assert code == verdict.exit_code(lines)  # the headline's exit code (a defence off by default reads as carried)
    assert f"image {image.manifest} (package /{build.SITE}/sglang, Python 3.11)" in capsys.readouterr().out
    helpers.check_signed(tmp_path / "audit", public, capsys)  # the Statements name the image by its manifest digest
    assert {f.fix: as_expected(f) for f in row.fixes} == EXPECTED[f"sglang-{VERSION}"]
    assert receipts and all(r.source.kind == "registry" and r.source.image.manifest_digest == image.manifest
                            and r.source.image.config_digest == image.config and r.source.image.layers == image.layers[1:]
                            and r.source.tree_digest == release_tree(VERSION).identity.tree_digest
                            for r in receipts.values())


def test_registry_oci_docker_archive_and_wheel_are_one_tree(image, registry, wheel, tmp_path, release_tree):
    """Each read afresh (its own cache): the index by config digest would otherwise answer for all."""
    ref = push(image, registry, "vendor/sglang-formats")
    build.skopeo("copy", f"oci:{image.layout}:{VERSION}", f"docker-archive:{tmp_path / 'image.tar'}:vendor/sglang:{VERSION}")
    texts = [ref, f"oci:{image.layout}@{VERSION}", f"docker-archive:{tmp_path / 'image.tar'}", f"wheel:{wheel}"]
    got = [sources.resolve(specs.parse(t), Store.at(tmp_path / f"cache{n}")).identity for n, t in enumerate(texts)]
    assert {i.tree_digest for i in got} == {release_tree(VERSION).identity.tree_digest}
    pulled, layout, archive, _ = got
    assert pulled.image == layout.image  # the same manifest, config and layers, by digest
    assert archive.image.config_digest == image.config and archive.image.manifest_digest is None
    assert pulled.image.python == "3.11"


def test_a_layer_that_whites_out_the_fix_reads_not_fixed(image, wheel, tmp_path, cache, release_tree):
    """0.5.22's image, then a layer deleting prefill.py (``.wh.prefill.py``) and one putting back a
    prefill.py without #38935's gate at the prefill door: the final file system is what is audited."""
    fork = forks.make(release_tree(VERSION).root, tmp_path / "fork", forks.WITHOUT_PREFILL_GATE)
    replaced = (fork / forks.PREFILL).read_bytes()
    head, _, base = PREFILL.rpartition("/")
    layers = [build.python_layer(), build.wheel_layer(wheel), build.tar([build.Member(f"{head}/.wh.{base}")]),
              build.tar([build.Member(PREFILL, replaced)])]
    whiteout = build.oci(tmp_path / "layout", layers, tag="whiteout")
    code, record, receipts = audit(f"oci:{whiteout.layout}", tmp_path / "audit", cache, *helpers.fix_args((38935,)))
    assert code == 1
    (row,) = record.rows
    sites = {s.site: s.status for f in row.fixes for s in f.sites}
    assert (sites["prefill-door"], sites["decode-door"]) == ("not fixed", "fixed")
    assert {f.fix: f.status for f in row.fixes} == {38935: "not fixed"}
    assert all(r.source.image.layers == (whiteout.layers[1], whiteout.layers[3]) for r in receipts.values())
