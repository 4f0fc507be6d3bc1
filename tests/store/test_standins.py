"""The stand-ins answer as a machine without a GPU answers, or raise; they never supply a value.

Each check runs in a fresh interpreter (the finder is process-wide), with only the stand-in module
on its path: what a probed tree would see for packages its environment cannot hold.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runner.standins import cpu_standins as standins

STANDINS_DIR = Path(standins.__file__).parent


def run(code: str, *extra_path: Path) -> dict:
    """Run ``code`` with the stand-ins installed; it sets ``out``, which comes back as JSON."""
    prelude = (
        "import json, sys\n"
        f"sys.path[:0] = {[str(p) for p in extra_path]!r}\n"
        f"sys.path.append({str(STANDINS_DIR)!r})\n"
        "import cpu_standins; cpu_standins.install()\n"
        "out = {}\n"
    )
    proc = subprocess.run([sys.executable, "-I", "-c", prelude + code + "\nprint(json.dumps(out))"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_triton_answers_like_a_machine_without_gpu():
    # sglang/srt/layers/attention/fla/utils.py (0.5.10-0.5.17) asks for the active driver's target
    # backend and falls back to "cpu" on any exception, then does getattr(torch, device).
    out = run(
        "import triton\n"
        "try:\n"
        "    device = triton.runtime.driver.active.get_current_target().backend\n"
        "except BaseException as e:\n"
        "    device, out['raised'] = 'cpu', type(e).__name__\n"
        "out['device'] = device\n"
        "try:\n"
        "    triton.runtime.driver.active.utils.get_device_properties(0)\n"
        "except BaseException as e:\n"
        "    out['properties'] = type(e).__name__\n"
        "out['runtime_is_module'] = type(triton.runtime).__name__\n"
        "out['marked'] = sorted(cpu_standins.loaded())\n"
    )
    assert out["device"] == "cpu" and out["raised"] == "RuntimeError"
    assert out["properties"] == "RuntimeError"
    assert out["runtime_is_module"] == "_StandinModule"
    assert {"triton", "triton.runtime"} <= set(out["marked"])


def test_triton_decorators_and_classes_answer_isinstance_like_triton():
    out = run(
        "import triton, triton.language as tl\n"
        "from triton.runtime.jit import JITFunction\n"
        "@triton.jit\n"
        "def k(x): pass\n"
        "@triton.jit(do_not_specialize=['x'])\n"
        "def k2(x): pass\n"
        "@triton.autotune(configs=[triton.Config({})], key=[])\n"
        "@triton.jit\n"
        "def k3(x): pass\n"
        "out['jit'] = [isinstance(f, JITFunction) and isinstance(f, triton.runtime.KernelInterface) for f in (k, k2)]\n"
        "out['same_class'] = triton.JITFunction is triton.runtime.JITFunction is JITFunction\n"
        "out['autotuned'] = [isinstance(k3, triton.runtime.autotuner.Autotuner), isinstance(k3, JITFunction)]\n"
        "out['wrapped'] = k.fn.__name__\n"
        "try:\n"
        "    k[(1,)](0)\n"
        "except cpu_standins.Unavailable:\n"
        "    out['launch'] = 'unavailable'\n"
        "out['cdiv'] = triton.cdiv(7, 2)\n"
    )
    assert out["jit"] == [True, True] and out["same_class"] is True
    assert out["autotuned"] == [True, False]  # as with triton: autotune wraps the JITFunction
    assert out["wrapped"] == "k"
    assert out["launch"] == "unavailable"
    assert out["cdiv"] == 4


@pytest.mark.parametrize("statement, call", [
    ("from sgl_kernel.kvcacheio import transfer_kv_all_layer as f", "f(1, 2)"),
    ("from sgl_kernel import awq_dequantize as f", "f()"),
    ("import sgl_kernel", "sgl_kernel.allreduce.custom_reduce()"),
    ("from vllm._custom_ops import scaled_fp8_quant as f", "f(None)"),
    ("from vllm._custom_ops import rotary_embedding as f", "f()"),
])
def test_gpu_kernel_libraries_import_but_every_kernel_raises(statement, call):
    out = run(
        f"{statement}\n"
        "try:\n"
        f"    out['value'] = repr({call})\n"
        "except cpu_standins.Unavailable as e:\n"
        "    out['raised'] = str(e)\n"
    )
    assert "value" not in out, f"a stand-in kernel returned {out['value']} instead of raising"
    assert "cannot run" in out["raised"]


@pytest.mark.parametrize("guarded", [
    "try:\n    import sgl_kernel\nexcept ImportError:\n    out['absent'] = True\n",
    "try:\n    from sgl_kernel import fused_add_rmsnorm\nexcept ImportError:\n    out['absent'] = True\n",
    "def f():\n    try:\n        import importlib; importlib.import_module('vllm._custom_ops')\n"
    "    except ModuleNotFoundError:\n        out['absent'] = True\nf()\n",
    "try:\n    from vllm.model_executor.layers.quantization.aqlm import AQLMConfig\nexcept ImportError:\n"
    "    out['absent'] = True\n",
])
def test_an_import_ready_for_absence_gets_absence_as_on_a_cpu_machine(guarded):
    # sgl-kernel's CUDA build fails to import beside CPU torch and vLLM is not installed there:
    # code that catches the ImportError must take its own fallback, not a stand-in.
    out = run(guarded + "out['marked'] = cpu_standins.loaded()\n")
    assert out == {"absent": True, "marked": []}


def test_an_unguarded_import_is_served_and_later_guarded_submodules_stay_absent():
    # 0.4.9: quantization/__init__ tries vllm.model_executor (VLLM_AVAILABLE), fp8.py imports
    # vllm._custom_ops unguarded on a CPU without AMX.
    out = run(
        "try:\n    from vllm.model_executor.layers.quantization.aqlm import AQLMConfig\n    out['first'] = True\n"
        "except ImportError:\n    out['first'] = False\n"
        "from vllm._custom_ops import scaled_fp8_quant\n"
        "try:\n    from vllm.model_executor.layers.linear import LinearBase\n    out['after'] = True\n"
        "except ImportError:\n    out['after'] = False\n"
        "out['marked'] = cpu_standins.loaded()\n"
    )
    assert out == {"first": False, "after": False, "marked": ["vllm", "vllm._custom_ops"]}


def test_every_declared_standin_is_served_and_marked(tmp_path):
    for package in ("sglang", "sglang/srt", "sglang/srt/mem_cache"):  # a tree without compiled modules
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    out = run(
        "import importlib\n"
        f"for name in {sorted(standins.STANDINS)!r}:\n"
        "    importlib.import_module(name)\n"
        "out['marked'] = cpu_standins.loaded()\n",
        tmp_path,
    )
    assert set(standins.STANDINS) <= set(out["marked"])


def test_a_real_module_always_wins(tmp_path):
    (tmp_path / "sgl_kernel").mkdir()
    (tmp_path / "sgl_kernel" / "__init__.py").write_text("REAL = True\n")
    out = run(
        "import sgl_kernel\n"
        "out['real'] = getattr(sgl_kernel, 'REAL', False) is True\n"
        "out['marked'] = cpu_standins.loaded()\n",
        tmp_path,
    )
    assert out == {"real": True, "marked": []}


def test_a_missing_parent_of_a_declared_standin_stays_missing():
    # sglang.srt.rust_extensions is declared; sglang itself must never be served (a tree that is
    # not on the path must fail to import, not import a stand-in).
    out = run(
        "try:\n    import sglang\nexcept ModuleNotFoundError:\n    out['missing'] = True\n"
        "try:\n    import sglang.srt.rust_extensions\nexcept ModuleNotFoundError:\n    out['child'] = 'missing'\n"
    )
    assert out == {"missing": True, "child": "missing"}


def test_undeclared_modules_stay_missing():
    out = run(
        "try:\n"
        "    import flashinfer\n"
        "except ModuleNotFoundError:\n"
        "    out['missing'] = True\n"
    )
    assert out == {"missing": True}


class _Cpu:
    """A ``torch._C._cpu`` of a torch that reports capabilities only through ``_get_cpu_capability``."""

    def __init__(self, capabilities: dict):
        self.capabilities = capabilities

    def _get_cpu_capability(self):
        return self.capabilities


def test_moved_torch_queries_answer_what_torch_reports():
    cpu = _Cpu({"amx_tile": False, "avx2": True})
    added = standins.alias_moved_torch_queries(cpu)
    assert set(added) == set(standins.TORCH_MOVED)
    assert cpu._is_amx_tile_supported() is False and cpu._is_avx2_supported() is True
    assert cpu._is_amx_fp16_supported() is False  # absent from the report: not supported, as torch says
    cpu.capabilities["amx_tile"] = True  # the answer is torch's, read at each call, never ours
    assert cpu._is_amx_tile_supported() is True
    assert "torch._C._cpu._is_amx_tile_supported" in standins.loaded()


def test_moved_torch_queries_leave_existing_names_and_older_torches_alone():
    cpu = _Cpu({"amx_tile": True})
    cpu._is_amx_tile_supported = lambda: "own"
    standins.alias_moved_torch_queries(cpu)
    assert cpu._is_amx_tile_supported() == "own"

    class Old:  # a torch whose C module has neither the report nor the names: nothing is invented
        pass

    assert standins.alias_moved_torch_queries(Old()) == []
    assert not hasattr(Old, "_is_amx_tile_supported")
