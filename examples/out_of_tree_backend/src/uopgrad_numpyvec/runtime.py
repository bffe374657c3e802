"""The runtime of NUMPYVEC: a compiler from Python source to bytecode (cached on disk by core), buffers as
numpy byte arrays, and a program that runs a kernel function with its helpers (`kernels.py`) in scope."""
from __future__ import annotations

import marshal
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from uopgrad.backend import Allocator, CompileError, Compiler, Program
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


class NumpyAllocator(Allocator[np.ndarray]):
    """Buffers are numpy uint8 arrays; a kernel views them as its parameter dtypes."""

    def _alloc(self, nbytes: int) -> np.ndarray:
        return np.zeros(nbytes, dtype=np.uint8)

    def _zero(self, handle: np.ndarray) -> None:
        handle.fill(0)

    def copyin(self, handle: np.ndarray, src: memoryview) -> None:
        """Copy host bytes into the buffer."""
        handle[:] = np.frombuffer(src, dtype=np.uint8)

    def copyout(self, dst: memoryview, handle: np.ndarray) -> None:
        """Copy the buffer into host bytes."""
        np.frombuffer(dst, dtype=np.uint8)[:] = handle

    def as_buffer(self, handle: np.ndarray) -> memoryview:
        """The buffer's own memory."""
        return handle.data


class NumpyProgram(Program):
    """One kernel: the function `name(bufs, vals, gsize)` defined by the compiled source."""

    def __init__(self, name: str, lib: bytes) -> None:
        super().__init__(name, lib)
        scope: dict[str, Any] = dict(vars(kernels))
        exec(marshal.loads(lib), scope)  # noqa: S102  (our own compiled kernel)
        self._fn = scope[name]

    def __call__(self, *bufs: object, vals: Sequence[int] = (), global_size: Sequence[int] | None = None,
                 local_size: Sequence[int] | None = None) -> None:
        """Run the kernel over every lane of the grid (one lane when it keeps its loops)."""
        with np.errstate(all="ignore"):  # inf, NaN and integer wrap-around are the defined results
            self._fn(bufs, tuple(vals), tuple(global_size or (1, 1, 1)))
