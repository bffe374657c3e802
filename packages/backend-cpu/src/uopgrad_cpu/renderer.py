"""The CPU backend's renderer: C99 from core's `CStyleRenderer`, with OpenMP on the outer loop.

The C dialect is the toolkit's default (C type names, `_Float16` storage with float arithmetic, libm
math functions), so this module only names the device and marks large output loops parallel. The pragma
is harmless without OpenMP: the compiler adds `-fopenmp` when the system compiler has it, and a C compiler
without it ignores the line.
"""
from __future__ import annotations

from uopgrad.renderer import CStyleRenderer

__all__ = ["CRenderer"]


class CRenderer(CStyleRenderer):
    """C99 for the host CPU: loop-style, one function per kernel, called through ctypes."""

    device = "CPU"
    parallel_pragma = "#pragma omp parallel for"
