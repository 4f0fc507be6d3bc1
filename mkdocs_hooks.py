"""MkDocs hook: the reference pages are generated from what the code holds, so they cannot drift.

A page names what it wants with a marker line; the hook replaces it when the site is built:

- ``<!-- generated: commands -->``: every command's ``--help``, from ``runner.cli.build_parser()``
  (the parser ``diffprobe`` itself runs), at a fixed width;
- ``<!-- generated: schemas -->``: every file format, from the JSON schemas in ``evidence/schema/``
  (themselves generated from the pydantic models, and kept current by a test);
- ``<!-- generated: duties -->``: every fix's duty table, from ``probes/duties_*.py`` (what the host judges with).

A page in ``docs/`` that the nav does not list yet is listed under "More" (titled by its heading), so a
page written by whoever knows the topic appears in the site the day it lands; its place in the nav is
chosen in mkdocs.yml.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

WIDTH = "100"  # argparse wraps help at $COLUMNS; fixed so that the page does not depend on the terminal


def commands() -> str:
    from runner import cli

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = cli.build_parser()
        [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        summary = {a.dest: a.help for a in sub._choices_actions}
        out = ["| command | what it does |", "|---|---|"]
        out += [f"| [`{name}`](#{name}) | {summary[name]} |" for name in sub.choices]
        out += ["", "## `diffprobe`", "", "```text", parser.format_help().rstrip(), "```"]
        for name, command in sub.choices.items():
            out += ["", f"## `{name}` {{#{name}}}", "", summary[name][0].upper() + summary[name][1:] + ".", "",
                    "```text", command.format_help().rstrip(), "```"]
        return "\n".join(out)
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def _type(spec: dict, prefix: str) -> str:
    """One JSON-schema type, in words short enough for a table cell; a reference links to its table."""
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{prefix}-{name.lower()})"
    for union in ("anyOf", "oneOf"):
        if union in spec:
            return " or ".join(_type(s, prefix) for s in spec[union])
    if "enum" in spec:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in spec["enum"])
    if "const" in spec:
        return f"`{json.dumps(spec['const'])}`"
    kind = spec.get("type", "any")
    if kind == "array":
        if "prefixItems" in spec:
            return "[" + ", ".join(_type(s, prefix) for s in spec["prefixItems"]) + "]"
        return f"list of {_type(spec.get('items', {}), prefix)}"
    if kind == "object" and isinstance(spec.get("additionalProperties"), dict):
        return f"map of {_type(spec['additionalProperties'], prefix)}"
    return kind


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _object(name: str, spec: dict, prefix: str) -> list[str]:
    out = [f"### {name} {{#{prefix}-{name.lower()}}}", ""]
    if spec.get("description"):
        out += [_cell(spec["description"]), ""]
    props = spec.get("properties", {})
    if not props:
        return out + [f"Type: {_type(spec, prefix)}", ""]
    required = set(spec.get("required", ()))
    out += ["| field | type | required | meaning |", "|---|---|---|---|"]
    for field, sub in props.items():
        out.append(f"| `{field}` | {_type(sub, prefix)} | {'yes' if field in required else ''} | {_cell(sub.get('description', ''))} |")
    return out + [""]


def schemas() -> str:
    out: list[str] = []
    for path in sorted((ROOT / "evidence" / "schema").glob("*.schema.json")):
        schema = json.loads(path.read_text())
        prefix = path.name.removesuffix(".schema.json")
        out += [f"## `{path.name}` {{#{prefix}}}", "", f"`evidence/schema/{path.name}`: the top-level object first.", ""]
        out += _object(schema.get("title", prefix), schema, prefix)
        for name, sub in sorted(schema.get("$defs", {}).items()):
            out += _object(name, sub, prefix)
    return "\n".join(out)


def _pattern(when) -> str:
    return ", ".join(f"{dim} {' or '.join(values)}" for dim, values in when.items())


def duties() -> str:
    """One table per fix, from its module's rows: each duty and what must hold, then which cases check which."""
    from probes import duties as d
    from probes import registry
    from runner import fixids

    out: list[str] = []
    for entry in registry.PROBES:
        table = d.TABLES[entry.fix]
        out += [f"### {fixids.label(entry.fix)}: probe `{entry.id}` {{#duties-{entry.fix}}}", "",
                f"`probes/duties_{entry.fix}.py`. " + _cell((table.__doc__ or "").split("\n\n")[1]), ""]
        if table.DUTIES:
            out += ["| duty | what must hold | check |", "|---|---|---|"]
            out += [f"| `{duty.id}` | {_cell(duty.promise)} | `{duty.held.__name__}` |" for duty in table.DUTIES]
            out.append("")
        out += ["| cases where | check the duties |", "|---|---|"]
        out += [f"| {_cell(_pattern(rule.when))} | {', '.join(f'`{x}`' for x in rule.duties)} |"
                for rule in table.SPACE.duties_by]
        out.append("")
    return "\n".join(out)


def _listed(nav) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, dict):
        return set().union(*map(_listed, nav.values()))
    return set().union(*map(_listed, nav)) if nav else set()


def on_config(config):
    docs = Path(config["docs_dir"])
    unlisted = sorted(p.name for p in docs.glob("*.md") if p.name not in _listed(config["nav"]))
    if unlisted:
        config["nav"].append({"More": unlisted})
    return config


GENERATORS = {"commands": commands, "schemas": schemas, "duties": duties}


def on_page_markdown(markdown: str, page, config, files) -> str:
    for name, make in GENERATORS.items():
        marker = f"<!-- generated: {name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown
