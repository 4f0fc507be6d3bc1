"""Where the layer's CPU torch comes from: named, overridable, recorded, and offline with a local wheel.

A real pip installs a small stand-in wheel *named* torch (the real one is 800 MB) into a scratch
virtualenv, from each kind of source; the records must say exactly where it came from.
"""

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from runner.errors import BadInput, Infrastructure
from runner.store import torch_source
from runner.store.torch_source import DEFAULT_INDEX, ENV_INDEX, ENV_WHEEL

REQ = "torch==2.13.0+cpu"


def make_wheel(directory: Path, version: str = "2.13.0+cpu") -> Path:
    """A minimal valid wheel of a distribution called torch."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"torch-{version}-py3-none-any.whl"
    dist = f"torch-{version}.dist-info"
    files = {
        "torch/__init__.py": b"FAKE = True\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return path


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "virtualenv", "--quiet", "--no-download", "--no-periodic-update", str(root)],
                   check=True)
    return root / "bin" / "python"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_default_is_the_machines_find_links_then_pytorchs_cpu_index():
    got = torch_source.candidates(environ={})
    assert [(s.kind, s.location, s.chosen_by) for s in got] == [
        ("pip-find-links", "pip configuration", "default"), ("index", DEFAULT_INDEX, "default")]


def test_an_option_beats_a_variable_and_a_wheel_beats_an_index(tmp_path):
    wheel = make_wheel(tmp_path)
    env = {ENV_INDEX: "https://mirror.invalid/cpu", ENV_WHEEL: str(wheel)}

    def first(**kw):
        s = torch_source.candidates(environ=kw.pop("environ", env), **kw)
        return len(s), s[0].kind, s[0].location, s[0].chosen_by

    assert first() == (1, "wheel", str(wheel), ENV_WHEEL)
    assert first(environ={ENV_INDEX: "https://mirror.invalid/cpu"}) == (1, "index", "https://mirror.invalid/cpu", ENV_INDEX)
    assert first(index="https://other.invalid/whl") == (1, "index", "https://other.invalid/whl", "--torch-index")
    assert first(wheel=str(wheel), index="https://other.invalid/whl") == (1, "wheel", str(wheel), "--torch-wheel")


def test_bad_sources_are_one_line_bad_input(tmp_path):
    with pytest.raises(BadInput, match="--torch-wheel .*no such file"):
        torch_source.candidates(wheel=str(tmp_path / "missing.whl"), environ={})
    with pytest.raises(BadInput, match=f"{ENV_INDEX} .*not a URL"):  # a bare directory is not an index
        torch_source.candidates(environ={ENV_INDEX: "not-a-url"})


def test_an_explicit_source_is_the_only_place_pip_looks(monkeypatch):
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://elsewhere.invalid/simple")
    [source] = torch_source.candidates(index="https://mirror.invalid/cpu", environ={})
    argv, env = torch_source.pip_args(source, REQ)
    assert argv[-3:] == ["--index-url", "https://mirror.invalid/cpu", REQ]
    assert "PIP_FIND_LINKS" not in env and "PIP_EXTRA_INDEX_URL" not in env
    assert env["PIP_CONFIG_FILE"] == "/dev/null"


def test_offline_from_the_machines_find_links(tmp_path, venv, monkeypatch):
    wheel = make_wheel(tmp_path / "wheels")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheel.parent))
    monkeypatch.setenv("PIP_INDEX_URL", "file:///nonexistent/index")  # no index reachable
    record = torch_source.install(venv, REQ, torch_source.candidates(environ={}), tmp_path / "logs")
    assert record.source.kind == "pip-find-links" and record.source.chosen_by == "default"
    assert record.url == wheel.as_uri().replace("+", "%2B") and record.sha256 == sha256(wheel)
    assert record.version == "2.13.0+cpu"


def test_named_wheel_and_named_index(tmp_path, venv, monkeypatch):
    monkeypatch.setenv("PIP_FIND_LINKS", str(make_wheel(tmp_path / "decoy", "2.13.0+cpu").parent))
    wheel = make_wheel(tmp_path / "named")
    record = torch_source.install(venv, REQ, torch_source.candidates(wheel=str(wheel), environ={}), tmp_path / "l1")
    assert (record.source.kind, record.source.chosen_by, record.sha256) == ("wheel", "--torch-wheel", sha256(wheel))
    assert "named" in record.url
    index = tmp_path / "simple"
    served = make_wheel(index / "torch")
    (index / "torch" / "index.html").write_text(f'<a href="{served.name.replace("+", "%2B")}">{served.name}</a>\n')
    record = torch_source.install(venv, REQ, torch_source.candidates(environ={ENV_INDEX: index.as_uri()}), tmp_path / "l2")
    assert (record.source.kind, record.source.chosen_by) == ("index", ENV_INDEX)
    assert "simple/torch/" in record.url and record.sha256 == sha256(served)  # never the decoy on find-links


def test_a_named_wheel_of_another_version_is_refused(tmp_path, venv):
    wheel = make_wheel(tmp_path, "2.12.0+cpu")
    with pytest.raises(BadInput, match=r"is torch 2\.12\.0\+cpu, but the lock pins torch==2\.13\.0\+cpu"):
        torch_source.install(venv, REQ, torch_source.candidates(wheel=str(wheel), environ={}), tmp_path / "logs")


def test_nothing_reachable_names_every_source_tried_and_the_options(tmp_path, venv, monkeypatch):
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "empty"))
    find_links, index = torch_source.DEFAULT
    monkeypatch.setattr(torch_source, "DEFAULT", (find_links, index.model_copy(update={"location": (tmp_path / "no-index").as_uri()})))
    sources = torch_source.candidates(environ={})
    with pytest.raises(Infrastructure) as e:
        torch_source.install(venv, REQ, sources, tmp_path / "logs")
    assert "find-links of this machine's pip configuration or index file://" in e.value.message
    assert "--torch-index URL or --torch-wheel PATH" in e.value.message and "\n" not in e.value.message


@pytest.mark.parametrize("args, env, expected", [
    (["--torch-wheel", "/nonexistent/torch.whl"], {}, "--torch-wheel /nonexistent/torch.whl: no such file"),
    (["--torch-index", "download.pytorch.org/whl/cpu"], {}, "--torch-index download.pytorch.org/whl/cpu: not a URL"),
    ([], {ENV_INDEX: "not a url"}, f"{ENV_INDEX} not a url: not a URL"),
])
def test_a_bad_source_is_one_line_exit_2_before_any_download(tmp_path, args, env, expected):
    proc = subprocess.run([sys.executable, "-m", "runner.cli", "env", "pypi:sglang==0.5.21", "--cache-dir", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and expected in proc.stderr
    assert not (tmp_path / "downloads").exists()
