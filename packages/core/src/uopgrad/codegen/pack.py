"""The packer of the opt pass (codegen, layer 11): lane-wise copies of a value become one vector value.

`split(r, amt)` replaces a range by `r_outer*amt + lane`; `Lanes` makes the `amt` lane-wise copies of a
value (its index arithmetic simplified, so that stride-1 accesses show); `Packer` merges such a tuple of
scalar lanes into one vector value by the first rule of `PACK` that applies, and gathers (STACK) the lanes
no rule packs. Every packed op computes in each lane exactly what the scalar op computes, so packing never
changes a value: the vector renderers print each op's vector form with the same IEEE operations (a
comparison is a lane mask, WHERE and MAX are bitwise selects by such a mask; spec/opt.md).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

from uopgrad.dtype import DType, dtypes
from uopgrad.ops import GroupOp, Ops
from uopgrad.rewrite import graph_rewrite
from uopgrad.symbolic import sym
from uopgrad.uop import UOp

__all__ = [
    "PACK",
    "VECTOR_DTYPES",
    "Lanes",
    "Packer",
    "consecutive",
    "gather_free",
    "lane_tree",
    "lanes_for",
    "lanewise_ops",
    "simplify_index",
    "split",
    "stride",
]

# element types the packer forms vectors of (float16 and bfloat16 stay scalar: no plain C vector op)
VECTOR_DTYPES = frozenset(
    {
        dtypes.float32,
        dtypes.float64,
        dtypes.int8,
        dtypes.int16,
        dtypes.int32,
        dtypes.int64,
        dtypes.uint8,
        dtypes.uint16,
        dtypes.uint32,
        dtypes.uint64,
    }
)
# bool lanes are packed too, as lane masks, but only as results and operands of ALU ops: never loaded,
# stored or reduced (a bool buffer holds 0/1 bytes, a mask all-ones or all-zeros lanes)
_LANE_DTYPES = VECTOR_DTYPES | {dtypes.bool}

_F, _I, _B = "float", "int", "bool"
# ALU op -> the operand kinds whose lane-wise vector form is exactly the scalar op (the kind of WHERE is
# that of its values): plain IEEE / wrapping operators, comparisons into masks, selects by masks
_VECTOR_ALU: dict[Ops, frozenset[str]] = {
    Ops.ADD: frozenset({_F, _I}),
    Ops.SUB: frozenset({_F, _I}),
    Ops.MUL: frozenset({_F, _I}),
    Ops.FDIV: frozenset({_F}),
    Ops.NEG: frozenset({_F, _I, _B}),
    Ops.MAX: frozenset({_F, _I}),
    Ops.AND: frozenset({_I, _B}),
    Ops.OR: frozenset({_I, _B}),
    Ops.XOR: frozenset({_I, _B}),
    Ops.CMPLT: frozenset({_F, _I}),
    Ops.CMPNE: frozenset({_F, _I, _B}),
    Ops.CMPEQ: frozenset({_F, _I, _B}),
    Ops.WHERE: frozenset({_F, _I, _B}),
}
# (source kind, destination kind) of the CASTs whose vector form is the scalar C conversion, lane by lane
# (float -> int is not: its scalar form goes through a helper that defines the out-of-range cases)
_VECTOR_CASTS = frozenset({(_F, _F), (_I, _I), (_I, _F), (_B, _F), (_B, _I), (_F, _B), (_I, _B)})


def _kind(dt: DType) -> str:
    return _B if dt.scalar() == dtypes.bool else _F if dtypes.is_float(dt) else _I


# process-wide: the opt pass tries several tiles per nest and many kernels share their index expressions, so
# most lane copies repeat (a transformer block's first step: 1584 simplifications of 660 distinct expressions,
# 40% of its lowering time). `sym` is a fixed table and a UOp is its structure, so a hit is the same result
@functools.lru_cache(maxsize=1 << 14)
def simplify_index(e: UOp) -> UOp:
    """`e` simplified by `symbolic.sym` (memoised)."""
    return graph_rewrite(e, sym, name="codegen: opt index")


def split(r: UOp, amt: int) -> tuple[UOp, list[UOp]]:
    """The split primitive: RANGE r of size n (amt divides n) -> (r_outer of size n/amt, keeping r's number
    and kind, and the `amt` expressions r_outer*amt + lane that replace r)."""
    n = int(r.src[0].arg)
    outer = UOp(Ops.RANGE, r.dtype, (UOp(Ops.CONST, r.dtype, (), n // amt),), r.arg)
    base = outer * UOp(Ops.CONST, r.dtype, (), amt)
    return outer, [base if k == 0 else base + UOp(Ops.CONST, r.dtype, (), k) for k in range(amt)]


class Lanes:
    """Lane-wise copies of a value (r replaced by each lane's expression), with the index arithmetic of
    every copy simplified, so that stride-1 accesses can be recognised."""

    def __init__(self, root: UOp, r: UOp, exprs: list[UOp]) -> None:
        self.r, self.exprs = r, tuple(exprs)
        self.uses: set[UOp] = set()  # the nodes under root that depend on r
        for u in root.toposort():
            if u is r or any(s in self.uses for s in u.src):
                self.uses.add(u)
        self.memo: dict[tuple[UOp, int], UOp] = {}

    def lane(self, u: UOp, k: int) -> UOp:
        """Lane `k`'s copy of `u`."""
        if u not in self.uses:
            return u
        if (u, k) not in self.memo:
            if u.dtype == dtypes.index:
                self.memo[(u, k)] = _lane_index(u, self.r, self.exprs, k)
            else:
                self.memo[(u, k)] = u.replace(src=tuple(self.lane(s, k) for s in u.src))
        return self.memo[(u, k)]

    def all(self, u: UOp) -> tuple[UOp, ...]:
        """Every lane's copy of `u`, lane 0 first."""
        return tuple(self.lane(u, k) for k in range(len(self.exprs)))


# process-wide, as simplify_index: the opt pass's retries and kernels of one shape ask for the same copies
@functools.lru_cache(maxsize=1 << 14)
def _lane_index(u: UOp, r: UOp, exprs: tuple[UOp, ...], k: int) -> UOp:
    """Lane `k`'s copy of index expression `u` (r replaced by exprs[k]), simplified. Where `r` is a plain
    term of `u` (stride s), lane k is lane 0 plus s*k: lane 0's simplified form with its constant moved
    (`_plus`), as `sym` writes it, without simplifying the whole expression again (7 of 8 lane copies are
    such, and their simplification was a quarter of a cold step's lowering; test_pack_lanes checks the
    two forms are the same node)."""
    if k > 0 and (s := stride(u, r)) is not None:
        return _plus(_lane_index(u, r, exprs, 0), s * k)
    sub = {**_divmods(u, r, exprs, k), r: exprs[k]}
    return simplify_index(u.substitute(sub, walk=True))


def _plus(e: UOp, c: int) -> UOp:
    """`e + c` for a simplified index expression `e`, in `sym`'s normal form: the constant last, folded into
    the one `e` ends with, and none where it is 0."""
    if c == 0:
        return e
    if e.op is Ops.CONST:
        return UOp(Ops.CONST, e.dtype, (), int(e.arg) + c)
    if e.op is Ops.ADD and e.src[1].op is Ops.CONST:
        e, c = e.src[0], int(e.src[1].arg) + c
        if c == 0:
            return e
    return UOp(Ops.ADD, e.dtype, (e, UOp(Ops.CONST, e.dtype, (), c)))


def _divmods(u: UOp, r: UOp, exprs: tuple[UOp, ...], k: int) -> dict[UOp, UOp]:
    """r // c and r % c where the lane count divides c, written without the lane where it cancels:
    with r = o*amt + k (0 <= k < amt), r // c = o // (c/amt) and r % c = (o % (c/amt))*amt + k."""
    amt, out = len(exprs), {}
    o = exprs[0].src[0]
    for d in u.toposort():
        if (
            d.op in (Ops.FLOORDIV, Ops.FLOORMOD)
            and d.src[0] is r
            and d.src[1].op is Ops.CONST
            and isinstance(c := d.src[1].arg, int)
            and c > 0
            and c % amt == 0
        ):
            q = UOp(Ops.CONST, d.dtype, (), c // amt)
            out[d] = (
                o // q
                if d.op is Ops.FLOORDIV
                else (o % q) * UOp(Ops.CONST, d.dtype, (), amt) + UOp(Ops.CONST, d.dtype, (), k)
            )
    return out


class Packer:
    """Turns a tuple of scalar lane values into one vector value by the first rule of `PACK` that applies;
    lanes no rule packs are gathered (STACK), which the heuristic only accepts as a broadcast. `ops` is the
    backend's native op set (an op it lacks is decomposed after this pass, which only knows scalars)."""

    def __init__(self, amt: int, ops: frozenset[Ops] | None = None) -> None:
        self.amt, self.ops = amt, ops
        self.memo: dict[tuple[UOp, ...], UOp] = {}

    def pack(self, lanes: tuple[UOp, ...]) -> UOp:
        """One vector value whose lane k is `lanes[k]`."""
        if lanes not in self.memo:
            out: UOp | None = None
            if lanes[0].dtype.count == 1 and lanes[0].dtype.scalar() in _LANE_DTYPES:
                out = next((o for rule in PACK if (o := rule(self, lanes)) is not None), None)
            self.memo[lanes] = UOp(Ops.STACK, lanes[0].dtype.vec(self.amt), lanes) if out is None else out
        return self.memo[lanes]

    def clean(self, v: UOp) -> bool:
        """Whether `v` has no gathers: every STACK under it is a broadcast of one value or the lanes of an op
        computed lane by lane (`_lanewise`)."""
        return gather_free(v.toposort())


def gather_free(nodes: Iterable[UOp]) -> bool:
    """Whether no node is a gather: every STACK is a broadcast of one value or the lanes of an op computed
    lane by lane (`_lanewise`)."""
    return all(
        u.op is not Ops.STACK or all(s is u.src[0] for s in u.src) or _lanewise_stack(u) for u in nodes
    )


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


def stride(e: UOp, r: UOp) -> int | None:
    """The elements index expression `e` moves per step of range `r` (None where `r` is not a plain term of
    it, e.g. under a division)."""
    terms, _ = _linear(e)
    return terms.get(r, 0) if not any(r in t.toposort() for t in terms if t is not r) else None


def consecutive(idx: Sequence[UOp]) -> bool:
    """INDEXes of one buffer at offsets o, o+1, ...: one vector access."""
    if any(i.op is not Ops.INDEX or i.src[0] is not idx[0].src[0] for i in idx):
        return False
    t0, c0 = _linear(idx[0].src[1])
    return all(_linear(i.src[1]) == (t0, c0 + k) for k, i in enumerate(idx))


def _same(p: Packer, lanes: tuple[UOp, ...]) -> UOp | None:
    """One value in every lane: a broadcast."""
    if any(u is not lanes[0] for u in lanes):
        return None
    return UOp(Ops.STACK, lanes[0].dtype.vec(p.amt), lanes)


def _load(p: Packer, lanes: tuple[UOp, ...]) -> UOp | None:
    """Ungated LOADs of consecutive elements of one buffer: one vector load."""
    if (
        lanes[0].dtype not in VECTOR_DTYPES
        or not all(u.op is Ops.LOAD and len(u.src) == 1 for u in lanes)
        or not consecutive([u.src[0] for u in lanes])
    ):
        return None
    return UOp(Ops.LOAD, lanes[0].dtype.vec(p.amt), (lanes[0].src[0],))


def _vector_op(p: Packer, u: UOp) -> bool:
    """Whether ALU op or CAST `u` has an exact lane-wise vector form (and the backend renders it)."""
    if (p.ops is not None and u.op in GroupOp.ALU and u.op not in p.ops) or any(
        s.dtype.count != 1 or s.dtype.scalar() not in _LANE_DTYPES for s in u.src
    ):
        return False
    if u.op is Ops.CAST:
        return (_kind(u.src[0].dtype), _kind(u.dtype)) in _VECTOR_CASTS
    operand = u.src[1] if u.op is Ops.WHERE else u.src[0]
    return _kind(operand.dtype) in _VECTOR_ALU.get(u.op, frozenset())


def _same_op(lanes: tuple[UOp, ...]) -> bool:
    """Every lane is the first's op with its dtype, arg and operand dtypes (so one op can stand for all)."""
    first = lanes[0]
    dts = tuple(s.dtype for s in first.src)
    return all(
        u.op is first.op
        and u.dtype == first.dtype
        and u.arg == first.arg
        and tuple(s.dtype for s in u.src) == dts
        for u in lanes
    )


def _alu(p: Packer, lanes: tuple[UOp, ...]) -> UOp | None:
    """The same lane-wise ALU op (or CAST) in every lane: the op on vectors of its operands."""
    first = lanes[0]
    if (
        (first.op not in GroupOp.ALU and first.op is not Ops.CAST)
        or not _vector_op(p, first)
        or not _same_op(lanes)
    ):
        return None
    srcs = tuple(p.pack(tuple(u.src[j] for u in lanes)) for j in range(len(first.src)))
    return UOp(first.op, first.dtype.vec(p.amt), srcs, first.arg)


def _reduce(p: Packer, lanes: tuple[UOp, ...]) -> UOp | None:
    """REDUCEs over the same loops: one reduce with a vector accumulator, each lane in its own order (the
    order of the scalar reduce: MAX, whose vector form is a select, stays exact)."""
    first = lanes[0]
    if (
        first.dtype not in VECTOR_DTYPES
        or (p.ops is not None and first.arg not in p.ops)
        or any(
            u.op is not Ops.REDUCE
            or u.arg is not first.arg
            or len(u.src) != len(first.src)
            or any(a is not b for a, b in zip(u.src[1:], first.src[1:]))
            for u in lanes
        )
    ):
        return None
    inner = p.pack(tuple(u.src[0] for u in lanes))
    return UOp(Ops.REDUCE, first.dtype.vec(p.amt), (inner, *first.src[1:]), first.arg)


def _lanewise(p: Packer, lanes: tuple[UOp, ...]) -> UOp | None:
    """The same ALU op (or CAST) in every lane, one without an exact vector form (POW, EXP2, SQRT, an integer
    division, a float -> int cast, ...): its operands packed, the op computed lane by lane on their lanes
    (GEP), the results stacked. Each lane computes exactly the scalar op, and the vector work around it
    stays vector work. Not on bools: a lane of a mask is all ones (-1 in C), not the scalar's 1."""
    first = lanes[0]
    if (
        (first.op not in GroupOp.ALU and first.op is not Ops.CAST)
        or any(x.dtype.count != 1 or x.dtype.scalar() not in VECTOR_DTYPES for x in (first, *first.src))
        or not _same_op(lanes)
    ):
        return None
    cols = [tuple(u.src[j] for u in lanes) for j in range(len(first.src))]
    # an operand the lanes share is used as it is; the others are packed and read back lane by lane
    shared = [all(s is col[0] for s in col) for col in cols]
    srcs = [col[0] if same else p.pack(col) for col, same in zip(cols, shared)]
    out = tuple(
        UOp(
            first.op,
            first.dtype,
            tuple(s if same else UOp(Ops.GEP, s.dtype.scalar(), (s,), (k,)) for s, same in zip(srcs, shared)),
            first.arg,
        )
        for k in range(p.amt)
    )
    return UOp(Ops.STACK, first.dtype.vec(p.amt), out)


def _lanewise_stack(u: UOp) -> bool:
    """A STACK made by `_lanewise`: lane k is one op on lane k of packed values (or on shared values)."""
    first = u.src[0]
    if first.op not in GroupOp.ALU and first.op is not Ops.CAST:
        return False
    for k, lane in enumerate(u.src):
        if lane.op is not first.op or len(lane.src) != len(first.src):
            return False
        for s, s0 in zip(lane.src, first.src):
            if s.op is Ops.GEP:
                if s.arg != (k,) or s0.op is not Ops.GEP or s.src[0] is not s0.src[0]:
                    return False
            elif s is not s0 or s.dtype.count != 1:
                return False
    return True


def lanewise_ops(u: UOp) -> int:
    """How many scalar ops under `u` are computed lane by lane (the lanes of `_lanewise` STACKs)."""
    return sum(len(x.src) for x in u.toposort() if x.op is Ops.STACK and _lanewise_stack(x))


# the packing rules, tried in order: an op with a vector form is packed as one vector op, any other ALU op
# lane by lane
PACK = (_same, _load, _reduce, _alu, _lanewise)


def lane_tree(v: UOp, op: Ops, amt: int, vector: bool = False) -> UOp:
    """The lanes of vector `v` combined pairwise, adjacent lanes first: a fixed order. With `vector`, the
    levels down to two lanes are vector ops on the even and the odd lanes: the same pairs, so the same bits,
    but no scalar op per pair (a float MAX is a select, which compilers turn into a mispredicted branch)."""
    while vector and amt > 2:
        amt //= 2
        lanes = [
            tuple(UOp(Ops.GEP, v.dtype.scalar(), (v,), (k,)) for k in range(first, 2 * amt, 2))
            for first in (0, 1)
        ]
        v = UOp(
            op,
            v.dtype.scalar().vec(amt),
            tuple(UOp(Ops.STACK, v.dtype.scalar().vec(amt), ls) for ls in lanes),
        )
    xs = [UOp(Ops.GEP, v.dtype.scalar(), (v,), (k,)) for k in range(amt)]
    while len(xs) > 1:
        xs = [UOp(op, xs[0].dtype, (a, b)) for a, b in zip(xs[::2], xs[1::2])]
    return xs[0]


def lanes_for(dt: DType, width: int, n: object, most: int = 0) -> int:
    """How many lanes of `dt` fill `width` bytes (at most `most`, where it is not 0: OpenCL C's vectors
    have up to 16) and divide the trip count `n` (0: none)."""
    amt = width // dt.itemsize if dt.count == 1 and dt.scalar() in VECTOR_DTYPES else 0
    amt = min(amt, most) if most > 0 else amt
    while amt > 1 and not (isinstance(n, int) and n % amt == 0):
        amt //= 2
    return amt if amt > 1 else 0
