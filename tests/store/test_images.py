"""Container images and wheels as sources, on small images built here (tests/images.py): the package
found where the image's Python imports it, layers applied in order with OCI whiteouts, every digest
checked, the same tree from an OCI layout, a docker-archive and a wheel; hostile layers refused with
exit 2 and one line naming the layer and the member, nothing written outside the cache."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from runner import cli
from runner.errors import BAD_INPUT, BadInput
from runner.store import image_fs, images, intake, sources, specs, trees
from runner.store.cache import Store
from tests import images as build
from tests.images import SITE, Member, directory

PACKAGE = {"sglang/__init__.py": b"__version__ = '0.0.1'\n", "sglang/srt/fix.py": b"FIXED = True\n",
           "sglang/srt/other.py": b"OTHER = 1\n"}


def package_layer(files: dict[str, bytes] = PACKAGE, site: str = SITE) -> bytes:
    return build.files_layer(files, site)


def digest_of(files: dict[str, bytes]) -> str:
    from runner.files import dirhash1

    return dirhash1((name, hashlib.sha256(data).hexdigest()) for name, data in files.items())


def resolve(text: str, cache: Store, **kw):
    spec = specs.parse(text)
    return images.resolve(spec, cache, **kw) if isinstance(spec, specs.ImageSpec) else sources.resolve(spec, cache)


def test_specs_of_images_and_wheels():
    digest = "sha256:" + "a" * 64
    assert specs.parse(f"oci:/images/v@1@{digest}") == specs.ImageSpec(kind="oci", where="/images/v@1", digest=digest)
    assert specs.parse("oci:/images/x@v1.2").tag == "v1.2"
    assert str(specs.parse("registry:127.0.0.1:5000/vendor/sglang")) == "registry:127.0.0.1:5000/vendor/sglang:latest"
    assert specs.parse(f"registry:ghcr.io/a/b@{digest}").digest == digest
    assert specs.parse("docker-archive:/tmp/x.tar").where == "/tmp/x.tar"
    assert specs.parse("wheel:/w/sglang-1-py3-none-any.whl") == specs.WheelSpec(file="/w/sglang-1-py3-none-any.whl")
    for bad in ("registry:-oProxy/x", "registry:host/x", "registry:ghcr.io/A", "registry:ghcr.io/a@sha256:12",
                "registry:ghcr.io/a:--x", "oci:", "wheel:", "docker-archive:a\nb"):
        with pytest.raises(BadInput):
            specs.parse(bad)


def test_an_image_reads_as_the_same_tree_as_its_package(tmp_path):
    b = build.oci(tmp_path / "img", [build.python_layer(), package_layer()])
    tree = resolve(f"oci:{b.layout}", Store.at(tmp_path / "cache"))
    i = tree.identity
    assert i.kind == "oci" and i.tree_digest == digest_of(PACKAGE) and i.files == 3
    assert i.image.manifest_digest == b.manifest and i.image.config_digest == b.config
    assert i.image.layers == (b.layers[1],)  # the python layer holds no file of the package
    assert (i.image.package, i.image.python) == (f"{SITE}/sglang", "3.11")
    assert sorted(tree.files) == sorted(PACKAGE)


def test_what_runs_at_every_start_beside_the_package_is_named_as_left_out(tmp_path):
    hooks = build.tar([Member(f"{SITE}/evil.pth", b"import os\n"), Member(f"{SITE}/sitecustomize.py", b"X = 1\n"),
                       Member(f"{SITE}/other.py", b"X = 1\n")])
    b = build.oci(tmp_path / "img", [package_layer(), hooks])
    i = resolve(f"oci:{b.layout}", Store.at(tmp_path / "cache")).identity
    assert i.left_out == (f"/{SITE}/evil.pth", f"/{SITE}/sitecustomize.py") and i.tree_digest == digest_of(PACKAGE)


def test_a_tag_or_a_digest_picks_the_image(tmp_path):
    b = build.oci(tmp_path / "img", [package_layer()], tag="v1")
    cache = Store.at(tmp_path / "cache")
    assert resolve(f"oci:{b.layout}@v1", cache).identity.image.manifest_digest == b.manifest
    assert resolve(f"oci:{b.layout}@{b.manifest}", cache).identity.image.manifest_digest == b.manifest
    with pytest.raises(BadInput, match="no image tagged 'v2'"):
        resolve(f"oci:{b.layout}@v2", cache)


def test_oci_docker_archive_and_wheel_give_one_tree(tmp_path):
    layers = [build.python_layer(), package_layer()]
    b = build.oci(tmp_path / "img", layers)
    config = build.docker_archive(tmp_path / "image.tar", layers)
    wheel = build.wheel(tmp_path / "sglang-0.0.1-py3-none-any.whl", PACKAGE)
    got = {text: resolve(text, Store.at(tmp_path / f"cache{n}")).identity
           for n, text in enumerate([f"oci:{b.layout}", f"docker-archive:{tmp_path / 'image.tar'}", f"wheel:{wheel}"])}
    assert {i.tree_digest for i in got.values()} == {digest_of(PACKAGE)}
    oci_, archive, whl = got.values()
    assert archive.image.config_digest == config == oci_.image.config_digest
    assert archive.image.manifest_digest is None  # a docker-archive holds no manifest: its layers by diff id
    assert archive.image.layers == (f"sha256:{hashlib.sha256(layers[1]).hexdigest()}",)
    assert (whl.kind, whl.version, whl.artifact) == ("wheel", "0.0.1", wheel.name)


def test_later_layers_replace_and_whiteouts_delete(tmp_path):
    """The audit must see the final file system: a later layer's file, a whiteout's absence, an
    opaque directory's own contents only."""
    pkg = f"{SITE}/sglang"
    layers = [package_layer(),
              build.tar([Member(f"{pkg}/srt/.wh.fix.py")]),  # the fix's module deleted
              build.tar([Member(f"{pkg}/srt/fix.py", b"FIXED = False\n")]),  # and put back, another one
              build.tar([Member(f"{pkg}/srt/.wh..wh..opq"), Member(f"{pkg}/srt/fix.py", b"FIXED = None\n")]),
              build.tar([Member(f"{pkg}/.wh.gone.py"), Member(f"{pkg}/new.py", b"NEW = 1\n")])]
    b = build.oci(tmp_path / "img", layers)
    tree = resolve(f"oci:{b.layout}", Store.at(tmp_path / "cache"))
    assert (tree.root / "sglang/srt/fix.py").read_bytes() == b"FIXED = None\n"
    assert not (tree.root / "sglang/srt/other.py").exists()  # below the opaque directory, from a lower layer
    assert tree.identity.image.layers == (b.layers[0], b.layers[3], b.layers[4])
    assert tree.identity.tree_digest == digest_of({"sglang/__init__.py": PACKAGE["sglang/__init__.py"],
                                                   "sglang/srt/fix.py": b"FIXED = None\n", "sglang/new.py": b"NEW = 1\n"})


def test_a_whited_out_package_is_not_found(tmp_path):
    b = build.oci(tmp_path / "img", [package_layer(), build.tar([Member(f"{SITE}/.wh.sglang")])])
    with pytest.raises(intake.Refused, match="no sglang package in the image"):
        resolve(f"oci:{b.layout}", Store.at(tmp_path / "cache"))


def test_the_package_python_imports_is_the_one_found(tmp_path):
    """Two packages: the one on the import path of the first python3 on the image's PATH (a virtual
    environment's), not the system's; its Python version is recorded."""
    venv = "opt/venv/lib/python3.12/site-packages"
    other = {**PACKAGE, "sglang/srt/fix.py": b"FIXED = 'venv'\n"}
    venv_layer = build.tar([directory("opt"), directory("opt/venv"), directory("opt/venv/bin"),
                            Member("opt/venv/pyvenv.cfg", b"home = /usr/bin\n"),
                            Member("opt/venv/bin/python3", kind=tarfile.SYMTYPE, linkname="/usr/bin/python3.12"),
                            directory("usr"), directory("usr/bin"), Member("usr/bin/python3.12", b"\x7fELF", mode=0o755)])
    layers = [package_layer(site="usr/lib/python3/dist-packages"), venv_layer, package_layer(other, site=venv)]
    b = build.oci(tmp_path / "img", layers, env_path="/opt/venv/bin:/usr/bin")
    i = resolve(f"oci:{b.layout}", Store.at(tmp_path / "cache")).identity
    assert (i.image.package, i.image.python, i.tree_digest) == (f"{venv}/sglang", "3.12", digest_of(other))
    b2 = build.oci(tmp_path / "img2", layers, env_path=None)  # no PATH, no python at the default's places: ambiguous
    with pytest.raises(intake.Refused, match="2 sglang packages"):
        resolve(f"oci:{b2.layout}", Store.at(tmp_path / "cache2"))


def _hostile(members: list[Member]) -> list[bytes]:
    return [package_layer(), build.tar(members)]


HOSTILE = {
    "traversal": (_hostile([Member("../../escaped.py", b"X = 1\n")]), "not a plain relative name"),
    "absolute": (_hostile([Member("/etc/escaped.py", b"X = 1\n")]), "not a plain relative name"),
    "symlink-in-package": (_hostile([Member(f"{SITE}/sglang/srt/fix.py", kind=tarfile.SYMTYPE, linkname="/etc/passwd")]),
                           "a symbolic link in the package"),
    "hardlink-out": (_hostile([Member("etc/passwd", b"root:x:0:0\n"),
                               Member(f"{SITE}/sglang/srt/fix.py", kind=tarfile.LNKTYPE, linkname="etc/passwd")]),
                     "a hard link across the package's boundary"),
    "hardlink-absolute": (_hostile([Member(f"{SITE}/sglang/srt/fix.py", kind=tarfile.LNKTYPE, linkname="/etc/passwd")]),
                          "not a plain relative name"),
    "device": (_hostile([Member("dev/sda", kind=tarfile.BLKTYPE)]), "a device"),
    "below-a-symlink": (_hostile([Member("usr/local/lib", kind=tarfile.SYMTYPE, linkname="/tmp"),
                                  Member("usr/local/lib/x.py", b"X = 1\n")]), "a symbolic link"),
    "fifo-in-package": (_hostile([Member(f"{SITE}/sglang/pipe", kind=tarfile.FIFOTYPE)]), "a FIFO"),
    "not-a-tar": ([package_layer(), b"this is no tar archive at all" * 40], "not a tar archive"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_layers_are_refused_with_one_line(tmp_path, capsys, case):
    layers, why = HOSTILE[case]
    b = build.oci(tmp_path / "img", layers)
    cache = tmp_path / "cache"
    code = cli.main(["resolve", f"oci:{b.layout}", "--cache-dir", str(cache)])
    err = capsys.readouterr().err.strip()
    assert code == BAD_INPUT, err
    assert len(err.splitlines()) == 1 and why in err and f"layer {b.layers[-1]}" in err, err
    assert not list(tmp_path.rglob("escaped.py"))  # nothing written outside the cache, nor inside
    assert not [p for p in (cache / "trees").iterdir()] if (cache / "trees").exists() else True


def _tamper(b: build.Built, digest: str, change) -> None:
    path = b.layout / "blobs" / "sha256" / digest.split(":", 1)[1]
    path.chmod(0o644)
    path.write_bytes(change(path.read_bytes()))


@pytest.mark.parametrize("what", ["manifest", "config", "layer"])
def test_a_blob_that_is_not_its_digest_is_refused(tmp_path, capsys, what):
    b = build.oci(tmp_path / "img", [package_layer()])
    digest = {"manifest": b.manifest, "config": b.config, "layer": b.layers[0]}[what]
    _tamper(b, digest, lambda data: data.replace(b"sha256", b"sha256 ") if what != "layer"
            else gzip.compress(gzip.decompress(data).replace(b"FIXED = True", b"FIXED = Fals"), mtime=0))
    code = cli.main(["resolve", f"oci:{b.layout}", "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err.strip()
    assert code == BAD_INPUT and len(err.splitlines()) == 1 and digest in err, err
    assert "hash" in err or "shorter than its manifest says" in err, err


def test_a_decompression_bomb_is_refused_as_it_expands(tmp_path):
    """Past ``ratio_after`` bytes out (64 MiB by default; 1 MiB here), more than ``ratio`` out per byte in."""
    b = build.oci(tmp_path / "img", [package_layer(), build.tar([Member("zeros", b"\0" * (4 << 20))])])
    with pytest.raises(intake.Refused, match=f"layer {b.layers[1]}: refused: a decompression bomb"):
        resolve(f"oci:{b.layout}", Store.at(tmp_path / "c"), image_bounds=image_fs.ImageBounds(ratio_after=1 << 20))


def test_bounds_of_an_image(tmp_path):
    many = [Member(f"f{i}", b"") for i in range(20)]
    b = build.oci(tmp_path / "img", [package_layer(), build.tar(many)])
    with pytest.raises(intake.Refused, match=f"layer {b.layers[1]}.*more than 10 members"):
        resolve(f"oci:{b.layout}", Store.at(tmp_path / "c1"), image_bounds=image_fs.ImageBounds(members=10))
    big = build.oci(tmp_path / "big", [package_layer({**PACKAGE, "sglang/big.bin": b"x" * 4096})])
    with pytest.raises(intake.Refused, match="4096 bytes, over the bound of 1024"):
        resolve(f"oci:{big.layout}", Store.at(tmp_path / "c2"), bounds=intake.Bounds(file_size=1024))
    header = build.oci(tmp_path / "hdr", [package_layer(), build.tar([Member("x" * 5000, b"")])])
    with pytest.raises(intake.Refused, match="an extended header"):
        resolve(f"oci:{header.layout}", Store.at(tmp_path / "c3"), image_bounds=image_fs.ImageBounds(header_size=1024))


def test_a_docker_archive_layer_must_be_its_diff_id(tmp_path, capsys):
    layers = [package_layer()]
    build.docker_archive(tmp_path / "image.tar", layers)
    with tarfile.open(tmp_path / "image.tar") as t:
        members = {m.name: t.extractfile(m).read() for m in t.getmembers()}
    name = next(n for n in members if n.endswith("layer.tar"))
    members[name] = members[name].replace(b"FIXED = True", b"FIXED = Fals")
    with tarfile.open(tmp_path / "bad.tar", "w") as t:
        for n, data in members.items():
            info = tarfile.TarInfo(n)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    code = cli.main(["resolve", f"docker-archive:{tmp_path / 'bad.tar'}", "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err.strip()
    assert code == BAD_INPUT and len(err.splitlines()) == 1 and "not the diff id" in err, err


def test_a_wheel_is_checked_against_its_record(tmp_path, capsys):
    good = build.wheel(tmp_path / "sglang-0.0.1-py3-none-any.whl", PACKAGE)
    tree = resolve(f"wheel:{good}", Store.at(tmp_path / "cache"))
    assert tree.identity.tree_digest == digest_of(PACKAGE)
    assert tree.identity.artifact_sha256 == hashlib.sha256(good.read_bytes()).hexdigest()
    cases = {"altered": ({"sglang/srt/fix.py": build.record_hash(b"FIXED = False\n")}, "do not have the sha256 its RECORD lists"),
             "unlisted": ({"sglang/srt/fix.py": ""}, "not listed with a hash in the wheel's RECORD"),
             "md5": ({"sglang/srt/fix.py": "md5=abc"}, "not sha256 or stronger"),
             "metadata": ({"sglang-0.0.1.dist-info/METADATA": build.record_hash(b"x")}, "do not have the sha256")}
    for case, (record, why) in cases.items():
        (tmp_path / case).mkdir()
        bad = build.wheel(tmp_path / case / "sglang-0.0.1-py3-none-any.whl", PACKAGE, record=record)
        code = cli.main(["resolve", f"wheel:{bad}", "--cache-dir", str(tmp_path / "cache")])
        err = capsys.readouterr().err.strip()
        assert code == BAD_INPUT and len(err.splitlines()) == 1 and why in err, (case, err)


def test_a_stored_image_tree_is_found_again_by_config_digest(tmp_path):
    """The second read of an image reads its manifest and config, not its layers."""
    b = build.oci(tmp_path / "img", [package_layer()])
    cache = Store.at(tmp_path / "cache")
    first = resolve(f"oci:{b.layout}", cache).identity
    _tamper(b, b.layers[0], lambda data: b"")  # a layer the runtime would refuse; the config names the same tree
    assert resolve(f"oci:{b.layout}", cache).identity == first
    assert json.loads(cache.index("image", b.config.split(":")[1]).read_text())["tree_digest"] == first.tree_digest
    assert stat.S_ISDIR((cache.tree(first.tree_digest)).stat().st_mode) and trees.load(cache, first.tree_digest)


def test_a_multi_platform_image_reads_this_platform(tmp_path, monkeypatch):
    """index.json -> an image index -> the linux/amd64 manifest; the identity names both digests."""
    b = build.oci(tmp_path / "img", [package_layer()])
    listed = json.loads((b.layout / "index.json").read_text())["manifests"][0]
    other = {**listed, "digest": "sha256:" + "0" * 64, "platform": {"os": "linux", "architecture": "arm64"}}
    index = json.dumps({"schemaVersion": 2, "mediaType": images.INDEXES[0],
                        "manifests": [other, {**listed, "platform": {"os": "linux", "architecture": "amd64"}}]}).encode()
    index_digest = f"sha256:{hashlib.sha256(index).hexdigest()}"
    (b.layout / "blobs" / "sha256" / index_digest.split(":")[1]).write_bytes(index)
    monkeypatch.setattr(images.platform, "machine", lambda: "x86_64")
    i = resolve(f"oci:{b.layout}@{index_digest}", Store.at(tmp_path / "cache")).identity
    assert (i.image.index_digest, i.image.manifest_digest) == (index_digest, b.manifest)
    monkeypatch.setattr(images.platform, "machine", lambda: "s390x")
    with pytest.raises(BadInput, match="no image for linux/s390x"):
        resolve(f"oci:{b.layout}@{index_digest}", Store.at(tmp_path / "cache2"))


def test_names_as_docker_writes_them_and_hard_links_inside_the_package(tmp_path):
    """``./``-prefixed names, and a hard link from one file of the package to another (its bytes)."""
    pkg = f"./{SITE}/sglang"
    layer = build.tar([directory("./usr"), *[directory(f"./{SITE}/sglang/srt".rsplit("/", n)[0]) for n in (4, 3, 2, 1, 0)],
                       Member(f"{pkg}/__init__.py", PACKAGE["sglang/__init__.py"]),
                       Member(f"{pkg}/srt/fix.py", PACKAGE["sglang/srt/fix.py"]),
                       Member(f"{pkg}/srt/other.py", kind=tarfile.LNKTYPE, linkname=f"{pkg}/srt/fix.py")])
    tree = resolve(f"oci:{build.oci(tmp_path / 'img', [layer]).layout}", Store.at(tmp_path / "cache"))
    assert tree.identity.tree_digest == digest_of({**PACKAGE, "sglang/srt/other.py": PACKAGE["sglang/srt/fix.py"]})


@pytest.mark.needs("umoci")
def test_layers_umoci_writes_and_its_whiteout(tmp_path):
    """An image made as a builder without a daemon makes it: umoci unpacks (rootless), the package is
    installed into the root file system and repacked (v1); v1 unpacked, the fix's module deleted and
    repacked (v2: a second layer, umoci's whiteout). v1 is the package's tree; v2 the tree without it."""
    def umoci(*args: str) -> None:
        subprocess.run(["umoci", *args], check=True, capture_output=True, timeout=120)

    layout, bundle = tmp_path / "layout", tmp_path / "bundle"
    umoci("init", "--layout", str(layout))
    umoci("new", "--image", f"{layout}:base")
    umoci("unpack", "--rootless", "--image", f"{layout}:base", str(bundle))
    for name, data in PACKAGE.items():
        (bundle / "rootfs" / SITE / name).parent.mkdir(parents=True, exist_ok=True)
        (bundle / "rootfs" / SITE / name).write_bytes(data)
    umoci("repack", "--image", f"{layout}:v1", str(bundle))
    umoci("unpack", "--rootless", "--image", f"{layout}:v1", str(tmp_path / "v1"))  # a repack diffs against its unpack
    (tmp_path / "v1" / "rootfs" / SITE / "sglang/srt/fix.py").unlink()
    umoci("repack", "--image", f"{layout}:v2", str(tmp_path / "v1"))
    v1 = resolve(f"oci:{layout}@v1", Store.at(tmp_path / "cache")).identity
    v2 = resolve(f"oci:{layout}@v2", Store.at(tmp_path / "cache")).identity
    assert v1.tree_digest == digest_of(PACKAGE)
    assert v2.tree_digest == digest_of({n: d for n, d in PACKAGE.items() if n != "sglang/srt/fix.py"})
    assert v2.image.layers == v1.image.layers  # the whiteout's layer contributes no file


def test_a_docker_archive_layer_held_once_and_linked_again(tmp_path):
    """docker save writes a layer an image holds twice once, and a symbolic link to it in its place."""
    layer = package_layer()
    diff_id = f"sha256:{hashlib.sha256(layer).hexdigest()}"
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": [diff_id, diff_id]}}).encode()
    manifest = json.dumps([{"Config": "config.json", "Layers": ["a/layer.tar", "b/layer.tar"]}]).encode()
    with tarfile.open(tmp_path / "image.tar", "w") as t:
        for name, data in [("config.json", config), ("a/layer.tar", layer), ("manifest.json", manifest)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("b/layer.tar")
        link.type, link.linkname = tarfile.SYMTYPE, "../a/layer.tar"
        t.addfile(link)
    i = resolve(f"docker-archive:{tmp_path / 'image.tar'}", Store.at(tmp_path / "cache")).identity
    assert i.tree_digest == digest_of(PACKAGE) and i.image.layers == (diff_id,)


@pytest.mark.parametrize("manifest, why", [
    (b"{not json", "manifest.json: not JSON"),
    (b"[]", "expected one image, found 0"),
    (b'[{"Config": "nowhere.json", "Layers": []}]', "names 'nowhere.json', which the archive does not hold"),
    (b'[{"Config": "../../etc/passwd", "Layers": []}]', "which the archive does not hold"),
])
def test_a_docker_archive_that_does_not_say_one_image_is_bad_input(tmp_path, capsys, manifest, why):
    with tarfile.open(tmp_path / "image.tar", "w") as t:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        t.addfile(info, io.BytesIO(manifest))
    code = cli.main(["resolve", f"docker-archive:{tmp_path / 'image.tar'}", "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err.strip()
    assert code == BAD_INPUT and len(err.splitlines()) == 1 and why in err, err


@pytest.mark.needs("skopeo", "docker-registry")
def test_a_registry_tag_is_read_once_to_its_digest(tmp_path):
    """registry:HOST/NAME:TAG: pulled by the digest the tag names now; the receipt names that digest."""
    b = build.oci(tmp_path / "img", [package_layer()], tag="v1")
    with build.registry(tmp_path / "registry") as address:
        build.push(b, address, "vendor/sglang", "v1")
        i = resolve(f"registry:{address}/vendor/sglang:v1", Store.at(tmp_path / "cache")).identity
        with pytest.raises(BadInput, match="skopeo inspect failed"):
            resolve(f"registry:{address}/vendor/none:v1", Store.at(tmp_path / "cache"))
    assert (i.kind, i.image.manifest_digest, i.tree_digest) == ("registry", b.manifest, digest_of(PACKAGE))


def test_receipts_of_an_image_or_a_wheel_are_named_by_the_tree_in_hex(tmp_path):
    """A receipt's file name: base64 of a tree digest may hold '/', which would make it a directory."""
    from runner.evidence import bundle

    i = resolve(f"oci:{build.oci(tmp_path / 'img', [package_layer()]).layout}", Store.at(tmp_path / "cache")).identity
    slashed = i.model_copy(update={"tree_digest": "h1:ab/cd+ef/" + i.tree_digest[11:]})
    for identity in (i, slashed, slashed.model_copy(update={"kind": "wheel", "image": None})):
        name = bundle.label(identity)
        assert "/" not in name and ":" not in name and name.startswith(f"{identity.kind}-"), name
