"""The host-side model of what a probe run sends back (docs/probe-contract.md).

Validation here is where a harness that misbehaves (a missing field, a float, an outcome outside
the four) becomes an infrastructure error instead of a receipt that claims something.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from probes.coverage import canonical

Outcome = Literal["observed", "error", "not_applicable", "timeout"]
Classification = Literal["bug", "clean", "inconclusive"]
ErrorWhere = Literal["setup", "sglang", "double", "import", "process"]
# Fields of a case that say how the run went, not what the tree did: a repeat need not reproduce them.
NOT_OBSERVED = frozenset({"duration_ms", "lines", "renamed", "conditions"})


def reject_floats(value: Any, where: str = "effects") -> Any:
    """Floats have no canonical text form; observations must not contain them. Every receipt is checked
    several times over (its cases read, judged, sealed): one walk without paths, and the path of the first
    float only when there is one."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:  # most of what JSON holds
            continue
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif isinstance(item, float):
            raise ValueError(f"{_first_float(value, where)}: floats are not allowed in observations")
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return value


def _first_float(value: Any, where: str) -> str | None:
    """Where the first float in ``value`` is, depth first in order (``effects.a[2].b``), or None."""
    if isinstance(value, float):
        return where
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _first_float(item, f"{where}.{key}" if isinstance(value, dict) else f"{where}[{key}]")
        if found is not None:
            return found
    return None


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CaseError(_Model):
    type: str
    message: str
    where: ErrorWhere
    frame: str | None = None


class Case(_Model):
    id: str
    site: str
    role: Literal["bug", "guard"]
    title: str
    signature: str
    outcome: Outcome
    classification: Classification
    effects: dict[str, Any] | None = None
    error: CaseError | None = None
    missing: str | None = None
    duration_ms: int = Field(ge=0)
    duties: dict[str, bool] | None = Field(
        None, description="each duty the case checks -> whether it held (probes/duties.py), judged on the host")
    lines: dict[str, list[tuple[int, int]]] | None = Field(
        None, description="the tree's lines the case's process ran (set-up, drive, observe): file relative to "
                          "sglang_root -> sorted, merged, inclusive [start, end] ranges; null: not recorded "
                          "(not applicable, no result from the process, or the recorder was displaced)")
    renamed: list[str] | None = Field(
        None, description="files of ``lines`` whose module ran code under another file's name (its code objects "
                          "renamed): that code's lines are recorded under the module's file as the code reports them, "
                          "so where in the file they ran cannot be trusted")

    conditions: dict[str, list[bool]] | None = Field(
        None, description="the atomic conditions of the fix's code (listed by the host, runner/judge/conditions.py) the "
                          "case's process evaluated: file:line:col -> the values it took ([false], [true] or "
                          "[false, true]); null: not recorded")

    _check_effects = field_validator("effects")(classmethod(lambda cls, v: reject_floats(v)))

    @field_validator("lines")
    @classmethod
    def _ranges(cls, lines: dict[str, list[tuple[int, int]]] | None) -> dict[str, list[tuple[int, int]]] | None:
        for path, spans in (lines or {}).items():
            parts = path.split("/")
            if path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
                raise ValueError(f"lines: {path[:200]!r} is not a plain relative path")
            if not canonical([list(s) for s in spans]):
                raise ValueError(f"lines of {path[:200]}: not sorted, merged [start, end] ranges from line 1")
        return lines

    @field_validator("conditions")
    @classmethod
    def _values(cls, found: dict[str, list[bool]] | None) -> dict[str, list[bool]] | None:
        if any(took not in ([False], [True], [False, True]) for took in (found or {}).values()):
            raise ValueError("conditions: each took [false], [true] or [false, true]")
        return found

    @model_validator(mode="after")
    def _renamed_within_lines(self) -> "Case":
        if self.renamed is not None and (self.lines is None or not set(self.renamed) <= set(self.lines)):
            raise ValueError(f"case {self.id}: renamed names files whose lines were not recorded")
        return self

    @model_validator(mode="after")
    def _consistent(self) -> "Case":
        """One outcome, its own evidence, and a classification that follows from it."""
        if (self.outcome == "observed") != (self.effects is not None):
            raise ValueError(f"case {self.id}: effects must be present exactly when observed")
        if (self.outcome == "error") != (self.error is not None):
            raise ValueError(f"case {self.id}: error must be present exactly when the outcome is error")
        if (self.outcome == "not_applicable") != bool(self.missing):
            raise ValueError(f"case {self.id}: not_applicable must name what is missing")
        if (self.outcome == "observed") == (self.classification == "inconclusive"):
            raise ValueError(f"case {self.id}: only an observed case can be classified bug or clean")
        if self.duties is not None:
            if self.outcome != "observed" or not self.duties:
                raise ValueError(f"case {self.id}: duties are judged only for an observed case")
            if (self.classification == "bug") == all(self.duties.values()):
                raise ValueError(f"case {self.id}: a case is a bug exactly when one of its duties failed")
        return self


class ImportResult(_Model):
    outcome: Literal["ok", "error"]
    error: CaseError | None = None
    duration_ms: int = Field(ge=0)


class Observations(_Model):
    schema_: Literal["diffprobe.observations/3"] = Field(alias="schema")
    probe: str
    fix: int
    python: str
    implementation: str
    platform: str
    sglang_root: str | None
    import_: ImportResult = Field(alias="import")
    imported: list[str] = Field(description="every tree file the run imported, relative to sglang_root; the host hashes each")
    standins: list[str]
    cases: list[Case]

    @model_validator(mode="after")
    def _unique_cases(self) -> "Observations":
        ids = [c.id for c in self.cases]
        if len(ids) != len(set(ids)):
            raise ValueError("duplicate case ids")
        return self
