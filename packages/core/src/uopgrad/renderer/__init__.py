"""Renderers (layer 12): a linear program (spec/kernels.md §2) printed as source text for one backend.

`Renderer` is what the pipeline reads from a backend: its device name, the ALU ops it renders natively
(`supports`, handed to codegen so that every other op is decomposed first), its grid limits (None for a
loop-style backend) and `render(program) -> str`. `CStyleRenderer` is the table-driven toolkit for
C-family languages that the CPU, OpenCL and CUDA backends subclass.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

from uopgrad.ops import Ops
from uopgrad.uop import UOp

__all__ = ["CStyleRenderer", "GridLimits", "LinearProgram", "OpTemplate", "Renderer"]

# a per-op template: (renderer, operand dtype, operand strings...) -> C expression
OpTemplate = Callable[..., str]


class LinearProgram(Protocol):
    """What a renderer reads from codegen's `Program`: a kernel name and the ordered kernel-level uops.
    `globals` (buffer slots in signature order) and `vars` (DEFINE_VARs in signature order) are read when
    present; otherwise they are taken from the uops (PARAMs by slot, DEFINE_VARs by first appearance)."""

    @property
    def name(self) -> str:
        """The kernel's name (made a valid identifier by the renderer)."""

    @property
    def uops(self) -> tuple[UOp, ...]:
        """The kernel-level uops in execution order."""


@dataclass(frozen=True)
class GridLimits:
    """Launch limits of a grid-style backend: per-dimension maxima of the global and local sizes."""

    global_max: tuple[int, ...] = (2**31 - 1, 65535, 65535)
    local_max: tuple[int, ...] = (1024, 1024, 64)
    local_prod_max: int = 1024


class Renderer:
    """Prints a linear program as source for one device. Subclasses set the class attributes."""

    device: str = ""
    # None: loop-style (every output dimension is a loop); else the grid a kernel is launched on
    grid: GridLimits | None = None
    # op -> template; the keys are the capability declaration: anything else is decomposed by codegen
    code_for_op: ClassVar[dict[Ops, OpTemplate]] = {}

    @property
    def supports(self) -> frozenset[Ops]:
        """The ALU ops this renderer prints natively (the keys of `code_for_op`)."""
        return frozenset(self.code_for_op)

    def render(self, program: LinearProgram) -> str:
        """The source text of `program`: one entry point named after it."""
        raise NotImplementedError(f"{type(self).__name__} does not implement render")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.device or '?'}>"


# the toolkit is imported last: it subclasses Renderer
from uopgrad.renderer.cstyle import CStyleRenderer  # noqa: E402
