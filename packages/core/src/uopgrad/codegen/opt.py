"""The optimisation pass (codegen, layer 11): between index and reduce, loop nests become vector code.

Two transformations, both built from one split primitive, `r -> r_outer*amt + lane` (`split`), and the
packer of `codegen/pack.py`, which turns `amt` lane-wise copies of a value into one vector value:

- UPCAST an output axis into vector lanes (`_upcast`): the stride-1 output axis of a nest is split; every
  lane computes exactly the ops of the unoptimised kernel, in the same order, so the result is
  bit-identical (spec/opt.md). Loads that are stride-1 across the lanes become vector loads, loads the
  lanes share are broadcast, the store is a vector store.
- UNROLL a reduce axis into a vector accumulator (`_unroll`): where the innermost reduce axis is stride-1
  in every load and the policy allows reordering (ADD, integer MUL and MAX), the accumulator holds `amt`
  partial results in up to ACCS independent accumulators (no latency-bound chain of dependent ops),
  combined at the end lane-wise and then by a fixed pairwise lane tree. The order depends only on the
  kernel, never on the thread count. A float MAX is unrolled too and then made exact (`exact_max`): where
  the lanes' result is a zero or a NaN, the output is reduced again in the sequential order.
- PACK the right operand's panel of an upcast tile (`_pack`) into thread-private scratch, once per column
  tile, where the renderer offers scratch memory: a copy, so bit-identical too.

The pass only runs where the target's `vector_width` (bytes) is non-zero and OPT is not 0. The heuristic is
cheap: a flat output range read as r // c and r % c is first split in two (output ranges stay
multi-dimensional; a float MAX's nest, whose exact fallback needs the flat range, is not split for the
unroll path); then unroll a reduce whose axis is stride-1 (and tile up to 2 x 2 outputs of a dot-product
matmul), else upcast a stride-1 output axis of a reducing nest into a register tile of up to ROWS rows
by one cache line of vectors with 64-byte vectors (the rows on the axis outside the lanes, the columns on
the lanes' own axis), NARROW_ROWS by NARROW_COLS vectors with narrower ones, whose register file may be half
as large (`rows`, `columns`), the column loop outside the row loop (a column reduce, which shares no load
along either axis, a tile of STREAM_BYTES of columns alone); a nest without a reduce has its
stride-1 output axis upcast on a loop-style target (`_elementwise`: GCC does not vectorise it at -O1 with
-fwrapv) and is left to the grid on a grid target. A transformation that would leave a gather (lanes
loaded one by one) is not made. `Choice` is the tile shape: the heuristic's by default, BEAM's pick
(uopgrad.search).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from uopgrad.codegen.pack import (
    VECTOR_DTYPES,
    Lanes,
    Packer,
    consecutive,
    gather_free,
    lane_tree,
    lanes_for,
    lanewise_ops,
    simplify_index,
    split,
    stride,
)
from uopgrad.codegen.reduce import exact_max, renumber
from uopgrad.config import ContextVar
from uopgrad.dtype import AddrSpace, DType, dtypes
from uopgrad.ops import Ops
from uopgrad.uop import UOp

__all__ = [
    "ACCS",
    "ACCS_DEFAULT",
    "GRID_LANES",
    "GRID_BIG",
    "GRID_MIN_ITEMS",
    "LANEWISE_OPS",
    "LINE",
    "NARROW_ROWS",
    "OPT",
    "ROWS",
    "VECTOR_DTYPES",
    "Choice",
    "choices",
    "columns",
    "heuristic",
    "optimize",
    "split",
]

# OPT=0 turns the pass off (the unoptimised kernel of spec/opt.md); 1, the default, is the heuristic
OPT = ContextVar("OPT", 1)

# a register tile of the upcast path: ROWS rows of one cache line of columns (MR x 64 bytes), the columns'
# panel of the right operand read one line per reduce step. The rows share that line's load; 64-byte vectors
# (AVX-512) come with 32 registers: 8 rows of one vector (8 accumulators, 8 broadcasts) leave room. Two
# lines per step (8 x 2 vectors) measured slower at 512^3 on a Zen 4 (2 cores, 32 KB L1d, 1 MB L2), the
# kernel alone, columns outside rows: 1.77 against 1.29 ms (numpy: 1.32). Blocking the reduce so that the
# panel fits L1 or L2 did not help 8 x 2, so it is not the panel's size.
# A file of 16 registers (AVX2, SSE) holds 8 accumulators too, as NARROW_ROWS rows of NARROW_COLS vectors:
# GCC reads a panel vector as a memory operand of each multiply that uses it (one load per row and vector)
# and a broadcast per row, so 2 x 4 issues 10 loads per reduce step where 4 x 2 issues 12, for the same 8
# multiplies and 8 adds. Measured on a Zen 3 (AVX2, 2 cores, 32 KB L1d, 512 KB L2), panels packed, best of
# 180 launches interleaved: 512^3 1.82 ms with 2 x 4, 2.13 with 4 x 2, 2.52 with 4 x 4 (16 accumulators
# spill), 3.76 with 1 x 8; the three matmuls of a 64 x 256 @ 256 x 256 training step 63/70/68 us against
# 71/76/74 with 4 x 2. (8 x 2 spills: 3.6 ms against 2.8 with 4 x 2 on one core of a Zen 5.)
ROWS = 8
NARROW_ROWS = 2
NARROW_COLS = 4
LINE = 64  # bytes of the right operand's panel per reduce step: one cache line
# the most scalar ops a transformed nest may compute lane by lane (ops without a vector form, `pack.py`): one
# such op in every lane of an 8-row tile of 16 lanes (the POW of d(x**2) after a matmul). A tanh epilogue
# (EXP2) in that tile made 741 lines, compiled in 164 ms against 59 ms for the scalar kernel.
LANEWISE_OPS = 128


def registers(width: int) -> int:
    """The vector registers that vectors of `width` bytes imply: 32 with 64-byte ones (AVX-512's zmm0-31),
    16 with narrower ones (AVX2's and SSE's ymm/xmm0-15; NEON has 32, counted as 16 to stay safe)."""
    return 32 if width >= 64 else 16


def rows(width: int) -> int:
    """The rows of the heuristic's register tile: 8 with 32 registers (AVX-512), 2 with 16 (AVX2, SSE), so
    that the tile holds 8 accumulators beside the rows' broadcasts and the panel's loads in either file."""
    return ROWS if registers(width) >= 32 else NARROW_ROWS


def columns(width: int) -> int:
    """The vectors of a register tile's row: one cache line's worth with 32 registers (1 with AVX-512),
    NARROW_COLS with 16 (AVX2: two lines; SSE: one)."""
    if width <= 0:
        return 1
    return max(1, LINE // width) if registers(width) >= 32 else NARROW_COLS


# PACK: the row loop of a register tile must run at least this often over one column tile for the copy of
# the right operand's panel into a contiguous scratch array (`_pack`) to be worth its one pass over it
PACK_MIN_ROWS = 4
# ... over at least this many rows of outputs: x @ W.T with 8 rows of x (a gathered panel, 4 tiles of 2 rows
# with AVX2) measured 21 us packed against 17 us as a dot tile; with 16 rows, 27 against 28 (Zen 3)
PACK_MIN_OUTPUT_ROWS = 16
# ... and a panel of vector loads (not a gather) must span this many bytes of its operand. The panel is a
# column of cache lines one operand row apart: with a row of a power-of-two size, its lines fall into a few
# sets of the L1d, which then hold a fraction of them, and the rows' tiles read them again from L2. Below
# half the L1d the panel stays there whatever its stride, and the copy is a cost. Measured on a Zen 3 (32
# KB L1d, 512 KB L2), best of 180 launches interleaved, 2 x 4 tile: the weight gradient x.T @ g of a
# training step (a 64 KB span: 64 rows 1 KB apart) 68 us packed against 103 unpacked (4 x 2: 74 against
# 91); 64x256 @ 256x256 (256 KB) 63 against 82; 512^3 (1 MB) 1.82 ms against 2.97. An L2-sized threshold
# (half the L2, as before) left the first unpacked.
# PACK_MIN_SPAN is the default where the target states no cache sizes (half a 32 KB L1d); where it does,
# half its own L1d (`pack_min_span`)
PACK_MIN_SPAN = 16 * 1024
NEVER_PACK = 1 << 62  # a `Choice.pack_span` no operand reaches


def pack_min_span(cache_sizes: tuple[int, ...] = ()) -> int:
    """The span of its operand (bytes) from which a panel of vector loads is packed: half the target's L1d
    (the first of `Target.cache_sizes`), PACK_MIN_SPAN where it states none."""
    return cache_sizes[0] // 2 if cache_sizes and cache_sizes[0] > 0 else PACK_MIN_SPAN


# a column reduce (every load streams along the output's stride-1 axis, none is shared: `x.sum(axis=0)`)
# gets a tile of STREAM_BYTES along that axis (two cache lines: 4 AVX2 vectors, 2 AVX-512 ones):
# independent accumulators, and whole cache lines of each row it steps over, at least STREAM_MIN_ITEMS
# output iterations left for the cores. Measured on a Zen 3 (AVX2, 2 cores), float32, medians of 7,
# ours/numpy before -> after: sum(axis=0) of 4096x1024 2.38-3.25 -> 1.44-2.38, of 1024x4096 1.78-2.01 ->
# 1.24-1.59, of 16384x256 1.34-1.65 -> 0.87-1.06
STREAM_BYTES = 128
STREAM_MIN_ITEMS = 8

# the most nodes of an elementwise nest that the pass vectorises (`_elementwise`): an SGD or Adam update is
# tens; a chain of hundreds of ops is left to run scalar
ELEMENTWISE_NODES = 256

# the most lanes of a vector on a grid target: OpenCL C's widest vector types (float16, char16)
GRID_LANES = 16
# the fewest work-items a big kernel on a grid target keeps where its outputs allow: lanes and tile rows
# take work-items from the launch, so past this floor a tile gets fewer rows, then fewer lanes; a nest of
# fewer than GRID_BIG iterations in all is left its full tile (its launch is short) (spec/opt.md §5)
GRID_MIN_ITEMS = 256
GRID_BIG = 65536

# the outputs of a tile of the unroll path (a dot-product matmul) along each of the last two axes
DOT_TILE = 2
# independent vector accumulators of an unrolled reduce, by vector width (bytes): one accumulator is a
# chain of dependent adds (or MAX selects) bound by their latency; measured on a Zen 5 (AVX-512), a row
# MAX over 4096x1024 took 0.91 ms with one, 0.59 with two and 0.52 with four. Four where the register file
# has 32 vector registers (AVX-512), two where it may have 16 (AVX2, SSE), so that a 2 x 2 dot tile of
# them still fits. It depends on the width alone, never on the tile shape: every BEAM choice keeps the
# same order (spec/opt.md)
ACCS = {64: 4}
ACCS_DEFAULT = 2


@dataclass(frozen=True)
class Choice:
    """The shape of the register tiles: `rows` x `cols` (vectors) in the upcast path, the column loop
    outside the row loop (`swap`), `dot_rows` x `dot_cols` outputs in the unroll path, the panel packed
    from an operand span of `pack_span` bytes (half the target's L1d). Every choice gives
    the same values: tiles copy the stores, each output's reduce keeps its order (spec/opt.md). The
    default is the heuristic; BEAM searches the others (uopgrad.search)."""

    rows: int = ROWS
    cols: int = 1
    swap: bool = True
    dot_rows: int = DOT_TILE
    dot_cols: int = DOT_TILE
    pack_span: int = PACK_MIN_SPAN  # bytes of its operand from which a panel of vector loads is packed


def heuristic(width: int, cache_sizes: tuple[int, ...] = ()) -> Choice:
    """The heuristic's tile shape for vectors of `width` bytes (the register file it implies: `rows` by
    `columns`) on a target with `cache_sizes` (L1d, L2, L3 bytes; () unknown: the packing
    threshold's default). Only `pack_span` depends on the caches: it copies, so it never changes a value."""
    return Choice(rows=rows(width), cols=columns(width), pack_span=pack_min_span(cache_sizes))


def choices(width: int = 64, cache_sizes: tuple[int, ...] = ()) -> list[Choice]:
    """The tile shapes BEAM times, the heuristic's for `width` and `cache_sizes` first, then its tile with
    the panel always and never packed (a copy: the threshold is a guess from the L1d, which BEAM checks); the
    others pack by the heuristic's threshold."""
    base = heuristic(width, cache_sizes)
    out = [base, replace(base, pack_span=0), replace(base, pack_span=NEVER_PACK)]
    for r, cols, swap in itertools.product((1, 2, 4, 8), (1, 2, 4), (False, True)):
        out.append(Choice(r, cols, swap, pack_span=base.pack_span))
    for dr, dc in itertools.product((1, 2, 4), (1, 2, 4)):
        out.append(Choice(dot_rows=dr, dot_cols=dc, pack_span=base.pack_span))
    return list(dict.fromkeys(out))


def _reorderable(red: UOp) -> bool:
    """Whether the policy (spec/opt.md) lets a reduce take lanes in any order and combine them: ADD, and
    integer MUL and MAX (exact in any order). A float MAX may too, with `exact_max` after it."""
    return red.arg in (Ops.ADD, Ops.MAX) or (red.arg is Ops.MUL and dtypes.is_int(red.dtype))


def _unroll(red: UOp, width: int, ops: frozenset[Ops] | None, lanes: int = 0) -> UOp | None:
    """REDUCE(x, ..., r), r stride-1 in every load of x that uses it -> a vector accumulator over r/amt
    and a lane tree (for a float MAX, with its exact fallback); None where it does not apply."""
    r = red.src[-1]
    if not _reorderable(red) or r.src[0].op is not Ops.CONST or (ops is not None and red.arg not in ops):
        return None
    amt = lanes_for(red.dtype, width, r.src[0].arg, lanes)
    if not amt:
        return None
    outer, exprs = split(r, amt)
    p = Packer(amt, ops)
    v = p.pack(Lanes(red.src[0], r, exprs).all(red.src[0]))
    if not p.clean(v):
        return None
    float_max = red.arg is Ops.MAX and dtypes.is_float(red.dtype)
    fast = lane_tree(_accumulators(red, v, outer, ACCS.get(width, ACCS_DEFAULT)), red.arg, amt, float_max)
    return exact_max(red, fast) if float_max else fast


def _accumulators(red: UOp, v: UOp, outer: UOp, accs: int) -> UOp:
    """The vector reduce of `v` over `outer` (and red's other ranges) as `accs` (or fewer, a power of two
    that divides the trip count) independent accumulators, accumulator k taking the steps k, k+accs, ...
    of `outer`, combined lane-wise pairwise at the end ((a0+a1)+(a2+a3)): a fixed order, and no chain of
    dependent ops longer than a trip count / accs."""
    n = int(outer.src[0].arg)
    while accs > 1 and n % accs != 0:
        accs //= 2
    vt, rest = v.dtype, red.src[1:-1]
    if accs < 2:
        return UOp(Ops.REDUCE, vt, (v, *rest, outer), red.arg)
    step, exprs = split(outer, accs)
    lanes = Lanes(v, outer, exprs)
    xs = [UOp(Ops.REDUCE, vt, (lanes.lane(v, k), *rest, step), red.arg) for k in range(accs)]
    while len(xs) > 1:
        xs = [UOp(red.arg, vt, (a, b)) for a, b in zip(xs[::2], xs[1::2])]
    return xs[0]


def _upcast(
    store: UOp, r: UOp, width: int, ops: frozenset[Ops] | None, gathers: bool = False, most: int = 0
) -> tuple[UOp, UOp] | None:
    """STORE(INDEX(p, off), v), off stride-1 in output range r -> (a vector store, r_outer); with `gathers`,
    the value may gather lanes (for `_pack` to move out of the reduce)."""
    if len(store.src) != 2 or store.src[0].op is not Ops.INDEX or r.src[0].op is not Ops.CONST:
        return None
    amt = lanes_for(store.src[1].dtype, width, r.src[0].arg, most)
    if not amt:
        return None
    outer, exprs = split(r, amt)
    lanes, p = Lanes(store, r, exprs), Packer(amt, ops)
    target = lanes.all(store.src[0])
    if not consecutive(target):
        return None
    vec = p.pack(lanes.all(store.src[1]))
    if not gathers and not p.clean(vec):
        return None
    return UOp(Ops.STORE, dtypes.void, (target[0], vec)), outer


def _nest(node: UOp) -> tuple[list[UOp], UOp] | None:
    """END(r0, END(r1, ... STORE)) of output loops -> ([r0, r1, ...], STORE); None for other shapes."""
    ranges: list[UOp] = []
    while node.op is Ops.END and len(node.src) == 2 and node.src[0].arg[1] == "loop":
        ranges.append(node.src[0])
        node = node.src[1]
    return (ranges, node) if node.op is Ops.STORE and ranges else None


def _index_nodes(u: UOp) -> list[UOp]:
    """The index expressions under `u` that a non-index node reads (where a range substitution goes)."""
    return [s for x in u.toposort() if x.dtype != dtypes.index for s in x.src if s.dtype == dtypes.index]


def _substitute_index(u: UOp, sub: dict[UOp, UOp]) -> UOp:
    """`u` with `sub` applied (outermost first) to each index expression, simplified."""
    exprs = {e: simplify_index(e.substitute(sub, walk=True)) for e in _index_nodes(u)}
    return u.substitute({k: v for k, v in exprs.items() if k is not v}, walk=True)


def _unflatten(ranges: list[UOp], store: UOp) -> tuple[list[UOp], UOp]:
    """Keep output ranges multi-dimensional: a flat innermost range r that the kernel reads as r // c and
    r % c becomes two ranges, r = outer*c + inner (the split primitive with a loop as the inner part)."""
    r = ranges[-1]
    if r.src[0].op is not Ops.CONST:
        return ranges, store
    divs = {
        int(d.src[1].arg)
        for d in store.toposort()
        if d.op in (Ops.FLOORDIV, Ops.FLOORMOD)
        and d.src[0] is r
        and d.src[1].op is Ops.CONST
        and isinstance(d.src[1].arg, int)
        and d.src[1].arg > 1
    }
    n = int(r.src[0].arg)
    if len(divs) != 1 or n % (c := divs.pop()) != 0:
        return ranges, store
    ci = UOp(Ops.CONST, r.dtype, (), c)
    outer = UOp(Ops.RANGE, r.dtype, (UOp(Ops.CONST, r.dtype, (), n // c),), r.arg)
    inner = UOp(Ops.RANGE, r.dtype, (ci,), (r.arg[0] + 0.5, "loop"))  # numbered by `renumber`
    sub = {r // ci: outer, r % ci: inner, r: outer * ci + inner}
    return [*ranges[:-1], outer, inner], _substitute_index(store, sub)


def _tile(
    ranges: list[UOp], stores: tuple[UOp, ...], axis: int, amt: int, streams: bool = False
) -> tuple[list[UOp], tuple[UOp, ...]]:
    """UPCAST output range `ranges[axis]` into `amt` copies of the stores (or fewer, a power of two that
    divides it), where some load of the value does not depend on it (an input broadcast along it, whose
    one load every copy reuses) or, with `streams`, only where none does; the copies' reduces share their
    loops (several accumulators in one loop nest: the rows and columns of a register tile)."""
    if len(ranges) < (-axis if axis < 0 else axis + 1):
        return ranges, stores
    r = ranges[axis]
    if r.src[0].op is not Ops.CONST:
        return ranges, stores
    while amt > 1 and int(r.src[0].arg) % amt != 0:
        amt //= 2
    if amt < 2:
        return ranges, stores
    nodes = [u for st in stores for u in st.toposort()]
    loads = [u for u in nodes if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]
    # a loop whose bound depends on r (an exact MAX's redo) would be copied while the loops inside it are not
    alone = all(r in ld.toposort() for ld in loads)  # no load the copies could share
    if alone != streams or any(u.op is Ops.RANGE and r in u.toposort() for u in nodes if u is not r):
        return ranges, stores
    outer, exprs = split(r, amt)
    out: list[UOp] = []
    for st in stores:
        lanes = Lanes(st, r, exprs)
        out.extend(lanes.all(st))
    new = list(ranges)
    new[axis] = outer
    return new, tuple(out)


def _stream_cols(flat: list[UOp], width: int) -> int:
    """The vectors of a column reduce's tile (`_upcast_nest`): STREAM_BYTES of them, or fewer where the
    output loops would keep fewer than STREAM_MIN_ITEMS iterations to share among the cores."""
    cols, items = max(1, STREAM_BYTES // width), 1
    for r in flat:
        items *= int(r.src[0].arg) if r.src[0].op is Ops.CONST else STREAM_MIN_ITEMS
    while cols > 1 and items // cols < STREAM_MIN_ITEMS:
        cols //= 2
    return cols


def _optimize_nest(
    effect: UOp,
    width: int,
    ops: frozenset[Ops] | None,
    choice: Choice,
    scratch: int = 0,
    nest: int = 0,
    lanes: int = 0,
) -> UOp:
    """The nest transformed by `choice`; where that computes more than LANEWISE_OPS ops lane by lane (every
    tile copy and lane of an op without a vector form is a scalar op in the source, which the C compiler
    pays for), by a tile of one row or output instead; where that still does, left as it is."""
    one = replace(choice, rows=1, cols=1, dot_rows=1, dot_cols=1)
    floor = _floor(effect) if lanes > 0 else 0  # a grid target's work-items
    for c in (choice, one):
        out = _transform_nest(effect, width, ops, c, scratch, nest, lanes)
        if lanewise_ops(out) > LANEWISE_OPS:
            continue
        # a tile of one row that leaves too few work-items: fewer lanes (an upcast's lanes are copies)
        while _items(out) < floor and lanes > 2 and c is one:
            lanes //= 2
            out = _transform_nest(effect, width, ops, one, scratch, nest, lanes)
        if _items(out) >= floor:
            return out
    return effect


def _floor(effect: UOp) -> int:
    """The work-items a grid target's nest keeps: GRID_MIN_ITEMS where it has that many outputs and runs
    GRID_BIG iterations in all, else none."""
    items = _items(effect)
    if items < GRID_MIN_ITEMS:
        return 0
    longest = 1  # the most iterations one output's reduce runs
    for red in (u for u in effect.toposort() if u.op is Ops.REDUCE):
        n = 1
        for r in red.src[1:]:
            n *= int(r.src[0].arg) if r.op is Ops.RANGE and r.src[0].op is Ops.CONST else GRID_BIG
        longest = max(longest, n)
    return GRID_MIN_ITEMS if items * longest >= GRID_BIG else 0


def _items(effect: UOp) -> int:
    """The iterations of a nest's output loops: a grid target's work-items once `gpudims` has run."""
    n, node = 1, effect
    while node.op is Ops.END and node.src[0].op is Ops.RANGE and node.src[0].arg[1] == "loop":
        bound = node.src[0].src[0]
        n *= int(bound.arg) if bound.op is Ops.CONST else GRID_MIN_ITEMS  # a symbolic size: plenty
        if len(node.src) != 2:  # the stores of a tile
            break
        node = node.src[1]
    return n


def _transform_nest(
    effect: UOp, width: int, ops: frozenset[Ops] | None, choice: Choice, scratch: int, nest: int, lanes: int
) -> UOp:
    found = _nest(effect)
    if found is None:
        return _full_reduce(effect, width, ops) if lanes == 0 else effect
    ranges, store = found
    reduces = [u for u in store.toposort() if u.op is Ops.REDUCE]
    if not reduces:
        return _elementwise(ranges, store, width, ops) if lanes == 0 else effect
    # unroll first: a reduce whose innermost axis is stride-1 gets a vector accumulator
    sub = {red: new for red in reduces if (new := _unroll(red, width, ops, lanes)) is not None}
    if sub and not any(red.arg is Ops.MAX and dtypes.is_float(red.dtype) for red in sub):
        # a flat output range read as r // c, r % c: two ranges, so that the tile below can be made (a float
        # MAX is left flat: its exact fallback's loop does not nest in split ranges)
        flat_store = store
        ranges, store = _unflatten(ranges, store)
        if store is not flat_store:  # the reduces read the split ranges now
            sub = {
                red: new
                for red in store.toposort()
                if red.op is Ops.REDUCE and (new := _unroll(red, width, ops, lanes)) is not None
            }
    if sub:
        # a dot-product matmul (both operands stride-1 along the reduce) with scratch: its right operand's
        # panel gathered into scratch once per column tile, then the upcast tile of the plain matmul. Whether
        # it takes that path (each output's reduce in its own order) or the dot tile below (the reduce
        # reordered) is the heuristic's tile's decision, so that no tile BEAM tries changes a value
        base = replace(heuristic(width), pack_span=choice.pack_span)  # by the width alone (and the packing)
        out = (
            _upcast_nest(ranges, store, width, ops, base, scratch, nest, True, lanes) if scratch > 0 else None
        )
        if out is not None:
            if choice != base:  # the searched tile, where it makes the same path (a gather-free tile)
                tried = _upcast_nest(ranges, store, width, ops, choice, scratch, nest, True, lanes)
                out = out if tried is None else tried
            return out
        # else a tile of outputs: each row's and each column's vector loads shared by the other's accumulators
        ranges, stores = _tile(ranges, (store.substitute(sub),), -1, choice.dot_cols)
        ranges, stores = _tile(ranges, stores, -2, choice.dot_rows)
        return _ends(ranges, stores)
    ranges, store = _unflatten(ranges, store)  # a flat output range read as r // c, r % c: two ranges
    out = _upcast_nest(ranges, store, width, ops, choice, scratch, nest, False, lanes)
    if out is None and scratch > 0:  # a panel that only a gather reads, gathered once into scratch
        out = _upcast_nest(ranges, store, width, ops, choice, scratch, nest, True, lanes)
    return effect if out is None else out


def _full_reduce(effect: UOp, width: int, ops: frozenset[Ops] | None) -> UOp:
    """A STORE of reduces with no output loop (a loss's mean, `x.sum()` below the split's size) on a
    loop-style target: each reduce unrolled as in a nest (its stride-1 innermost axis as the lanes of vector
    accumulators). Its one output has no loop to upcast or tile, so the unroll is all there is: the MLP
    step's loss, 64 x 256 squared differences, took 38 us as a scalar chain of dependent adds."""
    if effect.op is not Ops.STORE:
        return effect
    sub = {
        red: new
        for red in effect.toposort()
        if red.op is Ops.REDUCE and (new := _unroll(red, width, ops)) is not None
    }
    return effect.substitute(sub) if sub else effect


def _elementwise(ranges: list[UOp], store: UOp, width: int, ops: frozenset[Ops] | None) -> UOp:
    """A nest of several loops without a reduce on a loop-style target: its stride-1 output axis as vector
    lanes (each lane the scalar kernel's ops). GCC's loop vectoriser cannot do it: with -fwrapv an `int`
    index made of several loops may wrap, so at -O1 it is not affine, and in an OpenMP loop no bound says
    otherwise (measured on a Zen 3: a relu over 64x256 floats 7.6 us scalar, 2.0 us in vectors). A single
    loop's index is the loop variable itself, which GCC vectorises (a little faster than this: an 8-op chain
    over 4M floats 395 against 415 us), so that nest is left to it. Not where the stored buffer is also read
    at another index: lanes read before any lane writes, a scalar loop may read what it wrote. Nor where
    the nest has more than ELEMENTWISE_NODES nodes (a long chain: microseconds either way, and the packer
    recurses along it)."""
    effect = _ends(ranges, (store,))
    index, nodes = store.src[0], store.toposort()
    if (
        len(ranges) < 2
        or index.op is not Ops.INDEX
        or len(nodes) > ELEMENTWISE_NODES
        or any(u.op is Ops.INDEX and u.src[0] is index.src[0] and u is not index for u in nodes)
    ):
        return effect
    res = _upcast(store, ranges[-1], width, ops)
    return effect if res is None else _ends([*ranges[:-1], res[1]], (res[0],))


def _upcast_nest(
    ranges: list[UOp],
    store: UOp,
    width: int,
    ops: frozenset[Ops] | None,
    choice: Choice,
    scratch: int,
    nest: int,
    gathers: bool,
    lanes: int = 0,
) -> UOp | None:
    """The upcast path: vector lanes along the stride-1 output axis, a register tile, the column loop
    outside the row loop, the panel packed where it pays. With `gathers`, only where the gathers of lanes
    the vector value has all go into the panel's copy (a transposed panel), never into the reduce."""
    ranges_in = ranges
    res = _upcast(store, ranges[-1], width, ops, gathers, lanes)
    if res is None:
        return None
    vstore, outer = res
    flat = [*ranges[:-1], outer]
    ranges, stores = _tile(flat, (vstore,), -2, choice.rows)
    tile_rows = 1 if ranges is flat else int(flat[-2].src[0].arg) // int(ranges[-2].src[0].arg)
    tiled, stores = _tile(ranges, stores, -1, choice.cols)
    # a column reduce (STREAM_BYTES) where the choice tiles at all (not the one-output fallback's)
    if tiled is flat and (choice.rows, choice.cols) != (1, 1) and not gathers and lanes == 0:
        return _ends(*_tile(flat, stores, -1, _stream_cols(flat, width), streams=True))
    if choice.swap and tiled is not flat and len(tiled) >= 2:  # a tile of rows, columns or both
        # columns outside rows: the column's panel of the right operand is reused by every row tile
        swapped = _swap_last(tiled)
        stores = tuple(st.substitute(dict(zip(tiled[-2:], swapped[-1:-3:-1])), walk=True) for st in stores)
        tiled = swapped
        # a panel read by fewer than PACK_MIN_OUTPUT_ROWS rows stays where it is (as a gather, the dot tile)
        bound = tiled[-1].src[0]
        if bound.op is Ops.CONST and int(bound.arg) * tile_rows >= PACK_MIN_OUTPUT_ROWS:
            if choice.cols > 1 and _overflows(tiled, stores, scratch, choice.pack_span):
                # a narrower tile of as many accumulators, whose panel may fit
                narrow = replace(choice, rows=choice.rows * 2, cols=choice.cols // 2)
                return _upcast_nest(ranges_in, store, width, ops, narrow, scratch, nest, gathers, lanes)
            stores = _pack(tiled, stores, scratch, nest, choice.pack_span)
    # the copy into scratch (under an AFTER) may gather; nothing else
    outside_copy = (x for st in stores for x in st.toposort(gate=lambda u: u.op is not Ops.AFTER))
    if gathers and not gather_free(outside_copy):
        return None
    return _ends(tiled, stores)


def _panel(
    ranges: list[UOp], stores: tuple[UOp, ...], span: int
) -> tuple[UOp, list[UOp], DType, int, int] | None:
    """The panel `_pack` copies (the reduce range, its vector loads and gathers, their dtype, the reduce's
    trip count, the lanes per step), where it is to be packed by every rule but the scratch's size."""
    rows = ranges[-1]
    if rows.src[0].op is not Ops.CONST or int(rows.src[0].arg) < PACK_MIN_ROWS:
        return None
    reduces = list(dict.fromkeys(u for st in stores for u in st.toposort() if u.op is Ops.REDUCE))
    if not reduces or len({red.src[1:] for red in reduces}) != 1 or len(reduces[0].src) != 2:
        return None
    k = reduces[0].src[1]
    if k.src[0].op is not Ops.CONST:
        return None
    allowed = {*ranges[:-1], k}
    panel = [
        u
        for u in dict.fromkeys(x for red in reduces for x in red.src[0].toposort())
        if _panel_part(u, k, allowed)
    ]
    if not panel or len({ld.dtype.scalar() for ld in panel}) != 1:
        return None
    dt, n, step = panel[0].dtype.scalar(), int(k.src[0].arg), sum(ld.dtype.count for ld in panel)
    strides = [stride(ld.src[0].src[1], k) for ld in panel if ld.op is Ops.LOAD]
    if len(strides) == len(panel) and all(s is not None and n * abs(s) * dt.itemsize < span for s in strides):
        return None  # only vector loads, all of a panel that stays in L1
    return k, panel, dt, n, step


def _overflows(ranges: list[UOp], stores: tuple[UOp, ...], scratch: int, span: int) -> bool:
    """Whether the panel is to be packed but does not fit `scratch` bytes (a narrower tile's may)."""
    found = _panel(ranges, stores, span) if scratch > 0 else None
    return found is not None and found[3] * found[4] * found[2].itemsize > scratch


def _pack(
    ranges: list[UOp], stores: tuple[UOp, ...], scratch: int, nest: int, span: int = PACK_MIN_SPAN
) -> tuple[UOp, ...]:
    """PACK the right operand's panel: the vector loads of the reduce that do not depend on the row loop
    (`ranges[-1]`, inside the column loop `ranges[-2]`) are copied, once per column tile, into a scratch
    array (DEFINE_LOCAL: thread-private on a loop-style backend) laid out as the reduce reads it, one row
    of the loads' lanes per reduce step, and the row tiles read them from there. A panel of a row-major
    operand is a column of cache lines a row apart; where that stride is a multiple of a cache way's size
    (a 512-float row is 2 KB) the whole panel falls into a few cache sets and thrashes L1 and L2 (measured
    on a Zen 3 with AVX2, 2 cores, a 2 x 4 tile: 512^3 float32 2.97 ms unpacked, 1.82 ms packed; the
    weight gradient of a training step, 256x64 @ 64x256, 103 against 68 us). Copying changes no value.
    Applies where the reduce is one loop of constant size, the panel fits `scratch` bytes and the row loop
    runs at least PACK_MIN_ROWS times (and, `_upcast_nest` checks, over PACK_MIN_OUTPUT_ROWS rows); a
    panel of vector loads alone, where one of them spans `span` bytes of its operand (half the L1d: below
    it, it stays there). A panel with a gather is always packed, so that the threshold (a cache fact) never
    decides between the gathered panel and the dot tile, that is, never a reduce's order."""
    found = _panel(ranges, stores, span) if scratch > 0 else None
    if found is None:
        return stores
    k, panel, dt, n, step = found
    if n * step * dt.itemsize > scratch:
        return stores
    order = {u: i for st in stores for i, u in enumerate(st.toposort())}
    tile = UOp(Ops.DEFINE_LOCAL, dt.ptr(n * step, AddrSpace.LOCAL), (), nest)
    # a number above every range's (a sibling of the row loop: it nests by its sources), made 0, 1, ... by
    # `renumber`
    top = max(u.arg[0] for u in order if u.op is Ops.RANGE)
    p = UOp(Ops.RANGE, k.dtype, k.src, (top + 1, "loop"))
    copies, reads, lane = [], {}, 0
    for ld in panel:
        copies.append(
            UOp(
                Ops.STORE,
                dtypes.void,
                (
                    UOp(Ops.INDEX, tile.dtype, (tile, _offset(p, step, lane))),
                    ld.substitute({k: p}, walk=True),
                ),
            )
        )
        reads[ld] = lane
        lane += ld.dtype.count
    packed = UOp(Ops.AFTER, tile.dtype, (tile, UOp(Ops.END, dtypes.void, (p, *copies))))
    sub = {
        ld: UOp(Ops.LOAD, ld.dtype, (UOp(Ops.INDEX, tile.dtype, (packed, _offset(k, step, off))),))
        for ld, off in reads.items()
    }
    return tuple(st.substitute(sub, walk=True) for st in stores)


def _panel_part(u: UOp, k: UOp, allowed: set[UOp]) -> bool:
    """Whether `u` is a vector the panel's copy can make once per column tile: a vector load, or a gather
    of scalar loads (lanes of a transposed operand), ungated, of a buffer, at indices that depend on the
    reduce range `k` and on no range but `allowed` ones. Never a bool gather: it is a lane mask (all-ones
    lanes), which no buffer holds (a bool buffer holds 0/1 bytes)."""
    if u.dtype.count < 2 or (u.op is Ops.STACK and all(s is u.src[0] for s in u.src)):
        return False
    if u.dtype.scalar() not in VECTOR_DTYPES:
        return False
    loads = u.src if u.op is Ops.STACK else (u,)
    if not all(
        ld.op is Ops.LOAD
        and len(ld.src) == 1
        and ld.src[0].op is Ops.INDEX
        and len(ld.src[0].src) == 2
        and ld.src[0].src[0].op is Ops.PARAM
        for ld in loads
    ):
        return False
    rs = {x for ld in loads for x in ld.src[0].src[1].toposort() if x.op is Ops.RANGE}
    return k in rs and rs <= allowed


def _offset(r: UOp, step: int, off: int) -> UOp:
    """r*step + off, as index arithmetic."""
    e = r * UOp(Ops.CONST, r.dtype, (), step)
    return e + UOp(Ops.CONST, r.dtype, (), off) if off else e


def _swap_last(ranges: list[UOp]) -> list[UOp]:
    """The last two loops in the other order: each takes the other's number (the linearizer nests by it)."""
    a, b = ranges[-2], ranges[-1]
    return [*ranges[:-2], b.replace(arg=(a.arg[0], b.arg[1])), a.replace(arg=(b.arg[0], a.arg[1]))]


def _ends(ranges: list[UOp], stores: tuple[UOp, ...]) -> UOp:
    """The loop nest END(r0, END(r1, ... stores))."""
    node = UOp(Ops.END, dtypes.void, (ranges[-1], *stores))
    for r in reversed(ranges[:-1]):
        node = UOp(Ops.END, dtypes.void, (r, node))
    return node


def optimize(
    sink: UOp,
    width: int,
    ops: frozenset[Ops] | None = None,
    choice: Choice | None = None,
    scratch: int = 0,
    lanes: int = 0,
    cache_sizes: tuple[int, ...] = (),
) -> UOp:
    """The optimised kernel graph: each loop nest of `sink` (the index pass's SINK) transformed for
    vectors of `width` bytes; a nest the heuristic does not recognise is kept as it is. `ops` is the
    backend's native ALU op set (None: every op): only those get vector forms. `choice` shapes the register
    tiles (default: the heuristic's). `scratch` is the bytes of thread-private memory a loop nest may
    declare (0: none), where the upcast path packs a matmul's right operand. `lanes` caps a vector's lanes
    (0: as many as fill `width`; a grid target's OpenCL C has vectors of up to 16, `GRID_LANES`).
    `cache_sizes` (the target's L1d, L2, L3 bytes; () unknown) set the default choice's packing threshold."""
    if width <= 0:
        return sink
    nests = tuple(
        _optimize_nest(e, width, ops, choice or heuristic(width, cache_sizes), scratch, i, lanes)
        for i, e in enumerate(sink.src)
    )
    return renumber(sink.replace(src=nests))
