"""BROKEN_C_DIVULP: the CPU backend on a target without a native float divide, whose decomposition of
`a / b` is `a * (1 / b)`: two roundings, off by an ulp on about a third of the quotients (core decomposes
FDIV correctly rounded, uopgrad.codegen.decomp).

The patch replaces the decomposition for every target without FDIV in the process that loads this device
(CPU, CL and CUDA render FDIV, so they never take it): it lives in a module of its own, imported only for
this device."""

from __future__ import annotations

import uopgrad.codegen.decomp as decomp
from uopgrad import Ops, UOp, dtypes
from uopgrad_broken.cbackend import _backend
from uopgrad_cpu import CRenderer

__all__ = ["BrokenDivUlp"]


class _NoDivide(CRenderer):
    """A renderer without a native float divide: codegen decomposes FDIV (pm_decomp) before it renders."""

    @property
    def supports(self) -> frozenset[Ops]:
        """The C renderer's ops but FDIV."""
        return super().supports - {Ops.FDIV}


_original = decomp._fdiv


def _fdiv_by_reciprocal(a: UOp, b: UOp) -> UOp:
    """a * (1 / b) for float32 and float64 ("one multiply is cheaper than a divide")."""
    if a.dtype in (dtypes.float32, dtypes.float64):
        return UOp(Ops.MUL, a.dtype, (a, UOp(Ops.RECIPROCAL, b.dtype, (b,))))
    return _original(a, b)


decomp._fdiv = _fdiv_by_reciprocal
BrokenDivUlp = _backend(_NoDivide)
