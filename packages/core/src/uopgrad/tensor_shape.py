"""Shape ops, padding modes, interpolation, einsum and creation helpers (a mixin of Tensor, layer 15 with
tensor.py): split/chunk, repeat/repeat_interleave, roll, tril/triu, einsum, pad(mode=...), pad_to,
shrink_to, unfold, diag/diagonal, meshgrid, interpolate, var_mean/std_mean, softmin, logcumsumexp,
normalize, linspace, the `*_like` creators and Kaiming initialisation. Generic over `Self` (tensor_hooks).

All of them are movement ops, masks and sums over existing primitives (interpolation is a constant
matrix per resized dimension, computed on the host from the static sizes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Self, TypeVar, cast

import numpy as np

from uopgrad._util import prod
from uopgrad.dtype import ConstType, DType, dtypes
from uopgrad.errors import ArgumentError, DeviceError, NotSupportedError, ShapeError
from uopgrad.mixin import concrete_size, resolve_shape_arg
from uopgrad.tensor_args import dim_alias, nonnegative, pad_pairs, to_dtype
from uopgrad.tensor_hooks import TensorHooks

if TYPE_CHECKING:
    from typing import Unpack

    from uopgrad.tensor_hooks import _OnDevice
    from uopgrad.uop import sint

__all__ = ["ShapeMixin"]

_S = TypeVar("_S", bound="ShapeMixin")  # the helpers below take and give values of the family

_PAD_MODES = ("constant", "reflect", "replicate", "circular")
_INTERP_MODES = ("linear", "bilinear", "trilinear", "nearest", "nearest-exact")


_int = concrete_size  # these ops need concrete sizes


class ShapeMixin(TensorHooks):
    """Splitting, repeating, rolling, triangles, einsum, padding modes, interpolation and creation."""

    __slots__ = ()

    # ------------------------------------------------------------------ split and repeat
    def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Self, ...]:
        """Pieces along `dim`: of `sizes` each (the last may be smaller), or of the listed sizes."""
        d = self._axis(dim)
        n = _int(self.shape[d])
        if isinstance(sizes, int):
            if sizes <= 0:
                raise ValueError(f"split size must be positive, not {sizes}")
            sizes = [min(sizes, n - s) for s in range(0, n, sizes)] or [0]
        if sum(sizes) != n:
            raise ValueError(f"split sizes {list(sizes)} don't add up to {n}, the size of dim {d}")
        out, start = [], 0
        for s in sizes:
            out.append(self.shrink(tuple((start, start + s) if k == d else None for k in range(self.ndim))))
            start += s
        return tuple(out)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Self, ...]:
        """At most `chunks` pieces along `dim`, each of ceil(size / chunks) (the last may be smaller)."""
        if chunks <= 0:
            raise ValueError(f"chunk needs a positive number of chunks, not {chunks}")
        n = _int(self.shape[self._axis(dim)])
        return self.split(max(1, math.ceil(n / chunks)), dim)

    def repeat(self, repeats: Sequence[int] | int, *more: int) -> Self:
        """Tile self `repeats[i]` times along dimension i (more repeats than dims add leading dims)."""
        reps = (repeats, *more) if isinstance(repeats, int) else tuple(repeats)
        if len(reps) < self.ndim:
            raise ValueError(f"repeat needs at least {self.ndim} repeats for shape {self.shape}, got {reps}")
        base = (1,) * (len(reps) - self.ndim) + tuple(self.shape)
        y = self.reshape(tuple(d for s in base for d in (1, s)))
        y = y.expand(tuple(d for r, s in zip(reps, base) for d in (r, s)))
        return y.reshape(tuple(r * s for r, s in zip(reps, base)))

    def repeat_interleave(self, repeats: int, dim: int | None = None) -> Self:
        """Each element repeated `repeats` times in a row along `dim` (of the flattened tensor if None)."""
        x = self
        if dim is None:
            x, dim = x.flatten(), 0
        d = x._axis(dim)
        y = x.unsqueeze(d + 1)
        y = y.expand(tuple(repeats if k == d + 1 else s for k, s in enumerate(y.shape)))
        return y.flatten(d, d + 1)

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Self:
        """Shift elements along `dims` cyclically (the flattened tensor when dims is None)."""
        x = self
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
    def view(self, *shape: sint | Sequence[sint]) -> Self:
        """reshape, under PyTorch's name."""
        return self.reshape(*shape)

    def size(self, dim: int | None = None) -> sint | tuple[sint, ...]:
        """The shape, or the size of dimension `dim`."""
        return tuple(self.shape) if dim is None else self.shape[self._axis(dim)]

    def nbytes(self) -> int:
        """Bytes of data: numel * element size."""
        return _int(self.numel()) * self.element_size()

    def is_floating_point(self) -> bool:
        """Whether the dtype is a float type."""
        return dtypes.is_float(self.dtype)

    def pad_to(self, shape: Sequence[int | None], *args: int | None, value: ConstType = 0) -> Self:
        """Pad at the end of each dimension up to `shape` (None keeps a dimension)."""
        shp = resolve_shape_arg((shape, *args))
        if len(shp) != self.ndim:
            raise ValueError(f"pad_to {tuple(shp)} needs one size per dimension of {self.shape}")
        pads = [None if n is None else (0, n - _int(s)) for s, n in zip(self.shape, shp)]
        return self.pad(pads, value=value)

    def shrink_to(self, shape: Sequence[int | None], *args: int | None) -> Self:
        """Keep the first `shape[i]` elements of each dimension (None keeps a dimension)."""
        shp = resolve_shape_arg((shape, *args))
        return self.shrink([None if n is None else (0, n) for n in shp])

    def unfold(self, dim: int, size: int, step: int) -> Self:
        """The windows of `size` every `step` along `dim` (that dim becomes the window count, a last dim
        of `size` is appended), as torch.Tensor.unfold."""
        d = self._axis(dim)
        if size < 0 or step <= 0 or size > _int(self.shape[d]):  # the reference raises RuntimeError here
            raise ArgumentError(
                f"unfold(dim={dim}, size={size}, step={step}) of shape {self.shape}: size "
                f"must be in [0, {self.shape[d]}] and step > 0"
            )
        w = self.transpose(d, -1)._pool((size,), step)  # (..., windows, size) with dim d last before it
        return w.transpose(d, -2)

    def diag(self) -> Self:
        """The square matrix with this 1-d tensor on its diagonal."""
        if self.ndim != 1:
            raise ValueError(f"diag needs a 1-d tensor, not shape {self.shape}")
        n = _int(self.shape[0])
        eye = self.eye(n, device=self.device, dtype=dtypes.bool)
        return eye.where(self.reshape(1, n), self.const_like(0))

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Self:
        """The elements [i, i + offset] of dims dim1, dim2, as a last dim (as PyTorch)."""
        a, b = self._axis(dim1), self._axis(dim2)
        if a == b:
            raise ArgumentError(
                f"diagonal of shape {self.shape}: dim1={dim1} and dim2={dim2} name the same dimension"
            )
        y = self.permute(*[k for k in range(self.ndim) if k not in (a, b)], a, b)
        r, c = _int(y.shape[-2]), _int(y.shape[-1])
        lo, hi = (0, offset) if offset >= 0 else (-offset, 0)
        n = max(0, min(r - lo, c - hi))
        y = y.shrink([*([None] * (y.ndim - 2)), (lo, lo + n), (hi, hi + n)])
        eye = self.eye(n, device=self.device, dtype=dtypes.bool)
        return eye.where(y, y.const_like(0)).sum(-1, dtype=y.dtype)

    def meshgrid(self, *args: Self, indexing: str = "ij") -> tuple[Self, ...]:
        """Coordinate grids of 1-d tensors ("ij": matrix indexing, "xy": the first two swapped)."""
        if indexing not in ("ij", "xy"):
            raise ArgumentError(f"meshgrid indexing must be 'ij' or 'xy', not {indexing!r}")
        ts = [self, *args]
        shape = tuple(_int(t.numel()) for t in ts)
        out = [
            t.reshape(tuple(-1 if k == j else 1 for k in range(len(ts)))).expand(shape)
            for j, t in enumerate(ts)
        ]
        return tuple(o.transpose(0, 1) for o in out) if indexing == "xy" and len(ts) >= 2 else tuple(out)

    # ------------------------------------------------------------------ reductions on top of reductions
    @dim_alias
    def var_mean(
        self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1
    ) -> tuple[Self, Self]:
        """(var, mean) over `axis`."""
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

    @dim_alias
    def std_mean(
        self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1
    ) -> tuple[Self, Self]:
        """(std, mean) over `axis`."""
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

    @dim_alias
    def softmin(self, axis: int = -1, dtype: DType | str | None = None) -> Self:
        """softmax(-x)."""
        return (-self).softmax(axis, dtype)

    @dim_alias
    def logcumsumexp(self, axis: int = 0) -> Self:
        """log(cumsum(e ** x)) along `axis`, as a scan of logaddexp in log2(n) doubling steps: each prefix
        is shifted by its own maximum, so a small entry before a large one keeps its value (one shift by
        the row's maximum would underflow e ** (x - max) to a subnormal or 0 there)."""
        if self.ndim == 0:
            return self
        ax, y = self._axis(axis), self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)
        n, d = _int(y.shape[ax]), 1
        while d < n:  # y[i] = logaddexp(y[i], y[i - d]); -inf (the identity) before the start
            cut = [(0, n - d) if i == ax else None for i in range(y.ndim)]
            pad = [(d, 0) if i == ax else None for i in range(y.ndim)]
            # realized per step: unfused, step k would recompute step k-1 twice, 2 ** k evaluations in all
            y = y.logaddexp(y.shrink(cut).pad(pad, value=-math.inf)).contiguous()
            d *= 2
        return y

    def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Self:
        """x / max(||x||_p, eps) along `dim`, with PyTorch's vector norms: p = 0 counts the nonzero entries
        (no gradient), p = +-inf is the largest / smallest magnitude, any other p (sum |x|^p)^(1/p)."""
        if p == 0:
            norm = self.ne(0).sum(dim, keepdim=True).cast(self.dtype)
        elif math.isinf(p):
            norm = self.abs().max(dim, keepdim=True) if p > 0 else self.abs().min(dim, keepdim=True)
        else:
            norm = self.abs().pow(p).sum(dim, keepdim=True).pow(1 / p)
        return self / norm.maximum(eps)

    # ------------------------------------------------------------------ triangles
    def _tri(self, diagonal: int, upper: bool) -> Self:
        if self.ndim < 2:
            raise ValueError(f"tril/triu need at least 2 dimensions, not shape {self.shape}")
        r, c = _int(self.shape[-2]), _int(self.shape[-1])
        rows = self.arange(r, device=self.device).reshape(r, 1)
        cols = self.arange(c, device=self.device).reshape(1, c)
        keep = (cols >= rows + diagonal) if upper else (cols <= rows + diagonal)
        return keep.where(self, self.const_like(0))

    def tril(self, diagonal: int = 0) -> Self:
        """Zero above the `diagonal`-th diagonal of the last two dimensions."""
        return self._tri(diagonal, False)

    def triu(self, diagonal: int = 0) -> Self:
        """Zero below the `diagonal`-th diagonal of the last two dimensions."""
        return self._tri(diagonal, True)

    # ------------------------------------------------------------------ einsum
    @classmethod
    def einsum(cls, formula: str, *operands: Self | Sequence[Self], dtype: DType | None = None) -> Self:
        """Einstein summation, e.g. einsum("ij,jk->ik", a, b): letters shared by operands are multiplied
        along, letters missing from the output summed over (implicit output: the letters seen once)."""
        ts = list(operands[0]) if len(operands) == 1 and not hasattr(operands[0], "uop") else list(operands)
        tensors = cast("list[Self]", ts)
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
            aligned.append(
                t.reshape(tuple(t.shape[order.index(spec.index(c))] if c in spec else 1 for c in letters))
            )
        full = aligned[0]
        for a in aligned[1:]:
            full = full * a
        summed = tuple(k for k, c in enumerate(letters) if c not in out)
        ret = full.sum(summed, keepdim=True, dtype=dtype) if summed else full
        ret = ret.reshape(tuple(s for k, s in enumerate(ret.shape) if k not in summed))
        kept = [c for c in letters if c in out]
        return ret.permute([kept.index(c) for c in out]) if out else ret

    # ------------------------------------------------------------------ padding modes
    def _pad_mode(self, padding: Sequence[object], mode: str, value: ConstType) -> Self:
        """pad(mode=...): "constant" (value), "reflect", "replicate" or "circular"; negative amounts cut."""
        x = self
        if mode not in _PAD_MODES:
            raise NotSupportedError(f"pad mode must be one of {_PAD_MODES}, not {mode!r}")
        pairs = pad_pairs(x.ndim, padding)
        if len(pairs) != x.ndim:
            raise ValueError(f"pad {tuple(padding)} needs one entry per dimension of {x.shape}")
        if mode == "circular" and any(_int(a) < 0 for p in pairs if p is not None for a in p):
            raise NotSupportedError(
                f"circular pad {tuple(padding)} has a negative amount; shrink the tensor first"
            )
        grow = [None if p is None else (max(0, _int(p[0])), max(0, _int(p[1]))) for p in pairs]

        def cut(t: Self) -> Self:  # negative amounts cut from each end
            return t.shrink(
                [
                    (max(0, -_int(p[0])), _int(t.shape[d]) - max(0, -_int(p[1]))) if p is not None else None
                    for d, p in enumerate(pairs)
                ]
            )

        if mode == "constant":
            return cut(x).pad(grow, value=value)
        for d, p in enumerate(grow):  # reflect and replicate see the whole data, then cut (as PyTorch)
            if p is None or p == (0, 0):
                continue
            x = _pad_dim(x, d, p[0], p[1], mode)
        return cut(x)

    # ------------------------------------------------------------------ interpolation
    def interpolate(self, size: Sequence[int], mode: str = "linear", align_corners: bool = False) -> Self:
        """Resize the last len(size) dimensions to `size`: "linear" (also "bilinear", "trilinear"),
        "nearest" or "nearest-exact", with PyTorch's coordinate conventions."""
        x = self
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
            wdt = x.dtype if dtypes.is_float(x.dtype) else dtypes.float32
            wt = x._from_data(w, device=x.device, dtype=wdt)
            y = x.transpose(d, -1)._to_float()
            y = (y.unsqueeze(-2) * wt).sum(-1)
            x = y.transpose(d, -1).cast(x.dtype) if not dtypes.is_float(x.dtype) else y.transpose(d, -1)
        return x

    def _interpolate_uint8(self, size: Sequence[int], align_corners: bool) -> Self:
        """The linear modes on uint8 images as PyTorch computes them: one pass per dim, the last dim first,
        each a fixed-point sum (weights as int16 with `prec` fraction bits) rounded and clamped to uint8."""
        x = self
        for k in reversed(range(len(size))):
            d = x.ndim - len(size) + k
            w, prec = _fixed_point(_interp_matrix(_int(x.shape[d]), _int(size[k]), "linear", align_corners))
            wt = x._from_data(w, device=x.device, dtype=dtypes.int32)
            y = (x.transpose(d, -1).cast(dtypes.int32).unsqueeze(-2) * wt).sum(-1, dtype=dtypes.int32)
            x = ((y + (1 << (prec - 1))) >> prec).clip(0, 255).cast(dtypes.uint8).transpose(d, -1)
        return x

    # ------------------------------------------------------------------ creation
    @classmethod
    def linspace(
        cls,
        start: float,
        stop: float,
        steps: int,
        device: str | None = None,
        dtype: DType | str | None = None,
        requires_grad: bool | None = None,
    ) -> Self:
        """`steps` evenly spaced values from start to stop, both included."""
        if steps < 0:
            raise ValueError(f"linspace needs steps >= 0, not {steps}")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if dt == dtypes.bool:  # PyTorch and the reference have no bool linspace either
            raise ArgumentError("linspace can't make a bool tensor; ask for a number dtype and compare")
        if steps <= 1:
            return cls.full((steps,), start, device=device, dtype=dt, requires_grad=requires_grad)
        i = cls.arange(steps, device=device).cast(dtypes.float64 if dt == dtypes.float64 else dtypes.float32)
        step = (stop - start) / (steps - 1)
        # the second half counts back from stop, as PyTorch does, so both ends are exact
        ret = (i < steps // 2).where(i * step + start, stop - (steps - 1 - i) * step)
        return cls._from_data(ret.cast(dt).uop, requires_grad=requires_grad)

    def empty_like(self, dtype: DType | str | None = None, requires_grad: bool | None = None) -> Self:
        """An uninitialised tensor of this shape, device and dtype (unless given)."""
        return self.empty(
            self.shape, device=self.device, dtype=dtype or self.dtype, requires_grad=requires_grad
        )

    def rand_like(
        self, dtype: DType | str | None = None, requires_grad: bool | None = None, device: str | None = None
    ) -> Self:
        """Uniform [0, 1) values of this shape and device (sharded like this tensor)."""
        return self._random_like(self.rand, dtype, requires_grad, device)

    def randn_like(
        self, dtype: DType | str | None = None, requires_grad: bool | None = None, device: str | None = None
    ) -> Self:
        """Standard normal values of this shape and device (sharded like this tensor)."""
        return self._random_like(self.randn, dtype, requires_grad, device)

    def _random_like(
        self,
        fn: Callable[..., Self],
        dtype: DType | str | None,
        requires_grad: bool | None,
        device: str | None,
    ) -> Self:
        """`fn`'s values in this tensor's shape; on a device tuple drawn on the first device and sharded as
        this tensor is (the device can't be changed then: the reference's rule)."""
        dt = dtype or self._float_or_default()
        if not isinstance(devs := self.device, tuple):
            return fn(_ints(self.shape), device=device or devs, dtype=dt, requires_grad=requires_grad)
        if device is not None:
            raise DeviceError(f"a *_like of a tensor on {devs} takes its devices; can't put it on {device}")
        out = fn(_ints(self.shape), device=devs[0], dtype=dt).shard(devs, self.uop.axis)
        out.requires_grad = requires_grad
        return out

    def _float_or_default(self) -> DType:
        return self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float

    @classmethod
    def kaiming_uniform(cls, *shape: int | Sequence[int], a: float = 0.01, **kw: Unpack[_OnDevice]) -> Self:
        """He uniform initialisation for a leaky-relu slope `a`: bound sqrt(6 / ((1 + a²) fan_in))."""
        shp = nonnegative(resolve_shape_arg(shape), "kaiming_uniform")
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a**2)) / math.sqrt(prod(shp[1:]))
        return cls.uniform(shp, low=-bound, high=bound, **kw)

    @classmethod
    def kaiming_normal(cls, *shape: int | Sequence[int], a: float = 0.01, **kw: Unpack[_OnDevice]) -> Self:
        """He normal initialisation for a leaky-relu slope `a`: std sqrt(2 / ((1 + a²) fan_in))."""
        shp = nonnegative(resolve_shape_arg(shape), "kaiming_normal")
        std = math.sqrt(2.0 / (1 + a**2)) / math.sqrt(prod(shp[1:]))
        return cls.normal(shp, mean=0.0, std=std, **kw)


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
    expanded = [spec.replace("...", ell[width - n :]) for spec, n in zip(inputs, spans)]
    if out is None:
        seen = "".join(expanded)
        out = ell + "".join(sorted(c for c in set(seen) if seen.count(c) == 1 and c not in ell))
    else:
        out = out.replace("...", ell)
    return ",".join(expanded), True, out


def _diagonal(t: _S, spec: str) -> tuple[_S, str]:
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


def _pad_dim(x: _S, d: int, before: int, after: int, mode: str) -> _S:
    n = _int(x.shape[d])

    def take(lo: int, hi: int) -> _S:
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
