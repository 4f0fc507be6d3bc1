"""How the probes install a stock server's configuration, by the era of the tree's runtime context
(probes/tree.py ``publish_config``), on hand-made context modules shaped like each era's: read from
the module, never from a version. The real trees of each era: tests/probes/test_between_releases_real.py."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace

import pytest

from probes import tree

CONTEXT, SERVER_ARGS = "sglang.srt.runtime_context", "sglang.srt.server_args"


class ServerArgs:
    def __init__(self, model_path: str, **options: object) -> None:
        self.model_path, self.options = model_path, options


class Slot:
    """``RuntimeContext`` of the trees between 0.5.15 and the first ``publish``: ``set_server_args``
    fills what ``get_server_args()`` (and, on main before 0.5.17, the config namespaces) read."""

    def __init__(self) -> None:
        self.server_args = None

    def set_server_args(self, server_args: ServerArgs) -> None:
        self.server_args = server_args


def _install(monkeypatch: pytest.MonkeyPatch, **context: object) -> list[str]:
    calls: list[str] = []
    module = ModuleType(CONTEXT)
    for name, value in context.items():
        setattr(module, name, value)
    module.reset_context = lambda: calls.append("reset")
    monkeypatch.setitem(sys.modules, CONTEXT, module)
    monkeypatch.setitem(sys.modules, SERVER_ARGS, SimpleNamespace(__name__=SERVER_ARGS, ServerArgs=ServerArgs))
    return calls


def test_a_context_with_publish_is_published_as_the_scheduler(monkeypatch):
    published = []
    calls = _install(monkeypatch, publish=lambda sa, role: published.append((sa, role)), get_context=Slot)
    assert tree.publish_config(flag=True) == f"{CONTEXT}.publish"
    [(server_args, role)] = published
    assert (role, server_args.model_path, server_args.options, calls) == ("scheduler", "dummy", {"flag": True}, ["reset"])


def test_a_context_that_holds_server_args_without_publish_gets_them_in_its_own_slot(monkeypatch):
    """The era of upstream main of 2026-07-24 (and 0.5.15, 0.5.16): no ``publish``; the stock
    configuration goes where the tree's scheduler puts it (``get_context().set_server_args``)."""
    slot = Slot()
    calls = _install(monkeypatch, get_context=lambda: slot)
    assert tree.publish_config() == f"{CONTEXT}.get_context().set_server_args"
    assert (slot.server_args.model_path, slot.server_args.options, calls) == ("dummy", {}, ["reset"])


def test_a_context_that_holds_no_server_args_is_left_alone(monkeypatch):
    """0.5.14's context (parallel state only): the tree reads its server args from elsewhere."""
    calls = _install(monkeypatch, get_context=lambda: SimpleNamespace(parallel=None))
    assert tree.publish_config() is None
    assert calls == []


def test_a_tree_without_a_runtime_context_is_left_alone(monkeypatch):
    monkeypatch.setattr(tree, "_runtime_context", lambda: None)
    assert tree.publish_config() is None
