"""Every API era of the release line imports what the probes drive, in its own diffprobe environment.

One representative release per reason an era once failed at import (real wheels from the package
index, cached): the import check must pass, from the tree alone, and the stand-ins it needed must
be the ones declared for that reason, so a stand-in that stopped being needed (or a new one that
crept in) shows here. bench/eras_imports.py runs the same check over every release.
"""

from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from runner.sandbox.import_check import PROBED_MODULES, import_check
from runner.store import envs
from tests import tools

# release -> stand-ins (or moved torch queries) its import must have used, and why that era is here
ERAS = {
    "0.4.5": ({"sgl_kernel", "vllm._custom_ops"}, "torch 2.5.1 era; decord imported at module level (the lock has it)"),
    "0.4.6": ({"vllm._custom_ops", "vllm.model_executor"}, "vLLM ops and activation layers imported unguarded without CUDA"),
    "0.4.9": ({"torch._C._cpu._is_amx_tile_supported", "vllm._custom_ops"}, "a torch CPU query torch 2.13 moved"),
    "0.5.5": ({"sgl_kernel.kvcacheio", "torch._C._cpu._is_amx_tile_supported"}, "sgl_kernel.kvcacheio imported unguarded"),
    "0.5.10": ({"sgl_kernel.kvcacheio", "triton.runtime"}, "fla/utils asks triton's active driver for the device"),
    "0.5.14": ({"triton.runtime"}, "the same, in a cp311 wheel with compiled modules"),
}


@pytest.fixture(scope="module")
def checked(request, release_tree, cache, interp) -> dict[str, Future]:
    """version -> its (environment, import check), every era checked two at a time (each check is one
    process); a failure stays with its own version's test. In the sandbox where bubblewrap runs."""
    sandboxed = tools.sandboxed(request)

    def one(version: str):
        tree = release_tree(version)
        environment = envs.env(tree, cache, interp)
        return environment, import_check(environment, tree, sandboxed=sandboxed)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return {v: pool.submit(one, v) for v in ERAS}


@pytest.mark.slow
@pytest.mark.parametrize("version", list(ERAS))
def test_era_imports_the_probed_modules(version, checked, cache, interp):
    environment, check = checked[version].result()
    assert check.ok, check.modules
    assert check.outside == []
    assert set(PROBED_MODULES) <= set(check.modules)
    needed, why = ERAS[version]
    assert needed <= set(check.standins), f"{version} ({why}) no longer needs {needed - set(check.standins)}"
    layer_stamp = envs.layer(cache, interp)[1]
    assert layer_stamp.key == environment.stamp.layer_key  # one layer for every era
    assert layer_stamp.torch.url and len(layer_stamp.torch.sha256) == 64 and layer_stamp.choice == envs.CHOICE
