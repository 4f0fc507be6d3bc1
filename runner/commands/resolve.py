"""``diffprobe resolve``: a source's identity as JSON (kind, commit or artifact, tree digest, path)."""

from __future__ import annotations

import sys

import orjson

from runner import errors
from runner.app import pipeline
from runner.commands import options
from runner.evidence import pins
from runner.store import sources


def tree(args, text: str) -> sources.Tree:
    """Resolve ``text`` with the command's --cache-dir and --pins."""
    return pipeline.resolve(text, options.resolved(args, pins.load(options.path(args.pins))))


def cmd_resolve(args) -> int:
    resolved = tree(args, args.source)
    out = resolved.identity.model_dump(mode="json", exclude_none=True)
    out["local_path"] = str(resolved.root)
    sys.stdout.write(errors.printable_json(orjson.dumps(out, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()) + "\n")
    return errors.OK


def register(sub) -> None:
    p = options.command(
        sub, "resolve", "a source's identity: kind, commit or artifact, tree digest",
        about="Prints its identity as JSON (kind, commit or artifact, tree digest, local path).",
        example="diffprobe resolve pypi:sglang==0.5.21", ok="resolved; the identity is on stdout")
    options.source(p, what="the tree to resolve")
    options.common(p)
    p.set_defaults(func=cmd_resolve)
