"""No file diffprobe writes holds a URL's user info: every recorded field that names a source or a
URL is redacted as the model is made or read (errors.Redacted), whichever model records it."""

from __future__ import annotations

import typing

import pytest
from pydantic import BaseModel

from runner import errors
from runner.evidence import departures, mutation, receipts, records, upstream
from runner.store import trees

SECRET = "https://alice:ghp_S3CRET@git.example/vendor/sglang.git@abc123"


def _fields():
    """Every (model, field) of the recorded formats that holds text and whose name says it is a
    source, a repository or a URL (a field holding a model is that model's to redact)."""
    for module in (receipts, records, mutation, departures, upstream, trees):
        for model in vars(module).values():
            if isinstance(model, type) and issubclass(model, BaseModel) and model.__module__ == module.__name__:
                hints = typing.get_type_hints(model, include_extras=True)
                for name in model.model_fields:
                    texts = str in _leaves(hints[name])
                    if texts and name in {"source", "url", "repo", "baseline"}:
                        yield pytest.param(model, name, id=f"{model.__name__}.{name}")


def _leaves(annotation) -> set:
    """The plain types an annotation admits, through Optional, Union and Annotated."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _leaves(typing.get_args(annotation)[0])
    args = typing.get_args(annotation)
    if args and typing.get_origin(annotation) in (typing.Union, __import__("types").UnionType):
        return set().union(*(_leaves(a) for a in args))
    return {annotation}


@pytest.mark.parametrize("model,name", list(_fields()))
def test_every_source_or_url_field_is_redacted(model, name):
    annotation = typing.get_type_hints(model, include_extras=True)[name]
    assert errors.Redacted == annotation or errors.Redacted in typing.get_args(annotation), \
        f"{model.__name__}.{name} records a source or URL without redaction"


def test_a_secret_in_a_row_or_a_server_url_is_never_kept():
    row = records.Row(source=SECRET, label="x", tree_digest="h1:x", fixes=[], static=[])
    server = receipts.ServerIdentity(source=SECRET, url=SECRET, reported={})
    for text in (row.source, server.source, server.url, row.model_dump_json(), server.model_dump_json()):
        assert "ghp_S3CRET" not in text and "alice" not in text
    assert row.source == "https://***@git.example/vendor/sglang.git@abc123"
