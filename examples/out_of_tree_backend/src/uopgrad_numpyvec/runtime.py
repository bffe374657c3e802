"""The runtime of NUMPYVEC: a compiler from Python source to bytecode (cached on disk by core), buffers as
numpy byte arrays, and a program that runs a kernel function with its helpers (`kernels.py`) in scope."""

from __future__ import annotations

import marshal
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from uopgrad.backend import CompileError, Compiler, HostAllocator, Program, Size
from uopgrad_numpyvec import kernels

__all__ = ["NumpyAllocator", "NumpyProgram", "PyCompiler"]


class PyCompiler(Compiler):
    """Python source -> marshalled bytecode (its cache key is the interpreter's version: bytecode is not
    portable between versions)."""

    def __init__(self) -> None:
        super().__init__()
        self.cache_key = f"python {sys.version}"

    def compile(self, src: str) -> bytes:
        """Compile the kernel's source; a syntax error is a CompileError with the numbered source."""
        try:
            code = compile(src, "<numpyvec kernel>", "exec")
        except SyntaxError as e:
            raise CompileError("python", str(e), src) from e
        return marshal.dumps(code)


class NumpyAllocator(HostAllocator):
    """Buffers are host byte arrays (core's shared host allocator); a kernel views them as its dtypes."""


class NumpyProgram(Program):
    """One kernel: the function `name(bufs, vals, gsize)` defined by the compiled source."""

    def __init__(self, name: str, lib: bytes) -> None:
        super().__init__(name, lib)
        scope: dict[str, Any] = dict(vars(kernels))
        exec(marshal.loads(lib), scope)
        self._fn = scope[name]

    def __call__(
        self, *bufs: object, vals: Sequence[int] = (), global_size: Size = None, local_size: Size = None
    ) -> None:
        """Run the kernel over every lane of the grid (one lane when it keeps its loops)."""
        with np.errstate(all="ignore"):  # inf, NaN and integer wrap-around are the defined results
            self._fn(bufs, tuple(vals), tuple(global_size or (1, 1, 1)))
