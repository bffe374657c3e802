"""Movement and basic indexing (a mixin of Tensor, layer 15 with tensor.py): pad with a value, transpose,
T, flatten, unflatten, squeeze, unsqueeze, cat, stack, and `[]` / `[]=` with ints, slices (any step),
None and Ellipsis.

All of them are the six movement ops of the IR; a slice step is a pad, reshape and shrink, and cat pads
each part into place and sums them. Indexing by tensors goes to tensor_index. `[]=` writes into the
tensor's storage, or, where a gradient must flow through the write (or the tensor is on several devices),
builds the new value as where(mask, the value put back through the inverse view ops, self).
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from uopgrad import tensor_registry as registry
from uopgrad._util import dedup, prod
from uopgrad.dtype import ConstType, dtypes, least_upper_dtype
from uopgrad.errors import ArgumentError, DTypeMismatchError, GradientError
from uopgrad.mixin import MovementMixin
from uopgrad.ops import Ops
from uopgrad.tensor_args import TensorLike, concrete, py_scalar
from uopgrad.tensor_args import self_tensor as _t
from uopgrad.tensor_index import has_tensor_index, index_tuple
from uopgrad.tensor_nn import grad_enabled
from uopgrad.uop import UOp, ssimplify

if TYPE_CHECKING:
    from uopgrad.tensor import Tensor
    from uopgrad.uop import sint

__all__ = ["TensorMovementMixin"]


class TensorMovementMixin:
    """Reshaping, joining and basic indexing."""

    __slots__ = ()

    def pad(self, padding: Sequence[tuple[sint, sint] | None] | Sequence[sint], value: ConstType = 0,
            mode: str = "constant") -> Tensor:
        """Pad each dimension by (before, after) with `value` (zero by default); also PyTorch's flat form
        (last dimension first; there a negative amount cuts) and mode "reflect", "replicate" or "circular"."""
        x = _t(self)
        if (mode != "constant" or not all(p is None or isinstance(p, (tuple, list)) for p in padding)
                or any(isinstance(a, int) and a < 0 for p in padding if p is not None
                       for a in cast("tuple[sint, sint]", p))):
            return x._pad_mode(padding, mode, value)  # flat form, a mode, or negative amounts (they cut)
        arg = cast("Sequence[tuple[sint, sint] | None]", padding)
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
        d = x._axis(dim)  # a 0-d tensor takes dim 0 or -1, as PyTorch
        if x.ndim == 0:
            return x
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
        if x.ndim == 0:
            raise IndexError("cat of a 0-d tensor: there is no dimension to join along; unsqueeze or stack "
                             "instead")
        d = x._axis(dim)
        for t in args:
            mismatch = any(i != d and a != b for i, (a, b) in enumerate(zip(x.shape, t.shape)))
            if t.ndim != x.ndim or mismatch:
                raise ValueError(f"cat along dim {d}: shapes {x.shape} and {t.shape} differ elsewhere")
        x._check_devices(*args)
        dt = least_upper_dtype(*(t.dtype for t in ts))
        sizes = [t.shape[d] for t in ts]  # symbolic too: a kv cache's `cache[:, :start_pos].cat(new)`
        total = functools.reduce(lambda a, b: a + b, sizes)
        parts, offset = [], cast("sint", 0)
        for t, size in zip(ts, sizes):
            pads: list[tuple[sint, sint] | None] = [None] * x.ndim
            pads[d] = (offset, total - offset - size)
            parts.append(t.cast(dt).pad(pads))
            offset += size
        return functools.reduce(type(x).add, parts)

    def stack(self, *args: Tensor, dim: int = 0) -> Tensor:
        """Stack tensors of one shape along a new dimension `dim`."""
        first = cast(object, self)  # Tensor.stack([a, b], dim=...) passes a sequence as `self`
        if isinstance(first, (tuple, list)):
            if args:
                raise ArgumentError(f"stack takes its tensors either as one sequence or as arguments, not "
                                    f"both (got a {type(first).__name__} and {len(args)} more)")
            ts: tuple[Tensor, ...] = tuple(first)
        else:
            ts = (_t(self), *args)
        return type(ts[0]).cat(*(t.unsqueeze(dim) for t in ts), dim=dim)

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
                raise IndexError(f"can't index a Tensor with {type(i).__name__} {i!r:.40}: use ints, slices, "
                                 "None, ... or integer tensors")
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

    def _view_plan(self, indices: object) -> _ViewPlan:
        """How a basic index (ints, slices, None, Ellipsis) views this tensor."""
        me = _t(self)
        plan = _ViewPlan([], [], [], [], [])
        dim = 0
        for i in me._normalize_index(indices):
            if i is None:
                plan.out_shape.append(1)
                continue
            size = me.shape[dim]
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

    def __getitem__(self, indices: object) -> Tensor:
        """Basic indexing: ints (negative count from the end), slices (any step), None and Ellipsis;
        an int may be a bound symbolic variable and a slice end a symbolic size; int tensors (and lists,
        tuples inside an index) index as in numpy's advanced indexing (see index_tuple for lists)."""
        me = _t(self)
        indices = index_tuple(indices)
        if has_tensor_index(indices):
            return me._getitem_tensor(indices)
        plan = me._view_plan(indices)
        x = me.shrink(plan.shrinks).flip(plan.flips)
        for d, step, n in plan.strides:
            x = x._stride(d, step, n)
        return x.reshape(tuple(plan.out_shape))

    def _embed(self, indices: object, v: Tensor) -> tuple[Tensor, Tensor]:
        """The inverse of the view `self[indices]` (a basic index) for `v` of that view's shape: (v placed
        where the view reads self, zeros elsewhere; the bool mask of those places). Each view op is undone:
        the reshape, the strides (interleaving zeros), the flips and the shrink (a pad)."""
        x = _t(self)
        plan = x._view_plan(indices)
        out: list[Tensor] = []
        for t in (v, type(x)(True, device=x.device).expand(v.shape)):
            t = t.reshape(tuple(plan.kept))
            for d, step, n in reversed(plan.strides):
                lo, hi = cast("tuple[int, int]", plan.shrinks[d])
                t = t.unsqueeze(d + 1)
                t = t.pad(tuple((0, step - 1) if k == d + 1 else None for k in range(t.ndim)))
                t = t.reshape(t.shape[:d] + (n * step,) + t.shape[d + 2:])
                size, dims = hi - lo, range(t.ndim)
                t = t.shrink([(0, size) if k == d else None for k in dims]) if n * step >= size else \
                    t.pad([(0, size - n * step) if k == d else None for k in dims])
            t = t.flip(plan.flips)
            out.append(t.pad([(lo, s - hi) for (lo, hi), s in zip(plan.shrinks, x.shape)]))
        return out[0], out[1]

    def _setitem_result(self, indices: tuple[Any, ...], v: Tensor) -> Tensor:
        """The value self has after `self[indices] = v`, as a new tensor (nothing is written)."""
        x = _t(self)
        if has_tensor_index(indices):
            basic, new = x._setitem_tensor(indices, v)
        else:
            basic, new = indices, x[indices]._assignable(v)
        placed, mask = x._embed(basic, new)
        return mask.where(placed, x)

    def __setitem__(self, indices: object, v: TensorLike | Sequence[Any]) -> None:
        """self[indices] = v: a Tensor value must have self's dtype; Python values are cast to it. With a
        gradient to keep (self or v requires grad) self takes the new value as a graph, so the gradient flows
        to v and to the places of self that were not written; otherwise the write goes into self's storage
        (a view of a buffer sees it), or for a tensor on several devices into the whole tensor."""
        x = _t(self)
        indices = index_tuple(indices)
        if isinstance(v, type(x)):
            if v.dtype != x.dtype:
                raise DTypeMismatchError(f"setitem of a {v.dtype} tensor into a {x.dtype} tensor; cast it "
                                         "first")
            value = v
        else:
            value = type(x)(py_scalar(v), device=x.device, dtype=x.dtype)
        done = x._applied_store(indices, value)  # `x[i] += y`: the in-place op wrote x[i] already
        if grad_enabled() and (x.requires_grad or value.requires_grad):
            before = x.uop if done is None else _without(x.uop, done)
            x._check_no_other_uses(before, value)
            if done is not None:  # the stored value; the write into x is undone: redone below, as a graph
                x.uop, value = before, type(x)._adopt(done.src[1], value.requires_grad)
            x.uop = x._setitem_result(indices, value).uop
            return
        if done is not None and done in x.uop.src[1:]:
            return
        if isinstance(x.device, tuple):  # a store into a view of a MULTI is not lowered: write the whole
            x.assign(x._setitem_result(indices, value))
            return
        if has_tensor_index(indices):
            basic, new = x._setitem_tensor(indices, value)
            view = x[basic]
        else:
            view = x[indices]
            new = view._assignable(value)
        x._apply_store(view.uop.store(new.uop))

    def _applied_store(self, indices: tuple[Any, ...], value: Tensor) -> UOp | None:
        """`x[i] += y` runs `v = x[i]; v.assign(v + y); x[i] = v`: the STORE that wrote all of `value` into
        the view x[i] (before that write) already, else None. A value that is another view written meanwhile
        (`tmp = x[0]; x[0] = ...; x[2] = tmp`) is not one."""
        x, u = _t(self), value.uop
        if u.op is not Ops.AFTER or has_tensor_index(indices):
            return None
        store = next((s for s in u.src[1:] if s.op is Ops.STORE and s.src[0] is u.src[0]), None)
        if store is None:
            return None
        before = type(x)._adopt(_without(x.uop, store), False)
        return store if before[indices].uop is store.src[0] else None

    def _check_no_other_uses(self, old: UOp, value: Tensor) -> None:
        """A setitem that keeps a gradient replaces self's graph `old`: a live tensor already built on it
        (other than the value written, `x[i] += y`'s included) would silently drop out of self's gradient
        (the reference refuses it too)."""
        x = _t(self)
        keep = value.uop.toposort()
        users = dedup(s for t in registry.all_tensors() if t is not x and t.uop is not value.uop
                      and t.uop not in keep for s in t.uop.src)
        if users and old in UOp.sink(*users).toposort():
            raise GradientError("can't setitem on a tensor that requires grad and that another live tensor "
                                "was already built on")


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
