"""uopgrad_cpu: the CPU backend of uopgrad (C99 built by the system C compiler, loaded with ctypes).

`CPUBackend` is the `uopgrad.backends` entry point `CPU`. It is core's `CompiledBackend` with this
package's four parts: `CRenderer` (renderer.py), `CCompiler` (compiler.py), `CPUAllocator` and
`CPUProgram` (runtime.py). See docs/ARCHITECTURE.md §3.
"""

from __future__ import annotations

from uopgrad import dtypes
from uopgrad.backend import CompiledBackend
from uopgrad_cpu.compiler import CCompiler
from uopgrad_cpu.renderer import CRenderer
from uopgrad_cpu.runtime import CPUAllocator, CPUProgram

__all__ = ["CPU_DTYPES", "CCompiler", "CPUAllocator", "CPUBackend", "CPUProgram", "CRenderer"]

# bfloat16 has no C99 type: its buffers hold the bits, its values are floats rounded after every op (cstyle)
CPU_DTYPES = frozenset({dtypes.bool, *dtypes.ints, *dtypes.floats})


class CPUBackend(CompiledBackend):
    """The host CPU: every kernel is a C function; the outer loop of large kernels runs on all cores."""

    graph = None  # no graph executor: a TinyJit replays its captured launches one by one (jit.graph_class)

    def __init__(self, device: str) -> None:
        super().__init__(device, CRenderer(), CCompiler(), CPUAllocator(), CPUProgram, CPU_DTYPES)

    def synchronize(self) -> None:
        """Wait for the launched kernels: each returns when it has finished, so there is nothing to do."""
