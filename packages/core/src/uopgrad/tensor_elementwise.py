"""Elementwise Tensor ops from the primitives (a mixin of Tensor, layer 15 with tensor.py): `==`/`!=`/`~`,
where, exp, log, cos, tan, rsqrt, square, sign, abs, relu, sigmoid, tanh, gelu, softplus, clip; activations,
erf and the exact gelu, inverse trigonometric and hyperbolic functions, rounding, NaN/inf tests, any/all,
binary extras (lerp, logaddexp, copysign, fmod, bitwise ops) and division with a rounding mode.

Each op is a composition of ALU nodes the gradient table already knows, so every backend runs it without
new kernels. Rounding and tests have zero gradient (their comparisons carry none).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from uopgrad.dtype import ConstType, dtypes, least_upper_dtype
from uopgrad.mixin import MathMixin, broadcast_shape
from uopgrad.ops import Ops
from uopgrad.tensor_args import TensorLike, py_scalar
from uopgrad.tensor_args import self_tensor as _t

if TYPE_CHECKING:
    from collections.abc import Sequence

    from uopgrad.tensor import Tensor

__all__ = ["ElementwiseMixin"]

# Abramowitz & Stegun 7.1.26 is too coarse for float32; erf comes from erfc(x) = t·exp(-x² + P(t)) with
# t = 1/(1 + |x|/2) (Numerical Recipes' erfc, relative error below 1.2e-7 everywhere).
_ERFC_COEFFS = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
                1.48851587, -0.82215223, 0.17087277)
# Abramowitz & Stegun 4.4.46: arcsin(x) = pi/2 - sqrt(1 - x) * P(x) on [0, 1]
_ASIN_COEFFS = (1.5707963050, -0.2145988016, 0.0889789874, -0.0501743046, 0.0308918810, -0.0170881256,
                0.0066700901, -0.0012624911)


class ElementwiseMixin:
    """Comparisons, where, transcendental ops, activations, rounding, tests and rounding division."""

    __slots__ = ()

    # ------------------------------------------------------------------ comparisons, where and the core ops
    def __eq__(self, x: object) -> Tensor:  # type: ignore[override]  # elementwise, as in numpy and PyTorch
        t = _t(self)
        return t.eq(x)  # type: ignore[arg-type]

    def __ne__(self, x: object) -> Tensor:  # type: ignore[override]
        t = _t(self)
        return t.ne(x)  # type: ignore[arg-type]

    def __invert__(self) -> Tensor:
        x = _t(self)
        if x.dtype == dtypes.bool:
            return x.logical_not()
        if not dtypes.is_int(x.dtype):
            raise TypeError(f"~ needs an int or bool tensor, not {x.dtype}")
        return x ^ -1

    def _inverse(self) -> Tensor:
        """An order-reversing map: -x for floats, ~x for ints, not x for bools."""
        t = _t(self)
        return -t if dtypes.is_float(t.dtype) else ~t

    def _to_float(self) -> Tensor:
        x = _t(self)
        return x if dtypes.is_float(x.dtype) else x.cast(dtypes.default_float)

    def where(self, x: TensorLike, y: TensorLike) -> Tensor:
        """`x` where this (condition) tensor is true, else `y`, with broadcasting and dtype promotion."""
        t = _t(self)
        if not isinstance(x, type(t)) and not isinstance(y, type(t)):
            x = type(t)(py_scalar(x), device=t.device, requires_grad=False)
        xt = x if isinstance(x, type(t)) else y.ufix(x)  # type: ignore[union-attr]
        yt = y if isinstance(y, type(t)) else xt.ufix(y)
        cond = t if t.dtype == dtypes.bool else t.cast(dtypes.bool)
        cond._check_compatible(xt, yt)
        dt = least_upper_dtype(xt.dtype.base, yt.dtype.base)
        xt, yt = xt.cast(dt), yt.cast(dt)
        shape = broadcast_shape(cond.shape, xt.shape, yt.shape)
        cond, xt, yt = cond.expand(shape), xt.expand(shape), yt.expand(shape)
        return type(t)._wrap(cond.uop.alu(Ops.WHERE, xt.uop, yt.uop), xt, yt)

    def exp(self) -> Tensor:
        """e ** self."""
        x = _t(self)
        return (x._to_float() * (1 / math.log(2))).exp2()

    def log(self) -> Tensor:
        """Natural logarithm."""
        x = _t(self)
        return x.log2() * math.log(2)

    def cos(self) -> Tensor:
        """cosine, as sin(pi/2 - x)."""
        t = _t(self)
        return ((math.pi / 2) - t._to_float()).sin()

    def tan(self) -> Tensor:
        """tangent."""
        x = _t(self)
        return x.sin() / x.cos()

    def rsqrt(self) -> Tensor:
        """1 / sqrt(self)."""
        x = _t(self)
        return x.sqrt().reciprocal()

    def square(self) -> Tensor:
        """self * self."""
        x = _t(self)
        return x * x

    def sign(self) -> Tensor:
        """-1, 0 or 1 (NaN stays NaN); its gradient is zero."""
        x = _t(self)
        s = x.ne(0).where((x < 0).where(x.const_like(-1), x.const_like(1)), x.const_like(0))
        return x.ne(x).where(x, s) if dtypes.is_float(x.dtype) else s

    def abs(self) -> Tensor:
        """|self|, as self * sign(self) (gradient 0 at 0)."""
        x = _t(self)
        return x * x.sign()

    def relu(self) -> Tensor:
        """max(self, 0), with gradient 0 at 0."""
        x = _t(self)
        if not (dtypes.is_float(x.dtype) or dtypes.is_int(x.dtype)):
            return (x > 0).where(x, 0)  # (bool promotes)
        # (x > 0).where(x, 0) built on the nodes, one Tensor instead of three: the zero has x's dtype and
        # shape, so nothing is cast or broadcast
        u = x.uop
        return type(x)._wrap(u._binop(Ops.CMPLT, 0, True).alu(Ops.WHERE, u, u._scalar_like(0)), x)

    def sigmoid(self) -> Tensor:
        """1 / (1 + e ** -self); 0 where e ** -self overflows, with gradient 0 there."""
        x = _t(self)
        z = x._to_float() * (-1 / math.log(2))
        # where 2 ** z is inf the value is 1 / inf = 0, but EXP2's gradient would be inf * 0 = NaN: feed that
        # exp2 a 0 instead (both branches of a WHERE get a gradient), and select the 0 (the reference's kernel
        # rewrites x / (1 + x) and gets 0 the same way)
        over = z.exp2() == math.inf
        return over.where(0, (1 + over.where(0, z).exp2()).reciprocal())

    def tanh(self) -> Tensor:
        """Hyperbolic tangent, as 2 * sigmoid(2x) - 1."""
        x = _t(self)
        return 2.0 * (2.0 * x).sigmoid() - 1.0

    def gelu(self, approximate: str = "tanh") -> Tensor:
        """GELU: the tanh approximation (as tinygrad), or the exact x * Phi(x) with approximate="none"."""
        t = _t(self)
        if approximate == "none":
            return 0.5 * t * (1 + (t * (1 / math.sqrt(2))).erf())
        if approximate != "tanh":
            raise ValueError(f"gelu approximate must be 'tanh' or 'none', not {approximate!r}")
        return 0.5 * t * (1 + (math.sqrt(2 / math.pi) * (t + 0.044715 * t * t * t)).tanh())

    def softplus(self, beta: float = 1.0) -> Tensor:
        """log(1 + e ** (beta * x)) / beta; linear above beta * x = 20, like PyTorch."""
        t = _t(self)
        bx = t._to_float() * beta
        linear = bx > 20
        # the cap as a WHERE, not minimum(20): MAX's rule would halve the gradient at exactly 20
        smooth = (1 + linear.where(20, bx).exp()).log() * (1 / beta)
        return linear.where(t._to_float(), smooth)

    def clip(self, min_: TensorLike | None = None, max_: TensorLike | None = None) -> Tensor:
        """Clamp into [min_, max_] (either bound may be None), by comparisons as the reference: NaN stays
        NaN with gradient 1, a value on a bound keeps its gradient 1."""
        x = _t(self)
        ret = x if min_ is None else (x < min_).where(min_, x)
        return ret if max_ is None else (ret > max_).where(max_, ret)

    clamp = clip

    # ------------------------------------------------------------------ activations
    def silu(self) -> Tensor:
        """x * sigmoid(x) (also called swish)."""
        x = _t(self)
        return x * x.sigmoid()

    def swish(self) -> Tensor:
        """x * sigmoid(x)."""
        return self.silu()

    def relu6(self) -> Tensor:
        """min(max(x, 0), 6)."""
        x = _t(self)
        return x.relu() - (x - 6).relu()

    def leaky_relu(self, neg_slope: float = 0.01) -> Tensor:
        """x for x > 0, else neg_slope * x."""
        x = _t(self)
        return (x < 0).where(x * neg_slope, x)

    def elu(self, alpha: float = 1.0) -> Tensor:
        """x for x > 0, else alpha * (e ** x - 1)."""
        x = _t(self)
        return (x > 0).where(x, (x.minimum(0).exp() - 1) * alpha)

    def celu(self, alpha: float = 1.0) -> Tensor:
        """max(0, x) + min(0, alpha * (e ** (x / alpha) - 1))."""
        x = _t(self)
        return x.maximum(0) + ((x / alpha).minimum(0).exp() - 1).minimum(0) * alpha

    def selu(self, alpha: float = 1.67326, gamma: float = 1.0507) -> Tensor:
        """gamma * elu(x, alpha)."""
        return self.elu(alpha) * gamma

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
        """x clamped into [min_val, max_val]."""
        return _t(self).clip(min_val, max_val)

    def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
        """alpha * x + beta clamped into [0, 1]."""
        y = _t(self) * alpha + beta
        return y.relu() - (y - 1).relu()

    def hardswish(self) -> Tensor:
        """x * relu6(x + 3) / 6."""
        x = _t(self)
        return x * (x + 3).relu6() * (1 / 6)

    def mish(self) -> Tensor:
        """x * tanh(softplus(x))."""
        x = _t(self)
        return x * x.softplus().tanh()

    def softsign(self) -> Tensor:
        """x / (1 + |x|)."""
        x = _t(self)
        return x / (1 + x.abs())

    def logsigmoid(self) -> Tensor:
        """log(sigmoid(x)), computed stably as -softplus(-x)."""
        return -(-_t(self)).softplus()

    def quick_gelu(self) -> Tensor:
        """x * sigmoid(1.702 x)."""
        x = _t(self)
        return x * (x * 1.702).sigmoid()

    def erf(self) -> Tensor:
        """The error function (float32 accurate); its gradient is that of the approximation, which is
        2/sqrt(pi) e ** -x² to float32 precision."""
        x = _t(self)._to_float()
        z = x.abs()
        big = z > 10  # erf is +-1 to the last bit there; keep z*z's inf (and its NaN gradient) out
        z = big.where(10, z)
        t = (1 + z * 0.5).reciprocal()
        poly = t * 0 + _ERFC_COEFFS[-1]
        for c in reversed(_ERFC_COEFFS[:-1]):
            poly = poly * t + c
        erfc = t * (poly - z * z).exp()
        return x.sign() * (1 - erfc)

    # ------------------------------------------------------------------ inverse trigonometric, hyperbolic
    def asin(self) -> Tensor:
        """arcsin, from Abramowitz & Stegun 4.4.46 (absolute error below 2e-8 on [-1, 1])."""
        x = _t(self)._to_float()
        z = x.abs()
        poly = z * 0 + _ASIN_COEFFS[-1]
        for c in reversed(_ASIN_COEFFS[:-1]):
            poly = poly * z + c
        return x.sign() * (math.pi / 2 - (1 - z).sqrt() * poly)

    def acos(self) -> Tensor:
        """arccos, as pi/2 - arcsin."""
        return math.pi / 2 - self.asin()

    def atan(self) -> Tensor:
        """arctan, as arcsin(x / sqrt(1 + x²))."""
        x = _t(self)._to_float()
        return (x / (1 + x * x).sqrt()).asin()

    def sinh(self) -> Tensor:
        """(e ** x - e ** -x) / 2."""
        x = _t(self)
        return (x.exp() - (-x).exp()) * 0.5

    def cosh(self) -> Tensor:
        """(e ** x + e ** -x) / 2."""
        x = _t(self)
        return (x.exp() + (-x).exp()) * 0.5

    def asinh(self) -> Tensor:
        """log(|x| + sqrt(x² + 1)), with x's sign."""
        x = _t(self)._to_float()
        z = x.abs()
        return x.sign() * (z + (z * z + 1).sqrt()).log()

    def acosh(self) -> Tensor:
        """log(x + sqrt(x² - 1)) for x >= 1."""
        x = _t(self)._to_float()
        return (x + (x * x - 1).sqrt()).log()

    def atanh(self) -> Tensor:
        """log((1 + x) / (1 - x)) / 2 for |x| < 1."""
        x = _t(self)._to_float()
        return ((1 + x) / (1 - x)).log() * 0.5

    def log10(self) -> Tensor:
        """Logarithm base 10."""
        return _t(self).log2() * math.log10(2)

    # ------------------------------------------------------------------ binary
    def lerp(self, end: Tensor, weight: Tensor | ConstType) -> Tensor:
        """self + (end - self) * weight."""
        x = _t(self)
        return x + (end - x) * weight

    def logaddexp(self, other: Tensor | ConstType) -> Tensor:
        """log(e ** self + e ** other), computed stably (-inf for two -inf, inf with an inf, as PyTorch)."""
        x = _t(self)
        o = x.ufix(other)
        m = x.maximum(o).detach()  # any shift gives the same value and gradient: the larger avoids overflow
        m = m.isinf().where(0, m)  # but an infinite one makes inf - inf = NaN
        return m + ((x - m).exp() + (o - m).exp()).log()

    def copysign(self, other: Tensor | ConstType) -> Tensor:
        """|self| with the sign of other (of -0.0 too)."""
        x = _t(self)._to_float()
        o = x.ufix(other)
        with_sign_bit = (o < 0) | ((o == 0) & (o.reciprocal() < 0))
        return with_sign_bit.where(-x.abs(), x.abs())

    def fmod(self, x: Tensor | ConstType) -> Tensor:
        """C's fmod: the remainder with the sign of self, self - trunc(self / x) * x."""
        me = _t(self)
        d = me.ufix(x)
        if dtypes.is_float(me.dtype) or dtypes.is_float(d.dtype):
            return me - (me / d).trunc() * d
        return me - me.div(d, rounding_mode="trunc") * d

    def mod(self, x: Tensor | ConstType, reverse: bool = False) -> Tensor:
        """Python's %: the remainder with the sign of the divisor (for floats self - floor(self / x) * x,
        which has a gradient)."""
        me = _t(self)
        num, den = (me.ufix(x), me) if reverse else (me, me.ufix(x))
        if dtypes.is_float(num.dtype) or dtypes.is_float(den.dtype):
            return num - (num / den).floor() * den
        return num % den

    def bitwise_and(self, x: Tensor | ConstType) -> Tensor:
        """self & x (ints and bools)."""
        return _t(self) & x

    def bitwise_or(self, x: Tensor | ConstType) -> Tensor:
        """self | x (ints and bools)."""
        return _t(self) | x

    def bitwise_xor(self, x: Tensor | ConstType) -> Tensor:
        """self ^ x (ints and bools)."""
        return _t(self) ^ x

    def bitwise_not(self) -> Tensor:
        """~self (ints and bools)."""
        return ~_t(self)

    def lshift(self, x: Tensor | int, reverse: bool = False) -> Tensor:
        """self << x."""
        me = _t(self)
        return me.ufix(x) << me if reverse else me << x

    def rshift(self, x: Tensor | int, reverse: bool = False) -> Tensor:
        """self >> x."""
        me = _t(self)
        return me.ufix(x) >> me if reverse else me >> x

    # ------------------------------------------------------------------ rounding
    def floor(self) -> Tensor:
        """Round toward -inf (ints unchanged)."""
        x = _t(self)
        if not dtypes.is_float(x.dtype):
            return x
        t = x.trunc()
        return (t > x).where(t - 1, t)

    def ceil(self) -> Tensor:
        """Round toward +inf (ints unchanged)."""
        x = _t(self)
        if not dtypes.is_float(x.dtype):
            return x
        t = x.trunc()
        return (t < x).where(t + 1, t)

    def round(self) -> Tensor:
        """Round to the nearest integer, halves to even (as numpy and PyTorch)."""
        x = _t(self)
        if not dtypes.is_float(x.dtype):
            return x
        f = x.floor()
        frac = x - f  # exact for floats of any magnitude
        odd = (f * 0.5).floor() * 2 != f
        up = (frac > 0.5) | ((frac == 0.5) & odd)
        return up.where(f + 1, f)

    # ------------------------------------------------------------------ tests and boolean reductions
    def isnan(self) -> Tensor:
        """True where the value is NaN."""
        x = _t(self)
        return x != x

    def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
        """True where the value is +inf (if detect_positive) or -inf (if detect_negative)."""
        x = _t(self)
        pos = (x == math.inf) if detect_positive else x.const_like(False).cast(dtypes.bool)
        neg = (x == -math.inf) if detect_negative else x.const_like(False).cast(dtypes.bool)
        return pos | neg

    def isfinite(self) -> Tensor:
        """True where the value is neither NaN nor infinite."""
        return (self.isinf() | self.isnan()).logical_not()

    def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """True where any element along `axis` is nonzero."""
        x = _t(self)
        return x.ne(0)._max(axis, keepdim)  # a bool MAX: False over nothing, as the reference

    def all(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """True where every element along `axis` is nonzero."""
        x = _t(self)
        return x.eq(0).any(axis, keepdim).logical_not()

    def allclose(self, other: Tensor, rtol: float = 1e-5, atol: float = 1e-8,
                 equal_nan: bool = False) -> bool:
        """Whether isclose holds everywhere (reads the answer back)."""
        return bool(self.isclose(other, rtol, atol, equal_nan).all().item())

    def isclose(self, other: Tensor | ConstType, rtol: float = 1e-5, atol: float = 1e-8,
                equal_nan: bool = False) -> Tensor:
        """|self - other| <= atol + rtol * |other| elementwise (NaNs equal when equal_nan)."""
        x = _t(self)
        o = x.ufix(other)
        close = ((x == o) | ((x - o).abs() <= atol + rtol * o.abs())) & x.isfinite() & o.isfinite()
        close = close | ((x == o) & x.isinf())
        return close | (x.isnan() & o.isnan()) if equal_nan else close

    # ------------------------------------------------------------------ division
    def div(self, x: Tensor | ConstType, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
        """self / x; rounding_mode "trunc" rounds the quotient toward zero, "floor" toward -inf (ints stay
        ints for both, as PyTorch)."""
        me = _t(self)
        num, den = (me.ufix(x), me) if reverse else (me, me.ufix(x))
        if rounding_mode is None:
            return MathMixin.div(num, den)
        if rounding_mode not in ("trunc", "floor"):
            raise ValueError(f"rounding_mode must be None, 'trunc' or 'floor', not {rounding_mode!r}")
        if dtypes.is_float(num.dtype) or dtypes.is_float(den.dtype):
            q = MathMixin.div(num, den)
            return q.trunc() if rounding_mode == "trunc" else q.floor()
        q = num // den
        if rounding_mode == "floor":
            return q
        # floor division rounds toward -inf: step back up where the signs differ and it was inexact
        inexact = (q * den).ne(num) & ((num < 0).ne(den < 0))
        return inexact.where(q + 1, q)
