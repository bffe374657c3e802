"""Indexing by tensors, scans and sorting (a mixin of Tensor, layer 15 with tensor.py): gather, scatter,
scatter_reduce, tensor indices in `[]`, masked_fill/masked_select, nonzero, multinomial,
cumsum/cumprod/cummax/cummin, sort/argsort/topk.

All of them are one-hot compositions: an index tensor is compared with an arange along the indexed
dimension and the comparison selects (WHERE) and reduces. That costs a factor of the indexed size in the
fused kernel, never a new kernel kind, and the gradient flows through WHERE to the selected elements.
Scans and sorts compare every pair along their axis (quadratic in that axis, fine for the sizes models use).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Self, TypeVar, cast

import numpy as np

from uopgrad._util import prod
from uopgrad.dtype import ConstType, DType, dtypes
from uopgrad.errors import ArgumentError, DTypeError, OperandShapeError
from uopgrad.mixin import broadcast_shape, concrete_size
from uopgrad.tensor_args import dim_alias, index_tuple, is_tensor_like
from uopgrad.tensor_hooks import TensorHooks

__all__ = ["IndexMixin"]

_I = TypeVar("_I", bound="IndexMixin")  # the helpers below take and give values of the family

_SCATTER_REDUCES = ("sum", "prod", "mean", "amax", "amin")


_int = concrete_size  # these ops need concrete sizes


def _lowest(dt: DType) -> ConstType:
    if dtypes.is_float(dt):
        return -math.inf
    return False if dt == dtypes.bool else int(dtypes.min(dt))


def _less(a: _I, b: _I) -> _I:
    """a < b in the order that puts NaN above everything (PyTorch's sort order)."""
    if not dtypes.is_float(a.dtype):
        return a < b
    return (a < b) | (b.isnan() & a.isnan().logical_not())


def _same(a: _I, b: _I) -> _I:
    """a == b, with NaN equal to NaN (so a NaN finds itself)."""
    return a.eq(b) | (a.isnan() & b.isnan()) if dtypes.is_float(a.dtype) else a.eq(b)


def _highest(dt: DType) -> ConstType:
    if dtypes.is_float(dt):
        return math.inf
    return True if dt == dtypes.bool else int(dtypes.max(dt))


class IndexMixin(TensorHooks):
    """gather/scatter, tensor indices, masks, scans and sorting for Tensor."""

    __slots__ = ()

    # ------------------------------------------------------------------ helpers
    def _one_hot_along_dim(self, num_classes: int, dim: int = -1) -> Self:
        """self == arange(num_classes) along `dim` (self has size 1 there): a bool mask."""
        d = self._axis(dim)
        ones = (1,) * (self.ndim - d - 1)
        rng = self.arange(num_classes, device=self.device).reshape((num_classes, *ones))
        return self.eq(rng)

    def _int_index(self, index: Self, size: int, what: str) -> Self:
        if not dtypes.is_int(index.dtype):
            raise TypeError(f"{what} needs an integer index tensor, not {index.dtype}")
        index = index.to(self.device)
        return (index < 0).where(index + size, index)  # negative indices count from the end

    # ------------------------------------------------------------------ gather and scatter
    def gather(self, dim: int, index: Self) -> Self:
        """out[i][j][k] = self[index[i][j][k]][j][k] for dim 0 (and so on): index has self's rank and is no
        larger than self outside `dim`."""
        d, n, idx = self._fitted_index(dim, index, "gather")
        sel = self.shrink(tuple(None if k == d else (0, i) for k, i in enumerate(index.shape)))
        sel = sel.unsqueeze(-1).transpose(-1, d)  # dim d now has size 1, the last axis walks the source
        mask = idx.unsqueeze(-1)._one_hot_along_dim(n, -1)
        return mask.where(sel, 0).sum(-1, dtype=self.dtype)

    def _fitted_index(self, dim: int, index: Self, what: str) -> tuple[int, int, Self]:
        """(the normalised dim, its size, `index` checked as gather/scatter indices along it): `index` has
        self's rank and is no larger than self outside `dim`."""
        d = self._axis(dim)
        larger = any(i > s for k, (i, s) in enumerate(zip(index.shape, self.shape)) if k != d)
        if index.ndim != self.ndim or larger:
            raise OperandShapeError(
                f"{what} index of shape {index.shape} does not fit {self.shape} along "
                f"dim {d}: it needs the same rank and no larger size outside dim"
            )
        n = _int(self.shape[d])
        return d, n, self._int_index(index, n, what)

    def _scatter_parts(self, dim: int, index: Self, src: Self | ConstType) -> tuple[Self, Self, int]:
        """(mask, values): mask[..., j at dim, ..., k] says source element k lands on j; values is the source
        laid out alike; both padded to self's shape. Also the normalised dim."""
        d, n, idx = self._fitted_index(dim, index, "scatter")
        if isinstance(src, (int, float, bool)):
            vals = self.full_like(src).shrink(tuple((0, 1) if k == d else None for k in range(self.ndim)))
            vals = vals.shrink(tuple(None if k == d else (0, i) for k, i in enumerate(index.shape)))
            vals = vals.expand(tuple(index.shape))
        else:
            if src.ndim != self.ndim or any(i > s for i, s in zip(index.shape, src.shape)):
                raise OperandShapeError(
                    f"scatter src of shape {src.shape} is smaller than its index {index.shape}"
                )
            if src.dtype != self.dtype:  # PyTorch and the reference refuse to cast silently
                raise DTypeError(f"scatter of a {src.dtype} src into a {self.dtype} tensor; cast src first")
            vals = src.shrink(tuple((0, i) for i in index.shape))
        mask = idx.unsqueeze(-1)._one_hot_along_dim(n, -1).transpose(-1, d)
        vals = vals.unsqueeze(-1).transpose(-1, d)
        pads: list[tuple[int, int] | None] = [
            None if k == d else (0, _int(s) - _int(i))
            for k, (s, i) in enumerate(zip(self.shape, index.shape))
        ]
        return mask.pad([*pads, None], value=False), vals.pad([*pads, None]), d

    def scatter(self, dim: int, index: Self, src: Self | ConstType, reduce: str | None = None) -> Self:
        """A copy of self with src written at `index` along `dim` (torch.scatter); reduce "add" or
        "multiply" combines with self instead. Of several writes to one place the last one wins."""
        if reduce is not None:
            if reduce not in ("add", "multiply"):
                raise ValueError(f"scatter reduce must be 'add' or 'multiply', not {reduce!r}")
            if not isinstance(src, (int, float, bool)):  # the reference's rule: a scalar src only
                raise TypeError(
                    f"scatter(reduce={reduce!r}) takes a scalar src; for a tensor src use "
                    f"scatter_reduce(dim, index, src, {'sum' if reduce == 'add' else 'prod'!r})"
                )
            values = self.full_like(src).shrink(tuple((0, i) for i in index.shape))
            return self.scatter_reduce(dim, index, values, "sum" if reduce == "add" else "prod")
        mask, vals, _ = self._scatter_parts(dim, index, src)
        k = self.arange(_int(mask.shape[-1]), device=self.device)
        last = mask.where(k, -1)._max(-1, keepdim=True)
        pick = mask & (k == last)
        hit = mask.any(-1)
        return hit.where(pick.where(vals, 0).sum(-1, dtype=self.dtype), self)

    def scatter_reduce(
        self, dim: int, index: Self, src: Self, reduce: str, include_self: bool = True
    ) -> Self:
        """Reduce src into a copy of self at `index` along `dim` with "sum", "prod", "mean", "amax" or
        "amin" (torch.scatter_reduce); places no index names keep self."""
        if reduce not in _SCATTER_REDUCES:
            raise ArgumentError(f"scatter_reduce reduce must be one of {_SCATTER_REDUCES}, not {reduce!r}")
        mask, vals, _ = self._scatter_parts(dim, index, src)
        hit = mask.any(-1)
        keep = self if include_self else None
        if reduce in ("sum", "mean"):
            total = mask.where(vals, 0).sum(-1, dtype=self.dtype)
            if reduce == "sum":
                return hit.where(total + keep if keep is not None else total, self)
            count = mask.cast(dtypes.int32).sum(-1) + (1 if include_self else 0)
            ret = (total + keep if keep is not None else total) / count.maximum(1).cast(self.dtype)
            ret = ret if dtypes.is_float(self.dtype) else ret.floor().cast(self.dtype)
            return hit.where(ret, self)
        if reduce == "prod":
            p = mask.where(vals, 1).prod(-1)
            return hit.where(p * keep if keep is not None else p, self)
        if reduce == "amax":
            m = mask.where(vals, _lowest(self.dtype))._max(-1, False)
            return hit.where(m.maximum(keep) if keep is not None else m, self)
        m = mask.where(vals, _highest(self.dtype))._inverse()._max(-1, False)._inverse()
        return hit.where(m.minimum(keep) if keep is not None else m, self)

    # ------------------------------------------------------------------ tensor indices in []
    def _split_index(self, indices: object) -> tuple[Self, list[tuple[int, Self]], tuple[Any, ...]]:
        """Apply the basic part of an advanced index: (the view, [(its dim, int index tensor)], the basic
        index that makes the view: the tensor indices replaced by full slices)."""
        idx = list(index_tuple(indices))
        placeholders: dict[int, Self] = {}
        basic: list[Any] = []
        for i in idx:
            if is_tensor_like(i):
                t = i if isinstance(i, type(self)) else self._from_data(i, device=self.device)
                if t.dtype == dtypes.bool:
                    raise IndexError(
                        "indexing with a bool tensor has a data-dependent shape; use "
                        "masked_select, or where() to keep the shape"
                    )
                if not dtypes.is_int(t.dtype):
                    raise IndexError(f"tensors used as indices must be integer tensors, not {t.dtype}")
                s = slice(None)
                placeholders[id(s)] = t
                basic.append(s)
            else:
                basic.append(i)
        tensors: list[tuple[int, Self]] = []
        out_dim = 0
        for i in self._normalize_index(tuple(basic)):
            if isinstance(i, slice) and id(i) in placeholders:
                tensors.append((out_dim, placeholders[id(i)]))
            if i is None or isinstance(i, slice):
                out_dim += 1
        return self[tuple(basic)], tensors, tuple(basic)

    def _index_masks(self, tensors: list[tuple[int, Self]]) -> tuple[Self, list[int], list[int]]:
        """(one-hot mask of shape B + N, the indexed dims, the rest) for index tensors broadcast to B."""
        dims = [d for d, _ in tensors]
        b = broadcast_shape(*(t.shape for _, t in tensors))
        sizes = [_int(self.shape[d]) for d in dims]
        mask: Self | None = None
        for k, ((_, t), n) in enumerate(zip(tensors, sizes)):
            idx = self._int_index(t, n, "indexing").expand(b)
            oh = idx.reshape(b + (1,) * len(dims)).eq(
                self.arange(n, device=self.device).reshape(
                    (1,) * len(b) + tuple(n if j == k else 1 for j in range(len(dims)))
                )
            )
            mask = oh if mask is None else mask & oh
        assert mask is not None
        rest = [d for d in range(self.ndim) if d not in dims]
        return mask, dims, rest

    def _getitem_tensor(self, indices: object) -> Self:
        """numpy's advanced indexing by int tensors (after the basic part): one masked sum."""
        view, tensors, _ = self._split_index(indices)
        mask, dims, rest = view._index_masks(tensors)
        nb, nr, nd = mask.ndim - len(dims), len(rest), len(dims)
        src = view.permute(*rest, *dims)  # R + N
        src = src.reshape((1,) * nb + tuple(src.shape))
        m = mask.reshape(tuple(mask.shape[:nb]) + (1,) * nr + tuple(mask.shape[nb:]))
        out = m.where(src, 0).sum(tuple(range(nb + nr, nb + nr + nd)), dtype=view.dtype)  # B + R
        order = _result_order(dims, nb, nr)
        return out if order is None else out.permute(order)

    def _setitem_tensor(self, indices: object, v: Self) -> tuple[tuple[Any, ...], Self]:
        """For `self[indices] = v` with an advanced index: (the basic index of the view the tensor indices
        select in, that view's new value). Where several index entries name one element the last one (in
        the row-major order of the broadcast indices) wins, as in numpy and the reference."""
        view, tensors, basic = self._split_index(indices)
        mask, dims, rest = view._index_masks(tensors)
        nb, nr, nd = mask.ndim - len(dims), len(rest), len(dims)
        bshape = tuple(_int(s) for s in mask.shape[:nb])
        br = bshape + tuple(view.shape[d] for d in rest)
        val = v.cast(self.dtype)
        order = _result_order(dims, nb, nr)
        try:
            val = (
                val.expand(br)
                if order is None
                else val.expand(tuple(br[o] for o in order)).permute(np.argsort(order).tolist())
            )
        except ValueError as e:
            raise ValueError(f"can't set a value of shape {v.shape} into an index of shape {br}") from e
        if prod(bshape) == 0:  # an empty index writes nothing
            return basic, view
        m = mask.reshape(bshape + (1,) * nr + tuple(mask.shape[nb:]))  # B + R (ones) + N
        pick = m
        if nb:  # the last writer of each element: the largest flat position in B of the entries naming it
            pos = self.arange(_int(prod(bshape)), device=self.device).reshape(bshape + (1,) * (nr + nd))
            pick = m & (pos == m.where(pos, -1)._max(tuple(range(nb)), True))
        # the values, scattered: R + N
        scattered = pick.where(val.reshape(br + (1,) * nd), 0).sum(tuple(range(nb)), dtype=self.dtype)
        hit = m.any(tuple(range(nb)))
        new = hit.where(scattered, view.permute(*rest, *dims)).permute(np.argsort([*rest, *dims]).tolist())
        return basic, new

    # ------------------------------------------------------------------ masks
    def masked_fill(self, mask: Self, value: Self | ConstType) -> Self:
        """value where mask is true, else self."""
        return mask.where(value if isinstance(value, type(self)) else self.ufix(value), self)

    def masked_select(self, mask: Self, size: int | None = None, fill_value: ConstType = 0) -> Self:
        """The elements where mask is true, flattened (1-d). Without `size` the length is read back from
        the device (a realize); with it the result has that length, padded with fill_value."""
        shape = broadcast_shape(self.shape, mask.shape)
        flat, m = self.expand(shape).flatten(), mask.cast(dtypes.bool).expand(shape).flatten()
        n = int(cast(int, m.cast(dtypes.int32).sum().item())) if size is None else size
        pos = m.cast(dtypes.int32).cumsum(0) - 1  # where each selected element goes
        slot = self.arange(n, device=self.device).reshape(n, 1)
        pick = m.reshape(1, -1) & (pos.reshape(1, -1) == slot)
        out = pick.where(flat.reshape(1, -1), 0).sum(1, dtype=self.dtype)
        return out if size is None else pick.any(1).where(out, fill_value)

    def nonzero(self, size: int | None = None, fill_value: ConstType = 0) -> Self:
        """The indices of the nonzero elements, (count, ndim) int32 in row-major order. Without `size` the
        count is read back from the device; with it the result has `size` rows, padded with fill_value
        (an index: a float one is truncated, and never makes the indices float)."""
        fill_value = int(fill_value)
        shape = tuple(_int(s) for s in self.shape)
        mask = self.ne(0).flatten()
        n = size if size is not None else int(cast(int, mask.cast(dtypes.int32).sum().item()))
        if not shape:
            return self.empty(n, 0, device=self.device, dtype=dtypes.int32)
        lin = self.arange(_int(prod(shape)), device=self.device)
        cols = [
            ((lin // int(np.prod(shape[k + 1 :]))) % shape[k]).masked_select(mask, n, fill_value)
            for k in range(len(shape))
        ]
        return cols[0].stack(*cols[1:], dim=1)

    def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Self:
        """`num_samples` class indices drawn with probability proportional to self (1-d, or a batch of
        rows); without replacement only one sample per row."""
        if self.ndim not in (1, 2):
            raise ValueError(f"multinomial needs a 1-d or 2-d tensor of weights, not shape {self.shape}")
        if not replacement and num_samples != 1:
            raise NotImplementedError("multinomial without replacement draws only one sample per row")
        w = self.reshape(1, -1) if self.ndim == 1 else self
        cdf = w.cumsum(1) / w.sum(1, keepdim=True)
        u = self.rand(_int(w.shape[0]), num_samples, 1, device=self.device)
        idx = (u >= cdf.unsqueeze(1)).cast(dtypes.int32).sum(2).minimum(_int(w.shape[1]) - 1)
        return idx.reshape(num_samples) if self.ndim == 1 else idx

    # ------------------------------------------------------------------ scans
    def _scan_mask(self, n: int, exclusive: bool = False) -> Self:
        """mask[i, j] = j <= i (j < i when exclusive), as bool."""
        i = self.arange(n, device=self.device)
        return (i.reshape(1, n) < i.reshape(n, 1)) if exclusive else (i.reshape(1, n) <= i.reshape(n, 1))

    def _scan(self, axis: int, fill: ConstType) -> tuple[Self, Self]:
        """(self with `axis` last and a new axis before it, the scan mask)."""
        d = self._axis(axis)  # a 0-d tensor takes axis 0 or -1, anything else is an IndexError (as PyTorch)
        d = d if self.ndim else 0
        y = (self.reshape(1) if self.ndim == 0 else self).transpose(d, -1)
        n = _int(y.shape[-1])
        return y.unsqueeze(-2), self._scan_mask(n)

    def _unscan(self, out: Self, axis: int) -> Self:
        if self.ndim == 0:
            return out.reshape(())
        return out.transpose(self._axis(axis), -1)

    @dim_alias
    def cumsum(self, axis: int = 0) -> Self:
        """Running sum along `axis`."""
        y, m = self._scan(axis, 0)
        dt = self.dtype if dtypes.is_float(self.dtype) else None
        return self._unscan(m.where(y, 0).sum(-1, dtype=dt), axis)

    @dim_alias
    def cumprod(self, axis: int = 0) -> Self:
        """Running product along `axis`."""
        y, m = self._scan(axis, 1)
        return self._unscan(m.where(y, 1).prod(-1), axis)

    @dim_alias
    def cummax(self, axis: int = 0) -> tuple[Self, Self]:
        """(running maximum along `axis`, the index of the latest element equal to it), as PyTorch; a NaN
        is the maximum from where it stands on, its index that of the latest NaN."""
        y, m = self._scan(axis, 0)
        vals = m.where(y, _lowest(self.dtype))._max(-1, False)
        n = _int(m.shape[-1])
        j = self.arange(n, device=self.device)
        hit = m & _same(y, vals.unsqueeze(-1))
        return self._unscan(vals, axis), self._unscan(hit.where(j, -1)._max(-1, False), axis)

    @dim_alias
    def cummin(self, axis: int = 0) -> tuple[Self, Self]:
        """(running minimum along `axis`, the index of the latest element equal to it)."""
        vals, idx = self._inverse().cummax(axis)
        return vals._inverse(), idx

    # ------------------------------------------------------------------ sorting
    def sort(self, dim: int = -1, descending: bool = False) -> tuple[Self, Self]:
        """(values, indices) sorted along `dim`, stable: equal values keep their order; NaN sorts above
        +inf (last ascending, first descending), as PyTorch."""
        d = self._axis(dim) if self.ndim else 0
        y = (self.reshape(1) if self.ndim == 0 else self).transpose(d, -1)
        n = _int(y.shape[-1])
        a, b = y.unsqueeze(-1), y.unsqueeze(-2)  # a[..., i, 1] against b[..., 1, j]
        i = self.arange(n, device=self.device)
        before = _less(a, b) if descending else _less(b, a)
        rank = (before | (_same(b, a) & (i.reshape(1, n) < i.reshape(n, 1)))).cast(dtypes.int32).sum(-1)
        onehot = rank.unsqueeze(-2).eq(i.reshape(n, 1))  # onehot[..., r, i]: element i has rank r
        vals = onehot.where(y.unsqueeze(-2), 0).sum(-1, dtype=self.dtype)
        idx = onehot.where(i.reshape(1, n), 0).sum(-1)
        if self.ndim == 0:
            return vals.reshape(()), idx.reshape(())
        return vals.transpose(d, -1), idx.transpose(d, -1)

    def argsort(self, dim: int = -1, descending: bool = False) -> Self:
        """The indices that sort self along `dim`."""
        return self.sort(dim, descending)[1]

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Self, Self]:
        """(values, indices) of the k largest (smallest when not largest) along `dim`, always in sorted
        order (so sorted_ changes nothing)."""
        d = self._axis(dim)
        if not 0 <= k <= _int(self.shape[d]):
            raise ValueError(f"topk k={k} is out of range for dimension {d} of size {self.shape[d]}")
        vals, idx = self.sort(d, descending=largest)
        sl = tuple((0, k) if j == d else None for j in range(self.ndim))
        return vals.shrink(sl), idx.shrink(sl)


def _result_order(dims: Sequence[int], nb: int, nr: int) -> list[int] | None:
    """numpy's rule: broadcast index dims replace adjacent indexed dims in place (a permutation of B + R),
    and go first (None: no permutation) when the indexed dims are apart or lead."""
    nd = len(dims)
    if list(dims) != list(range(dims[0], dims[0] + nd)) or dims[0] == 0:
        return None
    first = dims[0]
    return [*range(nb, nb + first), *range(nb), *range(nb + first, nb + nr)]
