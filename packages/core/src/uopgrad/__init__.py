"""uopgrad: a small, exact, property-tested reference implementation of a tinygrad-style compiler core.

The facade exports exactly the public contract of docs/ARCHITECTURE.md §4; everything else lives in its
module (`uopgrad.gradient`, `uopgrad.function`, `uopgrad.backend`, ...).

The facade's names are loaded on first use (PEP 562 `__getattr__`): `import uopgrad` itself reads only the
configuration (so a bad `DEBUG` still warns at import), and `uopgrad --version` never pays for numpy,
ml_dtypes and the compiler (1.2 s before, measured on 2 shared cores).
"""

from __future__ import annotations

import importlib as _importlib
import sys as _sys
import types as _types
import typing as _typing

from uopgrad import config as _config
from uopgrad._version import __version__ as __version__

if _typing.TYPE_CHECKING:
    from uopgrad.backend import Device, GlobalCounters
    from uopgrad.config import Context
    from uopgrad.dtype import DType, dtypes
    from uopgrad.function import function
    from uopgrad.jit import TinyJit
    from uopgrad.ops import GroupOp, Ops
    from uopgrad.rewrite import PatternMatcher, UPat, graph_rewrite
    from uopgrad.tensor import Tensor
    from uopgrad.uop import UOp

    Variable = UOp.variable

__all__ = [
    "Context",
    "DType",
    "Device",
    "GlobalCounters",
    "GroupOp",
    "Ops",
    "PatternMatcher",
    "Tensor",
    "TinyJit",
    "UOp",
    "UPat",
    "Variable",
    "dtypes",
    "function",
    "graph_rewrite",
]

# facade name -> (module, attribute path in it)
_FACADE: dict[str, tuple[str, str]] = {
    "Context": ("uopgrad.config", "Context"),
    "DType": ("uopgrad.dtype", "DType"),
    "Device": ("uopgrad.backend", "Device"),
    "GlobalCounters": ("uopgrad.backend", "GlobalCounters"),
    "GroupOp": ("uopgrad.ops", "GroupOp"),
    "Ops": ("uopgrad.ops", "Ops"),
    "PatternMatcher": ("uopgrad.rewrite", "PatternMatcher"),
    "Tensor": ("uopgrad.tensor", "Tensor"),
    "TinyJit": ("uopgrad.jit", "TinyJit"),
    "UOp": ("uopgrad.uop", "UOp"),
    "UPat": ("uopgrad.rewrite", "UPat"),
    # tinygrad's spelling: Variable("i", 1, 10).bind(3) for a symbolic size or offset
    "Variable": ("uopgrad.uop", "UOp.variable"),
    "dtypes": ("uopgrad.dtype", "dtypes"),
    "function": ("uopgrad.function", "function"),
    "graph_rewrite": ("uopgrad.rewrite", "graph_rewrite"),
}


def __getattr__(name: str) -> object:
    """A facade name, loaded (and kept) on first use; a submodule (`uopgrad.nn`) is imported as asked."""
    if name not in _FACADE:
        if name.startswith("_"):
            raise AttributeError(f"module 'uopgrad' has no attribute {name!r}")
        try:
            return _importlib.import_module(f"uopgrad.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"uopgrad.{name}":
                raise
            raise AttributeError(f"module 'uopgrad' has no attribute {name!r}") from None
    module, path = _FACADE[name]
    obj: object = _importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    globals()[name] = obj
    return obj


class _Facade(_types.ModuleType):
    """The package's module type: importing the submodule `uopgrad.function` sets the attribute `function`
    of the package to that module (the import system does), which would hide the facade's decorator of the
    same name once it is loaded lazily; a facade name is never replaced by a submodule."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _FACADE and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Facade


def __dir__() -> list[str]:
    return sorted(
        {*__all__, *(n for n in globals() if n.startswith("__") or not n.startswith("_"))} - {"annotations"}
    )


if _config.getenv_path("UOPGRAD_VIZ") is not None:  # a VIZ page per realize, imported only when asked
    from uopgrad import viz as _viz

    _viz.enable_from_environment()
