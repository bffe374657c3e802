"""uopgrad_numpyvec: a third-party uopgrad backend, written only against uopgrad's backend-author API.

`NumpyVecBackend` is the `uopgrad.backends` entry point `NUMPYVEC`. It is core's `CompiledBackend` with
four small parts of its own: `NumpyRenderer` prints each kernel's linear program as a Python function over
numpy arrays (every output element is one lane of a grid, all lanes computed at once), `PyCompiler`
compiles that source to Python bytecode, `NumpyAllocator` keeps buffers as numpy byte arrays and
`NumpyProgram` runs a kernel. It passes `pytest --pyargs uopgrad_conformance --backend NUMPYVEC`.
"""

from __future__ import annotations

from uopgrad import dtypes
from uopgrad.backend import CompiledBackend
from uopgrad_numpyvec.renderer import NumpyRenderer
from uopgrad_numpyvec.runtime import NumpyAllocator, NumpyProgram, PyCompiler

__all__ = ["DTYPES", "NumpyAllocator", "NumpyProgram", "NumpyRenderer", "NumpyVecBackend", "PyCompiler"]

# numpy has no bfloat16, so it is not claimed (the conformance suite reports those cases as "not claimed")
DTYPES = frozenset({dtypes.bool, *dtypes.ints, dtypes.float16, dtypes.float32, dtypes.float64})


class NumpyVecBackend(CompiledBackend):
    """Kernels as vectorised numpy code: correct everywhere, fast nowhere; a template for new backends.
    A variant (say, with another op table) subclasses `NumpyRenderer` and names it in `renderer_class`."""

    renderer_class: type[NumpyRenderer] = NumpyRenderer

    def __init__(self, device: str) -> None:
        super().__init__(device, self.renderer_class(), PyCompiler(), NumpyAllocator(), NumpyProgram, DTYPES)
