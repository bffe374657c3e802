"""The CPU backend's renderer: C99 from core's `CStyleRenderer`, with GCC vector types and OpenMP on the
outer loop.

The C dialect is the toolkit's default (C type names, `_Float16` storage with float arithmetic, libm
math functions) plus core's `GCCVectorRenderer` for the opt pass's vector forms, so this module only names
the device, states the host's vector width and cache sizes (read by `hostinfo.py`) and marks large output
loops parallel. The pragma is harmless without OpenMP: the compiler adds `-fopenmp` when the system
compiler has it, and a C compiler without it ignores the line.
"""

from __future__ import annotations

from uopgrad import DType
from uopgrad.renderer.vector import GCCVectorRenderer
from uopgrad_cpu.hostinfo import host_facts

__all__ = ["CRenderer", "host_vector_width"]


def host_vector_width() -> int:
    """Bytes of the widest vector register of this CPU that `-march=native` uses: AVX-512 64, AVX2 32,
    SSE2 or NEON 16; 0 when unknown (the opt pass is then off). Read once (`hostinfo.host_facts`)."""
    return host_facts().vector_width


# libm's functions that kernels call (codegen's ALU templates and core's C helpers), declared instead of
# `#include <math.h>`: parsing the header was over a quarter of the C compiler's time on a small kernel (92
# -> 64 ms of CPU, measured), and GCC and clang still treat these names as their builtins
_LIBM = ("sqrt", "exp2", "log2", "sin", "trunc", "fmod", "pow")
_MATH_DECLS = (
    *(f"double {f}({', '.join(['double'] * (2 if f in ('fmod', 'pow') else 1))});" for f in _LIBM),
    *(f"float {f}f({', '.join(['float'] * (2 if f in ('fmod', 'pow') else 1))});" for f in _LIBM),
    "#define INFINITY __builtin_inff()",
    '#define NAN __builtin_nanf("")',
)


class CRenderer(GCCVectorRenderer):
    """C99 with GCC vector extensions for the host CPU: loop-style, one function per kernel, called through
    ctypes."""

    device = "CPU"
    prefix_lines = _MATH_DECLS
    vector_width = host_vector_width()
    # (L1d, L2, L3) bytes of this host's caches, from sysfs: the opt pass derives its packing threshold
    # from the L2 (spec/opt.md §3.1); () where unreadable (the pass's measured default)
    cache_sizes = host_facts().cache_sizes
    parallel_pragma = "#pragma omp parallel for"
    # a kernel's local memory is a stack array of the thread running the loop nest (the pragma makes it
    # private): the opt pass packs a matmul's panel into it, with AVX2 32 floats per reduce step, so 2048
    # steps in 256 KB (a panel that does not fit takes a narrower tile). A constant, not a cache fact: which
    # panels fit decides whether a transposed operand is gathered or its reduce reordered (spec/opt.md §1)
    scratch = 256 * 1024

    def render_local(self, name: str, dt: DType, size: int) -> str:
        """A DEFINE_LOCAL: a stack array, aligned for vector loads (each thread has its own)."""
        return f"{self.ctype(dt)} {name}[{size}] __attribute__((aligned(64)));"
