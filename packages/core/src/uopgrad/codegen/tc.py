"""Tensor cores (codegen, layer 11): a float16 or bfloat16 matmul kernel becomes WMMA ops, one warp per
output tile, on grid-style targets whose `tensor_cores` name a shape of `FRAGMENTS`.

A kernel qualifies when it is one STORE of `f(acc)` at an affine index in (i, j), where `acc` is a float32
ADD-REDUCE over one range k of the product of two ungated loads of one dtype of `INPUTS` (the product in
that dtype then cast, or the casts multiplied), one load's index affine in (i, k), the other's in (j, k),
and the output's loops read row-major as (i, j) with M, N, K multiples of the shape's. Any other kernel is
kept as it is. The kernel becomes one warp (`lidx0`, `WARP` threads) per output tile (the tile loops become
workgroups) and a loop over the K steps; per step, one WMMA per element of the lane's fragment of the tile
product `a[tile rows, step] @ b[step, tile cols]` (spec/opt.md §6 states its rounding), added to that
element's float32 accumulator. The elements of one lane share their sources, so the renderer issues one
hardware instruction for all of them. OPT=0 turns the pass off (pipeline.lower drops the shapes).
"""

from __future__ import annotations

from uopgrad._util import prod
from uopgrad.codegen.target import Target, TensorCoreShape
from uopgrad.dtype import dtypes
from uopgrad.ops import Ops
from uopgrad.uop import UOp

__all__ = ["FRAGMENTS", "INPUTS", "WARP", "WmmaArg", "fragment", "tensor_cores"]

WARP = 32  # threads of a warp: the lanes that share one tile
# a WMMA node's arg: (shape, element of the lane's fragment, a's row and k strides, b's k and column strides)
WmmaArg = tuple[TensorCoreShape, int, int, int, int, int]

# shape -> the output elements each lane holds (`fragment` says which): PTX's mma.m16n8k16, 16x8 per warp
FRAGMENTS: dict[TensorCoreShape, int] = {(16, 8, 16): 4}


def fragment(lane: UOp, e: int) -> tuple[UOp, UOp]:
    """(row, column) in the 16x8 output tile of element `e` of `lane`'s fragment: PTX's m16n8k16 accumulator
    layout, g = lane // 4 and t = lane % 4 holding rows g and g+8 of columns 2t and 2t+1."""
    g, t = lane // 4, lane % 4
    return g + 8 * (e >> 1), t * 2 + (e & 1)


def _idx(v: int) -> UOp:
    return UOp(Ops.CONST, dtypes.index, (), v)


def _affine(x: UOp) -> dict[UOp | None, int] | None:
    """`x` as {variable: coefficient, None: constant} if it is a sum of constant multiples of ranges."""
    if x.op is Ops.CONST and isinstance(x.arg, int):
        return {None: x.arg}
    if x.op is Ops.RANGE:
        return {x: 1}
    if x.op is Ops.ADD:
        a, b = _affine(x.src[0]), _affine(x.src[1])
        if a is None or b is None:
            return None
        return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}
    if x.op is Ops.MUL:
        a, b = _affine(x.src[0]), _affine(x.src[1])
        if a is None or b is None:
            return None
        if set(a) <= {None}:
            a, b = b, a
        if not set(b) <= {None}:
            return None
        return {k: v * b.get(None, 0) for k, v in a.items()}
    return None


# the input dtypes of the matrix units: 16-bit floats, products exact in float32
INPUTS = (dtypes.float16, dtypes.bfloat16)


def _input_load(x: UOp) -> UOp | None:
    """The ungated float16/bfloat16 LOAD of a buffer that `x` is, seen through a cast to float32."""
    if x.op is Ops.CAST and x.dtype == dtypes.float32:
        x = x.src[0]
    ok = x.op is Ops.LOAD and x.dtype in INPUTS and len(x.src) == 1 and x.src[0].op is Ops.INDEX
    return x if ok and x.src[0].src[0].op is Ops.PARAM else None


def _operands(red: UOp) -> tuple[UOp, UOp] | None:
    """The two loads of one 16-bit float dtype whose product the float32 ADD-REDUCE `red` sums."""
    v = red.src[0]
    if v.op is Ops.CAST and v.src[0].op is Ops.MUL and v.src[0].dtype in INPUTS:
        v = v.src[0]
    if v.op is not Ops.MUL:
        return None
    a, b = _input_load(v.src[0]), _input_load(v.src[1])
    return None if a is None or b is None or a.dtype != b.dtype else (a, b)


def _coeffs(x: UOp, allowed: set[UOp | None]) -> dict[UOp | None, int] | None:
    aff = _affine(x.simplify())
    return aff if aff is not None and set(aff) <= allowed else None


def tensor_cores(sink: UOp, target: Target) -> UOp:
    """`sink` (the index pass's SINK) with its matmul on tensor cores where it qualifies, else unchanged.
    The target must hold the input dtype: a renderer issues the instruction for the dtypes it has."""
    shapes = [s for s in target.tensor_cores if s in FRAGMENTS]
    if not shapes or target.grid is None or len(sink.src) != 1:
        return sink
    nodes = sink.toposort()
    stores = [u for u in nodes if u.op is Ops.STORE]
    reduces = [u for u in nodes if u.op is Ops.REDUCE]
    loops = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "loop"), key=lambda r: r.arg[0])
    if len(stores) != 1 or len(reduces) != 1 or not loops or any(u.op is Ops.SPECIAL for u in nodes):
        return sink
    store, red = stores[0], reduces[0]
    if len(store.src) != 2 or store.src[0].op is not Ops.INDEX or store.src[0].src[0].op is not Ops.PARAM:
        return sink
    if red.arg is not Ops.ADD or red.dtype != dtypes.float32 or len(red.src) != 2:
        return sink
    k, operands = red.src[1], _operands(red)
    if operands is None or (target.dtypes and operands[0].dtype not in target.dtypes):
        return sink
    if k.src[0].op is not Ops.CONST or any(r.src[0].op is not Ops.CONST for r in loops):
        return sink
    sizes = [int(r.src[0].arg) for r in loops]
    total, K = prod(sizes), int(k.src[0].arg)
    for shape in shapes:
        for n in (d for d in range(shape[1], total + 1, shape[1]) if total % d == 0):
            out = _rewrite(sink, store, red, k, operands, loops, sizes, shape, total // n, n, K)
            if out is not None:
                return out
    return sink


def _rewrite(
    sink: UOp,
    store: UOp,
    red: UOp,
    k: UOp,
    operands: tuple[UOp, UOp],
    loops: list[UOp],
    sizes: list[int],
    shape: TensorCoreShape,
    m: int,
    n: int,
    kk: int,
) -> UOp | None:
    """The kernel on tensor cores if its output loops read as an (m, n) matrix; None where they do not."""
    tm, tn, tk = shape
    if m % tm or n % tn or kk % tk:
        return None
    # the output loops as functions of fresh (i, j), row-major
    i = UOp(Ops.RANGE, dtypes.index, (_idx(m),), (-2, "loop"))
    j = UOp(Ops.RANGE, dtypes.index, (_idx(n),), (-1, "loop"))
    flat, inner, as_ij = i * n + j, 1, {}
    for r, size in reversed(list(zip(loops, sizes, strict=True))):
        q = flat // inner if inner != 1 else flat
        as_ij[r] = q % size if r is not loops[0] else q
        inner *= size
    a, b = operands
    a_off, b_off = (x.src[0].src[1].substitute(as_ij) for x in (a, b))
    ca, cb = _coeffs(a_off, {i, k, None}), _coeffs(b_off, {j, k, None})
    if ca is None or cb is None:  # perhaps the other way round
        a, b = b, a
        a_off, b_off = b_off, a_off
        ca, cb = _coeffs(a_off, {i, k, None}), _coeffs(b_off, {j, k, None})
    co = _coeffs(store.src[0].src[1].substitute(as_ij), {i, j, None})
    if ca is None or cb is None or co is None:
        return None
    # the new kernel: tile loops (i, j), one warp per tile, the K steps as a reduce loop
    ti = UOp(Ops.RANGE, dtypes.index, (_idx(m // tm),), (0, "loop"))
    tj = UOp(Ops.RANGE, dtypes.index, (_idx(n // tn),), (1, "loop"))
    step = UOp(Ops.RANGE, dtypes.index, (_idx(kk // tk),), (2, "reduce"))
    lane = UOp(Ops.SPECIAL, dtypes.index, (_idx(WARP),), "lidx0")

    def at(x: UOp, c: dict[UOp | None, int], first: UOp, second: UOp) -> UOp:
        return x.src[0].replace(src=(x.src[0].src[0], (_idx(c.get(None, 0)) + first + second).simplify()))

    a_ptr = at(a, ca, ti * (tm * ca.get(i, 0)), step * (tk * ca.get(k, 0)))
    b_ptr = at(b, cb, step * (tk * cb.get(k, 0)), tj * (tn * cb.get(j, 0)))
    strides = (ca.get(i, 0), ca.get(k, 0), cb.get(k, 0), cb.get(j, 0))
    hole = UOp(Ops.NOOP, dtypes.float32, (), "tc acc")  # where the reduce's value goes in the epilogue
    epilogue = store.src[1].substitute({red: hole}).substitute(as_ij)
    updates, stores = [], []
    for e in range(FRAGMENTS[shape]):
        acc = UOp(Ops.DEFINE_REG, dtypes.float32, (UOp(Ops.CONST, dtypes.float32, (), 0.0),), e)
        arg: WmmaArg = (shape, e, *strides)
        w = UOp(Ops.WMMA, dtypes.float32, (a_ptr, b_ptr, lane), arg)
        updates.append(UOp(Ops.STORE, dtypes.void, (acc, UOp(Ops.LOAD, dtypes.float32, (acc, step)) + w)))
        row, col = fragment(lane, e)
        ii, jj = ti * tm + row, tj * tn + col
        stores.append((acc, ii, jj))
    loop = UOp(Ops.END, dtypes.void, (step, *updates))
    outs = []
    for acc, ii, jj in stores:
        # simplified before the accumulator goes in: a 1-step loop must stay a RANGE, not fold to 0
        value = epilogue.substitute({i: ii, j: jj}).simplify()
        value = value.substitute({hole: UOp(Ops.LOAD, dtypes.float32, (acc, loop))})
        off = _idx(co.get(None, 0)) + ii * co.get(i, 0) + jj * co.get(j, 0)
        where = store.src[0].replace(src=(store.src[0].src[0], off.simplify()))
        outs.append(UOp(Ops.STORE, dtypes.void, (where, value)))
    body = UOp(Ops.END, dtypes.void, (tj, *outs))
    return sink.replace(src=(UOp(Ops.END, dtypes.void, (ti, body)),))
