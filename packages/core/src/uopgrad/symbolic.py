"""Symbolic simplification (below uop.py, whose `simplify` runs `pm_symbolic`): `exec_alu`, the value of
an ALU op on constants, and `sym`, the table of algebraic and index-arithmetic laws behind `UOp.simplify`.
Every law holds for every value of its dtype: ints wrap at their width, `index` is unbounded, floats are
IEEE. The laws are listed in spec/symbolic.md.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from uopgrad.alu import FOLDED, exec_alu
from uopgrad.dtype import ConstType, DType, Invalid, dtypes
from uopgrad.ops import GroupOp, Ops
from uopgrad.rewrite import PatternMatcher, UPat
from uopgrad.symbolic_divmod import pm_div_mod
from uopgrad.symbolic_rules import pm_commutative, pm_propagate_invalid, pm_symbolic_index, pm_symbolic_simple
from uopgrad.symbolic_valid import pm_move_where_on_load, pm_simplify_valid
from uopgrad.uop_index import sym_infer

if TYPE_CHECKING:  # the rules build nodes through the nodes they match (uop.py imports this module)
    from uopgrad.uop import UOp

__all__ = [
    "exec_alu",
    "pm_commutative",
    "pm_laws",
    "pm_move_where_on_load",
    "pm_simplify_valid",
    "pm_sym_ungated",
    "pm_symbolic",
    "sym",
    "sym_infer",
]

_INTS = (*dtypes.ints, dtypes.index)
_INTS_BOOL = (*_INTS, dtypes.bool)
_INTS_FLOATS = (*_INTS, *dtypes.floats)


# ---------------------------------------------------------------------- helpers of the rules
def _fold(a: UOp) -> UOp | None:
    """alu(c1, ..., cn) -> c; an undefined or meaningless value (x//0, a float AND) leaves the node."""
    try:
        return a.const_like(exec_alu(a.op, a.dtype, [s.arg for s in a.src]))
    except (ArithmeticError, TypeError):
        return None


def _fold_lanes(a: UOp) -> UOp | None:
    """alu(v1, ..., vn) over vector constants (VCONST, or a CONST broadcast to every lane) -> VCONST, lane by
    lane; a lane with an Invalid operand is Invalid. Device constants (a Tensor's) are left alone."""
    n = a.dtype.count
    if n == 1 or any(s.src for s in a.src):
        return None
    lanes = [s.arg if s.op is Ops.VCONST else (s.arg,) * n for s in a.src]
    out: list[object] = []  # a lane is a constant or Invalid
    try:
        for vals in zip(*lanes):
            out.append(
                Invalid if any(v is Invalid for v in vals) else exec_alu(a.op, a.dtype.scalar(), list(vals))
            )
    except (ArithmeticError, TypeError):
        return None
    return type(a)(Ops.VCONST, a.dtype, (), tuple(out))


def _fold_cast(a: UOp, c: UOp) -> UOp | None:
    """cast(c) -> c': ints wrap, floats round, a float to an int truncates toward zero; inf/NaN stay casts."""
    try:
        return a.const_like(c.arg)
    except ValueError:
        return None


def _const_right(a: UOp, c: UOp, x: UOp) -> UOp | None:
    """c op x -> x op c; not a float MAX, where maximum(-0.0, 0.0) is 0.0 but maximum(0.0, -0.0) is -0.0."""
    if x.op is Ops.CONST or (a.op is Ops.MAX and a.dtype.scalar() in dtypes.floats):
        return None
    return a.replace(src=(x, c))


def _is_neg_zero(v: ConstType) -> bool:
    """v is -0.0, the float that x + v leaves unchanged for every x."""
    return isinstance(v, float) and v == 0 and math.copysign(1.0, v) < 0


def _bounds(u: UOp) -> tuple[int, int] | None:
    """[vmin, vmax] of an integer node as ints, or None when a bound is infinite (unbounded index)."""
    lo, hi = u.vmin, u.vmax
    return (int(lo), int(hi)) if isinstance(lo, int) and isinstance(hi, int) else None


def _fits(dt: DType, lo: int, hi: int) -> bool:
    """Every integer in [lo, hi] is a value of `dt` (always true for the unbounded index)."""
    return dt.scalar() == dtypes.index or (dtypes.min(dt) <= lo and hi <= dtypes.max(dt))


def _no_wrap(x: UOp, c: UOp, y: UOp | None = None) -> bool:
    """c != 0, and x*c (+ y) equals its integer value in x's dtype: it never wraps (judged by vmin/vmax)."""
    if c.arg == 0:
        return False
    if x.dtype.scalar() == dtypes.index:
        return True
    xb, yb = _bounds(x), (0, 0) if y is None else _bounds(y)
    if xb is None or yb is None:
        return False
    lo, hi = sorted((xb[0] * c.arg, xb[1] * c.arg))
    return _fits(x.dtype, lo + yb[0], hi + yb[1])


def _quotient(x: UOp, c: int) -> int | None:
    """The one value x//c takes over the whole range of x, if there is one."""
    if c == 0 or (b := _bounds(x)) is None:
        return None
    return b[0] // c if b[0] // c == b[1] // c else None


def _nest_div(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    """(x//a)//b -> x//(a*b) for a, b > 0, when a*b is a value of the dtype."""
    a, b = c1.arg, c2.arg
    return x // (a * b) if a > 0 and b > 0 and _fits(x.dtype, a * b, a * b) else None


def _fold_range(x: UOp) -> UOp | None:
    """x -> c when vmin == vmax == c."""
    b = _bounds(x)
    return x.const_like(b[0]) if b is not None and b[0] == b[1] else None


# ---------------------------------------------------------------------- the table
_x, _y, _a, _b = UPat.var("x"), UPat.var("y"), UPat.var("a"), UPat.var("b")
_xi, _xib, _xb = UPat.var("x", _INTS), UPat.var("x", _INTS_BOOL), UPat.var("x", dtypes.bool)
# fixed-width ints: index division and ranges follow the reference's normal form (uopgrad.symbolic_divmod)
_xw = UPat.var("x", dtypes.ints)
_xf = UPat.var("x", dtypes.floats)
# CONST only (not VCONST): the helpers read `c.arg` as one number
_c, _c1, _c2 = UPat(Ops.CONST, name="c"), UPat(Ops.CONST, name="c1"), UPat(Ops.CONST, name="c2")

pm_laws = PatternMatcher(
    [
        # ** constant folding **
        (UPat(FOLDED, src=UPat(Ops.CONST), name="a"), _fold),  # alu(c1, ..., cn) -> c (not x//0)
        (UPat(FOLDED, src=UPat((Ops.CONST, Ops.VCONST)), name="a"), _fold_lanes),  # alu(v1, v2) -> v by lane
        (UPat(Ops.CAST, src=(UPat(Ops.CONST, name="c"),), name="a"), _fold_cast),  # cast(c) -> c'
        # ** canonical order: constants go right **
        (
            UPat(GroupOp.Commutative, src=(UPat(Ops.CONST, name="c"), _x), name="a"),
            _const_right,
        ),  # c op x -> x op c
        # ** identities **
        (_xib + 0, lambda x: x),  # x+0 -> x (ints, bool; for floats -0.0+0.0 is 0.0, and 1/0.0 != 1/-0.0)
        (_xf + _c, lambda x, c: x if _is_neg_zero(c.arg) else None),  # x+(-0.0) -> x (floats)
        (_x * 1, lambda x: x),  # x*1 -> x
        (_xib * 0, lambda x: x.const_like(0)),  # x*0 -> 0 (ints, bool; a float NaN*0 is NaN)
        (_xi // 1, lambda x: x),  # x//1 -> x
        (_xi % 1, lambda x: x.const_like(0)),  # x%1 -> 0
        (UPat(GroupOp.Idempotent, src=(_x, _x)), lambda x: x),  # max(x,x) -> x, x&x -> x, x|x -> x
        ((_x < _x).named("r"), lambda r, x: r.const_like(False)),  # x<x -> False
        (
            _xib.ne(_xib).named("r"),
            lambda r, x: r.const_like(False),
        ),  # x!=x -> False (ints, bool; NaN != NaN)
        # ** combining terms (ints wrap, so these hold modulo 2**bits) **
        (UPat.var("x", _INTS_FLOATS) + UPat.var("x", _INTS_FLOATS), lambda x: x * 2),  # x+x -> x*2
        ((_xi + _c1) + _c2, lambda x, c1, c2: x + (c1 + c2)),  # (x+c1)+c2 -> x+(c1+c2)
        ((_xi * _c1) * _c2, lambda x, c1, c2: x * (c1 * c2)),  # (x*c1)*c2 -> x*(c1*c2)
        (_xi * _c1 + _xi * _c2, lambda x, c1, c2: x * (c1 + c2)),  # x*c1+x*c2 -> x*(c1+c2)
        (_xi * _c + _xi, lambda x, c: x * (c + 1)),  # x*c+x -> x*(c+1)
        # ** where **
        (UPat.const(dtypes.bool, True).where(_a, _b), lambda a, b: a),  # where(True, a, b) -> a
        (UPat.const(dtypes.bool, False).where(_a, _b), lambda a, b: b),  # where(False, a, b) -> b
        (UPat.var("c").where(_a, _a), lambda c, a: a),  # where(c, a, a) -> a
        # ** bool **
        (_xb & True, lambda x: x),  # x&True -> x
        (_xb & False, lambda x: x.const_like(False)),  # x&False -> False
        (_xb | False, lambda x: x),  # x|False -> x
        (_xb | True, lambda x: x.const_like(True)),  # x|True -> True
        (_xb.ne(False), lambda x: x),  # x!=False -> x
        (_xb.ne(True).ne(True), lambda x: x),  # not(not(x)) -> x
        # ** floor division and modulo of integers: c != 0; the dividend must not wrap where that matters **
        ((_xw % _c).named("m") % _c, lambda m, x, c: m if c.arg != 0 else None),  # (x%c)%c -> x%c
        ((_xw % _c) + (_xw // _c) * _c, lambda x, c: x if c.arg != 0 else None),  # x%c+(x//c)*c -> x
        ((_xw // _c1) // _c2, _nest_div),  # (x//a)//b -> x//(a*b) for a, b > 0
        ((_xw * _c) // _c, lambda x, c: x if _no_wrap(x, c) else None),  # (x*c)//c -> x
        ((_xw * _c) % _c, lambda x, c: x.const_like(0) if _no_wrap(x, c) else None),  # (x*c)%c -> 0
        (
            (_xw * _c + _y) // _c,
            lambda x, c, y: x + y // c if _no_wrap(x, c, y) else None,
        ),  # (x*c+y)//c -> x+y//c
        ((_xw * _c + _y) % _c, lambda x, c, y: y % c if _no_wrap(x, c, y) else None),  # (x*c+y)%c -> y%c
        # when all of x's range [vmin, vmax] has one quotient q = vmin//c = vmax//c:
        (
            _xw // _c,
            lambda x, c: None if (q := _quotient(x, c.arg)) is None else x.const_like(q),
        ),  # x//c -> q
        (
            _xw % _c,
            lambda x, c: None if (q := _quotient(x, c.arg)) is None else x - q * c.arg,
        ),  # x%c -> x-q*c
        # ** value ranges (vmin/vmax) **
        (UPat(GroupOp.ALU, dtypes.ints, name="x"), _fold_range),  # x -> c when vmin == vmax == c (ints)
        (
            UPat(GroupOp.Comparison, src=(UPat(dtype=_INTS_BOOL), UPat(dtype=_INTS_BOOL)), name="x"),
            _fold_range,
        ),  # a<b, a!=b -> True/False when the ranges of a and b decide it
    ]
)

_index = UPat(Ops.INDEX, name="index")
# the index-arithmetic normal form of the reference, after the laws above
pm_symbolic = (
    pm_propagate_invalid + pm_laws + pm_symbolic_simple + pm_commutative + pm_symbolic_index + pm_div_mod
)
pm_sym_distribute = PatternMatcher(
    [
        # where(s, a, b).cast() -> where(s, a.cast(), b.cast())
        (
            UPat.var("s").where(_a, _b).cast().named("cast"),
            lambda s, a, b, cast: s.where(a.cast(cast.dtype), b.cast(cast.dtype)),
        ),
        (-1 * (_xi + _y), lambda x, y: (-x) + (-y)),  # -(x+y) -> -x + -y (ints)
        (
            (UPat.var("x", dtypes.index) + _y) * _c,
            lambda x, y, c: x * c + y * c,
        ),  # (x+y)*c -> x*c+y*c (index)
        # storing what was just loaded from the same element does nothing
        (UPat(Ops.STORE, src=(_index, UPat(Ops.LOAD, src=(_index,)))), lambda index: type(index)(Ops.NOOP)),
    ]
)
# `sym` with gates simplified clause by clause (the reference's `sym`); `pm_sym_ungated` skips that step, for
# the many small rewrites while an index is built (simplify_valid on each was 60 s for a 20000-long arange)
pm_sym_ungated = pm_symbolic + pm_sym_distribute
sym = pm_symbolic + pm_simplify_valid + pm_sym_distribute
