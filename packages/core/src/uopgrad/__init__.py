"""uopgrad: a small, exact, property-tested reference implementation of a tinygrad-style compiler core.

The facade exports exactly the public contract of docs/ARCHITECTURE.md §4; everything else lives in its
module (`uopgrad.gradient`, `uopgrad.function`, `uopgrad.backend`, ...).
"""

from uopgrad._version import __version__ as __version__
from uopgrad.backend import Device, GlobalCounters
from uopgrad.config import Context
from uopgrad.config import getenv_path as _getenv_path
from uopgrad.dtype import DType, dtypes
from uopgrad.function import function
from uopgrad.jit import TinyJit
from uopgrad.ops import GroupOp, Ops
from uopgrad.rewrite import PatternMatcher, UPat, graph_rewrite
from uopgrad.tensor import Tensor
from uopgrad.uop import UOp

Variable = UOp.variable  # tinygrad's spelling: Variable("i", 1, 10).bind(3) for a symbolic size or offset

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

if _getenv_path("UOPGRAD_VIZ") is not None:  # a VIZ page per realize (uopgrad/viz), imported only when asked
    from uopgrad import viz as _viz

    _viz.enable_from_environment()
