"""Renderers (layer 12): a linear program (codegen's `Program`, spec/kernels.md §2) printed as source text.

`Renderer` is what the pipeline reads from a backend: its device name, the ALU ops it renders natively
(`supports`, handed to codegen's `lower` so that every other op is decomposed first), its grid limits
(None for a loop-style backend) and `render(program) -> str`. `CStyleRenderer` is the table-driven toolkit
for C-family languages that the CPU, OpenCL and CUDA backends subclass.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from uopgrad.codegen import GridSpec, Program
from uopgrad.ops import Ops

__all__ = ["CStyleRenderer", "OpTemplate", "Renderer"]

# a per-op template: (renderer, operand dtype, operand strings...) -> C expression
OpTemplate = Callable[..., str]


class Renderer:
    """Prints a linear program as source for one device. Subclasses set the class attributes."""

    device: str = ""
    # None: loop-style (every output dimension is a loop); else the grid a kernel is launched on
    grid: GridSpec | None = None
    # op -> template; the keys are the capability declaration: anything else is decomposed by codegen
    code_for_op: ClassVar[dict[Ops, OpTemplate]] = {}
    # bytes of a vector register the source may use (AVX-512: 64, AVX2: 32, NEON: 16); 0: scalar only
    vector_width: int = 0
    # bytes of thread-private memory (DEFINE_LOCAL) a loop nest may declare, where the opt pass packs a
    # matmul's right operand (loop-style renderers); 0: none
    scratch: int = 0

    @property
    def supports(self) -> frozenset[Ops]:
        """The ALU ops this renderer prints natively (the keys of `code_for_op`)."""
        return frozenset(self.code_for_op)

    def function_name(self, name: str) -> str:
        """The entry point's name in the source for a kernel named `name` (the runtime looks it up)."""
        return name

    def render(self, program: Program) -> str:
        """The source text of `program`: one entry point named after it."""
        raise NotImplementedError(f"{type(self).__name__} does not implement render")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.device or '?'}>"


# the toolkit is imported last: it subclasses Renderer
from uopgrad.renderer.cstyle import CStyleRenderer  # noqa: E402
