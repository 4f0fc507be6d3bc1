"""The shared layer's locked packages, installed by uv from the places pip is configured to look.

pip installs the lock's 155 packages one after another on one core (about 55 s of CPU on a cold
machine); uv downloads, unpacks and compiles them in parallel from the same indexes, and stays
within the lock: ``--no-deps`` (no resolver run), exact pins. uv does not read pip's configuration,
so the index URLs, find-links and certificate bundle pip would use (its configuration files and
``PIP_*`` variables, as ``pip config list`` shows them) are handed to it, and uv's own
configuration is set aside (``--no-config``, no ``UV_*`` variable that names a source), as the torch source's
explicit choice sets pip's aside. uv gets a cache of its own inside the layer being built, on the
same filesystem: it unpacks each wheel there once and hard-links the files into place, and the
cache is removed before the layer is sealed, so every file of the layer is written once (a copy
out of a shared cache writes 2.4 GiB twice) and shares its inode with nothing.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Mapping

from runner.errors import Infrastructure

# pip settings (``pip config list`` keys, without their section) and the uv options they become.
_LISTS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links"}
# uv variables that would add places to look, or change how files land; dropped.
_UV_SOURCES = ("UV_INDEX", "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS", "UV_NO_INDEX",
               "UV_INDEX_STRATEGY", "UV_CONSTRAINT", "UV_OVERRIDE", "UV_CONFIG_FILE", "UV_LINK_MODE", "UV_OFFLINE",
               "UV_CACHE_DIR", "UV_NO_CACHE")


def binary() -> str:
    """uv's executable, from the ``uv`` package diffprobe depends on."""
    try:
        import uv
    except ImportError:
        raise Infrastructure("uv is not installed beside diffprobe (pip install uv)") from None
    return uv.find_uv_bin()


def version() -> str:
    """``uv X.Y.Z``, as recorded in the layer stamp."""
    out = subprocess.run([binary(), "--version"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    return " ".join(out.stdout.split()[:2])


def pip_settings(python: Path) -> dict[str, str]:
    """pip's configuration as ``python -m pip config list`` reports it: files in the order pip reads
    them, then ``PIP_*`` variables, a later value replacing an earlier one."""
    out = subprocess.run([str(python), "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL).stdout
    files: dict[str, str] = {}
    variables: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        section, _, name = key.partition(".")
        if not sep or section not in ("global", "install", ":env:"):
            continue
        (variables if section == ":env:" else files)[name] = value.strip().strip("'\"")
    return {**files, **variables}


def from_pip(settings: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv options and variables that make uv look where pip would."""
    args: list[str] = []
    for name, option in _LISTS.items():
        for value in shlex.split(settings.get(name, "")):
            if value.startswith("file://") and not Path(value.removeprefix("file://")).is_dir():
                continue  # pip ignores a local index that is not there, with a warning; uv would fail
            args += [option, value]
    if settings.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        args.append("--no-index")
    env = {"SSL_CERT_FILE": settings["cert"]} if settings.get("cert") else {}
    return args, env


def install_command(python: Path, requirements: Path, settings: Mapping[str, str], cache: Path, *,
                    environ: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The uv command that installs ``requirements`` (exact pins, no dependencies) into ``python``'s
    environment with ``cache`` as uv's cache (the caller removes it), and its environment: ``environ`` (the one
    the caller starts it in) without what would point uv at another index or cache."""
    args, extra = from_pip(settings)
    env = {k: v for k, v in environ.items() if k not in _UV_SOURCES}
    env.update(extra)
    argv = [binary(), "pip", "install", "--no-config", "--python", str(python), "--no-deps", "--cache-dir", str(cache),
            "--link-mode", "hardlink", "--compile-bytecode", "--index-strategy", "unsafe-best-match", *args,
            "-r", str(requirements)]
    return argv, env

