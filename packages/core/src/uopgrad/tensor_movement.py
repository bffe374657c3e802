"""Movement and basic indexing (a mixin of Tensor, layer 15 with tensor.py): pad with a value, transpose,
T, flatten, unflatten, squeeze, unsqueeze, cat, stack, and `[]` / `[]=` with ints, slices (any step),
None and Ellipsis.

All of them are the six movement ops of the IR; a slice step is a pad, reshape and shrink, and cat pads
each part into place and sums them. Indexing by tensors goes to tensor_index.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from uopgrad._util import prod
from uopgrad.dtype import ConstType, dtypes, least_upper_dtype
from uopgrad.mixin import MovementMixin
from uopgrad.tensor_args import TensorLike, concrete, py_scalar
from uopgrad.tensor_args import self_tensor as _t
from uopgrad.tensor_index import has_tensor_index
from uopgrad.uop import UOp

if TYPE_CHECKING:
    from uopgrad.tensor import Tensor
    from uopgrad.uop import sint

__all__ = ["TensorMovementMixin"]


class TensorMovementMixin:
    """Reshaping, joining and basic indexing."""

    __slots__ = ()

    def pad(self, arg: Sequence[tuple[sint, sint] | None] | Sequence[sint], value: ConstType = 0,
            mode: str = "constant") -> Tensor:
        """Pad each dimension by (before, after) with `value` (zero by default); also PyTorch's flat form
        (last dimension first; there a negative amount cuts) and mode "reflect", "replicate" or "circular"."""
        x = _t(self)
        if mode != "constant" or not all(p is None or isinstance(p, (tuple, list)) for p in arg):
            return x._pad_mode(arg, mode, value)
        arg = cast("Sequence[tuple[sint, sint] | None]", arg)
        ret = MovementMixin.pad(x, arg)
        if value == 0 or ret is x:
            return ret
        inside = type(x)(UOp.const(dtypes.bool, True, x.uop.device, x.shape)).pad(arg)
        return inside.where(ret, value)

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        """Swap two dimensions."""
        x = _t(self)
        order = list(range(x.ndim))
        a, b = x._axis(dim0), x._axis(dim1)
        order[a], order[b] = order[b], order[a]
        return x.permute(order)

    @property
    def T(self) -> Tensor:
        """All dimensions reversed."""
        x = _t(self)
        return x.permute(tuple(reversed(range(x.ndim))))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge dimensions start_dim..end_dim into one."""
        x = _t(self)
        if x.ndim == 0:
            return x.reshape(1)
        s, e = x._axis(start_dim), x._axis(end_dim)
        return x.reshape(x.shape[:s] + (prod(x.shape[s:e + 1]),) + x.shape[e + 1:])

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
        """Split dimension `dim` into `sizes`."""
        x = _t(self)
        d = x._axis(dim)
        return x.reshape(x.shape[:d] + tuple(sizes) + x.shape[d + 1:])

    def squeeze(self, dim: int | None = None) -> Tensor:
        """Drop size-1 dimensions (only `dim`, if given and of size 1)."""
        x = _t(self)
        if dim is None:
            return x.reshape(tuple(s for s in x.shape if not (isinstance(s, int) and s == 1)))
        if x.ndim == 0:
            return x
        d = x._axis(dim)
        return x.reshape(x.shape[:d] + x.shape[d + 1:]) if x.shape[d] == 1 else x

    def unsqueeze(self, dim: int) -> Tensor:
        """Insert a size-1 dimension at `dim`."""
        x = _t(self)
        d = dim + x.ndim + 1 if dim < 0 else dim
        if not 0 <= d <= x.ndim:
            raise IndexError(f"unsqueeze dim {dim} is out of range for shape {x.shape}")
        return x.reshape(x.shape[:d] + (1,) + x.shape[d:])

    def cat(self, *args: Tensor, dim: int = 0) -> Tensor:
        """Concatenate along `dim` (each tensor is zero-padded into place and the results summed)."""
        x = _t(self)
        ts = (x, *args)
        d = x._axis(dim)
        for t in args:
            mismatch = any(i != d and a != b for i, (a, b) in enumerate(zip(x.shape, t.shape)))
            if t.ndim != x.ndim or mismatch:
                raise ValueError(f"cat along dim {d}: shapes {x.shape} and {t.shape} differ elsewhere")
        x._check_devices(*args)
        dt = least_upper_dtype(*(t.dtype for t in ts))
        sizes = [concrete(t.shape[d], "cat") for t in ts]
        total = sum(sizes)
        parts, offset = [], 0
        for t, size in zip(ts, sizes):
            pads: list[tuple[sint, sint] | None] = [None] * x.ndim
            pads[d] = (offset, total - offset - size)
            parts.append(t.cast(dt).pad(pads))
            offset += size
        return functools.reduce(type(x).add, parts)

    def stack(self, *args: Tensor, dim: int = 0) -> Tensor:
        """Stack tensors of one shape along a new dimension `dim`."""
        x = _t(self)
        return type(x).cat(*(t.unsqueeze(dim) for t in (x, *args)), dim=dim)

    def _stride(self, dim: int, step: int, n: int) -> Tensor:
        """Every `step`-th element along `dim`, keeping `n` (the dimension has at least (n-1)*step+1)."""
        t = _t(self)
        size = concrete(t.shape[dim])
        x = t
        if size < n * step:
            pads: list[tuple[sint, sint] | None] = [None] * t.ndim
            pads[dim] = (0, n * step - size)
            x = x.pad(pads)
        elif size > n * step:
            x = x.shrink(tuple((0, n * step) if i == dim else None for i in range(t.ndim)))
        shp = x.shape
        x = x.reshape(shp[:dim] + (n, step) + shp[dim + 1:])
        x = x.shrink(tuple((0, 1) if i == dim + 1 else None for i in range(x.ndim)))
        return x.reshape(shp[:dim] + (n,) + shp[dim + 1:])

    def _normalize_index(self, indices: object) -> list[Any]:
        x = _t(self)
        idx = list(indices) if isinstance(indices, tuple) else [indices]
        for i in idx:
            if isinstance(i, (type(x), list, np.ndarray)) or isinstance(i, bool):
                raise TypeError(f"indexing with {type(i).__name__} (advanced indexing) is not supported")
            if not (i is None or i is Ellipsis or isinstance(i, (int, slice, UOp, np.integer))):
                raise TypeError(f"can't index a Tensor with {type(i).__name__}")
        if sum(1 for i in idx if i is Ellipsis) > 1:
            raise IndexError("an index can only have a single ellipsis (...)")
        consuming = sum(1 for i in idx if i is not None and i is not Ellipsis)
        if consuming > x.ndim:
            raise IndexError(f"too many indices for tensor of dimension {x.ndim}: {indices!r}")
        fill = [slice(None)] * (x.ndim - consuming)
        if Ellipsis in [i for i in idx if not isinstance(i, UOp)]:
            e = next(j for j, i in enumerate(idx) if i is Ellipsis)
            return idx[:e] + fill + idx[e + 1:]
        return idx + fill

    def __getitem__(self, indices: object) -> Tensor:  # noqa: C901  (plus one dispatch to tensor indices)
        """Basic indexing: ints (negative count from the end), slices (any step), None and Ellipsis;
        an int may be a bound symbolic variable and a slice end a symbolic size; int tensors (and lists)
        index as in numpy's advanced indexing."""
        me = _t(self)
        if has_tensor_index(indices):
            return me._getitem_tensor(indices)
        shrinks: list[tuple[sint, sint]] = []
        flips: list[int] = []
        strides: list[tuple[int, int, int]] = []  # (dim, step, count)
        out_shape: list[sint] = []
        dim = 0
        for i in me._normalize_index(indices):
            if i is None:
                out_shape.append(1)
                continue
            size = me.shape[dim]
            if isinstance(i, UOp):
                shrinks.append((i, i + 1))
            elif isinstance(i, (int, np.integer)):
                j = int(i) + size if i < 0 else int(i)
                if isinstance(j, int) and isinstance(size, int) and not 0 <= j < size:
                    raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
                shrinks.append((j, j + 1))
            elif isinstance(i.start, UOp) or isinstance(i.stop, UOp) or not isinstance(size, int):
                if i.step not in (None, 1):
                    raise IndexError("a symbolic slice can't have a step")
                start, stop = 0 if i.start is None else i.start, size if i.stop is None else i.stop
                shrinks.append((start, stop))
                out_shape.append(stop if isinstance(start, int) and start == 0 else stop - start)
            else:
                r = range(*i.indices(size))
                if len(r) == 0:
                    shrinks.append((0, 0))
                else:
                    lo, hi = min(r[0], r[-1]), max(r[0], r[-1]) + 1
                    shrinks.append((lo, hi))
                    if r.step < 0:
                        flips.append(dim)
                    if abs(r.step) > 1:
                        strides.append((dim, abs(r.step), len(r)))
                out_shape.append(len(r))
            dim += 1
        x = me.shrink(shrinks).flip(flips)
        for d, step, n in strides:
            x = x._stride(d, step, n)
        return x.reshape(tuple(out_shape))

    def __setitem__(self, indices: object, v: TensorLike) -> None:
        x = _t(self)
        if has_tensor_index(indices):
            return x._setitem_tensor(indices, v)
        view = x[indices]
        if isinstance(v, type(x)):
            value = v.cast(x.dtype)
        else:
            value = type(x)(py_scalar(v), device=x.device, dtype=x.dtype)
        value = view._assignable(value)
        x._apply_store(view.uop.store(value.uop))
