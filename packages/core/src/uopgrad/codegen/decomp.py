"""Decompositions (codegen, layer 11): ALU ops a backend does not render are rewritten into ops it does.

`pm_decomp` runs with the backend's `Target` as its context; each row fires only when its op is missing
from the target's op set, and builds the replacement from simpler ops (which are decomposed again if they are
missing too). The float results meet the conformance suite's bounds (its FORWARD_ULPS): FDIV is correctly
rounded, POW within its transcendental bound (e*log2|b| formed in double length, then one EXP2), and
bfloat16 MULACC rounds once.
The results follow REFERENCE's numerics (spec/reference.md §3): floor division from C's truncating CDIV/CMOD
(fmod for floats) with a correction, NaN-propagating MAX, and POW with numpy's sign and special-value rules.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, localcontext

from uopgrad.codegen.target import Target
from uopgrad.dtype import DType, dtypes
from uopgrad.ops import GroupOp, Ops
from uopgrad.rewrite import PatternMatcher, UPat
from uopgrad.uop import UOp

__all__ = ["pm_decomp"]

# the integer dtype of each float's width, for reading a float's sign bit
_SIGNED_OF_WIDTH = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}


def _alu(op: Ops, *src: UOp) -> UOp:
    """A scalar ALU node: comparisons give bool, every other op the dtype of its last source."""
    dt = dtypes.bool if op in GroupOp.Comparison else src[-1].dtype
    return UOp(op, dt, src)


def _c(dt: DType, v: float | int | bool) -> UOp:
    return UOp(Ops.CONST, dt, (), dtypes.as_const(v, dt))


def _where(c: UOp, a: UOp, b: UOp) -> UOp:
    return UOp(Ops.WHERE, a.dtype, (c, a, b))


def _not(x: UOp) -> UOp:
    return _alu(Ops.CMPNE, x, _c(dtypes.bool, True))


def _eq(a: UOp, b: UOp) -> UOp:
    return _not(_alu(Ops.CMPNE, a, b))


def _and(a: UOp, b: UOp) -> UOp:
    return _alu(Ops.AND, a, b)


def _or(a: UOp, b: UOp) -> UOp:
    return _alu(Ops.OR, a, b)


def _neg(x: UOp) -> UOp:
    return _alu(Ops.NEG, x)


def _nonneg(x: UOp) -> bool:
    lo = x.vmin
    return not isinstance(lo, bool) and lo >= 0


# ---------------------------------------------------------------------- the decompositions
def _max(a: UOp, b: UOp) -> UOp:
    """numpy's maximum: a if a is NaN or a > b, else b (so a NaN b is kept); float16 keeps a on a tie
    (its loop compares with >=), float32/float64 keep b (max(0.0, -0.0) is -0.0)."""
    if a.dtype == dtypes.float16:
        ge = _or(_alu(Ops.CMPLT, b, a), _eq(a, b))  # a >= b (false when either is NaN)
        return _where(_or(_alu(Ops.CMPNE, a, a), ge), a, b)
    m = _where(_alu(Ops.CMPLT, b, a), a, b)
    return _where(_alu(Ops.CMPNE, a, a), a, m) if dtypes.is_float(a.dtype) else m


def _floor_fix(r: UOp, b: UOp) -> UOp:
    """C's remainder r of a/b is non-zero and of the other sign than b: the quotient rounded the wrong way."""
    zero = _c(r.dtype, 0)
    other_sign = _alu(Ops.CMPNE, _alu(Ops.CMPLT, r, zero), _alu(Ops.CMPLT, b, zero))
    return _where(_alu(Ops.CMPNE, r, zero), other_sign, _c(dtypes.bool, False))


def _sign_bit(x: UOp) -> UOp:
    """Whether float x has its sign bit set (-0.0 and negative NaNs too)."""
    bits = _SIGNED_OF_WIDTH[x.dtype.itemsize]
    return _alu(Ops.CMPLT, UOp(Ops.BITCAST, bits, (x,)), _c(bits, 0))


def _zero_signed_as(x: UOp) -> UOp:
    """copysign(0, x)."""
    return _where(_sign_bit(x), _c(x.dtype, -0.0), _c(x.dtype, 0.0))


def _float_divmod(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """numpy's npy_divmod: (a // b, a % b) from fmod (CMOD) and the floor of (a - mod) / b, pushed up when it
    lands more than 0.5 below; b == 0 gives a / b and fmod's NaN, a zero remainder takes b's sign and a zero
    quotient a / b's."""
    dt = a.dtype
    zero = _c(dt, 0.0)
    mod = _alu(Ops.CMOD, a, b)  # fmod: exact, the sign of a
    div = _alu(Ops.FDIV, _alu(Ops.ADD, a, _neg(mod)), b)
    fix = _floor_fix(mod, b)  # true for a NaN mod and b < 0 too, as in numpy (the results stay NaN)
    fixed_mod = _where(fix, _alu(Ops.ADD, mod, b), mod)
    rem = _where(_eq(mod, zero), _zero_signed_as(b), fixed_mod)
    div = _where(fix, _alu(Ops.ADD, div, _c(dt, -1.0)), div)
    t = _alu(Ops.TRUNC, div)
    fl = _where(_alu(Ops.CMPLT, div, t), _alu(Ops.ADD, t, _c(dt, -1.0)), t)  # floor(div)
    above_half = _alu(Ops.CMPLT, _c(dt, 0.5), _alu(Ops.ADD, div, _neg(fl)))
    fl = _where(above_half, _alu(Ops.ADD, fl, _c(dt, 1.0)), fl)
    q = _alu(Ops.FDIV, a, b)
    quot = _where(_eq(div, zero), _zero_signed_as(q), fl)
    return _where(_eq(b, zero), q, quot), rem


def _half_in_float(x: UOp, a: UOp, b: UOp, fn: Callable[[UOp, UOp], UOp]) -> UOp:
    """fn(a, b) on floats; the half types are computed in float32 and rounded once, as numpy does."""
    if x.dtype not in (dtypes.float16, dtypes.bfloat16):
        return fn(a, b)
    f = dtypes.float32
    return UOp(Ops.CAST, x.dtype, (fn(UOp(Ops.CAST, f, (a,)), UOp(Ops.CAST, f, (b,))),))


def _floordiv(x: UOp, a: UOp, b: UOp) -> UOp | None:
    if dtypes.is_float(x.dtype):
        return _half_in_float(x, a, b, lambda a, b: _float_divmod(a, b)[0])
    if not dtypes.is_int(x.dtype):
        return None
    if _nonneg(a) and _nonneg(b):
        return _alu(Ops.CDIV, a, b)
    fix = _floor_fix(_alu(Ops.CMOD, a, b), b)
    return _alu(Ops.ADD, _alu(Ops.CDIV, a, b), _where(fix, _c(x.dtype, -1), _c(x.dtype, 0)))


def _floormod(x: UOp, a: UOp, b: UOp) -> UOp | None:
    if dtypes.is_float(x.dtype):
        return _half_in_float(x, a, b, lambda a, b: _float_divmod(a, b)[1])
    if not dtypes.is_int(x.dtype):
        return None
    r = _alu(Ops.CMOD, a, b)
    if _nonneg(a) and _nonneg(b):
        return r
    return _alu(Ops.ADD, r, _where(_floor_fix(r, b), b, _c(x.dtype, 0)))


def _float_pow(b: UOp, e: UOp) -> UOp:
    """b**e = ±2**(e*log2|b|), with numpy's rules: the sign from an odd integer e and a negative b (-0.0 too),
    NaN for a finite negative b and a non-integer e, and 1 for e == 0, b == 1, or |b| == 1 and e = ±inf."""
    dt = b.dtype
    bits = _SIGNED_OF_WIDTH[dt.itemsize]
    neg = _alu(Ops.CMPLT, UOp(Ops.BITCAST, bits, (b,)), _c(bits, 0))  # the sign bit: -0.0 is negative too
    ax = _where(neg, _neg(b), b)
    finite_nonzero = _and(_alu(Ops.CMPNE, ax, _c(dt, 0.0)), _alu(Ops.CMPLT, ax, _c(dt, float("inf"))))
    r = _alu(Ops.EXP2, _alu(Ops.MUL, e, _alu(Ops.LOG2, ax)))
    if dt in _FLOAT_BITS:  # 0, inf, NaN and a huge e keep the plain form: their results are exact or overflow
        moderate = _alu(Ops.CMPLT, _abs(e), _c(dt, 2.0**100))
        r = _where(_and(finite_nonzero, moderate), _exact_exp2_log2(ax, e, _FLOAT_BITS[dt]), r)
    integral = _eq(_alu(Ops.TRUNC, e), e)
    twice_half = _alu(Ops.MUL, _alu(Ops.TRUNC, _alu(Ops.MUL, e, _c(dt, 0.5))), _c(dt, 2.0))
    odd = _and(integral, _alu(Ops.CMPNE, twice_half, e))
    res = _where(_and(neg, odd), _neg(r), r)
    res = _where(_and(_and(neg, finite_nonzero), _not(integral)), _c(dt, float("nan")), res)
    e_inf = _or(_eq(e, _c(dt, float("inf"))), _eq(e, _c(dt, float("-inf"))))
    one = _or(_or(_eq(b, _c(dt, 1.0)), _eq(e, _c(dt, 0.0))), _and(_eq(ax, _c(dt, 1.0)), e_inf))
    # b**1 is b exactly (exp2(log2(max)) can round up past the largest float)
    return _where(one, _c(dt, 1.0), _where(_eq(e, _c(dt, 1.0)), b, res))


def _exact_exp2_log2(ax: UOp, e: UOp, fb: _FloatBits) -> UOp:
    """2**(e*log2(ax)) for a finite ax > 0 and a moderate e, within about an ulp: y = e*log2(ax) is formed
    in double length (hi + lo), so only EXP2(hi)'s own rounding reaches the result. Rounding log2(ax) to the
    dtype instead would carry its half ulp, times |y|, into it (10 ulp at |y| ~ 40). log(m) = 2*atanh(s),
    s = (m-1)/(m+1) for ax = m * 2**k, m in [sqrt(1/2), sqrt(2)]: 2s and the series' first term (2/3)s^3
    (up to 1% of it) in double length, the rest (under 0.02%) in the dtype."""
    dt, c = ax.dtype, _c(ax.dtype, fb.split)
    m, k = _frexp(ax, fb)
    kf = UOp(Ops.CAST, dt, (k,))
    big = _alu(Ops.CMPLT, _c(dt, 2.0**0.5), m)
    m = _where(big, _alu(Ops.MUL, m, _c(dt, 0.5)), m)
    kf = _where(big, _alu(Ops.ADD, kf, _c(dt, 1.0)), kf)
    num = _alu(Ops.ADD, m, _c(dt, -1.0))  # exact (Sterbenz)
    den, den_err = _two_sum(m, _c(dt, 1.0))
    s = _alu(Ops.FDIV, num, den)
    s_lo = _alu(Ops.SUB, _residual(num, s, den, c), _alu(Ops.MUL, s, den_err))
    s_lo = _alu(Ops.FDIV, s_lo, den)  # s + s_lo = num / (den + den_err)
    (third_hi, third_lo), (log2e_hi, log2e_lo) = _DOUBLE_LENGTH[dt]
    z, z_err = _two_prod(s, s, c)
    s3, s3_err = _two_prod(z, s, c)
    s3_err = _alu(Ops.ADD, s3_err, _alu(Ops.MUL, z_err, s))
    # the series' first term, (2/3)s^3, is up to 1% of log(m): in double length as well
    t1, t1_err = _two_prod(s3, _c(dt, third_hi), c)
    t1_err = _alu(Ops.ADD, t1_err, _alu(Ops.MUL, s3_err, _c(dt, third_hi)))
    # (2/3)(s + s_lo)^3 - (2/3)s^3 is 2 s^2 s_lo to first order
    low = _alu(Ops.ADD, _alu(Ops.MUL, s3, _c(dt, third_lo)), _alu(Ops.MUL, _alu(Ops.ADD, z, z), s_lo))
    t1_err = _alu(Ops.ADD, t1_err, low)
    terms = (fb.mant + 8) // 5  # z**n / (2n + 5) past them is below the dtype's precision of the sum
    poly = _c(dt, 1.0 / (2 * terms + 5))
    for n in reversed(range(terms)):
        poly = _alu(Ops.ADD, _alu(Ops.MUL, poly, z), _c(dt, 1.0 / (2 * n + 5)))
    rest = _alu(Ops.MUL, _alu(Ops.MUL, _alu(Ops.ADD, s3, s3), z), poly)  # 2s^5/5 + 2s^7/7 + ...
    # log(m) = ln_hi + ln_lo, ln_lo within about an ulp of ln_hi (every part above it summed exactly)
    ln_hi, ln_err = _two_sum(_alu(Ops.ADD, s, s), t1)
    ln_hi, ln_err2 = _two_sum(ln_hi, rest)
    ln_lo = _alu(Ops.ADD, _alu(Ops.ADD, ln_err, ln_err2), _alu(Ops.ADD, t1_err, _alu(Ops.ADD, s_lo, s_lo)))
    p, p_err = _two_prod(ln_hi, _c(dt, log2e_hi), c)
    lo = _alu(Ops.ADD, _alu(Ops.MUL, ln_hi, _c(dt, log2e_lo)), _alu(Ops.MUL, ln_lo, _c(dt, log2e_hi)))
    l_hi, l_err = _two_sum(kf, p)  # log2(ax) = l_hi + l_lo, l_lo within about an ulp of l_hi
    l_lo = _alu(Ops.ADD, l_err, _alu(Ops.ADD, p_err, lo))
    y, y_err = _two_prod(e, l_hi, c)
    y_lo = _alu(Ops.ADD, y_err, _alu(Ops.MUL, e, l_lo))
    r = _alu(Ops.EXP2, y)  # 2**(y + y_lo) = 2**y * (1 + y_lo*ln2), the square of y_lo*ln2 far below an ulp
    fixed = _alu(Ops.ADD, r, _alu(Ops.MUL, r, _alu(Ops.MUL, y_lo, _c(dt, math.log(2)))))
    return _where(_alu(Ops.CMPLT, r, _c(dt, float("inf"))), fixed, r)  # inf * 0 would be NaN


def _int_pow(b: UOp, e: UOp) -> UOp:
    """b**e by square-and-multiply over e's bits, wrapping; a negative e gives 1 for b == 1, ±1 for b == -1
    (by e's parity), else 0 (spec/reference.md §3)."""
    dt = b.dtype
    bits = 8 * dt.itemsize - (0 if dtypes.is_unsigned(dt) else 1)
    hi = e.vmax
    if isinstance(hi, int) and not isinstance(hi, bool):
        bits = max(1, min(bits, hi.bit_length()))
    one, zero = _c(dt, 1), _c(dt, 0)
    r, p = one, b
    for i in range(bits):
        bit = _alu(Ops.CMPNE, _alu(Ops.AND, _alu(Ops.SHR, e, _c(dt, i)), one), zero)
        r = _where(bit, _alu(Ops.MUL, r, p), r)
        if i + 1 < bits:
            p = _alu(Ops.MUL, p, p)
    if dtypes.is_unsigned(dt) or _nonneg(e):
        return r
    odd = _alu(Ops.CMPNE, _alu(Ops.AND, e, one), zero)
    minus_one = _c(dt, -1)
    inv = _where(_eq(b, one), one, _where(_eq(b, minus_one), _where(odd, minus_one, one), zero))
    return _where(_alu(Ops.CMPLT, e, zero), inv, r)


def _pow(target: Target, x: UOp, b: UOp, e: UOp) -> UOp:
    wider = {dtypes.float16: dtypes.float32, dtypes.bfloat16: dtypes.float32}
    if dtypes.float64 in target.dtypes:
        # e*log2|b| carries log2's rounding times |e*log2|b|| into the result: float32 computed in float32
        # is ~5 ulp off at |e*log2 b| ~ 20; in float64 the error stays far below float32's ulp
        wider[dtypes.float32] = dtypes.float64
    if x.dtype in wider:  # computed in the wider float, rounded once
        f = wider[x.dtype]
        return UOp(Ops.CAST, x.dtype, (_float_pow(UOp(Ops.CAST, f, (b,)), UOp(Ops.CAST, f, (e,))),))
    if dtypes.is_float(x.dtype):
        return _float_pow(b, e)
    if x.dtype == dtypes.bool:
        return _where(e, b, _c(dtypes.bool, True))  # b**e on 0/1: b, or 1 when e is 0
    return _int_pow(b, e)


def _sub(a: UOp, b: UOp) -> UOp:
    if a.dtype == dtypes.bool:
        return _alu(Ops.CMPNE, a, b)  # bool a-b is computed on 0/1, then != 0: xor
    return _alu(Ops.ADD, a, _neg(b))


def _neg_decomp(x: UOp) -> UOp:
    return _not(x) if x.dtype == dtypes.bool else _alu(Ops.MUL, x, _c(x.dtype, -1))


@dataclass(frozen=True)
class _FloatBits:
    """A binary float's layout, for the division that works on significands and exponents apart."""

    ints: DType  # the signed integer of its width (the bits)
    mant: int  # significand bits stored
    bias: int  # exponent bias
    split: float  # Veltkamp's constant 2**ceil(p/2) + 1: splits a significand into halves

    @property
    def emin(self) -> int:
        """The smallest normal exponent."""
        return 1 - self.bias


_FLOAT_BITS = {
    dtypes.float32: _FloatBits(dtypes.int32, 23, 127, 2.0**12 + 1),
    dtypes.float64: _FloatBits(dtypes.int64, 52, 1023, 2.0**27 + 1),
}


def _hi_lo(x: Decimal, dt: DType) -> tuple[float, float]:
    """x as hi + lo in `dt`: hi rounded to dt, lo the rest rounded (twice dt's precision between them)."""
    hi = float(x)
    if dt == dtypes.float32:
        hi = struct.unpack("f", struct.pack("f", hi))[0]
    return hi, float(x - Decimal(hi))


with localcontext() as _ctx:
    _ctx.prec = 40
    # 2/3 and log2(e) in double length
    _DOUBLE_LENGTH = {dt: (_hi_lo(Decimal(2) / 3, dt), _hi_lo(1 / Decimal(2).ln(), dt)) for dt in _FLOAT_BITS}


def _split(x: UOp, c: UOp) -> tuple[UOp, UOp]:
    """Veltkamp: x = hi + lo exactly, each with half the significand, so products of halves are exact."""
    t = _alu(Ops.MUL, x, c)
    hi = _alu(Ops.SUB, t, _alu(Ops.SUB, t, x))
    return hi, _alu(Ops.SUB, x, hi)


def _two_prod(x: UOp, y: UOp, c: UOp) -> tuple[UOp, UOp]:
    """Dekker: x*y = p + err exactly, from the halves (no FMA: a renderer may not have one; the C backend
    turns contraction off)."""
    (xh, xl), (yh, yl) = _split(x, c), _split(y, c)
    p = _alu(Ops.MUL, x, y)
    err = _alu(Ops.ADD, _alu(Ops.SUB, _alu(Ops.MUL, xh, yh), p), _alu(Ops.MUL, xh, yl))
    return p, _alu(Ops.ADD, _alu(Ops.ADD, err, _alu(Ops.MUL, xl, yh)), _alu(Ops.MUL, xl, yl))


def _two_sum(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """Knuth: a + b = s + err exactly."""
    s = _alu(Ops.ADD, a, b)
    bb = _alu(Ops.SUB, s, a)
    return s, _alu(Ops.ADD, _alu(Ops.SUB, a, _alu(Ops.SUB, s, bb)), _alu(Ops.SUB, b, bb))


def _residual(a: UOp, q: UOp, b: UOp, c: UOp) -> UOp:
    """a - q*b, exactly for q close to a/b (up to its last bits), by Dekker's product."""
    p, err = _two_prod(q, b, c)
    return _alu(Ops.SUB, _alu(Ops.SUB, a, p), err)


def _abs(x: UOp) -> UOp:
    return _where(_alu(Ops.CMPLT, x, _c(x.dtype, 0.0)), _neg(x), x)


def _frexp(x: UOp, fb: _FloatBits) -> tuple[UOp, UOp]:
    """(m, e) with x = m * 2**e, |m| in [1, 2) of x's sign, for a finite non-zero x (a denormal is first
    scaled by 2**64 to be normal)."""
    dt, it = x.dtype, fb.ints
    tiny = _alu(Ops.CMPLT, _abs(x), _c(dt, 2.0**fb.emin))
    bits = UOp(Ops.BITCAST, it, (_where(tiny, _alu(Ops.MUL, x, _c(dt, 2.0**64)), x),))
    field_ = _alu(Ops.AND, _alu(Ops.SHR, bits, _c(it, fb.mant)), _c(it, 2 * fb.bias + 1))
    e = _alu(Ops.SUB, _alu(Ops.SUB, field_, _c(it, fb.bias)), _where(tiny, _c(it, 64), _c(it, 0)))
    sign_and_mant = _alu(Ops.AND, bits, _c(it, ~((2 * fb.bias + 1) << fb.mant)))
    return UOp(Ops.BITCAST, dt, (_alu(Ops.OR, sign_and_mant, _c(it, fb.bias << fb.mant)),)), e


def _pow2(k: UOp, dt: DType, fb: _FloatBits) -> UOp:
    """2**k as a float, for k in [emin, bias]."""
    return UOp(
        Ops.BITCAST, dt, (_alu(Ops.SHL, _alu(Ops.ADD, k, _c(k.dtype, fb.bias)), _c(k.dtype, fb.mant)),)
    )


def _clamp(k: UOp, lo: int, hi: int) -> UOp:
    k = _where(_alu(Ops.CMPLT, k, _c(k.dtype, lo)), _c(k.dtype, lo), k)
    return _where(_alu(Ops.CMPLT, _c(k.dtype, hi), k), _c(k.dtype, hi), k)


def _float_div(a: UOp, b: UOp) -> UOp:
    """IEEE a/b (float32, float64) from RECIPROCAL and integer ops on the bits. The significands ma, mb (in
    [1, 2)) are divided: q0 = ma*(1/mb), corrected once by the remainder ma - q0*mb, which Dekker's exact
    product gives without an FMA; then scaled by 2**(ea - eb) in an exact step and one that rounds once,
    unless the result is denormal: then it can round twice, which matters only when the first result
    lies on a midpoint of the denormal grid, where the remainder's sign says which way the quotient lies.
    A zero, infinite or NaN operand takes a * (1/b) with b reduced to ±1 when it is finite and non-zero, so
    0 / the smallest denormal is 0 (not 0 * inf)."""
    dt = a.dtype
    fb = _FLOAT_BITS[dt]
    zero, inf, c = _c(dt, 0.0), _c(dt, float("inf")), _c(dt, fb.split)

    def regular(x: UOp) -> UOp:  # finite and non-zero
        return _and(_alu(Ops.CMPLT, _abs(x), inf), _alu(Ops.CMPNE, x, zero))

    unit_b = _where(_alu(Ops.CMPLT, b, zero), _c(dt, -1.0), _c(dt, 1.0))
    special = _alu(Ops.MUL, a, _alu(Ops.RECIPROCAL, _where(regular(b), unit_b, b)))
    (ma, ea), (mb, eb) = _frexp(a, fb), _frexp(b, fb)
    r = _alu(Ops.RECIPROCAL, mb)
    q0 = _alu(Ops.MUL, ma, r)
    q = _alu(Ops.ADD, q0, _alu(Ops.MUL, _residual(ma, q0, mb, c), r))  # in (1/2, 2), correctly rounded
    side = _alu(Ops.MUL, _residual(ma, q, mb, c), r)  # its sign: the side of q the true quotient is on
    n = _alu(Ops.SUB, ea, eb)
    s1 = _clamp(n, fb.emin + 1, fb.bias - 1)  # q * 2**s1 stays normal: exact
    s2 = _clamp(_alu(Ops.SUB, n, s1), fb.emin + 1, fb.bias - 1)  # beyond it the result is 0 or inf anyway
    q1 = _alu(Ops.MUL, q, _pow2(s1, dt, fb))
    t = _alu(Ops.MUL, q1, _pow2(s2, dt, fb))
    # a tie of the last rounding: q1 - t/2**s2 (exact) is half a denormal step; go one step to the true side
    back = _pow2(_neg(s2), dt, fb)
    d = _alu(Ops.SUB, q1, _alu(Ops.MUL, t, back))
    ad = _abs(d)
    den = _c(dt, 2.0 ** (fb.emin - fb.mant))
    tie = _eq(_alu(Ops.ADD, ad, ad), _alu(Ops.MUL, den, back))
    up = _and(_alu(Ops.CMPLT, zero, d), _alu(Ops.CMPLT, zero, side))
    down = _and(_alu(Ops.CMPLT, d, zero), _alu(Ops.CMPLT, side, zero))
    fixed = _where(_and(tie, _or(up, down)), _alu(Ops.ADD, t, _where(up, den, _neg(den))), t)
    return _where(_and(regular(a), regular(b)), fixed, special)


def _fdiv(a: UOp, b: UOp) -> UOp:
    """a/b correctly rounded for floats (in float32 for the half types, then rounded once to them: a float32
    quotient has more than twice their bits, so the two roundings agree); CDIV for ints."""
    if a.dtype in (dtypes.float16, dtypes.bfloat16):
        f = dtypes.float32
        return UOp(Ops.CAST, a.dtype, (_float_div(UOp(Ops.CAST, f, (a,)), UOp(Ops.CAST, f, (b,))),))
    if dtypes.is_float(a.dtype):
        return _float_div(a, b)
    return _alu(Ops.CDIV, a, b)


def _mulacc(a: UOp, b: UOp, c: UOp) -> UOp:
    """a*b+c as REFERENCE rounds it (spec/reference.md §3): twice in the dtype, except bfloat16, which is
    computed in float32 and rounded once (a renderer that rounds every bfloat16 op would round thrice)."""
    if a.dtype != dtypes.bfloat16:
        return _alu(Ops.ADD, _alu(Ops.MUL, a, b), c)
    f = dtypes.float32
    a32, b32, c32 = (UOp(Ops.CAST, f, (x,)) for x in (a, b, c))
    return UOp(Ops.CAST, a.dtype, (_alu(Ops.ADD, _alu(Ops.MUL, a32, b32), c32),))


def _missing(ctx: Target, op: Ops, dt: DType) -> bool:
    """`op` on operands of `dt` is not rendered natively (not in the target's ops, or an exception)."""
    return not ctx.supports(op, dt)


_a, _b, _x = UPat.var("a"), UPat.var("b"), UPat.var("x")
_bool_a, _bool_b = UPat.var("a", dtypes.bool), UPat.var("b", dtypes.bool)

pm_decomp = PatternMatcher(
    [
        (
            UPat(Ops.MAX, src=(_a, _b)),
            lambda ctx, a, b: _max(a, b) if _missing(ctx, Ops.MAX, a.dtype) else None,
        ),  # max(a,b) -> where(a<b, b, a)
        (
            UPat(Ops.FLOORDIV, src=(_a, _b), name="x"),
            lambda ctx, x, a, b: _floordiv(x, a, b) if _missing(ctx, Ops.FLOORDIV, a.dtype) else None,
        ),  # a//b -> cdiv + fix
        (
            UPat(Ops.FLOORMOD, src=(_a, _b), name="x"),
            lambda ctx, x, a, b: _floormod(x, a, b) if _missing(ctx, Ops.FLOORMOD, a.dtype) else None,
        ),  # a%b -> cmod (+ fix)
        (
            UPat(Ops.POW, src=(_a, _b), name="x"),
            lambda ctx, x, a, b: _pow(ctx, x, a, b) if _missing(ctx, Ops.POW, a.dtype) else None,
        ),  # b**e -> exp2/log2 or mults
        (
            UPat(Ops.SUB, src=(_a, _b)),
            lambda ctx, a, b: _sub(a, b) if _missing(ctx, Ops.SUB, a.dtype) else None,
        ),  # a-b -> a+(-b)
        (
            UPat(Ops.NEG, src=(_x,)),
            lambda ctx, x: _neg_decomp(x) if _missing(ctx, Ops.NEG, x.dtype) else None,
        ),  # -x -> x*-1
        (
            UPat(Ops.CMPEQ, src=(_a, _b)),
            lambda ctx, a, b: _eq(a, b) if _missing(ctx, Ops.CMPEQ, a.dtype) else None,
        ),  # a==b -> !(a!=b)
        (
            UPat(Ops.FDIV, src=(_a, _b)),
            lambda ctx, a, b: _fdiv(a, b) if _missing(ctx, Ops.FDIV, a.dtype) else None,
        ),  # a/b
        (
            UPat(Ops.RECIPROCAL, src=(_x,)),
            lambda ctx, x: (
                _alu(Ops.FDIV, _c(x.dtype, 1.0), x)
                if _missing(ctx, Ops.RECIPROCAL, x.dtype) and not _missing(ctx, Ops.FDIV, x.dtype)
                else None
            ),
        ),  # 1/x -> FDIV(1, x)
        (
            UPat(Ops.MULACC, src=(_a, _b, _x)),
            lambda ctx, a, b, x: _mulacc(a, b, x) if _missing(ctx, Ops.MULACC, a.dtype) else None,
        ),  # mulacc(a,b,c) -> a*b+c (bfloat16: in float32)
        (
            UPat(Ops.AND, src=(_bool_a, _bool_b)),
            lambda ctx, a, b: (
                _where(a, b, _c(dtypes.bool, False)) if _missing(ctx, Ops.AND, a.dtype) else None
            ),
        ),  # a&b -> where(a, b, False) (bool)
        (
            UPat(Ops.OR, src=(_bool_a, _bool_b)),
            lambda ctx, a, b: _where(a, _c(dtypes.bool, True), b) if _missing(ctx, Ops.OR, a.dtype) else None,
        ),  # a|b -> where(a, True, b) (bool)
        (
            UPat(Ops.XOR, src=(_bool_a, _bool_b)),
            lambda ctx, a, b: _alu(Ops.CMPNE, a, b) if _missing(ctx, Ops.XOR, a.dtype) else None,
        ),  # a^b -> a!=b (bool)
    ]
)
