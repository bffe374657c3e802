"""Backends the harness tests plant, reached as a backend author's are: by `uopgrad.backends` entry points
(the tests write a dist-info for them in a temporary directory on PYTHONPATH).

`MinimalCPU` renders only the ALU ops a backend must render (core decomposes every other one, codegen/
decomp.py), so the suite's op cases check core's decompositions. `SegfaultingCPU` is the CPU backend whose
SIN reads address 0: a kernel that kills the process, as a backend's bug does.
"""

from __future__ import annotations

from typing import ClassVar

from uopgrad import Ops
from uopgrad.backend import CompiledBackend
from uopgrad.renderer import OpTemplate
from uopgrad_cpu import CPU_DTYPES, CCompiler, CPUAllocator, CPUProgram, CRenderer

# the ALU ops core can build from others (codegen/decomp.py); a minimal backend declares none of them
DECOMPOSED = frozenset(
    {Ops.MAX, Ops.FLOORDIV, Ops.FLOORMOD, Ops.POW, Ops.SUB, Ops.NEG, Ops.CMPEQ, Ops.FDIV, Ops.MULACC}
)


class _MinimalRenderer(CRenderer):
    code_for_op: ClassVar[dict[Ops, OpTemplate]] = {
        op: t for op, t in CRenderer.code_for_op.items() if op not in DECOMPOSED
    }


class MinimalCPU(CompiledBackend):
    """The CPU backend declaring only the ops that have no decomposition."""

    graph = None

    def __init__(self, device: str) -> None:
        super().__init__(device, _MinimalRenderer(), CCompiler(), CPUAllocator(), CPUProgram, CPU_DTYPES)

    def synchronize(self) -> None:
        """Kernels return when they are done."""


def _segfaulting_sin(r: CRenderer, dt: object, x: str) -> str:
    return f"({x} + *(volatile float*)0)"


class _SegfaultRenderer(CRenderer):
    code_for_op: ClassVar[dict[Ops, OpTemplate]] = {**CRenderer.code_for_op, Ops.SIN: _segfaulting_sin}


class SegfaultingCPU(CompiledBackend):
    """The CPU backend whose SIN kernels segfault."""

    graph = None

    def __init__(self, device: str) -> None:
        super().__init__(device, _SegfaultRenderer(), CCompiler(), CPUAllocator(), CPUProgram, CPU_DTYPES)

    def synchronize(self) -> None:
        """Kernels return when they are done."""


def _max_keeping_b_on_ties(r: CRenderer, dt: object, a: str, b: str) -> str:
    # NaN-propagating; on a tie (max(-0.0, 0.0)) it gives b, where REFERENCE's float16 keeps a: the spec
    # leaves that zero's sign open
    return f"((({a}!={a})||({a}>{b}))?{a}:{b})"


class _ZeroSignRenderer(CRenderer):
    code_for_op: ClassVar[dict[Ops, OpTemplate]] = {**CRenderer.code_for_op, Ops.MAX: _max_keeping_b_on_ties}


class ZeroSignCPU(CompiledBackend):
    """The CPU backend whose MAX picks the other zero on a tie: conforming (MAX's zero sign is open)."""

    graph = None

    def __init__(self, device: str) -> None:
        super().__init__(device, _ZeroSignRenderer(), CCompiler(), CPUAllocator(), CPUProgram, CPU_DTYPES)

    def synchronize(self) -> None:
        """Kernels return when they are done."""
