"""Backends the harness tests plant, reached as a backend author's are: by `uopgrad.backends` entry points,
which `install_site(DIR)` writes as a dist-info in DIR (the tests use a temporary directory; `nox -s
conformance_minimal` runs `python conformance/tests/planted_backends.py build/planted-site`). Either puts DIR
and this folder on PYTHONPATH.

`MinimalCPU` renders only the ALU ops a backend must render (core decomposes every other one, codegen/
decomp.py), so the suite's op cases check core's decompositions. `SegfaultingCPU` is the CPU backend whose
SIN reads address 0: a kernel that kills the process, as a backend's bug does. `ZeroSignCPU`'s MAX picks
the other zero on a tie, which the spec allows.
"""

from __future__ import annotations

import sys
from pathlib import Path
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


def _planted(renderer: type[CRenderer], doc: str) -> type[CompiledBackend]:
    """The CPU backend with `renderer` (its compiler, allocator and programs as they are)."""

    class Planted(CompiledBackend):
        graph = None

        def __init__(self, device: str) -> None:
            super().__init__(device, renderer(), CCompiler(), CPUAllocator(), CPUProgram, CPU_DTYPES)

        def synchronize(self) -> None:
            """Kernels return when they are done."""

    Planted.__doc__ = doc
    return Planted


MinimalCPU = _planted(_MinimalRenderer, "The CPU backend declaring only the ops that have no decomposition.")


def _segfaulting_sin(r: CRenderer, dt: object, x: str) -> str:
    return f"({x} + *(volatile float*)0)"


class _SegfaultRenderer(CRenderer):
    code_for_op: ClassVar[dict[Ops, OpTemplate]] = {**CRenderer.code_for_op, Ops.SIN: _segfaulting_sin}


SegfaultingCPU = _planted(_SegfaultRenderer, "The CPU backend whose SIN kernels segfault.")


def _max_keeping_b_on_ties(r: CRenderer, dt: object, a: str, b: str) -> str:
    # NaN-propagating; on a tie (max(-0.0, 0.0)) it gives b, where REFERENCE's float16 keeps a: the spec
    # leaves that zero's sign open
    return f"((({a}!={a})||({a}>{b}))?{a}:{b})"


class _ZeroSignRenderer(CRenderer):
    code_for_op: ClassVar[dict[Ops, OpTemplate]] = {**CRenderer.code_for_op, Ops.MAX: _max_keeping_b_on_ties}


ZeroSignCPU = _planted(
    _ZeroSignRenderer,
    "The CPU backend whose MAX picks the other zero on a tie: conforming (MAX's zero sign is open).",
)

# device -> class of this module: the entry points `install_site` writes
ENTRY_POINTS = {"MINIMAL_CPU": "MinimalCPU", "SEGV_CPU": "SegfaultingCPU", "ZEROSIGN_CPU": "ZeroSignCPU"}


def install_site(site: Path) -> Path:
    """Write the entry points of this module's backends as a dist-info in `site`; `site` and this folder go
    on PYTHONPATH."""
    info = site / "planted_backends-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: planted-backends\nVersion: 0\n")
    lines = [f"{name} = planted_backends:{cls}" for name, cls in ENTRY_POINTS.items()]
    (info / "entry_points.txt").write_text("[uopgrad.backends]\n" + "\n".join(lines) + "\n")
    return site


if __name__ == "__main__":
    install_site(Path(sys.argv[1]))
