"""What a tree's own code makes of a live worker's configuration (``diffprobe accept``).

Runs inside the tree's environment, in the sandbox, like every probe: standard library and the
tree only. The host never parses a value the tree parses: it asks this module, which answers with
the tree's own code.

- ``env``: each (name, raw string or null for unset) as the tree's ``Envs`` field reads it
  (``EnvBool``, ``EnvInt``, ``EnvFloat``...: ``field.get()`` with the variable set or unset, its
  warnings kept: ``1e5`` for an ``EnvInt`` is the tree's warning and its default, not a number).
- ``fields``: each ``ServerArgs`` field's declared type and default, as the tree declares them
  (a dataclass in older trees, msgspec records in arg groups in later ones).
- ``values``: each reported value checked against its field's declared type (msgspec, strict): a
  worker that reports ``"true"`` for a bool or ``1e5`` for an int is not read as one.
- ``layouts``: the tree's own checksum comparability rule (``kv_layout_signature``, where the tree
  has it) over a stand-in model shape cut by each side's reported TP / PP / page size / KV dtype.
- ``backends``: whether a transfer backend's KV manager has its own ``should_verify_kv_checksum``.

Usage: ``python server_config.py QUESTIONS.json ANSWERS.json``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
import typing
import warnings

# The stand-in model shape the layouts are cut from (the served model's is not reported): MHA, so
# that another attention-TP width or PP stage changes the bytes each rank digests.
SHAPE = {"kv_heads": 8, "head_dim": 128, "layers": 8}
NOT_SET = object()


def jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return repr(value)


def first_line(e: BaseException) -> str:
    return (f"{type(e).__name__}: {e}".splitlines() or [type(e).__name__])[0][:300]


# --- environment variables ---------------------------------------------------------------------


def env_answers(asked: list) -> list[dict]:
    try:
        environ = importlib.import_module("sglang.srt.environ")
    except Exception as e:  # a tree without Envs: nothing of its reads can be asked
        return [{"name": n, "raw": r, "kind": None, "error": f"no sglang.srt.environ: {first_line(e)}"} for n, r in asked]
    base = getattr(environ, "EnvField", None)
    declared = getattr(environ, "Envs", None)
    out = []
    for name, raw in asked:
        field = vars(declared).get(name) if declared is not None else None
        if base is None or not isinstance(field, base):
            out.append({"name": name, "raw": raw, "kind": None, "error": "not declared in the tree's Envs"})
            continue
        saved = os.environ.get(name, NOT_SET)
        try:
            if raw is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = raw
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                value = field.get()
                default = field._resolve_default() if hasattr(field, "_resolve_default") else field.default
            out.append({"name": name, "raw": raw, "kind": type(field).__name__, "value": jsonable(value),
                        "default": jsonable(default), "warnings": [str(w.message)[:300] for w in caught]})
        except Exception as e:
            out.append({"name": name, "raw": raw, "kind": type(field).__name__, "error": first_line(e)})
        finally:
            if saved is NOT_SET:
                os.environ.pop(name, None)
            else:
                os.environ[name] = saved
    return out


# --- ServerArgs ---------------------------------------------------------------------------------


def declared_fields(cls, out: dict) -> dict:
    """name -> (type, default) over ServerArgs, nested records flattened as /server_info flattens them."""
    try:
        import msgspec

        if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
            hints = typing.get_type_hints(cls, include_extras=True)
            for f in msgspec.structs.fields(cls):
                default = f.default if f.default is not msgspec.NODEFAULT else (
                    f.default_factory() if f.default_factory is not msgspec.NODEFAULT else None)
                nested = hints.get(f.name, f.type)
                if isinstance(nested, type) and issubclass(nested, msgspec.Struct):
                    declared_fields(nested, out)
                else:
                    out[f.name] = (hints.get(f.name, f.type), default)
            return out
    except ImportError:
        pass
    if dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls, include_extras=True)
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
            nested = hints.get(f.name, f.type)
            if dataclasses.is_dataclass(nested) and isinstance(nested, type):
                declared_fields(nested, out)
            else:
                out[f.name] = (nested, default)
    return out


def server_args_answers(names: list[str], values: list) -> tuple[dict, list, str | None]:
    try:
        cls = importlib.import_module("sglang.srt.server_args").ServerArgs
        fields = declared_fields(cls, {})
    except Exception as e:
        why = f"ServerArgs not read: {first_line(e)}"
        return {n: {"declared": None, "error": why} for n in names}, [
            {"field": f, "valid": None, "why": why} for f, _ in values], why
    out = {}
    for name in names:
        if name in fields:
            hint, default = fields[name]
            out[name] = {"declared": True, "type": typing_repr(hint), "default": jsonable(default)}
        else:
            out[name] = {"declared": False}
    checked = []
    for name, value in values:
        if name not in fields:
            checked.append({"field": name, "valid": None, "why": "not a field of the tree's ServerArgs"})
            continue
        try:
            import msgspec

            msgspec.convert(value, type=fields[name][0], strict=True)
            checked.append({"field": name, "valid": True, "why": f"as declared ({typing_repr(fields[name][0])})"})
        except Exception as e:
            checked.append({"field": name, "valid": False,
                            "why": f"not as declared ({typing_repr(fields[name][0])}: {first_line(e)})"})
    return out, checked, None


def typing_repr(hint) -> str:
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return typing_repr(typing.get_args(hint)[0])
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


# --- the checksum's comparability rule -----------------------------------------------------------


def layout_answers(asked: list[dict]) -> tuple[str | None, list[dict]]:
    """Each side's cut of the stand-in shape (what its ranks would digest), and where the tree has its
    comparability rule, the rule's signature over it."""
    rule = conn = None
    loaded = None
    try:
        utils = importlib.import_module("sglang.srt.disaggregation.utils")
        conn = importlib.import_module("sglang.srt.disaggregation.base.conn")
        rule = getattr(utils, "kv_layout_signature", None)
    except Exception as e:
        loaded = f"disaggregation modules not imported: {first_line(e)}"
    out = []
    for side in asked:
        try:
            tp, dp, pp = int(side["tp_size"]), int(side.get("dp_size") or 1), int(side.get("pp_size") or 1)
            attn_tp = tp // dp if side.get("enable_dp_attention") and dp > 0 and tp % dp == 0 else tp
            dtype = str(side.get("kv_cache_dtype") or "auto")
            page = int(side.get("page_size") or 1)
            cut = {"attn_tp": attn_tp, "pp_stage_layers": -(-SHAPE["layers"] // pp), "page_size": page, "kv_cache_dtype": dtype}
        except Exception as e:
            out.append({"signature": None, "error": f"layout not read: {first_line(e)}"})
            continue
        if rule is None:
            out.append({"signature": None, "error": loaded, "cut": cut})
            continue
        try:
            width = 1 if ("fp8" in dtype or "int8" in dtype) else 2
            item = max(1, SHAPE["kv_heads"] // attn_tp) * SHAPE["head_dim"] * width * page
            args = conn.KVArgs()
            args.page_size, args.kv_cache_dtype_str, args.kv_layout, args.swa_kv_cache_layout = page, dtype, None, None
            args.state_types, args.kv_item_lens, args.state_item_lens = [], [item] * (2 * cut["pp_stage_layers"]), []
            out.append({"signature": int(rule(args)), "error": None, "cut": cut})
        except Exception as e:
            out.append({"signature": None, "error": first_line(e), "cut": cut})
    return (f"{utils.__name__}.kv_layout_signature" if rule is not None else None), out


def backend_answers(names: list[str]) -> dict:
    out = {}
    try:
        base = importlib.import_module("sglang.srt.disaggregation.base.conn").BaseKVManager
    except Exception as e:
        return {n: {"own_rule": None, "error": first_line(e)} for n in names}
    default = getattr(base, "should_verify_kv_checksum", None)
    for name in names:
        try:
            module = importlib.import_module(f"sglang.srt.disaggregation.{name}.conn")
            managers = [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, base) and c is not base]
            own = sorted(c.__name__ for c in managers if getattr(c, "should_verify_kv_checksum", None) is not default)
            out[name] = {"own_rule": bool(own), "managers": own, "error": None}
        except Exception as e:
            out[name] = {"own_rule": None, "error": first_line(e)}
    return out


def main(questions_path: str, answers_path: str) -> None:
    with open(questions_path) as f:
        asked = json.load(f)
    fields, values, server_args_error = server_args_answers(asked.get("fields", []), asked.get("values", []))
    rule, layouts = layout_answers(asked.get("layouts", []))
    answers = {"env": env_answers(asked.get("env", [])), "fields": fields, "values": values,
               "server_args_error": server_args_error, "rule": rule, "shape": SHAPE, "layouts": layouts,
               "backends": backend_answers(asked.get("backends", []))}
    with open(answers_path, "w") as f:
        json.dump(answers, f)
    os._exit(0)  # the answer is out; tearing down torch and SGLang would only cost seconds


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
