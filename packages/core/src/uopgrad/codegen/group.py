"""Grouped reductions (codegen, layer 11): on grid-style backends with local memory, a workgroup's threads
split a big reduce, and their partial results are combined in local memory by a fixed tree.

A kernel qualifies when it stores once, has exactly one REDUCE, every range has a constant size, the reduce
is at least `MIN_REDUCE` elements long and the kernel has at most `MAX_OUTPUTS` outputs (more outputs keep
the grid busy one thread per output, as before). The REDUCE's ranges are flattened (row-major, so the flat
index runs in the sequential order) and split over `L` threads (`lidx0`, a power of two) by a layout from
the table `LAYOUTS` (spec/opt.md §4):

| reduce | thread `t` folds | why |
|---|---|---|
| ADD, integer MUL and MAX | `t, t+L, t+2L, ...` | neighbouring threads read neighbouring elements |
| float MAX | the same, then the exact fallback (`exact_max`) | the bits of the sequential order |

Every thread then stores its partial in `temp[t]`, and log2(L) steps, each after a barrier, compute
`temp'[t] = temp[t] OP temp[(t+s) % L]` (s = 1, 2, 4, ...; `temp'` the other half of a local array of 2L,
so no thread overwrites what another still reads). Where `t % 2s == 0` that is a pairwise tree that keeps
the partials in thread order, and only those entries are read again (the others are computed because a
per-step mask costs as much, and eight masks kept across barriers miscompile on PoCL 3.0). The order never
depends on timing. A float MAX result that is a zero or a NaN is reduced again by thread 0 in the
sequential order; `CHUNKED_MAX` instead gives each thread a contiguous chunk, folded in order, which is
bit-exact as it is (the sequential MAX is associative on bits: the first NaN wins, a tie the later value).
Thread 0 stores the result; the output axes become workgroups with one thread each (gpudims sees `lidx0`).
Float MUL reduces and float16/bfloat16/bool ones are not grouped.

`split_partials` is the other half, decided before scheduling: on a grid target a reduce of few outputs is
first split into `S` partials per output, each a kernel output of its own (uopgrad.split_reduce, two
kernels), so that the grid has at least `SPLIT_THREADS` threads' worth of outputs.
"""

from __future__ import annotations

from uopgrad._util import prod
from uopgrad.codegen.opt import OPT
from uopgrad.codegen.program import GridSpec
from uopgrad.codegen.reduce import exact_max, identity_element, renumber
from uopgrad.codegen.target import Target
from uopgrad.dtype import AddrSpace, DType, dtypes
from uopgrad.ops import Ops
from uopgrad.rewrite import PatternMatcher, UPat, graph_rewrite
from uopgrad.symbolic import sym
from uopgrad.uop import UOp

__all__ = [
    "LAYOUTS",
    "MAX_OUTPUTS",
    "MIN_CHUNK",
    "MIN_REDUCE",
    "SPLIT_FOLD",
    "SPLIT_MIN",
    "SPLIT_THREADS",
    "group_reduces",
    "group_size",
    "split_partials",
    "splits_nothing",
]

MIN_REDUCE = 256  # shorter reduces stay one loop per thread
MAX_OUTPUTS = 65536  # more outputs than this already fill the grid
MIN_CHUNK = 8  # elements each thread folds, at least
LOCAL_BYTES = 16384  # local memory the partials may take (OpenCL guarantees 32 KiB, CUDA 48 KiB)


def _grouped_dtype(dt: DType) -> bool:
    return dt.count == 1 and (dt in (dtypes.float32, dtypes.float64) or dtypes.is_int(dt))


# float MAX: contiguous chunks (bit-exact as they are) or interleaved, coalesced, with the exact fallback of
# the opt pass (a zero or NaN result is reduced again in the sequential order)
CHUNKED_MAX = False
# (reduce op, whether the dtype is a float) -> contiguous chunks (True) or interleaved elements (False);
# absent: not grouped (a float product would change its rounding in ways the policy does not allow)
LAYOUTS: dict[tuple[Ops, bool], bool] = {
    (Ops.ADD, True): False,
    (Ops.ADD, False): False,
    (Ops.MUL, False): False,
    (Ops.MAX, False): False,
    (Ops.MAX, True): CHUNKED_MAX,
}


def group_size(n: int, dt: DType, grid: GridSpec, local_memory: int) -> int:
    """Threads for a reduce of `n` elements of `dt`: the largest power of two within the grid's workgroup
    limits and the budget of `local_memory` bytes (two partials a thread) that leaves each thread at least
    `MIN_CHUNK` elements."""
    if not local_memory:
        return 1
    most = min(
        getattr(grid, "local_size", 128),
        grid.local_max[0],
        grid.local_prod_max,
        n // MIN_CHUNK,
        min(LOCAL_BYTES, local_memory) // (2 * dt.itemsize),
    )  # 2 halves
    return 1 << (most.bit_length() - 1) if most >= 2 else 1


# the outputs (times the workgroup's `local_size`) a split reduce's first kernel aims for: 32 workgroups
SPLIT_THREADS = 32
SPLIT_FOLD = 128  # elements each partial of a split reduce folds, at least
# shorter reduces stay one kernel: a second launch costs more than one thread folding this many (PoCL: ~50 us)
SPLIT_MIN = 65536


def splits_nothing(target: Target) -> bool:
    """Whether `split_partials` is 1 for every reduce on `target`: a loop-style one, or OPT=0."""
    return target.grid is None or not OPT


def split_partials(target: Target, n: int, outs: int, op: Ops, dt: DType) -> int:
    """Partials per output of a reduce of `n` elements into `outs` outputs of `op` on `dt` for `target`:
    the largest power of two that brings the outputs to `SPLIT_THREADS` workgroups of the grid's
    `local_size` and leaves each partial `SPLIT_FOLD` elements; 1 (no split) on loop-style targets, under
    OPT=0, for the reduces `LAYOUTS` leaves out, those under `SPLIT_MIN` elements and where the outputs are
    that many already."""
    if splits_nothing(target) or (op, dtypes.is_float(dt)) not in LAYOUTS or not _grouped_dtype(dt):
        return 1
    if n < SPLIT_MIN:
        return 1
    want = SPLIT_THREADS * int(getattr(target.grid, "local_size", 128))
    most = min(want // max(outs, 1), n // SPLIT_FOLD)
    return 1 << (most.bit_length() - 1) if most >= 2 else 1


def _idx(v: int) -> UOp:
    return UOp(Ops.CONST, dtypes.index, (), v)


def group_reduces(sink: UOp, grid: GridSpec, local_memory: int) -> UOp:
    """`sink` with its one REDUCE split over a workgroup of `grid` with `local_memory` bytes (see the module
    doc), or `sink` as it is."""
    nodes = sink.toposort()
    reds = [u for u in nodes if u.op is Ops.REDUCE]
    ranges = [u for u in nodes if u.op is Ops.RANGE]
    stores = [u for u in nodes if u.op is Ops.STORE]
    if (
        len(stores) != 1
        or len(reds) != 1
        or any(r.src[0].op is not Ops.CONST for r in ranges)
        or any(u.op in (Ops.SPECIAL, Ops.DEFINE_LOCAL) for u in nodes)
    ):  # a custom kernel's own threads
        return sink
    red = reds[0]
    op, dt, rr = red.arg, red.dtype, list(red.src[1:])
    chunked = LAYOUTS.get((op, dtypes.is_float(dt)))
    n = prod(int(r.src[0].arg) for r in rr)
    outs = prod(int(r.src[0].arg) for r in ranges if r not in rr)
    if chunked is None or not _grouped_dtype(dt) or n < MIN_REDUCE or outs > MAX_OUTPUTS:
        return sink
    size = group_size(n, dt, grid, local_memory)
    if size < 2:
        return sink
    lid = UOp(Ops.SPECIAL, dtypes.index, (_idx(size),), "lidx0")
    steps = -(-n // size)
    j = UOp(Ops.RANGE, dtypes.index, (_idx(steps),), (max(r.arg[0] for r in ranges) + 1, "reduce"))
    flat = lid * steps + j if chunked else j * size + lid
    mapping, inner = {}, 1
    for r in reversed(rr):
        q = flat // inner if inner != 1 else flat
        q = q % int(r.src[0].arg) if r is not rr[0] else q
        mapping[r] = graph_rewrite(q, sym, name="codegen: group index")
        inner *= int(r.src[0].arg)
    x = red.src[0].substitute(mapping)
    if steps * size != n:  # the last thread's chunk (or last step) runs past the end: gate it off
        valid = graph_rewrite(UOp(Ops.CMPLT, dtypes.bool, (flat, _idx(n))), sym, name="codegen: group gate")
        x = graph_rewrite(x, pm_gate_loads, ctx=valid, walk=True, name="codegen: group gate")
        ident = UOp(Ops.CONST, dt, (), identity_element(op, dt))
        x = UOp(Ops.WHERE, dt, (valid, x, ident))
    part = UOp(Ops.REDUCE, dt, (x, j), op)
    total = _tree(part, lid, size, op, dt)
    first = UOp(Ops.CMPEQ, dtypes.bool, (lid, _idx(0)))  # thread 0 alone stores the result
    if op is Ops.MAX and dtypes.is_float(dt) and not chunked:
        total = exact_max(red, total, first)
    store = stores[0].substitute({red: total})
    store = store.replace(
        src=(
            *store.src[:2],
            first if len(store.src) < 3 else UOp(Ops.AND, dtypes.bool, (store.src[2], first)),
        )
    )
    return renumber(sink.substitute({stores[0]: store}))


def _tree(part: UOp, lid: UOp, size: int, op: Ops, dt: DType) -> UOp:
    """The combined partials (one per thread), by the pairwise tree over two halves of `temp` in turn."""
    tile = UOp(Ops.DEFINE_LOCAL, dt.ptr(2 * size, AddrSpace.LOCAL), (), 0)
    done = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, tile.dtype, (tile, lid)), part))
    s, half = 1, 0
    while s < size:
        now = UOp(Ops.AFTER, tile.dtype, (tile, UOp(Ops.BARRIER, dtypes.void, (done,))))
        a = UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, tile.dtype, (now, lid + half)),))
        b = UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, tile.dtype, (now, (lid + s) % size + half)),))
        half = size - half
        out = UOp(Ops.INDEX, tile.dtype, (now, lid + half))
        done = UOp(Ops.STORE, dtypes.void, (out, UOp(op, dt, (a, b))))
        s *= 2
    now = UOp(Ops.AFTER, tile.dtype, (tile, UOp(Ops.BARRIER, dtypes.void, (done,))))
    return UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, tile.dtype, (now, _idx(half))),))


def _gated(x: UOp, gate: UOp) -> UOp:
    if len(x.src) > 1:
        return x.replace(src=(x.src[0], UOp(Ops.AND, dtypes.bool, (x.src[1], gate))))
    return x.replace(src=(x.src[0], gate))


# run once (walk): a thread past the end of the reduce loads nothing
pm_gate_loads = PatternMatcher(
    [
        (
            UPat(Ops.LOAD, src=(UPat(Ops.INDEX),), allow_any_len=True, name="x"),
            lambda ctx, x: _gated(x, ctx),
        ),  # load(i[, g]) -> load(i, g & in range)
    ]
)
