"""Reductions and contractions (a mixin of Tensor, layer 15 with tensor.py): sum, prod, max, min, mean,
var, std, softmax, log_softmax, logsumexp, argmax, argmin, one_hot, sparse_categorical_crossentropy, and the
matrix product (dot, matmul, `@`, linear).

Every reduce is one REDUCE_AXIS node of ADD, MUL or MAX over the normalised axes (min through the
order-reversing map); a matrix product is a broadcast multiply summed over the shared dimension.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from uopgrad._util import prod
from uopgrad.dtype import dtypes, least_upper_dtype, sum_acc_dtype
from uopgrad.errors import DTypeError, EmptyReduceError, OperandShapeError
from uopgrad.mixin import broadcast_shape
from uopgrad.ops import Ops
from uopgrad.tensor_args import DTypeLike, concrete, to_dtype
from uopgrad.tensor_args import self_tensor as _t

if TYPE_CHECKING:
    from uopgrad.tensor import Tensor

__all__ = ["ReduceMixin"]


class ReduceMixin:
    """Reductions over axes and the matrix product."""

    __slots__ = ()

    def _axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
        x = _t(self)
        if axis is None:
            return tuple(range(x.ndim))
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        if x.ndim == 0:
            if any(a not in (0, -1) for a in axes):
                raise IndexError(f"axis {axis} is out of range for a 0-d tensor")
            return ()
        norm = [x._axis(a) for a in axes]
        if len(set(norm)) != len(norm):
            raise ValueError(f"axis {axis} names a dimension more than once (shape {x.shape})")
        return tuple(sorted(norm))

    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
        x = _t(self)
        axes = x._axes(axis)
        ret = type(x)._wrap(x.uop._rop(op, axes), x)
        return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))

    def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            dtype: DTypeLike | None = None) -> Tensor:
        """Sum over `axis` (all by default), accumulated in `sum_acc_dtype`; half/bfloat16 cast back."""
        x = _t(self)
        acc = sum_acc_dtype(x.dtype) if dtype is None else to_dtype(dtype)
        ret = x.cast(acc)._reduce(Ops.ADD, axis, keepdim)
        low_float = x.dtype in (dtypes.float16, dtypes.bfloat16)
        return ret.cast(x.dtype) if dtype is None and low_float else ret

    def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
             dtype: DTypeLike | None = None) -> Tensor:
        """Product over `axis`."""
        x = _t(self)
        return x.cast(to_dtype(dtype) if dtype is not None else x.dtype)._reduce(Ops.MUL, axis, keepdim)

    def _check_nonempty(self, axis: int | Sequence[int] | None, op: str) -> None:
        """A reduce without identity over an empty axis has no value: raise, as PyTorch does."""
        x = _t(self)
        empty = [a for a in x._axes(axis) if isinstance(x.shape[a], int) and x.shape[a] == 0]
        if empty:
            raise EmptyReduceError(f"{op}(): the reduced axis {empty[0]} of shape {x.shape} is empty, and "
                                   f"{op} has no identity (use a reduction with one, such as sum, or check "
                                   "the size)")

    def _max(self, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
        """max without the empty check: NaN wins, and its gradient goes to the NaNs (docs/semantics.md §5)."""
        x = _t(self)
        if not dtypes.is_float(x.dtype):
            return x._reduce(Ops.MAX, axis, keepdim)
        # MAX's gradient rule (mask x == max, divided by the mask's count) finds nothing equal to a NaN and
        # divides by zero. So the MAX reduce sees no NaN, and a row with one takes its value (NaN) and its
        # gradient (each NaN's, like PyTorch's max() with one NaN) from a sum of the NaNs: a second reduce in
        # the same kernel, 0 in a row without NaN.
        nan = x.isnan()
        nans = nan.where(x, 0).sum(axis, keepdim)
        return nans.isnan().where(nans, nan.where(-math.inf, x)._reduce(Ops.MAX, axis, keepdim))

    def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Maximum over `axis`: NaN if the row holds one, tied maxima (or the NaNs) share the gradient; an
        empty reduced axis raises EmptyReduceError."""
        x = _t(self)
        x._check_nonempty(axis, "max")
        return x._max(axis, keepdim)

    def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Minimum over `axis`, as max (NaN wins; an empty reduced axis raises)."""
        x = _t(self)
        x._check_nonempty(axis, "min")
        return x._inverse()._max(axis, keepdim)._inverse()

    def _count(self, axis: int | Sequence[int] | None) -> int:
        x = _t(self)
        return concrete(prod(x.shape[i] for i in x._axes(axis)), "mean/var")

    def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Mean over `axis` (a float result for int input)."""
        x = _t(self)
        out = x.dtype if dtypes.is_float(x.dtype) else dtypes.default_float
        total = x.cast(sum_acc_dtype(x.dtype)).sum(axis, keepdim)
        return (total / x._count(axis)).cast(out)

    def var(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            correction: int = 1) -> Tensor:
        """Variance over `axis` with Bessel's `correction` (1 by default, as PyTorch)."""
        x = _t(self)
        squares = (x - x.mean(axis, keepdim=True)).square()
        return squares.sum(axis, keepdim) / max(0, x._count(axis) - correction)

    def std(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            correction: int = 1) -> Tensor:
        """Standard deviation over `axis`."""
        return self.var(axis, keepdim, correction).sqrt()

    def _softmax(self, axis: int) -> tuple[Tensor, Tensor, Tensor]:
        x = _t(self)
        m = x - x._reduce(Ops.MAX, axis, True).detach()  # the shift changes neither value nor gradient
        e = m.exp()
        return m, e, e.sum(axis, keepdim=True)

    def softmax(self, axis: int = -1, dtype: DTypeLike | None = None) -> Tensor:
        """e ** x / sum(e ** x) along `axis` (computed in `dtype` when given)."""
        t = _t(self)
        _, e, ss = (t if dtype is None else t.cast(dtype))._softmax(axis)
        return e / ss

    def log_softmax(self, axis: int = -1, dtype: DTypeLike | None = None) -> Tensor:
        """log(softmax(x)) along `axis`, computed stably (in `dtype` when given)."""
        t = _t(self)
        m, _, ss = (t if dtype is None else t.cast(dtype))._softmax(axis)
        return m - ss.log()

    def logsumexp(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """log(sum(e ** x)) over `axis`, computed stably; -inf for an empty or all -inf row, inf for a row
        with +inf (PyTorch's values; the reference's shift by an infinite max gives NaN)."""
        t = _t(self)
        m = t._reduce(Ops.MAX, axis, True).detach()
        m = m.isinf().where(0, m)  # an infinite shift would turn the row into inf - inf = NaN
        ret = (t - m).exp().sum(axis, keepdim).log()
        return ret + m.reshape(ret.shape)

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """Index of the first maximum (or the first NaN) along `axis` (of the flattened tensor when None), as
        int32; an empty axis raises EmptyReduceError."""
        x = _t(self)
        x._check_nonempty(axis, "argmax")
        if axis is None:
            return x.flatten().argmax(0)
        ax = x._axis(axis)
        n = concrete(x.shape[ax], "argmax")
        is_max = x == x._reduce(Ops.MAX, ax, True)
        if dtypes.is_float(x.dtype):  # a NaN is the maximum (the max is NaN, equal to nothing): the first NaN
            is_max = is_max | x.isnan()
        countdown = type(x).arange(n, 0, -1, device=x.device).reshape((n,) + (1,) * (x.ndim - ax - 1))
        return (n - (is_max * countdown).max(ax, keepdim)).cast(dtypes.int32)

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """Index of the first minimum (or NaN) along `axis`, as int32."""
        x = _t(self)
        x._check_nonempty(axis, "argmin")
        return x._inverse().argmax(axis, keepdim)

    def one_hot(self, num_classes: int) -> Tensor:
        """An int tensor of class indices as one-hot int32 rows (a new last dimension of `num_classes`)."""
        x = _t(self)
        if not dtypes.is_int(x.dtype):
            raise DTypeError(f"one_hot needs integer class indices, not {x.dtype}")
        if num_classes < 0:
            raise ValueError(f"one_hot num_classes must be non-negative, not {num_classes}")
        classes = type(x).arange(num_classes, device=x.device)
        return (x.unsqueeze(-1) == classes).where(1, 0)

    def dot(self, w: Tensor, dtype: DTypeLike | None = None) -> Tensor:
        """Matrix product (numpy's matmul broadcasting), as a sum over a broadcast multiply."""
        me = _t(self)
        n1, n2 = me.ndim, w.ndim
        if n1 == 0 or n2 == 0:
            raise OperandShapeError(f"matmul needs at least 1 dimension on both sides: {me.shape} and "
                                    f"{w.shape}")
        if me.shape[-1] != w.shape[-min(n2, 2)]:
            raise OperandShapeError(f"shapes {me.shape} and {w.shape} can't be multiplied "
                                    f"({me.shape[-1]} != {w.shape[-min(n2, 2)]})")
        # (x * wt).sum(-1, dtype=dtype).cast(out) of the views below, built on the nodes: one Tensor, not six
        # (a matmul was most of a small MLP's forward pass in Python)
        x, wt = me.uop.dot_operands(w.uop)
        try:
            broadcast_shape(x.shape, wt.shape)
        except ValueError as e:
            raise OperandShapeError(f"matmul of {me.shape} and {w.shape}: shapes {x.shape} and {wt.shape} "
                                    "can't be broadcast together") from e
        me._check_devices(w)
        prod_ = x._binop(Ops.MUL, wt, False)
        acc = sum_acc_dtype(prod_.dtype) if dtype is None else to_dtype(dtype)
        total = prod_.cast(acc)
        total = total._rop(Ops.ADD, (total.ndim - 1,)).reshape(total.shape[:-1])
        if dtype is None and prod_.dtype in (dtypes.float16, dtypes.bfloat16):
            total = total.cast(prod_.dtype)
        out = least_upper_dtype(me.dtype, w.dtype) if dtype is None else to_dtype(dtype)
        return type(me)._wrap(total.cast(out), me, w)

    def matmul(self, x: Tensor, reverse: bool = False, dtype: DTypeLike | None = None) -> Tensor:
        """self @ x (or x @ self when reverse)."""
        t = _t(self)
        return x.dot(t, dtype) if reverse else t.dot(x, dtype)

    def __matmul__(self, x: Tensor) -> Tensor:
        return self.matmul(x)

    def __rmatmul__(self, x: Tensor) -> Tensor:
        return self.matmul(x, True)

    def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """self @ weight + bias, with weight of shape (in, out) (a 1-d weight scales elementwise)."""
        t = _t(self)
        x = t * weight if weight.ndim == 1 else t.dot(weight)
        return x if bias is None else x + bias
