"""Deterministic JSON for observed values.

Effects must be byte-identical run to run on the same tree, so nothing that varies between
processes (addresses, ids, floats' platform quirks, times) may leak into them. Every value the
probes record passes through :func:`plain`.
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from enum import Enum
from http import HTTPStatus
from typing import Any

JSON = Any  # str | int | bool | None | list[JSON] | dict[str, JSON]

_SMALL_TENSOR = 16


def plain(value: Any) -> JSON:
    """Return ``value`` as deterministic JSON.

    A request is named by its ``rid``; a recording double by its name; a finish reason by its
    ``to_json()``; a dataclass by its type and fields; an object with no faithful JSON form by
    its type name only.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, HTTPStatus):
        return int(value)
    if isinstance(value, Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return repr(value)  # the contract admits no floats
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((plain(item) for item in value), key=_order)
    if isinstance(value, (list, tuple, deque)):
        return [plain(item) for item in value]
    double_name = getattr(type(value), "double_name", None)
    if callable(double_name):
        return f"<{value.double_name()}>"
    if type(value).__name__ == "Req" and isinstance(getattr(value, "rid", None), str):
        return value.rid
    if callable(getattr(type(value), "to_json", None)):
        return plain(value.to_json())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {type(value).__name__: plain(fields)}
    if callable(getattr(type(value), "tolist", None)) and hasattr(value, "dtype"):
        return _tensor(value)
    if type(value).__name__ == "array":  # array.array holds token ids
        return [int(item) for item in value]
    return f"<{type(value).__name__}>"


def _tensor(value: Any) -> JSON:
    """A torch tensor or a numpy array (the transfer code keeps page indices in numpy)."""
    count = value.numel() if callable(getattr(value, "numel", None)) else value.size
    if count > _SMALL_TENSOR:
        return {"tensor": list(value.shape)}
    return {"tensor": plain(value.tolist())}


def _order(item: JSON) -> str:
    return json.dumps(item, sort_keys=True)
