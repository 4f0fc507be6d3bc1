"""Stand-in modules for what cannot exist in a CPU probe environment.

Installed into every probe environment and activated by a ``.pth`` line. The finder sits at the
*end* of ``sys.meta_path``, so a real module always wins; a stand-in is served only when nothing
else can be imported under that name. Every module it serves carries ``DIFFPROBE_STANDIN = True``
so the probe harness can report exactly which stand-ins a run touched.

Names are declared in ``STANDINS`` (top-level package -> why); ``runner.envs`` records the same
list in the environment's stamp, so nothing here is silent.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

STANDINS = {
    "triton": "GPU kernel compiler; not usable on CPU",
    "torchvision": "local builds are CUDA builds that fail to load beside CPU torch",
    "sglang.srt.rust_extensions": "compiled Rust modules, present in release wheels, absent in git trees",
    "sglang.srt.mem_cache.rust_tree_core": "compiled Rust module, present in release wheels, absent in git trees",
}


class Unavailable(RuntimeError):
    """Raised when probed code tries to *use* a stand-in rather than merely import it."""


def _unavailable(name: str):
    def call(*_args, **_kwargs):
        raise Unavailable(f"{name} is a diffprobe stand-in and cannot run")

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
        return f"<diffprobe stand-in {self._name}>"


class _NoDriver:
    """Real triton without a GPU raises on ``driver.active``; code that probes for a GPU relies on it."""

    @property
    def active(self):
        raise RuntimeError("0 active drivers ([]). There should only be one.")


def _decorator(*args, **kwargs):
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return _Kernel(args[0])
    return _Kernel


class _Config:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


# Submodules a real package imports in its ``__init__``: after ``import triton``, ``triton.runtime``
# is the runtime package (whose ``driver`` raises without a GPU), not a placeholder value.
_SUBMODULES = {
    "triton": {"runtime", "compiler", "errors", "language", "testing", "tools"},
}

# Attributes that must be more specific than the generic fallback.
_SPECIFIC = {
    "triton": {
        "__version__": "0.0.0+diffprobe.standin",
        "jit": _decorator,
        "autotune": lambda *a, **k: _decorator,
        "heuristics": lambda *a, **k: _decorator,
        "Config": _Config,
        "cdiv": lambda a, b: -(-a // b),
        "next_power_of_2": lambda n: 1 if n <= 1 else 1 << (int(n) - 1).bit_length(),
    },
    "triton.runtime": {"driver": _NoDriver()},
    "triton.runtime.driver": {"active": property(lambda self: _NoDriver().active)},
    "torchvision": {"__version__": "0.0.0+diffprobe.standin"},
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
        module.DIFFPROBE_STANDIN = True
        module.__dict__.update(_SPECIFIC.get(module.__name__, {}))


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if any(fullname == root or fullname.startswith(root + ".") for root in STANDINS):
            return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)
        return None


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())


def loaded() -> list[str]:
    """Names of stand-in modules this interpreter actually imported."""
    # vars(), not getattr(): a lazy module (transformers) would import itself on attribute access
    return sorted(n for n, m in list(sys.modules.items()) if vars(m).get("DIFFPROBE_STANDIN", False) is True)
