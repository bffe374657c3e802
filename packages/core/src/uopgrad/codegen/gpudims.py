"""GPU launch dimensions (codegen, layer 11): output loops become grid indices on grid-style backends.

The output RANGEs of a kernel are mapped onto at most three hardware dimensions, the contiguous (innermost)
axis first, so it is x. Axes are grouped (outer ones merged first) into the fewest merges that fit the
dimensions' limits; when no grouping fits, the output is flattened and spread over x, y and z. Along x a
workgroup has `local_size` threads (128 by default) when that divides the axis, else the largest power of
two that does; when that would be a small workgroup the axis is padded up to it instead, and every load and
store is gated by the index being in bounds. Reduce ranges stay loops. Each hardware index is a SPECIAL:
`gidx<d>` (workgroup id) or `lidx<d>` (thread id in the workgroup).
"""

from __future__ import annotations

import itertools

from uopgrad._util import prod
from uopgrad.codegen.program import GridSpec
from uopgrad.dtype import dtypes
from uopgrad.errors import LoweringError
from uopgrad.ops import Ops
from uopgrad.rewrite import PatternMatcher, UPat, graph_rewrite
from uopgrad.symbolic import sym
from uopgrad.uop import UOp

__all__ = ["add_gpudims", "pm_grid_gate", "pm_grid_ranges"]

Dims = tuple[int, int, int]


def _special(name: str, size: int) -> UOp:
    return UOp(Ops.SPECIAL, dtypes.index, (UOp(Ops.CONST, dtypes.index, (), size),), name)


def _local_size(n: int, grid: GridSpec) -> tuple[int, bool]:
    """(threads per workgroup along x, whether the axis is padded up to a multiple of it)."""
    most = max(1, min(getattr(grid, "local_size", 128), grid.local_max[0], grid.local_prod_max))
    want = 1 << (most.bit_length() - 1)
    fit = want
    while n % fit:
        fit //= 2
    if fit >= min(32, want) or n <= fit:
        return fit, False
    return min(want, 1 << max(0, (n - 1).bit_length())), True


Plan = list[tuple[list[int], list[tuple[int, int, int]]]]


def _plan(sizes: list[int], grid: GridSpec, grouped: bool = False) -> Plan:
    """Groups of output axes (innermost first, as positions in `sizes`) with their hardware dims as
    (dim, workgroups, local size). The first grouping (fewest merges, outer axes merged first) in which
    every group fits its dimension wins; when none does, all axes are flattened and split over x, y, z.
    In a `grouped` kernel a workgroup's threads split the reduce, so every output is one workgroup."""
    order = list(range(len(sizes) - 1, -1, -1))  # innermost axis first: it becomes x
    for k in range(min(3, len(order)), 0, -1):
        for cuts in itertools.combinations(range(1, len(order)), k - 1):
            bounds = [0, *cuts, len(order)]
            plan: Plan = []
            for d in range(k):
                axes = order[bounds[d] : bounds[d + 1]]
                n = prod(sizes[a] for a in axes)
                local = _local_size(n, grid)[0] if d == 0 and not grouped else 1
                plan.append((axes, [(d, -(-n // local), local)]))
            if all(hw[0][1] <= grid.global_max[hw[0][0]] for _, hw in plan):
                return plan
    n = prod(sizes)
    local = 1 if grouped else _local_size(n, grid)[0]
    c0 = min(-(-n // local), grid.global_max[0])
    c1 = min(-(-n // (local * c0)), grid.global_max[1])
    c2 = -(-n // (local * c0 * c1))
    if c2 > grid.global_max[2]:
        raise LoweringError(f"an output of shape {sizes} does not fit a grid with limits {grid}")
    return [(order, [(0, c0, local), (1, c1, 1), (2, c2, 1)])]


def add_gpudims(sink: UOp, grid: GridSpec) -> tuple[UOp, Dims, Dims]:
    """Map the output loops of `sink` onto SPECIALs; returns the new sink, global size and local size. A
    kernel with several loop nests or a symbolic size keeps its loops and runs as a single thread. A
    kernel whose reduce is already split over `lidx0` threads (uopgrad.codegen.group) keeps them."""
    nodes = sink.toposort()
    lanes = next((int(u.src[0].arg) for u in nodes if u.op is Ops.SPECIAL and u.arg == "lidx0"), 1)
    loops = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "loop"), key=lambda r: r.arg[0])
    if not loops or len(sink.src) > 1 or any(r.src[0].op is not Ops.CONST for r in loops):
        return sink, (1, 1, 1), (lanes, 1, 1)
    sizes = [int(r.src[0].arg) for r in loops]
    global_size, local_size = [1, 1, 1], [1, 1, 1]
    mapping: dict[UOp, UOp] = {}
    valid: UOp | None = None
    for axes, hw in _plan(sizes, grid, lanes > 1):
        flat, stride, covered = UOp(Ops.CONST, dtypes.index, (), 0), 1, 1
        for d, count, local in hw:
            global_size[d], local_size[d] = count, local
            idx = _special(f"gidx{d}", count)
            if local > 1:
                idx = idx * local + _special(f"lidx{d}", local)
            flat, stride, covered = flat + idx * stride, stride * count * local, covered * count * local
        n = prod(sizes[a] for a in axes)
        if covered != n:
            cond = UOp(Ops.CMPLT, dtypes.bool, (flat, UOp(Ops.CONST, dtypes.index, (), n)))
            valid = cond if valid is None else UOp(Ops.AND, dtypes.bool, (valid, cond))
        inner = 1
        for k, a in enumerate(axes):
            q = flat // inner if inner != 1 else flat
            q = q if k == len(axes) - 1 else q % sizes[a]
            mapping[loops[a]] = graph_rewrite(q, sym, name="codegen: grid index")
            inner *= sizes[a]
    sink = graph_rewrite(sink, pm_grid_ranges, ctx=mapping, name="codegen: gpudims")
    if valid is not None:
        gate = graph_rewrite(valid, sym, name="codegen: grid gate")
        sink = graph_rewrite(sink, pm_grid_gate, ctx=gate, walk=True, name="codegen: grid gate")
    g, loc = global_size, local_size
    loc[0] *= lanes
    return sink, (g[0], g[1], g[2]), (loc[0], loc[1], loc[2])


def _gated(x: UOp, gate: UOp, at: int) -> UOp:
    """`x` with `gate` and-ed into its gate source (at position `at`), or added as one."""
    if len(x.src) > at:
        return x.replace(src=(*x.src[:at], UOp(Ops.AND, dtypes.bool, (x.src[at], gate))))
    return x.replace(src=(*x.src, gate))


def _group(bodies: tuple[UOp, ...]) -> UOp:
    return UOp(Ops.GROUP, dtypes.void, bodies)


pm_grid_ranges = PatternMatcher(
    [
        (UPat(Ops.RANGE, name="r"), lambda ctx, r: ctx.get(r)),  # an output loop -> its grid index
        (
            UPat(Ops.END, src=(UPat.var("i"),), allow_any_len=True, name="e"),
            lambda i, e: None if i.op is Ops.RANGE else e.src[1] if len(e.src) == 2 else _group(e.src[1:]),
        ),  # END(grid index, body) -> body; END(grid index, *bodies) (the opt pass's tile) -> GROUP
    ]
)

# run once (walk): an out-of-bounds thread of a padded grid neither loads nor stores
pm_grid_gate = PatternMatcher(
    [
        (
            UPat(Ops.LOAD, src=(UPat(Ops.INDEX),), allow_any_len=True, name="x"),
            lambda ctx, x: _gated(x, ctx, 1),
        ),  # load(i[, g]) -> load(i, g & in bounds)
        (
            UPat(Ops.STORE, src=(UPat(Ops.INDEX), UPat()), allow_any_len=True, name="x"),
            lambda ctx, x: _gated(x, ctx, 2),
        ),  # store(i, v[, g]) -> store(i, v, g & in bounds)
    ]
)
