"""Reductions and contractions (a mixin of Tensor, layer 15 with tensor.py): sum, prod, max, min, mean,
var, std, softmax, log_softmax, logsumexp, argmax, argmin, one_hot, sparse_categorical_crossentropy, and the
matrix product (dot, matmul, `@`, linear).

Every reduce is one REDUCE_AXIS node of ADD, MUL or MAX over the normalised axes (min through the
order-reversing map); a matrix product is a broadcast multiply summed over the shared dimension.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Self

from uopgrad._util import all_int, prod
from uopgrad.dtype import dtypes, least_upper_dtype, sum_acc_dtype
from uopgrad.errors import DTypeError, EmptyReduceError, OperandShapeError
from uopgrad.mixin import broadcast_shape
from uopgrad.ops import Ops
from uopgrad.tensor_args import DTypeLike, concrete, dim_alias, no_dim, to_dtype
from uopgrad.tensor_hooks import TensorHooks
from uopgrad.uop_build import matmul_nodes, max_nodes

if TYPE_CHECKING:
    pass

__all__ = ["ReduceMixin"]


class ReduceMixin(TensorHooks):
    """Reductions over axes and the matrix product."""

    __slots__ = ()

    def _axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        if self.ndim == 0:
            if any(a not in (0, -1) for a in axes):
                raise IndexError(f"axis {axis} is out of range for a 0-d tensor")
            return ()
        norm = [self._axis(a) for a in axes]
        if len(set(norm)) != len(norm):
            raise ValueError(f"axis {axis} names a dimension more than once (shape {self.shape})")
        return tuple(sorted(norm))

    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Self:
        axes = self._axes(axis)
        ret = self._wrap(self.uop._rop(op, axes), self)
        return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    @dim_alias
    def sum(
        self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: DTypeLike | None = None
    ) -> Self:
        """Sum over `axis` (all by default), accumulated in `sum_acc_dtype`; half/bfloat16 cast back."""
        acc = sum_acc_dtype(self.dtype) if dtype is None else to_dtype(dtype)
        ret = self.cast(acc)._reduce(Ops.ADD, axis, keepdim)
        low_float = self.dtype in (dtypes.float16, dtypes.bfloat16)
        return ret.cast(self.dtype) if dtype is None and low_float else ret

    @dim_alias
    def prod(
        self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: DTypeLike | None = None
    ) -> Self:
        """Product over `axis`."""
        return self.cast(to_dtype(dtype) if dtype is not None else self.dtype)._reduce(Ops.MUL, axis, keepdim)

    def _check_nonempty(self, axis: int | Sequence[int] | None, op: str) -> None:
        """A reduce without identity over an empty axis has no value: raise, as PyTorch does."""
        empty = [a for a in self._axes(axis) if isinstance(self.shape[a], int) and self.shape[a] == 0]
        if empty:
            raise EmptyReduceError(
                f"{op}(): the reduced axis {empty[0]} of shape {self.shape} is empty, and "
                f"{op} has no identity (use a reduction with one, such as sum, or check "
                "the size)"
            )

    def _max(self, axis: int | Sequence[int] | None, keepdim: bool) -> Self:
        """max without the empty check: NaN wins, and its gradient goes to the NaNs (docs/semantics.md §5)."""
        if not dtypes.is_float(self.dtype):
            return self._reduce(Ops.MAX, axis, keepdim)
        # MAX's gradient rule (mask x == max, divided by the mask's count) finds nothing equal to a NaN and
        # divides by zero. So the MAX reduce sees no NaN, and a row with one takes its value (NaN) and its
        # gradient (each NaN's, like PyTorch's max() with one NaN) from a sum of the NaNs: a second reduce in
        # the same kernel, 0 in a row without NaN.
        if (
            self.dtype in (dtypes.float32, dtypes.float64)
            and isinstance(self.device, str)
            and all_int(self.shape)
        ):
            return self._wrap(max_nodes(self.uop, self._axes(axis), keepdim), self)  # the same nodes, faster
        nan = self.isnan()
        nans = nan.where(self, 0).sum(axis, keepdim)
        return nans.isnan().where(nans, nan.where(-math.inf, self)._reduce(Ops.MAX, axis, keepdim))

    @no_dim
    def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
        """Maximum over `axis`: NaN if the row holds one, tied maxima (or the NaNs) share the gradient; an
        empty reduced axis raises EmptyReduceError."""
        self._check_nonempty(axis, "max")
        return self._max(axis, keepdim)

    @no_dim
    def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
        """Minimum over `axis`, as max (NaN wins; an empty reduced axis raises)."""
        self._check_nonempty(axis, "min")
        return self._inverse()._max(axis, keepdim)._inverse()

    def _count(self, axis: int | Sequence[int] | None) -> int:
        return concrete(prod(self.shape[i] for i in self._axes(axis)), "mean/var")

    @dim_alias
    def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
        """Mean over `axis` (a float result for int input)."""
        out = self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float
        total = self.cast(sum_acc_dtype(self.dtype)).sum(axis, keepdim)
        return (total / self._count(axis)).cast(out)

    @dim_alias
    def var(
        self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1
    ) -> Self:
        """Variance over `axis` with Bessel's `correction` (1 by default, as PyTorch)."""
        squares = (self - self.mean(axis, keepdim=True)).square()
        return squares.sum(axis, keepdim) / max(0, self._count(axis) - correction)

    @dim_alias
    def std(
        self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1
    ) -> Self:
        """Standard deviation over `axis`."""
        return self.var(axis, keepdim, correction).sqrt()

    def _softmax(self, axis: int) -> tuple[Self, Self, Self]:
        m = self - self._reduce(Ops.MAX, axis, True).detach()  # the shift changes neither value nor gradient
        e = m.exp()
        return m, e, e.sum(axis, keepdim=True)

    @dim_alias
    def softmax(self, axis: int = -1, dtype: DTypeLike | None = None) -> Self:
        """e ** x / sum(e ** x) along `axis` (computed in `dtype` when given)."""
        _, e, ss = (self if dtype is None else self.cast(dtype))._softmax(axis)
        return e / ss

    @dim_alias
    def log_softmax(self, axis: int = -1, dtype: DTypeLike | None = None) -> Self:
        """log(softmax(x)) along `axis`, computed stably (in `dtype` when given)."""
        m, _, ss = (self if dtype is None else self.cast(dtype))._softmax(axis)
        return m - ss.log()

    @dim_alias
    def logsumexp(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
        """log(sum(e ** x)) over `axis`, computed stably; -inf for an empty or all -inf row, inf for a row
        with +inf (PyTorch's values; the reference's shift by an infinite max gives NaN)."""
        m = self._reduce(Ops.MAX, axis, True).detach()
        m = m.isinf().where(0, m)  # an infinite shift would turn the row into inf - inf = NaN
        ret = (self - m).exp().sum(axis, keepdim).log()
        return ret + m.reshape(ret.shape)

    @dim_alias
    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Self:
        """Index of the first maximum (or the first NaN) along `axis` (of the flattened tensor when None), as
        int32; an empty axis raises EmptyReduceError."""
        self._check_nonempty(axis, "argmax")
        if axis is None:
            return self.flatten().argmax(0)
        ax = self._axis(axis)
        n = concrete(self.shape[ax], "argmax")
        is_max = self.eq(self._reduce(Ops.MAX, ax, True))
        if dtypes.is_float(self.dtype):  # a NaN is the maximum (the max is NaN, equal to nothing)
            is_max = is_max | self.isnan()
        countdown = self.arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - ax - 1))
        return (n - (is_max * countdown).max(ax, keepdim)).cast(dtypes.int32)

    @dim_alias
    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Self:
        """Index of the first minimum (or NaN) along `axis`, as int32."""
        self._check_nonempty(axis, "argmin")
        return self._inverse().argmax(axis, keepdim)

    def one_hot(self, num_classes: int) -> Self:
        """An int tensor of class indices as one-hot int32 rows (a new last dimension of `num_classes`)."""
        if not dtypes.is_int(self.dtype):
            raise DTypeError(f"one_hot needs integer class indices, not {self.dtype}")
        if num_classes < 0:
            raise ValueError(f"one_hot num_classes must be non-negative, not {num_classes}")
        classes = self.arange(num_classes, device=self.device)
        return self.unsqueeze(-1).eq(classes).where(1, 0)

    def dot(self, w: Self, dtype: DTypeLike | None = None) -> Self:
        """Matrix product (numpy's matmul broadcasting), as a sum over a broadcast multiply."""
        n1, n2 = self.ndim, w.ndim
        if n1 == 0 or n2 == 0:
            raise OperandShapeError(
                f"matmul needs at least 1 dimension on both sides: {self.shape} and {w.shape}"
            )
        if self.shape[-1] != w.shape[-min(n2, 2)]:
            raise OperandShapeError(
                f"shapes {self.shape} and {w.shape} can't be multiplied "
                f"({self.shape[-1]} != {w.shape[-min(n2, 2)]})"
            )
        if dtype is None and n1 == 2 and n2 == 2 and (fast := self._dot2d(w)) is not None:
            return fast
        # (x * wt).sum(-1, dtype=dtype).cast(out) of the views below, built on the nodes: one Tensor, not six
        # (a matmul was most of a small MLP's forward pass in Python)
        x, wt = self.uop.dot_operands(w.uop)
        try:
            broadcast_shape(x.shape, wt.shape)
        except ValueError as e:
            raise OperandShapeError(
                f"matmul of {self.shape} and {w.shape}: shapes {x.shape} and {wt.shape} "
                "can't be broadcast together"
            ) from e
        self._check_devices(w)
        prod_ = x._binop(Ops.MUL, wt, False)
        acc = sum_acc_dtype(prod_.dtype) if dtype is None else to_dtype(dtype)
        total = prod_.cast(acc)
        total = total._rop(Ops.ADD, (total.ndim - 1,)).reshape(total.shape[:-1])
        if dtype is None and prod_.dtype in (dtypes.float16, dtypes.bfloat16):
            total = total.cast(prod_.dtype)
        out = least_upper_dtype(self.dtype, w.dtype) if dtype is None else to_dtype(dtype)
        return self._wrap(total.cast(out), self, w)

    def _dot2d(self, w: Self) -> Self | None:
        """`dot` of two matrices of int sizes, of one dtype that sums in itself, on one device (a layer's
        matmul): the same nodes, by `matmul_nodes`; None where the general path decides (checked shapes)."""
        xu, wu = self.uop, w.uop
        (m, k), (_, n) = xu.shape, wu.shape
        dev = xu.device
        if (
            type(m) is not int
            or type(k) is not int
            or type(n) is not int
            or type(dev) is not str
            or wu.device != dev
            or xu.dtype != wu.dtype
            or sum_acc_dtype(wu.dtype) != wu.dtype
        ):
            return None
        return self._wrap(matmul_nodes(xu, wu, m, k, n, dev), self, w)

    def matmul(self, x: Self, reverse: bool = False, dtype: DTypeLike | None = None) -> Self:
        """self @ x (or x @ self when reverse)."""
        return x.dot(self, dtype) if reverse else self.dot(x, dtype)

    def __matmul__(self, x: Self) -> Self:
        return self.matmul(x)

    def __rmatmul__(self, x: Self) -> Self:
        return self.matmul(x, True)

    def linear(self, weight: Self, bias: Self | None = None) -> Self:
        """self @ weight + bias, with weight of shape (in, out) (a 1-d weight scales elementwise)."""
        x = self * weight if weight.ndim == 1 else self.dot(weight)
        return x if bias is None else x + bias
