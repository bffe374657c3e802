"""The target of a kernel (codegen, layer 11): `Target`, the one record of what a backend can run and what
codegen lowers for.

A renderer builds it (`Renderer.target(dtypes)`), a compiled backend keeps it as its `capabilities`, the
pass driver's `lower(kernel, target, choice)` reads it and caches programs by it (the record is frozen and
hashable), and the conformance suite derives its cases from it. It sits in codegen, below the driver and the
renderers that both use it (docs/ARCHITECTURE.md §2).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from uopgrad.codegen.program import GridSpec
from uopgrad.dtype import DType
from uopgrad.ops import Ops

__all__ = ["Target", "TensorCoreShape"]

# (M, N, K) of one matrix-multiply-accumulate instruction: an M x K by K x N product per step
TensorCoreShape = tuple[int, int, int]


@dataclass(frozen=True)
class Target:
    """What a backend runs and codegen lowers for. The first five fields keep the order of the former
    `uopgrad.backend.Capabilities(dtypes, ops, grid, compiled, vector_width)`, an alias of this class."""

    dtypes: frozenset[DType]  # dtypes its buffers hold and its kernels compute
    ops: frozenset[Ops]  # ALU ops rendered natively; codegen decomposes the others
    grid: GridSpec | None = None  # None: loop-style; else grid-style with these launch limits
    compiled: bool = True  # generates and compiles code (False for REFERENCE)
    vector_width: int = 0  # bytes of a vector register codegen may use; 0: no opt pass
    scratch: int = 0  # bytes of thread-private memory a loop nest may declare
    local_memory: int = 0  # bytes of local memory a workgroup has; 0: reduces are not grouped
    warp_size: int = 1  # threads that run in lockstep (a warp, a subgroup); 1: none or unknown
    tensor_cores: tuple[TensorCoreShape, ...] = ()  # matrix-unit shapes (the tc pass uses those it knows)
    # (op, dtype) pairs of `ops` that are NOT rendered natively for that operand dtype (say, MAX on float16):
    # codegen decomposes them as it does an op outside `ops`; the kit skips them (`supports`)
    unsupported: frozenset[tuple[Ops, DType]] = frozenset()
    # bytes of one core's (L1d, L2, L3) data caches, read from the host (0: a level it lacks); () unknown: the
    # opt pass derives its packing threshold from the L2 and keeps its measured default without one
    cache_sizes: tuple[int, ...] = ()

    def canonical(self) -> tuple[tuple[str, object], ...]:
        """Every field as (name, value) with its sets sorted: the same text in every process (a frozenset's
        order follows string hashing, which differs per process), for keys kept on disk."""

        def plain(v: object) -> object:
            return sorted(map(str, v)) if isinstance(v, frozenset) else v

        return tuple((f.name, plain(getattr(self, f.name))) for f in fields(self))

    def supports(self, op: Ops, dtype: DType) -> bool:
        """Whether `op` on operands of `dtype` (WHERE: on values of it; a vector: on its lanes) is rendered
        natively; codegen decomposes the ops for which it is not."""
        return op in self.ops and (op, dtype.scalar()) not in self.unsupported

    @property
    def loop_style(self) -> bool:
        """True when output dimensions are loops, not grid indices."""
        return self.grid is None

    @property
    def max_local_size(self) -> tuple[int, ...] | None:
        """Per-dimension maximum of the local (workgroup) size, None for loop-style backends."""
        return None if self.grid is None else self.grid.local_max

    @staticmethod
    def for_ops(
        ops: frozenset[Ops], grid: GridSpec | None = None, vector_width: int = 0, scratch: int = 0
    ) -> Target:
        """A target for lowering only (no dtypes claimed): the ALU ops `ops`, `grid` (its optional
        `local_memory` becomes the target's), `vector_width` and `scratch`, as `lower` took them before."""
        return Target(
            frozenset(),
            ops,
            grid,
            vector_width=vector_width,
            scratch=scratch,
            local_memory=int(getattr(grid, "local_memory", 0)),
        )
