"""The shared layer is sealed like a tree's environment (runner/store/seal.py) and checked before
each use: a planted .pth or byte-code in it refuses every run with one line (rebuilding it under
other runs would break them). A stand-in layer (its stamp, an empty site-packages, an interpreter
that runs) serves, so that nothing of the real 2.4 GiB layer is touched."""

from __future__ import annotations

import os
import sys

import pytest

from runner.errors import Infrastructure
from runner.sandbox import execute
from runner.store import envs
from runner.app.notices import PRINTED
from runner.store.cache import Store, read_model, write_model
from runner.store.seal import seal
from runner.store.torch_source import TorchSource

TORCH = [TorchSource(kind="index", location="file:///x", chosen_by="default")]


@pytest.fixture
def layer(tmp_path, interp, monkeypatch):
    monkeypatch.setattr(envs, "LAYERS_CHECKED", set())
    store = Store(tmp_path / "cache", notices=PRINTED)
    root = store.layer(envs.layer_key(interp))
    site = root / "lib" / "python3" / "site-packages"
    (site / "pkg" / "__pycache__").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("")
    (site / "pkg" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"compiled at install")
    (root / "bin").mkdir()
    (root / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    stamp = envs.LayerStamp.model_validate({
        "format": envs.FORMAT, "key": envs.layer_key(interp), "lock_sha256": envs.lock_sha256(), "interpreter": interp,
        "site_packages": "lib/python3/site-packages", "packages": [], "choice": envs.CHOICE, "seal": None,
        "torch": {"requirement": "torch==0", "version": "0", "url": "file:///x", "sha256": "0" * 64,
                  "source": {"kind": "index", "location": "file:///x", "chosen_by": "default"}},
    })
    write_model(root / "layer.json", stamp.model_copy(update={"seal": seal(root, exclude=envs.LAYER_STAMPS)}))
    return store, root, site


def test_an_intact_layer_is_used(layer, interp):
    store, root, _ = layer
    assert envs.layer(store, interp, TORCH)[0] == root
    assert envs.layer(store, interp, TORCH)[0] == root  # marking it used does not break its seal


@pytest.mark.parametrize("plant", ["pth", "pyc"])
def test_a_file_planted_in_the_layer_refuses_the_run_with_one_line(layer, interp, plant):
    store, root, site = layer
    if plant == "pth":
        (site / "zz-planted.pth").write_text("import os\n")
    else:
        target = site / "pkg" / "__pycache__" / "__init__.cpython-311.pyc"
        mtime = target.stat().st_mtime_ns
        target.write_bytes(b"planted, same size!")
        os.utime(target, ns=(mtime, mtime))  # its old mtime put back: its ctime still moved
    with pytest.raises(Infrastructure, match="altered since it was sealed") as refused:
        envs.layer(store, interp, TORCH)
    assert "\n" not in str(refused.value)


def test_a_layer_built_before_seals_is_sealed_as_found(layer, interp, capsys):
    store, root, _ = layer
    stamp = read_model(root / "layer.json", envs.LayerStamp)
    write_model(root / "layer.json", stamp.model_copy(update={"seal": None}))
    envs.layer(store, interp, TORCH)
    assert "without a seal" in capsys.readouterr().err
    assert read_model(root / "layer.json", envs.LayerStamp).seal == stamp.seal


def test_the_seal_is_checked_again_after_a_run_that_could_write_into_the_layer(layer, interp, tmp_path):
    """Once per process while only sandboxed runs use it (they see it read-only); an unsandboxed
    run could plant into it, so the next use checks again."""
    store, root, site = layer
    envs.layer(store, interp, TORCH)
    (site / "zz-planted.pth").write_text("import os\n")  # by a hand, outside any run of this process
    envs.layer(store, interp, TORCH)  # not seen: checked already in this process
    work = tmp_path / "work"
    work.mkdir()
    execute.run_isolated(["/bin/true"], work_dir=work, timeout=60, read_only=[], sandboxed=False)
    with pytest.raises(Infrastructure, match="altered since it was sealed"):
        envs.layer(store, interp, TORCH)
