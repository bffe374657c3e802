"""Elementwise Tensor ops from the primitives (a mixin of Tensor, layer 15 with tensor.py): `==`/`!=`/`~`,
exp, log, cos, tan, rsqrt, square, sign, abs, relu, sigmoid, tanh, gelu, softplus, clip; activations, erf
and the exact gelu, inverse trigonometric and hyperbolic functions, rounding, NaN/inf tests, any/all and
binary extras (lerp, logaddexp, copysign, fmod, mod, bitwise ops). Generic over `Self` (tensor_hooks).

Each op is a composition of ALU nodes the gradient table already knows, so every backend runs it without
new kernels. Rounding and tests have zero gradient (their comparisons carry none).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Self, TypeVar

from uopgrad.dtype import ConstType, dtypes
from uopgrad.errors import ArgumentError, DTypeError
from uopgrad.ops import Ops
from uopgrad.tensor_args import dim_alias
from uopgrad.tensor_hooks import TensorHooks

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["ElementwiseMixin"]

_E = TypeVar("_E", bound="ElementwiseMixin")  # the helpers below take and give values of the family

# Abramowitz & Stegun 7.1.26 is too coarse for float32; erf comes from erfc(x) = t·exp(-x² + P(t)) with
# t = 1/(1 + |x|/2) (Numerical Recipes' erfc, relative error below 1.2e-7 everywhere).
_ERFC_COEFFS = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)
# Abramowitz & Stegun 4.4.46: arcsin(x) = pi/2 - sqrt(1 - x) * P(x) on [0, 1]
_ASIN_COEFFS = (
    1.5707963050,
    -0.2145988016,
    0.0889789874,
    -0.0501743046,
    0.0308918810,
    -0.0170881256,
    0.0066700901,
    -0.0012624911,
)


_BIG = 2.0**28  # above it x² ± 1 rounds to x² even in float64
# below _SMALL, erf and arcsin come from their Taylor series (truncation below 1e-16 relative): the
# approximations above are 1 - erfc and pi/2 - ..., whose absolute error (~1e-8) swamps a small result, and
# arcsin(0) would be pi/2 - 1.5707963050 != 0
_SMALL = 0.1
_ERF_SERIES = tuple(2 / math.sqrt(math.pi) * (-1) ** k / (math.factorial(k) * (2 * k + 1)) for k in range(6))
_ASIN_SERIES = tuple(math.comb(2 * k, k) / (4**k * (2 * k + 1)) for k in range(5))


def _odd_series(z: _E, coeffs: Sequence[float]) -> _E:
    """sum(c_k z^(2k+1)), by Horner in z²."""
    z2 = z * z
    acc = z2 * 0 + coeffs[-1]
    for c in reversed(coeffs[:-1]):
        acc = acc * z2 + c
    return acc * z


def _odd_split(x: _E) -> tuple[_E, _E]:
    """(x < 0, |x|) for an odd function f(x) = sign(x) f(|x|), with |x| as a WHERE: abs's gradient is 0 at 0
    and would zero f's slope there."""
    neg = x < 0
    return neg, neg.where(-x, x)


def _log1p(u: _E) -> _E:
    """log(1 + u) for u >= 0, accurate for small u (Goldberg's trick): log(w) * u / (w - 1) with w = 1 + u
    corrects for the rounding of w; u itself where w rounds to 1. Its gradient is 1 / (1 + u) to rounding."""
    w = 1 + u
    exact = w.eq(1)
    return exact.where(u, w.log() * u / exact.where(1, w - 1))


def _expm1(x: _E, u: _E) -> _E:
    """e ** x - 1 from x and u = e ** x, accurate for small x (Kahan's trick): (u - 1) * x / log(u) corrects
    for the rounding of u; x itself where u rounds to 1, and -1 where u - 1 does."""
    one, minus_one = u.eq(1), (u - 1).eq(-1)
    off = one | minus_one
    us, xs = off.where(2, u), off.where(1, x)  # the unused quotient sees finite inputs: no inf * 0
    return one.where(x, minus_one.where(-1, (us - 1) * xs / us.log()))


def _at_most(x: _E, b: ConstType) -> _E:
    """x <= b, False for NaN (`<=` is not(x > b), True for NaN)."""
    return (x < b) | x.eq(b)


def _at_least(x: _E, b: ConstType) -> _E:
    """x >= b, False for NaN."""
    return (x > b) | x.eq(b)


class ElementwiseMixin(TensorHooks):
    """Comparisons, where, transcendental ops, activations, rounding, tests and rounding division."""

    __slots__ = ()

    # ------------------------------------------------------------------ comparisons, where and the core ops
    def __eq__(self, x: object) -> Self:  # type: ignore[override]  # elementwise, as in numpy and PyTorch
        return self.eq(x)  # type: ignore[arg-type]

    def __ne__(self, x: object) -> Self:  # type: ignore[override]
        return self.ne(x)  # type: ignore[arg-type]

    def __invert__(self) -> Self:
        if self.dtype == dtypes.bool:
            return self.logical_not()
        if not dtypes.is_int(self.dtype):
            raise DTypeError(f"~ needs an int or bool tensor, not {self.dtype}; cast it first")
        return self ^ -1

    def _inverse(self) -> Self:
        """An order-reversing map: -x for floats, ~x for ints, not x for bools."""
        return -self if dtypes.is_float(self.dtype) else ~self

    def _to_float(self) -> Self:
        return self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)

    def exp(self) -> Self:
        """e ** self."""
        return (self._to_float() * (1 / math.log(2))).exp2()

    def log(self) -> Self:
        """Natural logarithm."""
        return self.log2() * math.log(2)

    def cos(self) -> Self:
        """cosine, as 1 - 2 sin²(x/2): halving is exact, where pi/2 - x would round away x's low bits (all of
        them from 1e8 on in float32, making cos(x) = -sin(x))."""
        s = (self._to_float() * 0.5).sin()
        return 1 - 2 * s * s

    def tan(self) -> Self:
        """tangent."""
        return self.sin() / self.cos()

    def rsqrt(self) -> Self:
        """1 / sqrt(self)."""
        return self.sqrt().reciprocal()

    def square(self) -> Self:
        """self * self."""
        return self * self

    def sign(self) -> Self:
        """-1, 0 or 1 (NaN stays NaN); its gradient is zero."""
        s = self.ne(0).where((self < 0).where(self.const_like(-1), self.const_like(1)), self.const_like(0))
        return self.ne(self).where(self, s) if dtypes.is_float(self.dtype) else s

    def abs(self) -> Self:
        """|self|, as self * sign(self) (gradient 0 at 0)."""
        return self * self.sign()

    def relu(self) -> Self:
        """max(self, 0), with gradient 0 at 0."""
        if not (dtypes.is_float(self.dtype) or dtypes.is_int(self.dtype)):
            return (self > 0).where(self, 0)  # (bool promotes)
        # (x > 0).where(x, 0) built on the nodes, one Tensor instead of three: the zero has x's dtype and
        # shape, so nothing is cast or broadcast
        u = self.uop
        return self._wrap(u._binop(Ops.CMPLT, 0, True).alu(Ops.WHERE, u, u._scalar_like(0)), self)

    def sigmoid(self) -> Self:
        """1 / (1 + e ** -x) for x >= 0 and e ** x / (1 + e ** x) below: the exponential is e ** -|x| <= 1, so
        nothing overflows, the tails keep their tiny values (PyTorch's), and each local derivative is finite
        (an inf * 0 in the chain rule would be a NaN gradient)."""
        x = self._to_float()
        pos = x >= 0
        e = pos.where(-x, x).exp()  # a WHERE, not -|x|: abs has gradient 0 at 0
        r = (1 + e).reciprocal()
        return pos.where(r, e * r)

    def tanh(self) -> Self:
        """Hyperbolic tangent with x's sign, from u = e ** -2|x|: (1 - u) / (1 + u), or -expm1 / (2 + expm1)
        below |x| = 1/2, where 1 - u cancels (the reference's 2 * sigmoid(2x) - 1 rounds tanh(1e-13) to 0,
        and mish(-30) with it)."""
        neg, z = _odd_split(self._to_float())
        u = (-2 * z).exp()
        em = _expm1(-2 * z, u)
        r = (z < 0.5).where(-em / (2 + em), (1 - u) / (1 + u))
        return neg.where(-r, r)

    def gelu(self, approximate: str = "tanh") -> Self:
        """GELU. The default is the tanh approximation, as the reference (tinygrad) has it,
        0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3))), which is PyTorch's
        `gelu(x, approximate="tanh")`, NOT PyTorch's default; approximate="none" gives the exact
        x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2))), PyTorch's default. The two differ by up to about 5e-4
        (near |x| = 2.7); pass approximate="none" to match a PyTorch model's GELU."""
        if approximate == "none":
            return 0.5 * self * (1 + (self * (1 / math.sqrt(2))).erf())
        if approximate != "tanh":
            raise ValueError(f"gelu approximate must be 'tanh' or 'none', not {approximate!r}")
        return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh())

    def softplus(self, beta: float = 1.0) -> Self:
        """log(1 + e ** (beta * x)) / beta, as max(bx, 0) + log1p(e ** -|bx|): nothing overflows, and the
        tails keep their values (softplus(-30) is e ** -30, not log(1 + e ** -30) = 0)."""
        bx = self._to_float() * beta
        pos = bx >= 0
        # the WHEREs give the slope 1 of the linear part and -e/(1 + e) of the rest at 0 (abs and relu: 0)
        return (pos.where(bx, 0) + _log1p(pos.where(-bx, bx).exp())) * (1 / beta)

    def clip(self, min_: Self | ConstType | None = None, max_: Self | ConstType | None = None) -> Self:
        """Clamp into [min_, max_] (either bound may be None), by comparisons as the reference: NaN stays
        NaN with gradient 1, a value on a bound keeps its gradient 1 (PyTorch's clamp too)."""
        if min_ is None and max_ is None:
            raise ArgumentError("clip needs at least one of min_ and max_")
        ret = self if min_ is None else (self < min_).where(min_, self)
        return ret if max_ is None else (ret > max_).where(max_, ret)

    clamp = clip

    # ------------------------------------------------------------------ activations
    def silu(self) -> Self:
        """x * sigmoid(x) (also called swish)."""
        return self * self.sigmoid()

    def swish(self) -> Self:
        """x * sigmoid(x)."""
        return self.silu()

    def relu6(self) -> Self:
        """min(max(x, 0), 6), as hardtanh(0, 6) (PyTorch's): 6 at inf, not inf - inf."""
        return self.hardtanh(0, 6)

    def leaky_relu(self, neg_slope: float = 0.01) -> Self:
        """x for x > 0, else neg_slope * x (gradient neg_slope at 0, as PyTorch)."""
        return (self > 0).where(self, self * neg_slope)

    def elu(self, alpha: float = 1.0) -> Self:
        """x for x > 0, else alpha * (e ** x - 1); the gradient at 0 is alpha and NaN takes the linear branch,
        as PyTorch."""
        neg = _at_most(self, 0)
        # the exponential sees only the negative side: e ** (large x) would overflow into a NaN gradient
        return neg.where((neg.where(self, 0).exp() - 1) * alpha, self)

    def celu(self, alpha: float = 1.0) -> Self:
        """x for x > 0, else alpha * (e ** (x / alpha) - 1) (gradient 1 at 0, as PyTorch)."""
        neg = _at_most(self, 0)
        return neg.where(((neg.where(self, 0) / alpha).exp() - 1) * alpha, self)

    def selu(self, alpha: float = 1.67326, gamma: float = 1.0507) -> Self:
        """gamma * elu(x, alpha)."""
        return self.elu(alpha) * gamma

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Self:
        """x clamped into [min_val, max_val] with PyTorch's hardtanh gradient: 0 on a bound (clip keeps 1
        there), 1 for NaN, which stays NaN."""
        return _at_most(self, min_val).where(min_val, _at_least(self, max_val).where(max_val, self))

    def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Self:
        """alpha * x + beta clamped into [0, 1] (gradient 0 on a bound, as PyTorch)."""
        return (self * alpha + beta).hardtanh(0, 1)

    def hardswish(self) -> Self:
        """x * relu6(x + 3) / 6, by pieces: x above 3 and 0 below -3 have gradient 1 and 0 at +-inf, where
        the product would be inf * 0 (PyTorch's values, -inf * 0 = NaN included)."""
        # PyTorch's gradient on the knees: 1 at 3, 0 at -3
        over, under = _at_least(self, 3), _at_most(self, -3)
        mid = (over | under).where(0, self)  # the quadratic sees only (-3, 3) and NaN: finite local slopes
        return over.where(self, under.where(self * 0, mid * (mid + 3) * (1 / 6)))

    def mish(self) -> Self:
        """x * tanh(softplus(x))."""
        return self * self.softplus().tanh()

    def softsign(self) -> Self:
        """x / (1 + |x|)."""
        return self / (1 + self.abs())

    def logsigmoid(self) -> Self:
        """log(sigmoid(x)), computed stably as -softplus(-x)."""
        return -(-self).softplus()

    def quick_gelu(self) -> Self:
        """x * sigmoid(1.702 x)."""
        return self * (self * 1.702).sigmoid()

    def erf(self) -> Self:
        """The error function (float32 accurate); its gradient is that of the approximation, which is
        2/sqrt(pi) e ** -x² to float32 precision."""
        x = self._to_float()
        neg, z = _odd_split(x)
        big = z > 10  # erf is +-1 to the last bit there; keep z*z's inf (and its NaN gradient) out
        z = big.where(10, z)
        t = (1 + z * 0.5).reciprocal()
        poly = t * 0 + _ERFC_COEFFS[-1]
        for c in reversed(_ERFC_COEFFS[:-1]):
            poly = poly * t + c
        r = (z < _SMALL).where(_odd_series(z, _ERF_SERIES), 1 - t * (poly - z * z).exp())
        return neg.where(-r, r)

    # ------------------------------------------------------------------ inverse trigonometric, hyperbolic
    def asin(self) -> Self:
        """arcsin, from Abramowitz & Stegun 4.4.46 (absolute error below 2e-8 on [-1, 1])."""
        x = self._to_float()
        neg, z = _odd_split(x)
        poly = z * 0 + _ASIN_COEFFS[-1]
        for c in reversed(_ASIN_COEFFS[:-1]):
            poly = poly * z + c
        r = (z < _SMALL).where(_odd_series(z, _ASIN_SERIES), math.pi / 2 - (1 - z).sqrt() * poly)
        return neg.where(-r, r)

    def acos(self) -> Self:
        """arccos, as pi/2 - arcsin."""
        return math.pi / 2 - self.asin()

    def atan(self) -> Self:
        """arctan, as arcsin(u / sqrt(1 + u²)) of u = |x| <= 1, else pi/2 minus that of u = 1/|x|: x² never
        overflows, so atan(+-inf) is +-pi/2 with gradient 0."""
        x = self._to_float()
        neg, z = _odd_split(x)
        small = z <= 1
        u = small.where(z, small.where(1, z).reciprocal())  # the unused branch sees 1: no 1/0 in the chain
        a = (u / (1 + u * u).sqrt()).asin()
        r = small.where(a, math.pi / 2 - a)
        return neg.where(-r, r)

    def _half_exps(self) -> tuple[Self, Self]:
        """(e ** x / 2, e ** -x / 2), halved inside the exponent: sinh and cosh stay finite where e ** x
        alone overflows (88.7 < x < 89.4 in float32); z - 1 is exact for z >= 1."""
        z = self._to_float() * (1 / math.log(2))
        return (z - 1).exp2(), (-z - 1).exp2()

    def sinh(self) -> Self:
        """(e ** x - e ** -x) / 2."""
        a, b = self._half_exps()
        return a - b

    def cosh(self) -> Self:
        """(e ** x + e ** -x) / 2."""
        a, b = self._half_exps()
        return a + b

    def asinh(self) -> Self:
        """log(|x| + sqrt(x² + 1)), with x's sign; log(2|x|) where x² + 1 rounds to x² (x² would overflow)."""
        x = self._to_float()
        neg, z = _odd_split(x)
        big = z > _BIG
        zs = big.where(1, z)  # each branch sees only its own inputs: no inf * 0 in the unused one
        r = big.where(big.where(z, 1).log() + math.log(2), (zs + (zs * zs + 1).sqrt()).log())
        return neg.where(-r, r)

    def acosh(self) -> Self:
        """log(x + sqrt(x² - 1)) for x >= 1 (NaN below), log(2x) where x² - 1 rounds to x²."""
        x = self._to_float()
        big = (x > _BIG) | (x < -_BIG)
        xs = big.where(2, x)
        s = (xs * xs - 1).sqrt()
        # below -1, x + s = -1 / (s - x) is negative (a NaN log, as PyTorch) and cancels: the quotient
        # gives the gradient 1 / s that PyTorch reports there, without the cancellation
        inner = (xs < 0).where(-(s - xs).reciprocal(), xs + s)
        return big.where(big.where(x, 2).log() + math.log(2), inner.log())

    def atanh(self) -> Self:
        """(log(1 + x) - log(1 - x)) / 2 for |x| <= 1: +-inf at +-1 with gradient inf (a quotient inside
        one log would make that gradient inf * 0)."""
        x = self._to_float()
        return ((1 + x).log() - (1 - x).log()) * 0.5

    def log10(self) -> Self:
        """Logarithm base 10."""
        return self.log2() * math.log10(2)

    # ------------------------------------------------------------------ binary
    def lerp(self, end: Self, weight: Self | ConstType) -> Self:
        """self + (end - self) * weight."""
        return self + (end - self) * weight

    def logaddexp(self, other: Self | ConstType) -> Self:
        """log(e ** self + e ** other), computed stably (-inf for two -inf, inf with an inf, as PyTorch)."""
        o = self.ufix(other)
        # any shift gives the same value and gradient: the larger avoids overflow
        m = self.maximum(o).detach()
        m = m.isinf().where(0, m)  # but an infinite one makes inf - inf = NaN
        return m + ((self - m).exp() + (o - m).exp()).log()

    def copysign(self, other: Self | ConstType) -> Self:
        """|self| with the sign of other (of -0.0 too)."""
        x = self._to_float()
        o = x.ufix(other)
        with_sign_bit = (o < 0) | (o.eq(0) & (o.reciprocal() < 0))
        return with_sign_bit.where(-x.abs(), x.abs())

    def fmod(self, x: Self | ConstType) -> Self:
        """C's fmod: the remainder with the sign of self, self - trunc(self / x) * x."""
        d = self.ufix(x)
        if dtypes.is_float(self.dtype) or dtypes.is_float(d.dtype):
            return self - (self / d).trunc() * d
        return self - self.div(d, rounding_mode="trunc") * d

    def mod(self, x: Self | ConstType, reverse: bool = False) -> Self:
        """Python's %: the remainder with the sign of the divisor (for floats self - floor(self / x) * x,
        which has a gradient)."""
        num, den = (self.ufix(x), self) if reverse else (self, self.ufix(x))
        if dtypes.is_float(num.dtype) or dtypes.is_float(den.dtype):
            return num - (num / den).floor() * den
        return num % den

    def bitwise_and(self, x: Self | ConstType) -> Self:
        """self & x (ints and bools)."""
        return self & x

    def bitwise_or(self, x: Self | ConstType) -> Self:
        """self | x (ints and bools)."""
        return self | x

    def bitwise_xor(self, x: Self | ConstType) -> Self:
        """self ^ x (ints and bools)."""
        return self ^ x

    def bitwise_not(self) -> Self:
        """~self (ints and bools)."""
        return ~self

    def lshift(self, x: Self | int, reverse: bool = False) -> Self:
        """self << x (ints)."""
        return self.ufix(x) << self if reverse else self << x

    def rshift(self, x: Self | int, reverse: bool = False) -> Self:
        """self >> x (ints; arithmetic for signed ones)."""
        return self.ufix(x) >> self if reverse else self >> x

    def _shift_operands(self, op: str, x: object) -> None:
        """A shift of floats (or bools) has no meaning: refused where it is built, as &, | and ^ are."""
        for dt in (self.dtype, *([x.dtype] if isinstance(x, ElementwiseMixin) else [])):
            if not dtypes.is_int(dt):
                raise DTypeError(f"{op} needs int tensors, not {dt}; cast them first")
        if isinstance(x, float):
            raise DTypeError(f"{op} needs an int shift, not the float {x}")

    def __lshift__(self, x: Self | ConstType) -> Self:
        self._shift_operands("<<", x)
        return super().__lshift__(x)

    def __rshift__(self, x: Self | ConstType) -> Self:
        self._shift_operands(">>", x)
        return super().__rshift__(x)

    def __rlshift__(self, x: int) -> Self:
        self._shift_operands("<<", x)
        return self.ufix(x) << self

    def __rrshift__(self, x: int) -> Self:
        self._shift_operands(">>", x)
        return self.ufix(x) >> self

    # ------------------------------------------------------------------ rounding
    def floor(self) -> Self:
        """Round toward -inf (ints unchanged)."""
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return (t > self).where(t - 1, t)

    def ceil(self) -> Self:
        """Round toward +inf (ints unchanged)."""
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return (t < self).where(t + 1, t)

    def round(self) -> Self:
        """Round to the nearest integer, halves to even (as numpy and PyTorch)."""
        if not dtypes.is_float(self.dtype):
            return self
        f = self.floor()
        frac = self - f  # exact for floats of any magnitude
        odd = (f * 0.5).floor() * 2 != f
        up = (frac > 0.5) | (frac.eq(0.5) & odd)
        return up.where(f + 1, f)

    # ------------------------------------------------------------------ tests and boolean reductions
    def isnan(self) -> Self:
        """True where the value is NaN."""
        return self != self

    def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Self:
        """True where the value is +inf (if detect_positive) or -inf (if detect_negative)."""
        pos = self.eq(math.inf) if detect_positive else self.const_like(False).cast(dtypes.bool)
        neg = self.eq(-math.inf) if detect_negative else self.const_like(False).cast(dtypes.bool)
        return pos | neg

    def isfinite(self) -> Self:
        """True where the value is neither NaN nor infinite."""
        return (self.isinf() | self.isnan()).logical_not()

    @dim_alias
    def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
        """True where any element along `axis` is nonzero."""
        return self.ne(0)._max(axis, keepdim)  # a bool MAX: False over nothing, as the reference

    @dim_alias
    def all(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
        """True where every element along `axis` is nonzero."""
        return self.eq(0).any(axis, keepdim).logical_not()

    def allclose(self, other: Self, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> Self:
        """Whether isclose holds everywhere, as a 0-d bool tensor (the reference's form, lazy like any other
        result: `.item()` reads it; torch returns a Python bool)."""
        return self.isclose(other, rtol, atol, equal_nan).all()

    def isclose(
        self, other: Self | ConstType, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False
    ) -> Self:
        """|self - other| <= atol + rtol * |other| elementwise (NaNs equal when equal_nan)."""
        o = self.ufix(other)
        close = ((self == o) | ((self - o).abs() <= atol + rtol * o.abs())) & self.isfinite() & o.isfinite()
        close = close | ((self == o) & self.isinf())
        return close | (self.isnan() & o.isnan()) if equal_nan else close

    # ------------------------------------------------------------------ division
