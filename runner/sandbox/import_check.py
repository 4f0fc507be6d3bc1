"""An environment's acceptance test: import the modules the probes drive, in the sandbox, and say
from where each came (``diffprobe env``). It runs the tree's code, so it runs like a probe."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from runner.errors import Infrastructure
from runner.evidence.materials import rederive
from runner.sandbox import execute
from runner.store.envs import Env
from runner.store.sources import Tree

# The modules the probes drive; importing them is the environment's acceptance test.
PROBED_MODULES = [
    "sglang.srt.managers.schedule_batch",
    "sglang.srt.disaggregation.utils",
    "sglang.srt.disaggregation.prefill",
    "sglang.srt.disaggregation.decode",
    "sglang.srt.managers.scheduler",
]

_CHECK = r"""
import importlib, json, os, sys, time, traceback
modules = json.loads(sys.argv[1])
result = {"modules": {}, "files": [], "outside": [], "standins": [], "sys_path": sys.path}
start = time.monotonic()
for name in modules:
    try:
        importlib.import_module(name)
        result["modules"][name] = "ok"
    except BaseException as e:
        result["modules"][name] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
result["duration_ms"] = int((time.monotonic() - start) * 1000)
import sglang
root = os.path.dirname(os.path.dirname(os.path.realpath(sglang.__file__)))
for name, mod in sorted(sys.modules.items()):
    path = getattr(mod, "__file__", None)
    if not path or not (name == "sglang" or name.startswith("sglang.")):
        continue
    real = os.path.realpath(path)
    if real.startswith(root + os.sep):
        result["files"].append(os.path.relpath(real, root))
    else:
        result["outside"].append(real)
try:
    import cpu_standins
    result["standins"] = cpu_standins.loaded()
except ImportError:
    pass
result["sglang_root"] = root
with open(sys.argv[2], "w") as out:
    json.dump(result, out)
os._exit(0)  # the answer is out; tearing down torch and SGLang would only cost seconds
"""


class ImportCheck(BaseModel):
    modules: dict[str, str]
    files: dict[str, str]  # imported sglang file (relative to the tree) -> sha256, hashed by the host
    outside: list[str]  # sglang modules imported from anywhere but the tree: must be empty
    standins: list[str]
    sglang_root: str
    duration_ms: int

    @property
    def ok(self) -> bool:
        return all(v == "ok" for v in self.modules.values()) and not self.outside


def import_check(environment: Env, tree: Tree, timeout: int = 600, sandboxed: bool = True) -> ImportCheck:
    """Import the probed modules in a fresh interpreter of the environment (the tree's code: in the
    sandbox) and say from where; the files it names are hashed here, from the stored tree."""
    with execute.run_dir() as work_dir:
        out = work_dir / "out" / "check.json"
        argv = [str(environment.python), "-I", "-B", "-c", _CHECK, json.dumps(PROBED_MODULES), str(out)]
        run = execute.run_isolated(argv, work_dir=work_dir, timeout=timeout, read_only=environment.read_only,
                                   hidden=environment.hidden, sandboxed=sandboxed)
        if run.code is None:
            raise Infrastructure(f"import check in {environment.root} did not finish in {timeout} s")
        if run.code:
            raise Infrastructure(f"import check in {environment.root} crashed (exit {run.code})", detail=run.log_tail)
        raw = json.loads(execute.read_result(out))
    if not isinstance(raw, dict) or not isinstance(raw.get("files"), list):
        raise Infrastructure(f"import check in {environment.root} answered outside its format")
    check = ImportCheck.model_validate({**raw, "files": rederive(tree.root, raw["files"])})
    if Path(check.sglang_root).resolve() != tree.root.resolve():
        check.outside.append(check.sglang_root)
    return check
