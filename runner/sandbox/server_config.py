"""Ask a tree's own code what it makes of a live worker's configuration (``probes/server_config.py``):
its ``Envs`` fields' reading of each environment value, its ``ServerArgs`` declarations, its checksum
comparability rule. It is the tree's code, so it runs like a probe: in the sandbox, bounded, its
answer read as untrusted and checked against this model."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError

from runner.errors import Infrastructure
from runner.evidence import catalog
from runner.files import sha256_file
from runner.sandbox import execute
from runner.store.envs import Env

ENTRY = catalog.SERVER_CONFIG
TIMEOUT = 300


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class EnvAnswer(_Answer):
    name: str
    raw: str | None
    kind: str | None  # the tree's field class (EnvBool, EnvInt, EnvFloat...); None: not declared in its Envs
    value: Any = None
    default: Any = None
    warnings: list[str] = []
    error: str | None = None


class FieldAnswer(_Answer):
    declared: bool | None  # None: ServerArgs could not be read
    type: str | None = None
    default: Any = None
    error: str | None = None


class ValueAnswer(_Answer):
    field: str
    valid: bool | None  # None: not a field of the tree's ServerArgs, or ServerArgs not read
    why: str


class LayoutAnswer(_Answer):
    signature: int | None
    error: str | None = None
    cut: dict[str, Any] | None = None


class BackendAnswer(_Answer):
    own_rule: bool | None  # None: the backend's module did not import
    managers: list[str] = []
    error: str | None = None


class Answers(_Answer):
    env: list[EnvAnswer]
    fields: dict[str, FieldAnswer]
    values: list[ValueAnswer]
    server_args_error: str | None
    rule: str | None  # the tree's comparability rule, by name; None: the tree has none
    shape: dict[str, int]
    layouts: list[LayoutAnswer]
    backends: dict[str, BackendAnswer]
    _checked: dict[tuple[str, str], ValueAnswer] = PrivateAttr(default_factory=dict)

    def env_of(self, name: str, raw: str | None) -> EnvAnswer | None:
        return next((a for a in self.env if a.name == name and a.raw == raw), None)

    def value_of(self, field: str, value: Any) -> ValueAnswer | None:
        """The check of ``value`` (as reported) for ``field``; asked in the order they were given."""
        return self._checked.get((field, _key(value)))


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def entry_sha256() -> str:
    return sha256_file(catalog.probes_dir() / ENTRY)


def ask(environment: Env, questions: dict, *, sandboxed: bool, timeout: int = TIMEOUT) -> Answers:
    """The tree's answers to ``questions`` (keys env, fields, values, layouts, backends: see the probe)."""
    with execute.run_dir() as work_dir:
        code = execute.probes_copy(work_dir)
        asked = code / "questions.json"
        asked.write_text(json.dumps(questions))
        out = work_dir / "out" / "answers.json"
        argv = [str(environment.python), "-I", "-B", str(code / ENTRY), str(asked), str(out)]
        run = execute.run_isolated(argv, work_dir=work_dir, timeout=timeout, read_only=[*environment.read_only, code],
                                   hidden=environment.hidden, sandboxed=sandboxed)
        if run.code is None:
            raise Infrastructure(f"the tree's reading of the workers' configuration in {environment.root.name} "
                                 f"did not finish in {timeout} s")
        if run.code:
            raise Infrastructure(f"the tree's reading of the workers' configuration in {environment.root.name} "
                                 f"failed (exit {run.code})", detail=run.log_tail)
        raw = execute.read_result(out)
    try:
        answers = Answers.model_validate_json(raw)
    except ValidationError as e:
        raise Infrastructure(f"the tree's reading of the workers' configuration answered outside its format: "
                             f"{e.errors()[0]['msg']}") from None
    if len(answers.layouts) != len(questions.get("layouts", [])) or len(answers.values) != len(questions.get("values", [])):
        raise Infrastructure("the tree's reading of the workers' configuration answered a different number of questions")
    answers._checked.update({(f, _key(v)): a for (f, v), a in zip(questions.get("values", []), answers.values)})
    return answers
