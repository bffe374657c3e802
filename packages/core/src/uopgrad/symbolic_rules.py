"""Index arithmetic laws (below uop.py), in the order and the normal form of the reference's symbolic engine:
`pm_propagate_invalid` (gated indices), `pm_symbolic_simple` (local folding), `pm_commutative` (operand order
of index ops) and `pm_symbolic_index` (term combining, comparisons, casts). `uopgrad.symbolic` joins them with
the division rules (`uopgrad.symbolic_divmod`) and its own table.

Where a law is false for some dtype it is limited to the dtypes where it holds: laws that move terms across
a comparison or reassociate divisions hold for the unbounded `index` only (fixed-width ints wrap), and laws
that assume x*0 == 0 or x-x == 0 hold for ints and bool only (a float may be NaN or inf).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from uopgrad.dtype import DType, Invalid, dtypes
from uopgrad.ops import GroupOp, Ops
from uopgrad.rewrite import PatternMatcher, UPat

if TYPE_CHECKING:
    from uopgrad.uop import UOp

__all__ = [
    "pm_commutative",
    "invalid_gate",
    "invalid_pat",
    "pm_propagate_invalid",
    "pm_symbolic_index",
    "pm_symbolic_simple",
]

IDX = dtypes.index
_INTS = (*dtypes.ints, IDX)
_INTB = (*_INTS, dtypes.bool)
_x, _y = UPat.var("x"), UPat.var("y")
_xi, _xb, _xidx = UPat.var("x", _INTS), UPat.var("x", dtypes.bool), UPat.var("x", IDX)
_c, _c0, _c1 = UPat(Ops.CONST, name="c"), UPat(Ops.CONST, name="c0"), UPat(Ops.CONST, name="c1")
invalid_pat = UPat(Ops.CONST, arg=Invalid, name="i")
invalid_gate = UPat.var("cond").where(UPat.var("x"), invalid_pat)
_Arith = GroupOp.Binary - GroupOp.Comparison


def _is_invalid(u: UOp) -> bool:
    return u.op is Ops.CONST and u.arg is Invalid


def lossless(dt0: DType, dt1: DType) -> bool:
    """Every value of dt0 is a value of dt1 (a cast there and back is the identity)."""
    if dt0 == dt1 or dt0 == dtypes.bool:
        return True
    if dt1 == IDX:
        return dt0 in dtypes.ints
    if dtypes.is_int(dt0) and dtypes.is_int(dt1):
        return dt0 != IDX and dtypes.min(dt1) <= dtypes.min(dt0) and dtypes.max(dt0) <= dtypes.max(dt1)
    mantissa = {dtypes.float64: 53, dtypes.float32: 24, dtypes.float16: 11, dtypes.bfloat16: 8}
    if dt1 in mantissa and dt0 in dtypes.ints:
        value_bits = 8 * dt0.itemsize - (0 if dtypes.is_unsigned(dt0) else 1)
        return value_bits <= mantissa[dt1] - (dt1 != dtypes.float64)
    if dt1 in mantissa and dt0 in mantissa:
        return dt0 != dt1 and dt1 in (dtypes.float64, dtypes.float32) and mantissa[dt0] < mantissa[dt1]
    return False


# ---------------------------------------------------------------------- gated indices
def _where_invalid_first(cond: UOp, i: UOp, val: UOp) -> UOp:
    return i if _is_invalid(val) else cond.logical_not().where(val, i)


pm_propagate_invalid = PatternMatcher(
    [
        # an op on a gated index is gated the same way: where(c, x, Invalid) op y -> where(c, x op y, Invalid)
        (
            invalid_gate.cast(name="cast"),
            lambda i, x, cond, cast: x.cast(cast.dtype) if i.dtype == IDX else None,
        ),
        (
            UPat(GroupOp.Unary, src=(invalid_gate,), name="alu"),
            lambda cond, x, alu, i: cond.where(x.alu(alu.op), i),
        ),
        (
            UPat(_Arith, src=(invalid_gate, _y), name="alu"),
            lambda cond, x, y, alu, i: cond.where(x.alu(alu.op, y), i),
        ),
        (
            UPat(_Arith, src=(_y, invalid_gate), name="alu"),
            lambda cond, x, y, alu, i: cond.where(y.alu(alu.op, x), i),
        ),
        (
            UPat(GroupOp.Comparison, src=(invalid_gate, _y), name="alu"),
            lambda cond, x, y, alu, i: (
                x.alu(alu.op, y) if i.dtype == IDX else cond.where(x.alu(alu.op, y), i.cast(dtypes.bool))
            ),
        ),
        (
            UPat(GroupOp.Comparison, src=(_y, invalid_gate), name="alu"),
            lambda cond, x, y, alu, i: (
                y.alu(alu.op, x) if i.dtype == IDX else cond.where(y.alu(alu.op, x), i.cast(dtypes.bool))
            ),
        ),
        # anything computed from Invalid is Invalid
        (UPat(GroupOp.Unary, src=(invalid_pat,)), lambda i: i),
        (UPat(_Arith, src=[invalid_pat, UPat()]), lambda i: i),
        # Invalid goes in the false branch: where(c, Invalid, v) -> where(!c, v, Invalid)
        (UPat.var("cond").where(invalid_pat, UPat.var("val")), _where_invalid_first),
        # lift a nested gate out: where(a, where(c, x, Invalid), b) -> where(!a | c, where(a, x, b), Invalid)
        (
            UPat.var("a").where(invalid_gate, UPat.var("c")),
            lambda cond, i, x, a, c: (
                None
                if _is_invalid(c)
                else (cond if a is cond else (a.logical_not() | cond)).where(a.where(x, c), i)
            ),
        ),
        (
            UPat.var("a").where(UPat.var("b"), invalid_gate),
            lambda cond, i, x, a, b: None if _is_invalid(b) else (a | cond).where(a.where(b, x), i),
        ),
        (UPat(Ops.BITCAST, src=(invalid_pat,), name="bc"), lambda bc, i: i.cast(bc.dtype)),
        (
            UPat(Ops.BITCAST, src=(invalid_gate,), name="bc"),
            lambda bc, cond, x, i: cond.where(x.bitcast(bc.dtype), i.bitcast(bc.dtype)),
        ),
    ]
)


# ---------------------------------------------------------------------- local folding
def _others(terms: list[UOp], i: int, j: int) -> list[UOp]:
    return [t for k, t in enumerate(terms) if k not in (i, j)]


def _add_divmod_recombine(x: UOp) -> UOp | None:
    """x%c*m + x//c*(c*m) -> x*m, and its nested variants, anywhere in a sum of index terms."""
    terms = list(x.split_uop(Ops.ADD))
    for i, u in enumerate(terms):
        if u.op is Ops.FLOORMOD and u.src[1].op is Ops.CONST:
            base, div, mul = u.src[0], u.src[1].arg, 1
        elif (
            u.op is Ops.MUL
            and u.src[1].op is Ops.CONST
            and (m := u.src[0]).op is Ops.FLOORMOD
            and m.src[1].op is Ops.CONST
        ):
            base, div, mul = m.src[0], m.src[1].arg, u.src[1].arg
        else:
            continue
        for j, v in enumerate(terms):
            if i == j or v.op is not Ops.MUL or v.src[1].op is not Ops.CONST or v.src[1].arg != div * mul:
                continue
            q = v.src[0]
            exact = (
                q.op is Ops.FLOORDIV and q.src[1].op is Ops.CONST and q.src[1].arg == div and q.src[0] is base
            )
            # (b//d)%div*m + b//(d*div)*(div*m) -> (b//d)*m
            if not exact and div > 0 and base.op is Ops.FLOORDIV and base.src[1].op is Ops.CONST:
                exact = (
                    q.op is Ops.FLOORDIV
                    and q.src[1].op is Ops.CONST
                    and q.src[0] is base.src[0]
                    and q.src[1].arg == base.src[1].arg * div
                )
            if exact:
                return (base * mul).usum(*_others(terms, i, j))
            # (b//div)%d*(div*m) + b%div*m -> b%(div*d)*m
            if (
                div > 0
                and q.op is Ops.FLOORMOD
                and q.src[1].op is Ops.CONST
                and (d := q.src[1].arg) > 0
                and q.src[0].op is Ops.FLOORDIV
                and q.src[0].src[0] is base
                and q.src[0].src[1].op is Ops.CONST
                and q.src[0].src[1].arg == div
            ):
                folded: UOp = (base % (div * d)) * mul
                return folded.usum(*_others(terms, i, j))
    return None


def _all_ones(dt: DType, v: int) -> bool:
    """Every bit of `dt` is set in v (-1 for signed ints and index, the maximum for unsigned)."""
    return v == (dtypes.max(dt) if dtypes.is_unsigned(dt) else -1)


def _bool_cast_ne(x: UOp, c: UOp) -> UOp:
    return x if c.arg == 0 else x.logical_not() if c.arg == 1 else x.const_like(True)


pm_symbolic_simple = PatternMatcher(
    [
        (UPat.var("x", _INTB) ^ 0, lambda x: x),  # x^0 -> x
        (_xi // _xi, lambda x: x.const_like(1)),  # x//x -> 1 (x//0 is undefined)
        (_xi // -1, lambda x: -x),  # x//-1 -> -x
        ((UPat.var("x", _INTB) ^ _y) ^ _y, lambda x, y: x),  # (x^y)^y -> x
        ((UPat.var(dtype=_INTS) % _y).named("base") % _y, lambda base, y: base),  # (x%y)%y -> x%y
        (UPat(Ops.ADD, IDX, name="x"), _add_divmod_recombine),
        (_xb.where(UPat.const(dtypes.bool, True), UPat.const(dtypes.bool, False)), lambda x: x),
        (_xb.where(UPat.const(dtypes.bool, False), UPat.const(dtypes.bool, True)), lambda x: x.logical_not()),
        (UPat(Ops.CMPNE, src=(_xb.cast(_INTS), _c)), _bool_cast_ne),  # cast(b) != c decided by c
        (UPat(Ops.TRUNC, src=(UPat.var("x", _INTB),)), lambda x: x),
        (_xi % _xi, lambda x: x.const_like(0)),  # x%x -> 0
        (UPat.var("x", _INTB) ^ UPat.var("x", _INTB), lambda x: x.const_like(0)),  # x^x -> 0
        (UPat.var("x", _INTB) & 0, lambda x: x.const_like(0)),  # x&0 -> 0
        # (x&mask)>>k -> x>>k when the mask only clears bits below k
        (
            (_xi & UPat(Ops.CONST, name="mask")) >> UPat(Ops.CONST, name="k"),
            lambda x, mask, k: x >> k.arg if _all_ones(x.dtype, mask.arg | ((1 << k.arg) - 1)) else None,
        ),
        # bool MUL is AND, ADD and MAX are OR
        (UPat.var("x", dtypes.bool) * UPat.var("y", dtypes.bool), lambda x, y: x & y),
        (UPat.var("x", dtypes.bool) + UPat.var("y", dtypes.bool), lambda x, y: x | y),
        (UPat.var("x", dtypes.bool).maximum(UPat.var("y", dtypes.bool)), lambda x, y: x | y),
        # casts
        (UPat((Ops.CAST, Ops.BITCAST), name="r"), lambda r: r.src[0] if r.dtype == r.src[0].dtype else None),
        (
            _x.cast(name="a").cast(name="b"),
            lambda x, a, b: x if x.dtype == b.dtype and lossless(b.dtype, a.dtype) else None,
        ),
        (UPat.var("x", _INTS).cast(dtypes.bool), lambda x: x.ne(0)),
        # a.where(b.where(c, d), d) -> (a&b).where(c, d)
        (
            UPat.var("a").where(UPat.var("b").where(UPat.var("c"), UPat.var("d")), UPat.var("d")),
            lambda a, b, c, d: (a & b).where(c, d),
        ),
    ]
)

# index ops put their operands in one order (by structure), so equal sums are the same node
pm_commutative = PatternMatcher(
    [
        (
            UPat(GroupOp.Commutative, IDX, name="x"),
            lambda x: x.replace(src=x.src[::-1]) if x.src[1].tuplize < x.src[0].tuplize else None,
        ),
    ]
)


# ---------------------------------------------------------------------- term combining and comparisons
def _lt_folding(x: UOp, c: int) -> UOp | None:
    """sum < c -> (sum/d) < c//d: d divides c and every non-unit term, and the unit terms lie in [0, d)."""
    terms = list(x.split_uop(Ops.ADD))
    p, np_ = [u for u in terms if u.const_factor() == 1], [u for u in terms if u.const_factor() != 1]
    if (
        np_
        and (d := math.gcd(*[u.const_factor() for u in np_], c)) > 1
        and 0 <= sum(u.vmin for u in p)
        and sum(u.vmax for u in p) < d
    ):
        q = np_[0].usum(*np_[1:]).divides(d)
        return None if q is None else q < (c // d)
    return None


def _canonicalize_simplex(x: UOp) -> UOp | None:
    """a0*x0 + a1*x1 + ... with ai > 0 and xi >= 0 is positive iff x0 + x1 + ... is (ints)."""
    changed, ret = False, []
    for u in x.split_uop(Ops.ADD):
        if u.op is Ops.MUL and u.src[1].op is Ops.CONST and u.src[1].arg > 0:
            changed, u = True, u.src[0]
        if not (u.op in (Ops.CONST, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.RANGE) and u.vmin >= 0):
            return None
        ret.append(u)
    return ret[0].usum(*ret[1:]) if changed else None


def _where_alu(alu: UOp, c: UOp, t: UOp, tt: UOp, f: UOp, ff: UOp) -> UOp | None:
    if t.op is tt.op is Ops.CONST or f.op is ff.op is Ops.CONST:
        return c.where(t.alu(alu.op, tt), f.alu(alu.op, ff))
    return None


def _long_to_int(u: UOp, x: UOp, y: UOp) -> UOp | None:
    if any(v.overflows(dtypes.int32) for v in (u, x, y)):
        return None
    return x.cast(dtypes.int32).alu(u.op, y.cast(dtypes.int32)).cast(u.dtype)


def _fold_point(x: UOp) -> UOp | None:
    return x.const_like(x.vmin) if x.vmin == x.vmax else None


pm_symbolic_index = PatternMatcher(
    [
        (_xb | _xb.logical_not(), lambda x: x.const_like(True)),  # x|!x -> True
        # ** combine terms (ints: exact modulo 2**bits) **
        (_xi * _c0 + _xi * _c1, lambda x, c0, c1: x * (c0 + c1)),  # x*c0+x*c1 -> x*(c0+c1)
        ((UPat.var("y", _INTS) + _xi * _c0) + _xi * _c1, lambda x, y, c0, c1: y + x * (c0 + c1)),
        (_xi + _xi * _c, lambda x, c: x * (c + 1)),  # x+x*c -> x*(c+1)
        ((UPat.var("y", _INTS) + _xi) + _xi * _c, lambda x, y, c: y + x * (c + 1)),
        ((UPat.var("y", _INTS) + _xi * _c) + _xi, lambda x, y, c: y + x * (c + 1)),
        (_xi + _xi, lambda x: x * 2),  # x+x -> x*2
        ((UPat.var("y", _INTS) + _xi) + _xi, lambda y, x: y + x * 2),
        (-1 * (_xi + _c), lambda x, c: (-x) + (-c)),  # -(x+c) -> -x + -c
        (_c1 * (_xidx + _c0), lambda x, c1, c0: (c1 * x) + (c1 * c0)),  # c1*(x+c0) -> c1*x + c1*c0
        # ** where **
        (
            UPat.var("cond", dtypes.bool).logical_not().where(UPat.var("t"), UPat.var("f")),
            lambda cond, t, f: None if _is_invalid(f) else cond.where(f, t),
        ),
        (
            UPat(
                GroupOp.Binary,
                name="alu",
                src=(
                    UPat.var("c").where(UPat.var("t"), UPat.var("f")),
                    UPat.var("c").where(UPat.var("tt"), UPat.var("ff")),
                ),
            ),
            _where_alu,
        ),
        (
            (UPat.var("y") + UPat.var("c").where(UPat.var("t"), UPat.var("f")))
            + UPat.var("c").where(UPat.var("tt"), UPat.var("ff")),
            lambda y, c, t, tt, f, ff: (
                y + c.where(t + tt, f + ff)
                if t.op is tt.op is Ops.CONST or f.op is ff.op is Ops.CONST
                else None
            ),
        ),
        # ** a node whose range is one value is that value **
        (UPat((Ops.CMPLT, Ops.CMPNE), src=(UPat(dtype=_INTB), UPat(dtype=_INTB)), name="x"), _fold_point),
        (
            UPat((Ops.FLOORDIV, Ops.FLOORMOD, Ops.DEFINE_VAR, Ops.BIND, Ops.SPECIAL), _INTS, name="x"),
            _fold_point,
        ),
        (UPat(Ops.RANGE, src=(UPat(Ops.CONST),), name="x"), _fold_point),
        # max(x, y) -> x or y when the ranges decide it
        (
            UPat.var("x", _INTS).maximum(UPat.var("y", _INTS)),
            lambda x, y: x if x.vmin >= y.vmax else y if x.vmax <= y.vmin else None,
        ),
        # ** two-stage constant folding: (x op c1) op c2 -> x op (c1 op c2) **
        *(
            (
                UPat.var("x", _INTB).alu(op, _c1).alu(op, UPat(Ops.CONST, name="c2")).named("f"),
                lambda f, x, c1, c2: x.alu(f.op, c1.alu(f.op, c2)),
            )
            for op in (Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.MAX)
        ),
        ((_c0 + _xidx) < _c1, lambda x, c0, c1: x < (c1 - c0)),  # x+c0 < c1 -> x < c1-c0
        (
            (_xidx // _c1) // UPat(Ops.CONST, name="c2"),
            lambda x, c1, c2: x // (c1 * c2) if c2.arg > 0 else None,
        ),
        # ** comparisons of index terms **
        (
            (_c0 * _xidx) < _c1,
            lambda x, c0, c1: x < math.ceil(c1.arg / c0.arg) if c0.arg > 0 and c1.arg > 0 else None,
        ),
        (
            (_c0 * _xidx) < _c1,
            lambda x, c0, c1: (
                (-x) < (-math.floor(-c1.arg / -c0.arg))
                if c0.arg < 0 and c0.arg != -1 and c1.arg <= 0
                else None
            ),
        ),
        (
            (_xidx // UPat(Ops.CONST, name="d")) < _c,
            lambda x, d, c: x < (c.arg * d.arg) if d.arg > 0 else None,
        ),
        # ** constants last: (x+c)+y -> (x+y)+c, (x*c)*y -> (x*y)*c (ints) **
        ((_xi + _c1) + UPat.var("y", _INTS), lambda x, c1, y: (x + y) + c1),
        ((_xi * _c1) * UPat.var("y", _INTS), lambda x, c1, y: (x * y) * c1),
        (_xidx < _c, lambda x, c: _lt_folding(x, c.arg) if 0 < c.arg else None),
        (_xidx * -1 < UPat.var("y", IDX) * -1, lambda x, y: y < x),
        (
            (_xidx < 1).ne(True),
            lambda x: None if (n := _canonicalize_simplex(x)) is None else (n < 1).ne(True),
        ),
        # a range modulo (or divided by) its own end
        (
            UPat(Ops.RANGE, src=(UPat.var("end"),), allow_any_len=True, name="r") % UPat.var("end"),
            lambda r, end: r,
        ),
        (
            UPat(Ops.RANGE, src=(UPat.var("end"),), allow_any_len=True, name="r") // UPat.var("end"),
            lambda r, end: r.const_like(0),
        ),
        # ** casts **
        (
            _x.cast(name="a").cast(name="b"),
            lambda x, a, b: x.cast(b.dtype) if lossless(x.dtype, a.dtype) else None,
        ),
        (
            _xi.cast(_INTS, name="a").cast(name="b"),
            lambda x, a, b: (
                x.cast(b.dtype) if dtypes.min(a.dtype) <= x.vmin and x.vmax <= dtypes.max(a.dtype) else None
            ),
        ),
        (
            UPat(GroupOp.Binary, src=(UPat.var("x", dtypes.int64), UPat.var("y", dtypes.int64)), name="u"),
            _long_to_int,
        ),
        (
            (_xidx + _c).cast(dtypes.sints, name="cast"),
            lambda x, c, cast: x.cast(cast.dtype) + c.cast(cast.dtype),
        ),
    ]
)
