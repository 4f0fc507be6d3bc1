"""Where the dependency layer's CPU torch comes from: chosen explicitly, installed alone, recorded.

The lock pins a CPU build (``torch==X+cpu``), which PyPI does not serve (its Linux wheels are CUDA
builds). Sources, in order of precedence:

1. the one named: ``--torch-wheel PATH`` or ``--torch-index URL`` (a package index, PEP 503),
   else ``DIFFPROBE_TORCH_WHEEL`` or ``DIFFPROBE_TORCH_INDEX``;
2. by default, the find-links of this machine's pip configuration when they hold the pinned wheel
   (offline), else PyTorch's CPU wheel index.

An explicit source is the only place pip looks (the machine's pip configuration is set aside), so
a layer never holds a torch from somewhere it did not name. What pip installed, from which URL and
with which sha256, comes from pip's own installation report and goes into the layer stamp.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal, Mapping

from pydantic import BaseModel, ConfigDict

from runner.errors import BadInput, Infrastructure
from runner.store.procs import run_logged

DEFAULT_INDEX = "https://download.pytorch.org/whl/cpu"
ENV_WHEEL = "DIFFPROBE_TORCH_WHEEL"
ENV_INDEX = "DIFFPROBE_TORCH_INDEX"

# pip settings that would add places to look; dropped when a source is named explicitly.
_PIP_SOURCES = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_CONSTRAINT",
                "PIP_CONFIG_FILE", "PIP_REQUIREMENT")


class TorchSource(BaseModel):
    model_config = ConfigDict(frozen=True)
    kind: Literal["wheel", "index", "pip-find-links"]
    location: str  # the wheel path, the index URL, or "pip configuration"
    chosen_by: str  # the option or variable that named it, or "default"


# none named: the machine's find-links, then PyTorch's CPU index
DEFAULT = (TorchSource(kind="pip-find-links", location="pip configuration", chosen_by="default"),
           TorchSource(kind="index", location=DEFAULT_INDEX, chosen_by="default"))


class TorchRecord(BaseModel):
    """The layer stamp's answer to "where did CPU torch come from"."""
    requirement: str  # as pinned in the lock
    version: str  # as installed
    source: TorchSource
    url: str  # the file pip installed, from its report
    sha256: str


def candidates(wheel: str | None = None, index: str | None = None, *, environ: Mapping[str, str]) -> list[TorchSource]:
    """The sources to try, in order: the one named (an option before a variable, a wheel before an
    index), alone; else ``DEFAULT``. The command resolves them at its entry, from its options and
    the process environment, and hands them down."""
    named = [("wheel", wheel, "--torch-wheel"), ("index", index, "--torch-index"),
             ("wheel", environ.get(ENV_WHEEL), ENV_WHEEL), ("index", environ.get(ENV_INDEX), ENV_INDEX)]
    for kind, value, by in named:
        if not value:
            continue
        if kind == "wheel":
            path = Path(value).expanduser()
            if not path.is_file():
                raise BadInput(f"{by} {path}: no such file")
            return [TorchSource(kind="wheel", location=str(path.absolute()), chosen_by=by)]
        if "://" not in value:
            raise BadInput(f"{by} {value}: not a URL (a local index is file:///...)")
        return [TorchSource(kind="index", location=value, chosen_by=by)]
    return list(DEFAULT)


def pip_args(source: TorchSource, requirement: str) -> tuple[list[str], dict[str, str] | None]:
    """pip install arguments and environment that make ``source`` the only place pip looks."""
    common = ["install", "--no-deps", "--no-input", "--disable-pip-version-check", "--ignore-installed"]
    if source.kind == "pip-find-links":  # the machine's own configuration, but never an index
        return [*common, "--no-index", requirement], None
    isolated = {k: v for k, v in os.environ.items() if k not in _PIP_SOURCES}
    isolated["PIP_CONFIG_FILE"] = os.devnull  # no configured index, find-links or constraint
    if source.kind == "wheel":
        return [*common, "--no-index", source.location], isolated
    return [*common, "--index-url", source.location, requirement], isolated


def install(python: Path, requirement: str, sources: list[TorchSource], log_dir: Path) -> TorchRecord:
    """Install torch into the layer from the first source that has it; say where it came from.

    pip's report goes next to the interpreter's environment (one per build, even when several
    processes build the same layer at once); the logs go to ``log_dir``.
    """
    pinned = requirement.split("==", 1)[1]
    failures = []
    for n, source in enumerate(sources):
        report = python.parents[1] / f"torch-report-{n}.json"
        argv, env = pip_args(source, requirement)
        try:
            run_logged([str(python), "-m", "pip", *argv, "--report", str(report)],
                       step=f"install {requirement} from {describe(source)}", log=log_dir / f"torch-{n}.log", env=env)
        except Infrastructure as e:
            why = next((line.strip() for line in reversed((e.detail or "").splitlines()) if "ERROR" in line), e.message)
            failures.append(f"{describe(source)}: {why} (log: {log_dir / f'torch-{n}.log'})")
            continue
        item = json.loads(report.read_text())["install"][0]
        version = item["metadata"]["version"]
        if version != pinned:  # only a named wheel can be another version
            raise BadInput(f"{describe(source)} is torch {version}, but the lock pins {requirement}")
        info = item["download_info"]
        digest = info.get("archive_info", {}).get("hashes", {}).get("sha256", "")
        return TorchRecord(requirement=requirement, version=version, source=source, url=info["url"], sha256=digest)
    raise Infrastructure(
        f"cannot install {requirement} (CPU torch) from " + " or ".join(describe(s) for s in sources)
        + f"; name a source with --torch-index URL or --torch-wheel PATH ({ENV_INDEX}, {ENV_WHEEL})",
        detail="\n".join(failures),
    )


def describe(source: TorchSource) -> str:
    where = {"wheel": f"wheel {source.location}", "index": f"index {source.location}",
             "pip-find-links": "the find-links of this machine's pip configuration"}[source.kind]
    return where if source.chosen_by == "default" else f"{where} ({source.chosen_by})"
