"""``diffprobe resolve``: a source's identity as JSON (kind, commit or artifact, tree digest, path)."""

from __future__ import annotations

import sys

import orjson

from runner import errors
from runner.commands import options, pipeline
from runner.evidence import pins
from runner.store import sources


def tree(args, text: str) -> sources.Tree:
    """Resolve ``text`` with the command's --cache-dir and --pins."""
    return pipeline.resolve(text, pipeline.options(args, pins.load(options.path(args.pins))))


def cmd_resolve(args) -> int:
    resolved = tree(args, args.source)
    out = resolved.identity.model_dump(mode="json", exclude_none=True)
    out["local_path"] = str(resolved.root)
    sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n")
    return errors.OK


def register(sub) -> None:
    p = sub.add_parser("resolve", help="resolve a source to its identity (kind, commit/artifact, tree digest, path)")
    p.add_argument("source", help="git+URL_OR_PATH@REV[#ref=REF] | pypi:sglang==VERSION | path:DIR")
    options.common(p)
    p.set_defaults(func=cmd_resolve)
