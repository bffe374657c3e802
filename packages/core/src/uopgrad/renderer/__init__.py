"""Renderers (layer 12): a linear program (codegen's `Program`, spec/kernels.md §2) printed as source text.

`Renderer` is what the pipeline reads from a backend: its device name, the ALU ops it renders natively
(`supports`: every other op is decomposed first), its grid limits (None for a loop-style backend), vector
width, scratch, warp size, tensor-core shapes and cache sizes, gathered by `target(dtypes)` into the one
`Target` record codegen's `lower` takes; and `render(program) -> str`. `CStyleRenderer` is the
table-driven toolkit for C-family languages that the CPU, OpenCL and CUDA backends subclass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from uopgrad.codegen import GridSpec, Program, Target
from uopgrad.codegen.target import TensorCoreShape
from uopgrad.dtype import DType
from uopgrad.ops import Ops

__all__ = ["CStyleRenderer", "OpTemplate", "Renderer", "Target"]

# a per-op template: (renderer, operand dtype, operand strings...) -> C expression
OpTemplate = Callable[..., str]


class Renderer:
    """Prints a linear program as source for one device. Subclasses set the class attributes."""

    device: str = ""
    # None: loop-style (every output dimension is a loop); else the grid a kernel is launched on
    grid: GridSpec | None = None
    # op -> template; the keys are the capability declaration: anything else is decomposed by codegen
    code_for_op: ClassVar[dict[Ops, OpTemplate]] = {}
    # (op, dtype) pairs of those keys that are NOT printed natively for that operand dtype: codegen
    # decomposes them (Target.unsupported)
    unsupported: ClassVar[frozenset[tuple[Ops, DType]]] = frozenset()
    # bytes of a vector register the source may use (AVX-512: 64, AVX2: 32, NEON: 16); 0: scalar only
    vector_width: int = 0
    # bytes of thread-private memory (DEFINE_LOCAL) a loop nest may declare, where the opt pass packs a
    # matmul's right operand (loop-style renderers); 0: none
    scratch: int = 0
    # threads that run in lockstep (CUDA's warp, an OpenCL subgroup); 1: none or unknown
    warp_size: int = 1
    # (M, N, K) shapes of the matrix units the source may use (codegen/tc.py: WMMA ops the renderer issues)
    tensor_cores: tuple[TensorCoreShape, ...] = ()
    # bytes of one core's (L1d, L2, L3) caches the code runs on (a CPU backend reads its host's); () unknown
    cache_sizes: tuple[int, ...] = ()

    @property
    def supports(self) -> frozenset[Ops]:
        """The ALU ops this renderer prints natively (the keys of `code_for_op`)."""
        return frozenset(self.code_for_op)

    def target(self, dtypes: frozenset[DType]) -> Target:
        """The record codegen lowers for, on a device whose buffers hold `dtypes`: this renderer's ops, grid
        (whose optional `local_memory` is the target's), vector width, scratch, warp size, tensor cores,
        the (op, dtype) pairs it does not print natively and its cache sizes."""
        return Target(
            dtypes,
            self.supports,
            self.grid,
            compiled=True,
            vector_width=self.vector_width,
            scratch=self.scratch,
            local_memory=int(getattr(self.grid, "local_memory", 0)),
            warp_size=self.warp_size,
            tensor_cores=self.tensor_cores,
            unsupported=self.unsupported,
            cache_sizes=self.cache_sizes,
        )

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
