"""Shape ops, padding modes, interpolation, einsum and creation helpers (a mixin of Tensor, layer 15 with
tensor.py): split/chunk, repeat/repeat_interleave, roll, tril/triu, einsum, pad(mode=...), pad_to,
shrink_to, unfold, diag/diagonal, meshgrid, interpolate, var_mean/std_mean, softmin, logcumsumexp,
normalize, linspace, randperm, the `*_like` creators and Kaiming initialisation.

All of them are movement ops, masks and sums over existing primitives (interpolation is a constant
matrix per resized dimension, computed on the host from the static sizes).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

import numpy as np

from uopgrad._util import prod
from uopgrad.dtype import ConstType, DType, dtypes
from uopgrad.errors import ArgumentError, DeviceError, NotSupportedError, ShapeError
from uopgrad.mixin import concrete_size, resolve_shape_arg
from uopgrad.tensor_args import nonnegative, to_dtype
from uopgrad.tensor_args import self_tensor as _t
from uopgrad.tensor_args import tensor_type as _cls

if TYPE_CHECKING:
    from uopgrad.tensor import Tensor
    from uopgrad.uop import sint

__all__ = ["ShapeMixin"]

_PAD_MODES = ("constant", "reflect", "replicate", "circular")
_INTERP_MODES = ("linear", "bilinear", "trilinear", "nearest", "nearest-exact")


_int = concrete_size  # these ops need concrete sizes


def pad_pairs(ndim: int, padding: Sequence[object]) -> list[tuple[sint, sint] | None]:
    """(before, after) per dimension from either form: one pair (or None) per dimension, or PyTorch's
    flat (last_before, last_after, second_last_before, ...) covering the last len/2 dimensions."""
    if all(p is None or isinstance(p, (tuple, list)) for p in padding):
        return [None if p is None else (cast("sint", p[0]), cast("sint", p[1]))
                for p in cast("Sequence[Sequence[object] | None]", padding)]
    if len(padding) % 2 or len(padding) // 2 > ndim:
        raise ValueError(f"flat padding {tuple(padding)} needs an even length of at most 2 * {ndim}")
    flat = cast("Sequence[sint]", padding)
    pairs = [(flat[2 * k], flat[2 * k + 1]) for k in range(len(flat) // 2)]
    return [None] * (ndim - len(pairs)) + list(reversed(pairs))


class ShapeMixin:
    """Splitting, repeating, rolling, triangles, einsum, padding modes, interpolation and creation."""

    __slots__ = ()

    # ------------------------------------------------------------------ split and repeat
    def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """Pieces along `dim`: of `sizes` each (the last may be smaller), or of the listed sizes."""
        x = _t(self)
        d = x._axis(dim)
        n = _int(x.shape[d])
        if isinstance(sizes, int):
            if sizes <= 0:
                raise ValueError(f"split size must be positive, not {sizes}")
            sizes = [min(sizes, n - s) for s in range(0, n, sizes)] or [0]
        if sum(sizes) != n:
            raise ValueError(f"split sizes {list(sizes)} don't add up to {n}, the size of dim {d}")
        out, start = [], 0
        for s in sizes:
            out.append(x.shrink(tuple((start, start + s) if k == d else None for k in range(x.ndim))))
            start += s
        return tuple(out)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """At most `chunks` pieces along `dim`, each of ceil(size / chunks) (the last may be smaller)."""
        x = _t(self)
        if chunks <= 0:
            raise ValueError(f"chunk needs a positive number of chunks, not {chunks}")
        n = _int(x.shape[x._axis(dim)])
        return x.split(max(1, math.ceil(n / chunks)), dim)

    def repeat(self, repeats: Sequence[int] | int, *more: int) -> Tensor:
        """Tile self `repeats[i]` times along dimension i (more repeats than dims add leading dims)."""
        x = _t(self)
        reps = (repeats, *more) if isinstance(repeats, int) else tuple(repeats)
        if len(reps) < x.ndim:
            raise ValueError(f"repeat needs at least {x.ndim} repeats for shape {x.shape}, got {reps}")
        base = (1,) * (len(reps) - x.ndim) + tuple(x.shape)
        y = x.reshape(tuple(d for s in base for d in (1, s)))
        y = y.expand(tuple(d for r, s in zip(reps, base) for d in (r, s)))
        return y.reshape(tuple(r * s for r, s in zip(reps, base)))

    def repeat_interleave(self, repeats: int, dim: int | None = None) -> Tensor:
        """Each element repeated `repeats` times in a row along `dim` (of the flattened tensor if None)."""
        x = _t(self)
        if dim is None:
            x, dim = x.flatten(), 0
        d = x._axis(dim)
        y = x.unsqueeze(d + 1)
        y = y.expand(tuple(repeats if k == d + 1 else s for k, s in enumerate(y.shape)))
        return y.flatten(d, d + 1)

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
        """Shift elements along `dims` cyclically (the flattened tensor when dims is None)."""
        x = _t(self)
        if dims is None:
            return x.flatten().roll(shifts, 0).reshape(x.shape)
        sh = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        ds = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(sh) != len(ds):
            raise ArgumentError(f"roll needs one shift per dim, got shifts {sh} and dims {ds}")
        for s, dim in zip(sh, ds):
            d = x._axis(dim)
            n = _int(x.shape[d])
            k = s % n if n else 0
            if k:
                head, tail = x.split([n - k, k], d)
                x = tail.cat(head, dim=d)
        return x

    # ------------------------------------------------------------------ views and sizes
    def view(self, *shape: sint | Sequence[sint]) -> Tensor:
        """reshape, under PyTorch's name."""
        return _t(self).reshape(*shape)

    def size(self, dim: int | None = None) -> sint | tuple[sint, ...]:
        """The shape, or the size of dimension `dim`."""
        x = _t(self)
        return tuple(x.shape) if dim is None else x.shape[x._axis(dim)]

    def nbytes(self) -> int:
        """Bytes of data: numel * element size."""
        x = _t(self)
        return _int(x.numel()) * x.element_size()

    def is_floating_point(self) -> bool:
        """Whether the dtype is a float type."""
        return dtypes.is_float(_t(self).dtype)

    def short(self) -> Tensor:
        """Cast to int16."""
        return _t(self).cast(dtypes.int16)

    def bfloat16(self) -> Tensor:
        """Cast to bfloat16."""
        return _t(self).cast(dtypes.bfloat16)

    def pad_to(self, shape: Sequence[int | None], *args: int | None, value: ConstType = 0) -> Tensor:
        """Pad at the end of each dimension up to `shape` (None keeps a dimension)."""
        x = _t(self)
        shp = resolve_shape_arg((shape, *args))
        if len(shp) != x.ndim:
            raise ValueError(f"pad_to {tuple(shp)} needs one size per dimension of {x.shape}")
        return x.pad([None if n is None else (0, n - _int(s)) for s, n in zip(x.shape, shp)], value=value)

    def shrink_to(self, shape: Sequence[int | None], *args: int | None) -> Tensor:
        """Keep the first `shape[i]` elements of each dimension (None keeps a dimension)."""
        x = _t(self)
        shp = resolve_shape_arg((shape, *args))
        return x.shrink([None if n is None else (0, n) for n in shp])

    def unfold(self, dim: int, size: int, step: int) -> Tensor:
        """The windows of `size` every `step` along `dim` (that dim becomes the window count, a last dim
        of `size` is appended), as torch.Tensor.unfold."""
        x = _t(self)
        d = x._axis(dim)
        if size < 0 or step <= 0 or size > _int(x.shape[d]):  # the reference raises RuntimeError here
            raise ArgumentError(f"unfold(dim={dim}, size={size}, step={step}) of shape {x.shape}: size must "
                                f"be in [0, {x.shape[d]}] and step > 0")
        w = x.transpose(d, -1)._pool((size,), step)  # (..., windows, size) with dim d last before it
        return w.transpose(d, -2)

    def diag(self) -> Tensor:
        """The square matrix with this 1-d tensor on its diagonal."""
        x = _t(self)
        if x.ndim != 1:
            raise ValueError(f"diag needs a 1-d tensor, not shape {x.shape}")
        n = _int(x.shape[0])
        return x.eye(n, device=x.device, dtype=dtypes.bool).where(x.reshape(1, n), x.const_like(0))

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """The elements [i, i + offset] of dims dim1, dim2, as a last dim (as PyTorch)."""
        x = _t(self)
        a, b = x._axis(dim1), x._axis(dim2)
        if a == b:
            raise ArgumentError(f"diagonal of shape {x.shape}: dim1={dim1} and dim2={dim2} name the same "
                                "dimension")
        y = x.permute(*[k for k in range(x.ndim) if k not in (a, b)], a, b)
        r, c = _int(y.shape[-2]), _int(y.shape[-1])
        lo, hi = (0, offset) if offset >= 0 else (-offset, 0)
        n = max(0, min(r - lo, c - hi))
        y = y.shrink([*([None] * (y.ndim - 2)), (lo, lo + n), (hi, hi + n)])
        eye = x.eye(n, device=x.device, dtype=dtypes.bool)
        return eye.where(y, y.const_like(0)).sum(-1, dtype=y.dtype)

    def meshgrid(self, *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
        """Coordinate grids of 1-d tensors ("ij": matrix indexing, "xy": the first two swapped)."""
        if indexing not in ("ij", "xy"):
            raise ArgumentError(f"meshgrid indexing must be 'ij' or 'xy', not {indexing!r}")
        ts = [_t(self), *args]
        shape = tuple(_int(t.numel()) for t in ts)
        out = [t.reshape(tuple(-1 if k == j else 1 for k in range(len(ts)))).expand(shape) for j, t in
               enumerate(ts)]
        return tuple(o.transpose(0, 1) for o in out) if indexing == "xy" and len(ts) >= 2 else tuple(out)

    # ------------------------------------------------------------------ reductions on top of reductions
    def var_mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
                 correction: int = 1) -> tuple[Tensor, Tensor]:
        """(var, mean) over `axis`."""
        x = _t(self)
        return x.var(axis, keepdim, correction), x.mean(axis, keepdim)

    def std_mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
                 correction: int = 1) -> tuple[Tensor, Tensor]:
        """(std, mean) over `axis`."""
        x = _t(self)
        return x.std(axis, keepdim, correction), x.mean(axis, keepdim)

    def softmin(self, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
        """softmax(-x)."""
        return (-_t(self)).softmax(axis, dtype)

    def logcumsumexp(self, axis: int = 0) -> Tensor:
        """log(cumsum(e ** x)) along `axis`, as a scan of logaddexp in log2(n) doubling steps: each prefix
        is shifted by its own maximum, so a small entry before a large one keeps its value (one shift by
        the row's maximum would underflow e ** (x - max) to a subnormal or 0 there)."""
        x = _t(self)
        if x.ndim == 0:
            return x
        ax, y = x._axis(axis), x if dtypes.is_float(x.dtype) else x.cast(dtypes.default_float)
        n, d = _int(y.shape[ax]), 1
        while d < n:  # y[i] = logaddexp(y[i], y[i - d]); -inf (the identity) before the start
            cut = [(0, n - d) if i == ax else None for i in range(y.ndim)]
            pad = [(d, 0) if i == ax else None for i in range(y.ndim)]
            # realized per step: unfused, step k would recompute step k-1 twice, 2 ** k evaluations in all
            y = y.logaddexp(y.shrink(cut).pad(pad, value=-math.inf)).contiguous()
            d *= 2
        return y

    def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
        """x / max(||x||_p, eps) along `dim`, with PyTorch's vector norms: p = 0 counts the nonzero entries
        (no gradient), p = +-inf is the largest / smallest magnitude, any other p (sum |x|^p)^(1/p)."""
        x = _t(self)
        if p == 0:
            norm = x.ne(0).sum(dim, keepdim=True).cast(x.dtype)
        elif math.isinf(p):
            norm = x.abs().max(dim, keepdim=True) if p > 0 else x.abs().min(dim, keepdim=True)
        else:
            norm = x.abs().pow(p).sum(dim, keepdim=True).pow(1 / p)
        return x / norm.maximum(eps)

    # ------------------------------------------------------------------ triangles
    def _tri(self, diagonal: int, upper: bool) -> Tensor:
        x = _t(self)
        if x.ndim < 2:
            raise ValueError(f"tril/triu need at least 2 dimensions, not shape {x.shape}")
        r, c = _int(x.shape[-2]), _int(x.shape[-1])
        rows = x.arange(r, device=x.device).reshape(r, 1)
        cols = x.arange(c, device=x.device).reshape(1, c)
        keep = (cols >= rows + diagonal) if upper else (cols <= rows + diagonal)
        return keep.where(x, x.const_like(0))

    def tril(self, diagonal: int = 0) -> Tensor:
        """Zero above the `diagonal`-th diagonal of the last two dimensions."""
        return self._tri(diagonal, False)

    def triu(self, diagonal: int = 0) -> Tensor:
        """Zero below the `diagonal`-th diagonal of the last two dimensions."""
        return self._tri(diagonal, True)

    # ------------------------------------------------------------------ einsum
    @classmethod
    def einsum(cls, formula: str, *operands: Tensor | Sequence[Tensor], dtype: DType | None = None) -> Tensor:
        """Einstein summation, e.g. einsum("ij,jk->ik", a, b): letters shared by operands are multiplied
        along, letters missing from the output summed over (implicit output: the letters seen once)."""
        ts = list(operands[0]) if len(operands) == 1 and not hasattr(operands[0], "uop") else list(operands)
        tensors = cast("list[Tensor]", ts)
        lhs, arrow, out = formula.replace(" ", "").partition("->")
        inputs = lhs.split(",")
        if len(inputs) != len(tensors):
            raise ValueError(f"einsum {formula!r} names {len(inputs)} operands, got {len(tensors)}")
        # (an ellipsis stands for the dims that no letter names, broadcast across the operands from the right)
        if "." in formula:
            lhs, explicit, out = _expand_ellipsis(inputs, out if arrow else None, [t.ndim for t in tensors])
            inputs, arrow = lhs.split(","), "->" if explicit else ""
        letters = sorted(set("".join(inputs)))
        if not arrow:
            out = "".join(c for c in letters if "".join(inputs).count(c) == 1)
        sizes: dict[str, sint] = {}
        aligned = []
        for spec, t in zip(inputs, tensors):
            if len(spec) != t.ndim:
                raise ValueError(f"einsum operand {spec!r} has {len(spec)} letters for shape {t.shape}")
            if len(set(spec)) != len(spec):
                t, spec = _diagonal(t, spec)
            for ch, s in zip(spec, t.shape):
                if sizes.get(ch, 1) == 1:  # a size 1 broadcasts against any other
                    sizes[ch] = s
                elif sizes[ch] != s and not (isinstance(s, int) and s == 1):
                    raise ShapeError(f"einsum letter {ch!r} has sizes {sizes[ch]} and {s}")
            order = sorted(range(len(spec)), key=lambda k: letters.index(spec[k]))
            t = t.permute(order)
            aligned.append(t.reshape(tuple(t.shape[order.index(spec.index(c))] if c in spec else 1
                                           for c in letters)))
        full = aligned[0]
        for a in aligned[1:]:
            full = full * a
        summed = tuple(k for k, c in enumerate(letters) if c not in out)
        ret = full.sum(summed, keepdim=True, dtype=dtype) if summed else full
        ret = ret.reshape(tuple(s for k, s in enumerate(ret.shape) if k not in summed))
        kept = [c for c in letters if c in out]
        return ret.permute([kept.index(c) for c in out]) if out else ret

    # ------------------------------------------------------------------ padding modes
    def _pad_mode(self, padding: Sequence[object], mode: str, value: ConstType) -> Tensor:
        """pad(mode=...): "constant" (value), "reflect", "replicate" or "circular"; negative amounts cut."""
        x = _t(self)
        if mode not in _PAD_MODES:
            raise NotSupportedError(f"pad mode must be one of {_PAD_MODES}, not {mode!r}")
        pairs = pad_pairs(x.ndim, padding)
        if len(pairs) != x.ndim:
            raise ValueError(f"pad {tuple(padding)} needs one entry per dimension of {x.shape}")
        if mode == "circular" and any(_int(a) < 0 for p in pairs if p is not None for a in p):
            raise NotSupportedError(f"circular pad {tuple(padding)} has a negative amount; shrink the tensor "
                                    "first")
        grow = [None if p is None else (max(0, _int(p[0])), max(0, _int(p[1]))) for p in pairs]

        def cut(t: Tensor) -> Tensor:  # negative amounts cut from each end
            return t.shrink([(max(0, -_int(p[0])), _int(t.shape[d]) - max(0, -_int(p[1]))) if p is not None
                             else None for d, p in enumerate(pairs)])
        if mode == "constant":
            return cut(x).pad(grow, value=value)
        for d, p in enumerate(grow):  # reflect and replicate see the whole data, then cut (as PyTorch)
            if p is None or p == (0, 0):
                continue
            x = _pad_dim(x, d, p[0], p[1], mode)
        return cut(x)

    # ------------------------------------------------------------------ interpolation
    def interpolate(self, size: Sequence[int], mode: str = "linear", align_corners: bool = False) -> Tensor:
        """Resize the last len(size) dimensions to `size`: "linear" (also "bilinear", "trilinear"),
        "nearest" or "nearest-exact", with PyTorch's coordinate conventions."""
        x = _t(self)
        if mode not in _INTERP_MODES:
            raise ValueError(f"interpolate mode must be one of {_INTERP_MODES}, not {mode!r}")
        if len(size) > x.ndim:
            raise ValueError(f"interpolate size {tuple(size)} has more dims than shape {x.shape}")
        if align_corners and mode.startswith("nearest"):
            raise ValueError("align_corners only applies to the linear modes")
        if x.dtype == dtypes.uint8 and not mode.startswith("nearest"):
            return x._interpolate_uint8(size, align_corners)
        for k, out in enumerate(size):
            d = x.ndim - len(size) + k
            w = _interp_matrix(_int(x.shape[d]), _int(out), mode, align_corners).astype(np.float64)
            wt = type(x)(w, device=x.device, dtype=x.dtype if dtypes.is_float(x.dtype) else dtypes.float32)
            y = x.transpose(d, -1)._to_float()
            y = (y.unsqueeze(-2) * wt).sum(-1)
            x = y.transpose(d, -1).cast(x.dtype) if not dtypes.is_float(x.dtype) else y.transpose(d, -1)
        return x

    def _interpolate_uint8(self, size: Sequence[int], align_corners: bool) -> Tensor:
        """The linear modes on uint8 images as PyTorch computes them: one pass per dim, the last dim first,
        each a fixed-point sum (weights as int16 with `prec` fraction bits) rounded and clamped to uint8."""
        x = _t(self)
        for k in reversed(range(len(size))):
            d = x.ndim - len(size) + k
            w, prec = _fixed_point(_interp_matrix(_int(x.shape[d]), _int(size[k]), "linear", align_corners))
            wt = type(x)(w, device=x.device, dtype=dtypes.int32)
            y = (x.transpose(d, -1).cast(dtypes.int32).unsqueeze(-2) * wt).sum(-1, dtype=dtypes.int32)
            x = ((y + (1 << (prec - 1))) >> prec).clip(0, 255).cast(dtypes.uint8).transpose(d, -1)
        return x

    # ------------------------------------------------------------------ creation
    @classmethod
    def linspace(cls, start: float, stop: float, steps: int, device: str | None = None,
                 dtype: DType | str | None = None, requires_grad: bool | None = None) -> Tensor:
        """`steps` evenly spaced values from start to stop, both included."""
        tc = _cls(cls)
        if steps < 0:
            raise ValueError(f"linspace needs steps >= 0, not {steps}")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if dt == dtypes.bool:  # PyTorch and the reference have no bool linspace either
            raise ArgumentError("linspace can't make a bool tensor; ask for a number dtype and compare")
        if steps <= 1:
            return tc.full((steps,), start, device=device, dtype=dt, requires_grad=requires_grad)
        i = tc.arange(steps, device=device).cast(dtypes.float64 if dt == dtypes.float64 else dtypes.float32)
        step = (stop - start) / (steps - 1)
        # the second half counts back from stop, as PyTorch does, so both ends are exact
        ret = (i < steps // 2).where(i * step + start, stop - (steps - 1 - i) * step)
        return tc(ret.cast(dt).uop, requires_grad=requires_grad)

    @classmethod
    def randperm(cls, n: int, device: str | None = None, dtype: DType | str | None = None,
                 requires_grad: bool | None = None) -> Tensor:
        """A random permutation of 0 .. n-1 (int32 unless `dtype` says otherwise)."""
        return _cls(cls)._random(lambda g: g.permutation(n), device, dtype, requires_grad, dtypes.int32)

    def empty_like(self, dtype: DType | str | None = None, requires_grad: bool | None = None) -> Tensor:
        """An uninitialised tensor of this shape, device and dtype (unless given)."""
        x = _t(self)
        return x.empty(x.shape, device=x.device, dtype=dtype or x.dtype, requires_grad=requires_grad)

    def rand_like(self, dtype: DType | str | None = None, requires_grad: bool | None = None,
                  device: str | None = None) -> Tensor:
        """Uniform [0, 1) values of this shape and device (sharded like this tensor)."""
        x = _t(self)
        return x._random_like(x.rand, dtype, requires_grad, device)

    def randn_like(self, dtype: DType | str | None = None, requires_grad: bool | None = None,
                   device: str | None = None) -> Tensor:
        """Standard normal values of this shape and device (sharded like this tensor)."""
        x = _t(self)
        return x._random_like(x.randn, dtype, requires_grad, device)

    def _random_like(self, fn: Callable[..., Tensor], dtype: DType | str | None, requires_grad: bool | None,
                     device: str | None) -> Tensor:
        """`fn`'s values in this tensor's shape; on a device tuple drawn on the first device and sharded as
        this tensor is (the device can't be changed then: the reference's rule)."""
        x = _t(self)
        dt = dtype or x._float_or_default()
        if not isinstance(devs := x.device, tuple):
            return fn(_ints(x.shape), device=device or devs, dtype=dt, requires_grad=requires_grad)
        if device is not None:
            raise DeviceError(f"a *_like of a tensor on {devs} takes its devices; can't put it on {device}")
        out = fn(_ints(x.shape), device=devs[0], dtype=dt).shard(devs, x.uop.axis)
        out.requires_grad = requires_grad
        return out

    def _float_or_default(self) -> DType:
        x = _t(self)
        return x.dtype if dtypes.is_float(x.dtype) else dtypes.default_float

    @classmethod
    def kaiming_uniform(cls, *shape: int | Sequence[int], a: float = 0.01, device: str | None = None,
                        dtype: DType | str | None = None, requires_grad: bool | None = None) -> Tensor:
        """He uniform initialisation for a leaky-relu slope `a`: bound sqrt(6 / ((1 + a²) fan_in))."""
        shp = nonnegative(resolve_shape_arg(shape), "kaiming_uniform")
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shp[1:]))
        return _cls(cls).uniform(shp, low=-bound, high=bound, device=device, dtype=dtype,
                                 requires_grad=requires_grad)

    @classmethod
    def kaiming_normal(cls, *shape: int | Sequence[int], a: float = 0.01, device: str | None = None,
                       dtype: DType | str | None = None, requires_grad: bool | None = None) -> Tensor:
        """He normal initialisation for a leaky-relu slope `a`: std sqrt(2 / ((1 + a²) fan_in))."""
        shp = nonnegative(resolve_shape_arg(shape), "kaiming_normal")
        std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shp[1:]))
        return _cls(cls).normal(shp, mean=0.0, std=std, device=device, dtype=dtype,
                                requires_grad=requires_grad)


def _ints(shape: Sequence[sint]) -> tuple[int, ...]:
    if not all(isinstance(s, int) for s in shape):
        raise ShapeError(f"random values need a concrete shape, not {tuple(shape)}")
    return tuple(cast(int, s) for s in shape)


def _expand_ellipsis(inputs: list[str], out: str | None, ndims: list[int]) -> tuple[str, bool, str]:
    """einsum's "..." replaced by fresh capital letters, one per dim it covers, right-aligned so that the
    operands' ellipses broadcast together; the implicit output is the ellipsis dims, then the letters seen
    once (in order), as PyTorch's."""
    if any(spec.count("...") > 1 for spec in inputs) or (out is not None and out.count("...") > 1):
        raise IndexError("einsum: an operand may hold one ellipsis ('...') at most")
    named = set("".join(inputs).replace(".", ""))
    fresh = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in named and c not in (out or "")]
    spans = [nd - len(spec.replace("...", "")) if "..." in spec else 0 for spec, nd in zip(inputs, ndims)]
    if any(n < 0 for n in spans):
        raise ValueError("einsum: an operand has more letters than dimensions")
    width = max(spans, default=0)
    ell = "".join(fresh[:width])
    expanded = [spec.replace("...", ell[width - n:]) for spec, n in zip(inputs, spans)]
    if out is None:
        seen = "".join(expanded)
        out = ell + "".join(sorted(c for c in set(seen) if seen.count(c) == 1 and c not in ell))
    else:
        out = out.replace("...", ell)
    return ",".join(expanded), True, out


def _diagonal(t: Tensor, spec: str) -> tuple[Tensor, str]:
    """einsum's repeated letter in one operand ("ii"): keep the diagonal, one letter per dimension."""
    while len(set(spec)) != len(spec):
        ch = next(c for c in spec if spec.count(c) > 1)
        a, b = spec.index(ch), spec.index(ch, spec.index(ch) + 1)
        n = _int(t.shape[a])
        t = t.permute(*[k for k in range(t.ndim) if k not in (a, b)], a, b)
        eye = t.eye(n, device=t.device, dtype=dtypes.bool)
        t = eye.where(t, 0).sum(-1)
        spec = "".join(c for k, c in enumerate(spec) if k not in (a, b)) + ch
    return t, spec


def _pad_dim(x: Tensor, d: int, before: int, after: int, mode: str) -> Tensor:
    n = _int(x.shape[d])

    def take(lo: int, hi: int) -> Tensor:
        return x.shrink(tuple((lo, hi) if k == d else None for k in range(x.ndim)))
    if mode == "reflect":
        if before >= n or after >= n:
            raise ValueError(f"reflect padding ({before}, {after}) must be smaller than the size {n}")
        parts = [take(1, before + 1).flip(d), x, take(n - after - 1, n - 1).flip(d)]
    elif mode == "replicate":
        def shape(k: int) -> tuple[sint, ...]:
            return tuple(k if j == d else s for j, s in enumerate(x.shape))
        parts = [take(0, 1).expand(shape(before)), x, take(n - 1, n).expand(shape(after))]
    else:  # circular
        if before > n or after > n:
            raise ValueError(f"circular padding ({before}, {after}) can't exceed the size {n}")
        parts = [take(n - before, n), x, take(0, after)]
    parts = [p for p in parts if _int(p.shape[d]) > 0]
    return parts[0].cat(*parts[1:], dim=d)


def _fixed_point(w: np.ndarray) -> tuple[np.ndarray, int]:
    """(w as int16 fixed-point numbers with `prec` fraction bits, prec): the most bits (up to 22) that keep
    twice the largest weight below 2 ** 15, each weight rounded half away from zero (PyTorch's uint8
    resampling, after Pillow's)."""
    top, prec = float(w.max()), 0
    while prec < 22 and int(0.5 + top * (1 << (prec + 1))) < (1 << 15):
        prec += 1
    scaled = w * (1 << prec)
    return np.trunc(scaled + np.where(scaled < 0, -0.5, 0.5)).astype(np.int32), prec


def _interp_matrix(n_in: int, n_out: int, mode: str, align_corners: bool) -> np.ndarray:
    """The (n_out, n_in) matrix that resizes one dimension."""
    o = np.arange(n_out, dtype=np.float64)
    w = np.zeros((n_out, n_in))
    if mode.startswith("nearest"):
        scale = n_in / n_out
        src = np.floor((o + 0.5) * scale) if mode == "nearest-exact" else np.floor(o * scale)
        w[np.arange(n_out), np.minimum(src.astype(np.int64), n_in - 1)] = 1.0
        return w
    if align_corners:
        src = o * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    else:
        src = np.maximum((o + 0.5) * (n_in / n_out) - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = src - lo
    np.add.at(w, (np.arange(n_out), lo), 1 - frac)
    np.add.at(w, (np.arange(n_out), hi), frac)
    return w
