"""The optimisation pass (codegen, layer 11): between index and reduce, loop nests become vector code.

Two transformations, both built from one split primitive, `r -> r_outer*amt + lane` (`split`), and one
packer that turns `amt` lane-wise copies of a value into one vector value by the rule table `_PACK`:

- UPCAST an output axis into vector lanes (`_upcast`): the stride-1 output axis of a nest that reduces is
  split; every lane computes exactly the ops of the unoptimised kernel, in the same order, so the result
  is bit-identical (spec/opt.md). Loads that are stride-1 across the lanes become vector loads, loads the
  lanes share are broadcast, the store is a vector store.
- UNROLL a reduce axis into a vector accumulator (`_unroll`): where the innermost reduce axis is stride-1
  in every load and the policy allows reordering (float ADD, integer ADD and MUL), the accumulator
  holds `amt` partial results, combined at the end by a fixed pairwise lane tree. The order depends only
  on the kernel, never on the thread count.

The pass only runs where `Capabilities.vector_width` (bytes) is non-zero and OPT is not 0. The heuristic
is cheap: unroll a reduce whose axis is stride-1, else upcast a stride-1 output axis of a reducing nest
(a flat output range first split in two where it is read as r // c and r % c) and make up to ROWS rows of
the axis outside it a register tile; nests without a reduce are left to the C compiler's own loop
vectoriser. A transformation that would leave a gather (lanes loaded one by one) is not made.
"""
from __future__ import annotations

from collections.abc import Sequence

from uopgrad.config import ContextVar
from uopgrad.dtype import DType, dtypes
from uopgrad.ops import Ops
from uopgrad.rewrite import graph_rewrite
from uopgrad.symbolic import sym
from uopgrad.uop import UOp

__all__ = ["OPT", "VECTOR_DTYPES", "optimize", "split"]

# OPT=0 turns the pass off (the unoptimised kernel of spec/opt.md); 1, the default, is the heuristic
OPT = ContextVar("OPT", 1)

# element types the packer forms vectors of (bool, float16 and bfloat16 stay scalar: no plain C vector op)
VECTOR_DTYPES = frozenset({dtypes.float32, dtypes.float64, dtypes.int8, dtypes.int16, dtypes.int32,
                           dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64})
# the rows of a register tile (the accumulators one loop nest updates: MR)
ROWS = 8
# ALU ops whose C template is a plain infix operator, so it is lane-wise on a GCC/OpenCL vector as well
_LANEWISE = {Ops.ADD: None, Ops.MUL: None, Ops.SUB: None}
_INT_LANEWISE = {Ops.AND: None, Ops.OR: None, Ops.XOR: None}


def _simplify(e: UOp) -> UOp:
    return graph_rewrite(e, sym, name="codegen: opt index")


def split(r: UOp, amt: int) -> tuple[UOp, list[UOp]]:
    """The split primitive: RANGE r of size n (amt divides n) -> (r_outer of size n/amt, keeping r's number
    and kind, and the `amt` expressions r_outer*amt + lane that replace r)."""
    n = int(r.src[0].arg)
    outer = UOp(Ops.RANGE, r.dtype, (UOp(Ops.CONST, r.dtype, (), n // amt),), r.arg)
    base = outer * UOp(Ops.CONST, r.dtype, (), amt)
    return outer, [base if k == 0 else base + UOp(Ops.CONST, r.dtype, (), k) for k in range(amt)]


class _Lanes:
    """Lane-wise copies of a value (r replaced by each lane's expression), with the index arithmetic of
    every copy simplified, so that stride-1 accesses can be recognised."""

    def __init__(self, root: UOp, r: UOp, exprs: list[UOp]) -> None:
        self.r, self.exprs = r, exprs
        self.uses: set[UOp] = set()  # the nodes under root that depend on r
        for u in root.toposort():
            if u is r or any(s in self.uses for s in u.src):
                self.uses.add(u)
        self.memo: dict[tuple[UOp, int], UOp] = {}

    def lane(self, u: UOp, k: int) -> UOp:
        if u not in self.uses:
            return u
        if (u, k) not in self.memo:
            if u.dtype == dtypes.index:
                sub = {**self.divmods(u, k), self.r: self.exprs[k]}
                self.memo[(u, k)] = _simplify(u.substitute(sub, walk=True))
            else:
                self.memo[(u, k)] = u.replace(src=tuple(self.lane(s, k) for s in u.src))
        return self.memo[(u, k)]

    def divmods(self, u: UOp, k: int) -> dict[UOp, UOp]:
        """r // c and r % c where the lane count divides c, written without the lane where it cancels:
        with r = o*amt + k (0 <= k < amt), r // c = o // (c/amt) and r % c = (o % (c/amt))*amt + k."""
        amt, out = len(self.exprs), {}
        o = self.exprs[0].src[0]
        for d in u.toposort():
            if d.op in (Ops.FLOORDIV, Ops.FLOORMOD) and d.src[0] is self.r and d.src[1].op is Ops.CONST \
                    and isinstance(c := d.src[1].arg, int) and c > 0 and c % amt == 0:
                q = UOp(Ops.CONST, d.dtype, (), c // amt)
                out[d] = o // q if d.op is Ops.FLOORDIV else (o % q) * UOp(Ops.CONST, d.dtype, (), amt) + \
                    UOp(Ops.CONST, d.dtype, (), k)
        return out

    def all(self, u: UOp) -> tuple[UOp, ...]:
        return tuple(self.lane(u, k) for k in range(len(self.exprs)))


class _Packer:
    """Turns a tuple of scalar lane values into one vector value by the first rule of `_PACK` that applies;
    lanes no rule packs are gathered (STACK), which the heuristic only accepts as a broadcast."""

    def __init__(self, amt: int) -> None:
        self.amt = amt
        self.memo: dict[tuple[UOp, ...], UOp] = {}

    def pack(self, lanes: tuple[UOp, ...]) -> UOp:
        if lanes not in self.memo:
            out: UOp | None = None
            if lanes[0].dtype.count == 1 and lanes[0].dtype.scalar() in VECTOR_DTYPES:
                out = next((o for rule in _PACK if (o := rule(self, lanes)) is not None), None)
            self.memo[lanes] = UOp(Ops.STACK, lanes[0].dtype.vec(self.amt), lanes) if out is None else out
        return self.memo[lanes]

    def clean(self, v: UOp) -> bool:
        """Whether `v` has no gathers: every STACK under it is a broadcast of one value."""
        return all(u.op is not Ops.STACK or all(s is u.src[0] for s in u.src) for u in v.toposort())


def _linear(e: UOp) -> tuple[dict[UOp, int], int]:
    """An index expression as (leaf -> coefficient, constant): sums, products with constants and
    constants are opened up; anything else (a RANGE, a division, ...) is a leaf."""
    if e.op is Ops.CONST:
        return {}, int(e.arg)
    if e.op is Ops.ADD:
        (ta, ca), (tb, cb) = _linear(e.src[0]), _linear(e.src[1])
        terms = dict(ta)
        for k, v in tb.items():
            terms[k] = terms.get(k, 0) + v
        return {k: v for k, v in terms.items() if v}, ca + cb
    if e.op is Ops.MUL and (c := next((s for s in e.src if s.op is Ops.CONST), None)) is not None:
        other = e.src[1] if c is e.src[0] else e.src[0]
        t, k0 = _linear(other)
        return {k: v * int(c.arg) for k, v in t.items()}, k0 * int(c.arg)
    return {e: 1}, 0


def _consecutive(idx: Sequence[UOp]) -> bool:
    """INDEXes of one buffer at offsets o, o+1, ...: one vector access."""
    if any(i.op is not Ops.INDEX or i.src[0] is not idx[0].src[0] for i in idx):
        return False
    t0, c0 = _linear(idx[0].src[1])
    return all(_linear(i.src[1]) == (t0, c0 + k) for k, i in enumerate(idx))


def _same(p: _Packer, lanes: tuple[UOp, ...]) -> UOp | None:
    """One value in every lane: a broadcast."""
    if any(u is not lanes[0] for u in lanes):
        return None
    return UOp(Ops.STACK, lanes[0].dtype.vec(p.amt), lanes)


def _load(p: _Packer, lanes: tuple[UOp, ...]) -> UOp | None:
    """Ungated LOADs of consecutive elements of one buffer: one vector load."""
    if not all(u.op is Ops.LOAD and len(u.src) == 1 for u in lanes) or \
            not _consecutive([u.src[0] for u in lanes]):
        return None
    return UOp(Ops.LOAD, lanes[0].dtype.vec(p.amt), (lanes[0].src[0],))


def _alu(p: _Packer, lanes: tuple[UOp, ...]) -> UOp | None:
    """The same lane-wise ALU op in every lane: the op on vectors of its operands."""
    first = lanes[0]
    ops = _LANEWISE if dtypes.is_float(first.dtype) else _LANEWISE | _INT_LANEWISE
    if first.op not in ops or any(u.op is not first.op or u.dtype != first.dtype for u in lanes):
        return None
    srcs = tuple(p.pack(tuple(u.src[j] for u in lanes)) for j in range(len(first.src)))
    return UOp(first.op, first.dtype.vec(p.amt), srcs)


def _reduce(p: _Packer, lanes: tuple[UOp, ...]) -> UOp | None:
    """ADD/MUL REDUCEs over the same loops: one reduce with a vector accumulator, each lane in its own
    order (MAX's C template is a select, which has no lane-wise C vector form)."""
    first = lanes[0]
    if first.arg not in (Ops.ADD, Ops.MUL) or \
            any(u.op is not Ops.REDUCE or u.arg is not first.arg or len(u.src) != len(first.src) or
                any(a is not b for a, b in zip(u.src[1:], first.src[1:])) for u in lanes):
        return None
    inner = p.pack(tuple(u.src[0] for u in lanes))
    return UOp(Ops.REDUCE, first.dtype.vec(p.amt), (inner, *first.src[1:]), first.arg)


# the packing rules, tried in order
_PACK = (_same, _load, _reduce, _alu)


def _lane_tree(v: UOp, op: Ops, amt: int) -> UOp:
    """The lanes of vector `v` combined pairwise, adjacent lanes first: a fixed order."""
    xs = [UOp(Ops.GEP, v.dtype.scalar(), (v,), (k,)) for k in range(amt)]
    while len(xs) > 1:
        xs = [UOp(op, xs[0].dtype, (a, b)) for a, b in zip(xs[::2], xs[1::2])]
    return xs[0]


def _lanes_for(dt: DType, width: int, n: object) -> int:
    """How many lanes of `dt` fill `width` bytes and divide the trip count `n` (0: none)."""
    amt = width // dt.itemsize if dt.count == 1 and dt.scalar() in VECTOR_DTYPES else 0
    while amt > 1 and not (isinstance(n, int) and n % amt == 0):
        amt //= 2
    return amt if amt > 1 else 0


def _reorderable(red: UOp) -> bool:
    """Whether the policy (spec/opt.md) lets a reduce change its order: float ADD, integer ADD and MUL."""
    return red.arg is Ops.ADD or (red.arg is Ops.MUL and dtypes.is_int(red.dtype))


def _unroll(red: UOp, width: int) -> UOp | None:
    """REDUCE(x, ..., r), r stride-1 in every load of x that uses it -> a vector accumulator over r/amt
    and a lane tree; None where it does not apply."""
    r = red.src[-1]
    if not _reorderable(red) or r.src[0].op is not Ops.CONST:
        return None
    amt = _lanes_for(red.dtype, width, r.src[0].arg)
    if not amt:
        return None
    outer, exprs = split(r, amt)
    p = _Packer(amt)
    v = p.pack(_Lanes(red.src[0], r, exprs).all(red.src[0]))
    if not p.clean(v):
        return None
    acc = UOp(Ops.REDUCE, red.dtype.vec(amt), (v, *red.src[1:-1], outer), red.arg)
    return _lane_tree(acc, red.arg, amt)


def _upcast(store: UOp, r: UOp, width: int) -> tuple[UOp, UOp] | None:
    """STORE(INDEX(p, off), v), off stride-1 in output range r -> (a vector store, r_outer)."""
    if len(store.src) != 2 or store.src[0].op is not Ops.INDEX or r.src[0].op is not Ops.CONST:
        return None
    amt = _lanes_for(store.src[1].dtype, width, r.src[0].arg)
    if not amt:
        return None
    outer, exprs = split(r, amt)
    lanes, p = _Lanes(store, r, exprs), _Packer(amt)
    target = lanes.all(store.src[0])
    if not _consecutive(target):
        return None
    vec = p.pack(lanes.all(store.src[1]))
    if not p.clean(vec):
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
    exprs = {e: _simplify(e.substitute(sub, walk=True)) for e in _index_nodes(u)}
    return u.substitute({k: v for k, v in exprs.items() if k is not v}, walk=True)


def _unflatten(ranges: list[UOp], store: UOp) -> tuple[list[UOp], UOp]:
    """Keep output ranges multi-dimensional: a flat innermost range r that the kernel reads as r // c and
    r % c becomes two ranges, r = outer*c + inner (the split primitive with a loop as the inner part)."""
    r = ranges[-1]
    if r.src[0].op is not Ops.CONST:
        return ranges, store
    divs = {int(d.src[1].arg) for d in store.toposort() if d.op in (Ops.FLOORDIV, Ops.FLOORMOD) and
            d.src[0] is r and d.src[1].op is Ops.CONST and isinstance(d.src[1].arg, int) and d.src[1].arg > 1}
    n = int(r.src[0].arg)
    if len(divs) != 1 or n % (c := divs.pop()) != 0:
        return ranges, store
    ci = UOp(Ops.CONST, r.dtype, (), c)
    outer = UOp(Ops.RANGE, r.dtype, (UOp(Ops.CONST, r.dtype, (), n // c),), r.arg)
    inner = UOp(Ops.RANGE, r.dtype, (ci,), (r.arg[0] + 0.5, "loop"))  # numbered by `_renumber`
    sub = {r // ci: outer, r % ci: inner, r: outer * ci + inner}
    return [*ranges[:-1], outer, inner], _substitute_index(store, sub)


def _rows(ranges: list[UOp], stores: tuple[UOp, ...], amt: int) -> tuple[list[UOp], tuple[UOp, ...]]:
    """UPCAST an output axis into `amt` rows (or fewer, a power of two that divides it): where a load of
    the value does not depend on the range just outside the lanes (an input broadcast along it), each of
    `amt` copies of the store reuses that load; the copies' reduces share their loops (several
    accumulators in one loop nest)."""
    if len(ranges) < 2:
        return ranges, stores
    r = ranges[-2]
    if r.src[0].op is not Ops.CONST:
        return ranges, stores
    while amt > 1 and int(r.src[0].arg) % amt != 0:
        amt //= 2
    if amt < 2:
        return ranges, stores
    loads = [u for st in stores for u in st.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]
    if all(r in ld.toposort() for ld in loads):
        return ranges, stores
    outer, exprs = split(r, amt)
    out: list[UOp] = []
    for st in stores:
        lanes = _Lanes(st, r, exprs)
        out.extend(lanes.all(st))
    return [*ranges[:-2], outer, ranges[-1]], tuple(out)


def _renumber(sink: UOp) -> UOp:
    """Number the kernel's ranges 0, 1, ... in their current order (the linearizer nests by number)."""
    rs = sorted({u for u in sink.toposort() if u.op is Ops.RANGE}, key=lambda u: u.arg[0])
    sub = {u: u.replace(arg=(i, u.arg[1])) for i, u in enumerate(rs)}
    return sink.substitute({k: v for k, v in sub.items() if k.arg != v.arg}, walk=True)


def _optimize_nest(effect: UOp, width: int) -> UOp:
    found = _nest(effect)
    if found is None:
        return effect
    ranges, store = found
    reduces = [u for u in store.toposort() if u.op is Ops.REDUCE]
    if not reduces:
        return effect
    # unroll first: a reduce whose innermost axis is stride-1 gets a vector accumulator
    sub = {red: new for red in reduces if (new := _unroll(red, width)) is not None}
    if sub:
        node = store.substitute(sub)
        for r in reversed(ranges):
            node = UOp(Ops.END, dtypes.void, (r, node))
        return node
    ranges, store = _unflatten(ranges, store)
    res = _upcast(store, ranges[-1], width)
    if res is None:
        return effect
    vstore, outer = res
    ranges, stores = _rows([*ranges[:-1], outer], (vstore,), ROWS)
    node = UOp(Ops.END, dtypes.void, (ranges[-1], *stores))
    for r in reversed(ranges[:-1]):
        node = UOp(Ops.END, dtypes.void, (r, node))
    return node


def optimize(sink: UOp, width: int) -> UOp:
    """The optimised kernel graph: each loop nest of `sink` (the index pass's SINK) transformed for
    vectors of `width` bytes; a nest the heuristic does not recognise is kept as it is."""
    if width <= 0:
        return sink
    return _renumber(sink.replace(src=tuple(_optimize_nest(e, width) for e in sink.src)))
