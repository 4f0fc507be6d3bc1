"""Hand-made tree code for the probe mechanics' tests (test_doubles_absent.py, test_lifetime_escape.py):
one module written under a temporary tree root and imported by file location, as the trees' are."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from probes import tree


def load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> tuple[Path, ModuleType]:
    """``source`` as ``<tmp_path>/tree/<name>.py``, imported as ``name`` for this test; no SGLang here, so
    the tree's defaults are not published. Returns the tree root and the module."""
    monkeypatch.setattr(tree, "publish_defaults", lambda: None)
    root = tmp_path / "tree"
    root.mkdir()
    (root / f"{name}.py").write_text(source)
    spec = importlib.util.spec_from_file_location(name, root / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return root, module
