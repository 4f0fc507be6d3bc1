"""The layer's lock is installed by uv from the places pip is configured to look, and nowhere else."""

from __future__ import annotations

import sys
from pathlib import Path

from runner.store import uv


def test_pip_settings_become_uv_options(tmp_path):
    local = tmp_path / "simple"
    local.mkdir()
    settings = {"index-url": "https://mirror.example/simple", "find-links": f"/opt/wheels {tmp_path}/more",
                "extra-index-url": f"file://{local} file://{tmp_path}/absent https://other.example/simple",
                "cert": "/etc/ssl/bundle.pem", "default-timeout": "180"}
    args, env = uv.from_pip(settings)
    assert args == ["--index-url", "https://mirror.example/simple",
                    "--extra-index-url", f"file://{local}", "--extra-index-url", "https://other.example/simple",
                    "--find-links", "/opt/wheels", "--find-links", f"{tmp_path}/more"]  # a missing local index: as pip, ignored
    assert env == {"SSL_CERT_FILE": "/etc/ssl/bundle.pem"}
    assert uv.from_pip({"no-index": "true", "find-links": "/w"}) == (["--find-links", "/w", "--no-index"], {})


def test_uv_is_told_the_lock_alone_and_ignores_its_own_configuration():
    argv, env = uv.install_command(Path("/layer/bin/python"), Path("/lock.txt"), {"find-links": "/w"}, Path("/layer/.uv"),
                                   environ={"UV_INDEX_URL": "https://elsewhere.example", "UV_CACHE_DIR": "/c", "HOME": "/h"})
    assert argv[1:3] == ["pip", "install"] and "--no-config" in argv and "--no-deps" in argv and "--compile-bytecode" in argv
    # unpacked once into a cache of its own beside the layer (removed by the caller), linked from there
    assert argv[argv.index("--cache-dir") + 1] == "/layer/.uv" and argv[argv.index("--link-mode") + 1] == "hardlink"
    assert argv[-2:] == ["-r", "/lock.txt"] and argv[argv.index("--python") + 1] == "/layer/bin/python"
    assert env == {"HOME": "/h"}


def test_pip_settings_read_from_pip_itself(tmp_path, monkeypatch):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://file.example/simple\nfind-links = /from-file\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_FIND_LINKS", "/from-variable")
    settings = uv.pip_settings(Path(sys.executable))
    assert settings["index-url"] == "https://file.example/simple" and settings["find-links"] == "/from-variable"
