"""Movement and basic indexing (a mixin of Tensor, layer 15 with tensor.py, generic over `Self`): transpose,
T, flatten, unflatten, squeeze, unsqueeze, cat, stack, and `[]` / `[]=` with ints, slices (any step),
None and Ellipsis (`pad` with a value or a mode is tensor.py's, over uopgrad.mixin's).

All of them are the six movement ops of the IR; a slice step is a pad, reshape and shrink, and cat pads
each part into place and sums them. Indexing by tensors goes to tensor_index. `[]=` writes into the
tensor's storage, or, where a gradient must flow through the write (or the tensor is on several devices),
builds the new value as where(mask, the value put back through the inverse view ops, self).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self, cast

import numpy as np

from uopgrad import tensor_registry as registry
from uopgrad._util import dedup, prod
from uopgrad.dtype import ConstType, least_upper_dtype
from uopgrad.errors import DTypeMismatchError, GradientError
from uopgrad.ops import Ops
from uopgrad.tensor_args import concrete, has_tensor_index, index_tuple, py_scalar, tensor_sequence
from uopgrad.tensor_grad import grad_enabled
from uopgrad.tensor_hooks import TensorHooks
from uopgrad.uop import UOp, ssimplify

if TYPE_CHECKING:
    from uopgrad.uop import sint

__all__ = ["TensorMovementMixin"]


class TensorMovementMixin(TensorHooks):
    """Reshaping, joining and basic indexing."""

    __slots__ = ()

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Self:
        """Swap two dimensions."""
        order = list(range(self.ndim))
        a, b = self._axis(dim0), self._axis(dim1)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Self:
        """All dimensions reversed."""
        return self.permute(tuple(reversed(range(self.ndim))))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        """Merge dimensions start_dim..end_dim into one."""
        if self.ndim == 0:
            return self.reshape(1)
        s, e = self._axis(start_dim), self._axis(end_dim)
        return self.reshape(self.shape[:s] + (prod(self.shape[s : e + 1]),) + self.shape[e + 1 :])

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Self:
        """Split dimension `dim` into `sizes`."""
        d = self._axis(dim)
        return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1 :])

    def squeeze(self, dim: int | None = None) -> Self:
        """Drop size-1 dimensions (only `dim`, if given and of size 1)."""
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if not (isinstance(s, int) and s == 1)))
        d = self._axis(dim)  # a 0-d tensor takes dim 0 or -1, as PyTorch
        if self.ndim == 0:
            return self
        return self.reshape(self.shape[:d] + self.shape[d + 1 :]) if self.shape[d] == 1 else self

    def unsqueeze(self, dim: int) -> Self:
        """Insert a size-1 dimension at `dim`."""
        d = dim + self.ndim + 1 if dim < 0 else dim
        if not 0 <= d <= self.ndim:
            raise IndexError(f"unsqueeze dim {dim} is out of range for shape {self.shape}")
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def cat(self, *args: Self, dim: int = 0) -> Self:
        """Concatenate along `dim` (each tensor is zero-padded into place and the results summed):
        `a.cat(b, c)` or, as torch.cat, `Tensor.cat([a, b, c])`."""
        ts = tensor_sequence(self, args, "cat")
        if ts[0] is not self:  # called on the class with a sequence
            return ts[0].cat(*ts[1:], dim=dim)
        if self.ndim == 0:
            raise IndexError(
                "cat of a 0-d tensor: there is no dimension to join along; unsqueeze or stack instead"
            )
        d = self._axis(dim)
        for t in args:
            mismatch = any(i != d and a != b for i, (a, b) in enumerate(zip(self.shape, t.shape)))
            if t.ndim != self.ndim or mismatch:
                raise ValueError(f"cat along dim {d}: shapes {self.shape} and {t.shape} differ elsewhere")
        self._check_devices(*args)
        dt = least_upper_dtype(*(t.dtype for t in ts))
        sizes = [t.shape[d] for t in ts]  # symbolic too: a kv cache's `cache[:, :start_pos].cat(new)`
        total = functools.reduce(lambda a, b: a + b, sizes)
        parts, offset = [], cast("sint", 0)
        for t, size in zip(ts, sizes):
            pads: list[tuple[sint, sint] | None] = [None] * self.ndim
            pads[d] = (offset, total - offset - size)
            parts.append(t.cast(dt).pad(pads))
            offset += size
        return functools.reduce(lambda a, b: a.add(b), parts)

    def stack(self, *args: Self, dim: int = 0) -> Self:
        """Stack tensors of one shape along a new dimension `dim`: `a.stack(b)` or `Tensor.stack([a, b])`."""
        ts = tensor_sequence(self, args, "stack")
        return type(ts[0]).cat(*(t.unsqueeze(dim) for t in ts), dim=dim)

    def _stride(self, dim: int, step: int, n: int) -> Self:
        """Every `step`-th element along `dim`, keeping `n` (the dimension has at least (n-1)*step+1)."""
        size = concrete(self.shape[dim])
        x = self
        if size < n * step:
            pads: list[tuple[sint, sint] | None] = [None] * self.ndim
            pads[dim] = (0, n * step - size)
            x = x.pad(pads)
        elif size > n * step:
            x = x.shrink(tuple((0, n * step) if i == dim else None for i in range(self.ndim)))
        shp = x.shape
        x = x.reshape(shp[:dim] + (n, step) + shp[dim + 1 :])
        x = x.shrink(tuple((0, 1) if i == dim + 1 else None for i in range(x.ndim)))
        return x.reshape(shp[:dim] + (n,) + shp[dim + 1 :])

    def _normalize_index(self, indices: object) -> list[Any]:
        idx = list(indices) if isinstance(indices, tuple) else [indices]
        for i in idx:
            if isinstance(i, (type(self), list, np.ndarray)) or isinstance(i, bool):
                raise TypeError(f"indexing with {type(i).__name__} (advanced indexing) is not supported")
            if not (i is None or i is Ellipsis or isinstance(i, (int, slice, UOp, np.integer))):
                raise IndexError(
                    f"can't index a Tensor with {type(i).__name__} {i!r:.40}: use ints, slices, "
                    "None, ... or integer tensors"
                )
        if sum(1 for i in idx if i is Ellipsis) > 1:
            raise IndexError("an index can only have a single ellipsis (...)")
        consuming = sum(1 for i in idx if i is not None and i is not Ellipsis)
        if consuming > self.ndim:
            raise IndexError(f"too many indices for tensor of dimension {self.ndim}: {indices!r}")
        fill = [slice(None)] * (self.ndim - consuming)
        if Ellipsis in [i for i in idx if not isinstance(i, UOp)]:
            e = next(j for j, i in enumerate(idx) if i is Ellipsis)
            return idx[:e] + fill + idx[e + 1 :]
        return idx + fill

    def _view_plan(self, indices: object) -> _ViewPlan:
        """How a basic index (ints, slices, None, Ellipsis) views this tensor."""
        plan = _ViewPlan([], [], [], [], [])
        dim = 0
        for i in self._normalize_index(indices):
            if i is None:
                plan.out_shape.append(1)
                continue
            size = self.shape[dim]
            if isinstance(i, UOp):
                plan.shrinks.append((i, i + 1))
                plan.kept.append(1)
            elif isinstance(i, (int, np.integer)):
                j = int(i) + size if i < 0 else int(i)
                if isinstance(j, int) and isinstance(size, int) and not 0 <= j < size:
                    raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
                plan.shrinks.append((j, j + 1))
                plan.kept.append(1)
            elif isinstance(i.start, UOp) or isinstance(i.stop, UOp) or not isinstance(size, int):
                if i.step not in (None, 1):
                    raise IndexError("a symbolic slice can't have a step")
                start, stop = 0 if i.start is None else i.start, size if i.stop is None else i.stop
                plan.shrinks.append((start, stop))
                # v:v+2 has the concrete size 2: simplified, so that a value of that shape can go there
                n = stop if isinstance(start, int) and start == 0 else ssimplify(stop - start)
                plan.kept.append(cast("sint", n))
                plan.out_shape.append(cast("sint", n))
            else:
                r = range(*i.indices(size))
                if len(r) == 0:
                    plan.shrinks.append((0, 0))
                else:
                    lo, hi = min(r[0], r[-1]), max(r[0], r[-1]) + 1
                    plan.shrinks.append((lo, hi))
                    if r.step < 0:
                        plan.flips.append(dim)
                    if abs(r.step) > 1:
                        plan.strides.append((dim, abs(r.step), len(r)))
                plan.kept.append(len(r))
                plan.out_shape.append(len(r))
            dim += 1
        return plan

    def __getitem__(self, indices: object) -> Self:
        """Basic indexing: ints (negative count from the end), slices (any step), None and Ellipsis;
        an int may be a bound symbolic variable and a slice end a symbolic size; int tensors (and lists,
        tuples inside an index) index as in numpy's advanced indexing (see index_tuple for lists)."""
        indices = index_tuple(indices)
        if has_tensor_index(indices):
            return self._getitem_tensor(indices)
        plan = self._view_plan(indices)
        x = self.shrink(plan.shrinks).flip(plan.flips)
        for d, step, n in plan.strides:
            x = x._stride(d, step, n)
        return x.reshape(tuple(plan.out_shape))

    def _embed(self, indices: object, v: Self) -> tuple[Self, Self]:
        """The inverse of the view `self[indices]` (a basic index) for `v` of that view's shape: (v placed
        where the view reads self, zeros elsewhere; the bool mask of those places). Each view op is undone:
        the reshape, the strides (interleaving zeros), the flips and the shrink (a pad)."""
        plan = self._view_plan(indices)
        out: list[Self] = []
        for t in (v, self._from_data(True, device=self.device).expand(v.shape)):
            t = t.reshape(tuple(plan.kept))
            for d, step, n in reversed(plan.strides):
                lo, hi = cast("tuple[int, int]", plan.shrinks[d])
                t = t.unsqueeze(d + 1)
                t = t.pad(tuple((0, step - 1) if k == d + 1 else None for k in range(t.ndim)))
                t = t.reshape(t.shape[:d] + (n * step,) + t.shape[d + 2 :])
                size, dims = hi - lo, range(t.ndim)
                t = (
                    t.shrink([(0, size) if k == d else None for k in dims])
                    if n * step >= size
                    else t.pad([(0, size - n * step) if k == d else None for k in dims])
                )
            t = t.flip(plan.flips)
            out.append(t.pad([(lo, s - hi) for (lo, hi), s in zip(plan.shrinks, self.shape)]))
        return out[0], out[1]

    def _setitem_result(self, indices: tuple[Any, ...], v: Self) -> Self:
        """The value self has after `self[indices] = v`, as a new tensor (nothing is written)."""
        if has_tensor_index(indices):
            basic, new = self._setitem_tensor(indices, v)
        else:
            basic, new = indices, self[indices]._assignable(v)
        placed, mask = self._embed(basic, new)
        return mask.where(placed, self)

    def __setitem__(self, indices: object, v: Self | ConstType | Sequence[Any]) -> None:
        """self[indices] = v: a Tensor value must have self's dtype; Python values are cast to it. With a
        gradient to keep (self or v requires grad) self takes the new value as a graph, so the gradient flows
        to v and to the places of self that were not written; otherwise the write goes into self's storage
        (a view of a buffer sees it), or for a tensor on several devices into the whole tensor."""
        indices = index_tuple(indices)
        if isinstance(v, type(self)):
            if v.dtype != self.dtype:
                raise DTypeMismatchError(
                    f"setitem of a {v.dtype} tensor into a {self.dtype} tensor; cast it first"
                )
            value = v
        else:
            value = self._from_data(py_scalar(v), device=self.device, dtype=self.dtype)
        done = self._applied_store(indices, value)  # `x[i] += y`: the in-place op wrote x[i] already
        if grad_enabled() and (self.requires_grad or value.requires_grad):
            before = self.uop if done is None else _without(self.uop, done)
            self._check_no_other_uses(before, value)
            if done is not None:  # the stored value; the write into x is undone: redone below, as a graph
                self.uop, value = before, self._adopt(done.src[1], value.requires_grad)
            self.uop = self._setitem_result(indices, value).uop
            return
        if done is not None and done in self.uop.src[1:]:
            return
        if isinstance(self.device, tuple):  # a store into a view of a MULTI is not lowered: write the whole
            self.assign(self._setitem_result(indices, value))
            return
        if has_tensor_index(indices):
            basic, new = self._setitem_tensor(indices, value)
            view = self[basic]
        else:
            view = self[indices]
            new = view._assignable(value)
        self._apply_store(view.uop.store(new.uop))

    def _applied_store(self, indices: tuple[Any, ...], value: Self) -> UOp | None:
        """`x[i] += y` runs `v = x[i]; v.assign(v + y); x[i] = v`: the STORE that wrote all of `value` into
        the view x[i] (before that write) already, else None. A value that is another view written meanwhile
        (`tmp = x[0]; x[0] = ...; x[2] = tmp`) is not one."""
        x, u = self, value.uop
        if u.op is not Ops.AFTER or has_tensor_index(indices):
            return None
        store = next((s for s in u.src[1:] if s.op is Ops.STORE and s.src[0] is u.src[0]), None)
        if store is None:
            return None
        before = x._adopt(_without(x.uop, store), False)
        return store if before[indices].uop is store.src[0] else None

    def _check_no_other_uses(self, old: UOp, value: Self) -> None:
        """A setitem that keeps a gradient replaces self's graph `old`: a live tensor already built on it
        (other than the value written, `x[i] += y`'s included) would silently drop out of self's gradient
        (the reference refuses it too)."""
        keep = value.uop.toposort()
        users = dedup(
            s
            for t in registry.all_tensors()
            if t is not self and t.uop is not value.uop and t.uop not in keep
            for s in t.uop.src
        )
        if users and old in UOp.sink(*users).toposort():
            raise GradientError(
                "can't setitem on a tensor that requires grad and that another live tensor "
                "was already built on"
            )


@dataclass
class _ViewPlan:
    """A basic index as view ops: shrinks (one per dim of self), flips and strides (dim, step, count) on the
    shrunk tensor, its shape after them (kept, one per dim of self) and the shape the view reshapes to."""

    shrinks: list[tuple[sint, sint]]
    flips: list[int]
    strides: list[tuple[int, int, int]]
    kept: list[sint]
    out_shape: list[sint]


def _without(u: UOp, store: UOp) -> UOp:
    """`u` without the AFTER on `store` that it got when that store was applied to it."""
    if u.op is not Ops.AFTER or store not in u.src[1:]:
        return u
    rest = tuple(s for s in u.src[1:] if s is not store)
    return u.src[0] if not rest else u.src[0].after(*rest)
