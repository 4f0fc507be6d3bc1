"""Stand-in modules for what cannot exist in a CPU probe environment.

Installed into every probe environment and activated by a ``.pth`` line. The finder sits at the
*end* of ``sys.meta_path``, so a real module always wins; a stand-in is served only when nothing
else can be imported under that name. Every module it serves carries ``CPU_STANDIN = True``
so the probe harness can report exactly which stand-ins a run touched.

Names are declared in ``STANDINS`` (top-level package -> why); ``runner.envs`` records the same
list in the environment's stamp, so nothing here is silent.

A stand-in answers as a machine without a GPU answers, or raises. GPU kernel libraries that such
a machine lacks (``_GPU_LIBRARIES``) stay absent to an import inside ``try``, which is ready for
that; an import that would crash its module outright (old releases on any machine without CUDA)
is served, and every kernel raises ``Unavailable`` when called. Once served, a module is in
``sys.modules``, so a later guarded import of that same module finds it (its submodules stay
absent); the stand-ins a run touched are listed in its receipt. Private torch queries that older
trees call under names torch has since moved (``TORCH_MOVED``) get torch's own answer from its new
place, never a value of ours.
"""

from __future__ import annotations

import dis
import importlib.abc
import importlib.machinery
import sys
import types

STANDINS = {
    "triton": "GPU kernel compiler; not usable on CPU",
    "torchvision": "local builds are CUDA builds that fail to load beside CPU torch",
    "sglang.srt.rust_extensions": "compiled Rust modules, present in release wheels, absent in git trees",
    "sglang.srt.mem_cache.rust_tree_core": "compiled Rust module, present in release wheels, absent in git trees",
    "sgl_kernel": "SGLang's CUDA kernel library (sgl-kernel/sglang-kernel, required by every release); its CUDA "
                  "build fails to import beside CPU torch: served only to imports not ready for its absence "
                  "(measured: 0.4.5.x, 0.4.9.post1-0.5.12.post1), every kernel raises when called",
    "vllm": "vLLM, which 0.4.x releases import unguarded on a machine without CUDA (custom ops, activation "
            "layers): served only to such imports, every op raises when called",
}

# GPU libraries a CPU-only machine does not have: code that imports them inside ``try`` (or
# ``with``) is ready for their absence and gets it (ModuleNotFoundError), as on that machine; only
# an import that would crash its module outright is served. Their lower-case names are kernels,
# which raise when called (no value of ours).
_GPU_LIBRARIES = ("sgl_kernel", "vllm")

# Old private torch CPU queries -> the capability torch now reports for the same cpuinfo bit
# (torch 2.13 dropped ``torch._C._cpu._is_<feature>_supported`` for ``_get_cpu_capability()``).
TORCH_MOVED = {
    "_is_avx2_supported": "avx2",
    "_is_avx512_supported": "avx512_f",
    "_is_avx512_vnni_supported": "avx512_vnni",
    "_is_avx512_bf16_supported": "avx512_bf16",
    "_is_amx_tile_supported": "amx_tile",
    "_is_amx_fp16_supported": "amx_fp16",
}


class Unavailable(RuntimeError):
    """Raised when probed code tries to *use* a stand-in rather than merely import it."""


def _unavailable(name: str):
    def call(*_args, **_kwargs):
        raise Unavailable(f"{name} is a CPU stand-in and cannot run")

    return call


class _Kernel:
    """What a stand-in decorator returns: importable, inspectable, never runnable."""

    def __init__(self, fn=None, *_args, **_kwargs):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __getitem__(self, _grid):
        return _unavailable(self.__name__)

    def __call__(self, *args, **kwargs):
        return _unavailable(self.__name__)(*args, **kwargs)


class _Value:
    """Any lower-case attribute: usable as a decorator, a constant or a namespace at import time."""

    def __init__(self, name: str):
        self._name = name

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return _Kernel(args[0])
        return _Value(self._name + "()")

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Value(f"{self._name}.{attr}")

    def __repr__(self):
        return f"<CPU stand-in {self._name}>"


class _Op:
    """A kernel (or namespace of kernels) of a GPU library: referable at import, raises when called."""

    def __init__(self, name: str):
        self._name = name

    def __call__(self, *_args, **_kwargs):
        raise Unavailable(f"{self._name} is a CPU stand-in kernel and cannot run on CPU")

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Op(f"{self._name}.{attr}")

    def __repr__(self):
        return f"<CPU stand-in kernel {self._name}>"


class _NoDriver:
    """Real triton without a GPU raises on ``driver.active``; code that probes for a GPU relies on it."""

    @property
    def active(self):
        raise RuntimeError("0 active drivers ([]). There should only be one.")


# triton's kernel classes, one class per name wherever triton exports it, so that isinstance()
# answers as with real triton (0.5.3's CachedKernel asserts isinstance(fn, triton.runtime.jit.JITFunction)).
class KernelInterface(_Kernel):
    pass


class JITFunction(KernelInterface):
    """What ``@triton.jit`` returns."""


class Autotuner(KernelInterface):
    """What ``@triton.autotune(...)`` returns."""


class Heuristics(KernelInterface):
    """What ``@triton.heuristics(...)`` returns."""


def jit(*args, **kwargs):
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return JITFunction(args[0])
    return JITFunction  # @triton.jit(**options)


def autotune(*_args, **_kwargs):
    return Autotuner


def heuristics(*_args, **_kwargs):
    return Heuristics


class _Config:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


# Submodules a real package imports in its ``__init__``: after ``import triton``, ``triton.runtime``
# is the runtime package (whose ``driver`` raises without a GPU), not a placeholder value.
_SUBMODULES = {
    "triton": {"runtime", "compiler", "errors", "language", "testing", "tools"},
    "vllm": {"_custom_ops"},
    "triton.runtime": {"jit", "autotuner"},
}

_KERNELS = {"jit": jit, "autotune": autotune, "heuristics": heuristics, "JITFunction": JITFunction,
            "KernelInterface": KernelInterface, "Autotuner": Autotuner, "Heuristics": Heuristics, "Config": _Config}

# Attributes that must be more specific than the generic fallback.
_SPECIFIC = {
    "triton": {
        "__version__": "0.0.0+cpu.standin",
        **_KERNELS,
        "Config": _Config,
        "cdiv": lambda a, b: -(-a // b),
        "next_power_of_2": lambda n: 1 if n <= 1 else 1 << (int(n) - 1).bit_length(),
    },
    "triton.runtime": {"driver": _NoDriver(), **_KERNELS, "Config": _Config},
    "triton.runtime.jit": {name: _KERNELS[name] for name in ("jit", "JITFunction", "KernelInterface")},
    "triton.runtime.autotuner": {name: _KERNELS[name] for name in ("autotune", "heuristics", "Autotuner", "Heuristics", "Config")},
    "triton.runtime.driver": {"active": property(lambda self: _NoDriver().active)},
    "torchvision": {"__version__": "0.0.0+cpu.standin"},
}


class _StandinMeta(type):
    """Class attributes fall back too (transformers reads ``InterpolationMode.NEAREST_EXACT``)."""

    def __getattr__(cls, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Value(f"{cls.__module__}.{cls.__name__}.{attr}")


class _StandinModule(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr in _SUBMODULES.get(self.__name__, ()):
            return importlib.import_module(f"{self.__name__}.{attr}")
        # Capitalised names are used with isinstance()/issubclass() (torch checks
        # isinstance(x, triton.JITFunction)), so they must be real classes.
        if attr[:1].isupper():
            value = _StandinMeta(attr, (_Kernel,), {"__module__": self.__name__})
        elif self.__name__.split(".", 1)[0] in _GPU_LIBRARIES:
            value = _Op(f"{self.__name__}.{attr}")
        else:
            value = _Value(f"{self.__name__}.{attr}")
        setattr(self, attr, value)
        return value


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        module = _StandinModule(spec.name)
        module.__path__ = []  # a package, so any submodule import succeeds
        return module

    def exec_module(self, module):
        module.CPU_STANDIN = True
        module.__dict__.update(_SPECIFIC.get(module.__name__, {}))


def _importing_frame():
    """The frame of the code whose import statement is being resolved (past importlib's own)."""
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename.startswith("<frozen importlib")
                                 or frame.f_code.co_filename.endswith(("importlib/__init__.py", __file__))):
        frame = frame.f_back
    return frame


def _guarded() -> bool:
    """Whether the import being resolved sits inside a ``try`` (or ``with``) block of its code."""
    frame = _importing_frame()
    parse = getattr(dis, "_parse_exception_table", None)  # CPython 3.11+
    if frame is None or parse is None:
        return False
    return any(entry.start <= frame.f_lasti < entry.end for entry in parse(frame.f_code))


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if not any(fullname == root or fullname.startswith(root + ".") for root in STANDINS):
            return None
        if fullname.split(".", 1)[0] in _GPU_LIBRARIES and _guarded():
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)


# Everything this module may serve, as an environment stamp records it: modules, then moved queries.
DECLARED = {
    **STANDINS,
    **{f"torch._C._cpu.{name}": f"moved in torch 2.13; answered by torch._C._cpu._get_cpu_capability()['{feature}']"
       for name, feature in TORCH_MOVED.items()},
}

_moved_called: set[str] = set()


def _moved_query(name: str, capabilities, feature: str):
    def query() -> bool:
        _moved_called.add(f"torch._C._cpu.{name}")
        return bool(capabilities().get(feature, False))

    query.__name__ = name
    return query


def alias_moved_torch_queries(cpu_module) -> list[str]:
    """Give ``torch._C._cpu`` its old query names back, answered by torch's own capability report."""
    capabilities = getattr(cpu_module, "_get_cpu_capability", None)
    if capabilities is None:
        return []
    added = [name for name in TORCH_MOVED if not hasattr(cpu_module, name)]
    for name in added:
        setattr(cpu_module, name, _moved_query(name, capabilities, TORCH_MOVED[name]))
    return added


class _AfterTorch(importlib.abc.Loader):
    """Runs torch's own loader, then restores the moved query names on ``torch._C._cpu``."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        alias_moved_torch_queries(module._C._cpu)


class _TorchFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _AfterTorch(spec.loader)
        return spec


def install() -> None:
    if not any(isinstance(f, _TorchFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchFinder())
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())


def loaded() -> list[str]:
    """Names of stand-in modules this interpreter actually imported, and moved torch queries it called."""
    # vars(), not getattr(): a lazy module (transformers) would import itself on attribute access
    modules = {n for n, m in list(sys.modules.items()) if vars(m).get("CPU_STANDIN", False) is True}
    return sorted(modules | _moved_called)
