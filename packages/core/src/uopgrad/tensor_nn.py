"""Neural-network Tensor ops (a mixin of Tensor, layer 15 with tensor.py): convolution and transposed
convolution, max/avg pooling, batchnorm/layernorm, the losses, dropout and scaled dot-product attention;
plus the training switches `Tensor.training` / `Tensor.train()` (and `Tensor.no_grad`, from tensor_grad).

Convolution and pooling gather their windows with movement ops only (`_pool`: pad, repeat, shrink,
reshape, permute), so a convolution is a broadcast multiply and a sum, like every other reduce; their
gradients come from the movement ops' rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import ContextDecorator
from typing import Any, ClassVar, Self, TypeAlias, TypeVar, cast

import numpy as np

from uopgrad.dtype import dtypes, least_upper_dtype
from uopgrad.errors import ArgumentError, DeviceError, OperandShapeError
from uopgrad.mixin import concrete_size
from uopgrad.tensor_args import dim_alias, pad_pairs
from uopgrad.tensor_grad import no_grad
from uopgrad.tensor_hooks import TensorHooks

__all__ = ["NNMixin"]

_N = TypeVar("_N", bound="NNMixin")  # the helpers below take and give values of the family

_REDUCTIONS = ("mean", "sum", "none")


_int = concrete_size  # these ops need concrete sizes
_Ints = tuple[int, ...]
PerDim: TypeAlias = int | Sequence[int]  # a spatial argument: one value for every spatial dim, or one per dim


def _tuple(x: PerDim, n: int, what: str) -> tuple[int, ...]:
    if isinstance(x, int):
        return (x,) * n
    if len(x) != n:
        raise ValueError(f"{what} {tuple(x)} needs {n} entries")
    return tuple(x)


def _pairs(padding: PerDim, n: int) -> list[tuple[int, int]]:
    """(before, after) for each of the last n dims: from an int, one int per dim, or PyTorch's flat 2n-tuple
    (last dim first: left, right, top, bottom, ...)."""
    if isinstance(padding, int):
        return [(padding, padding)] * n
    if len(padding) == n:
        return [(p, p) for p in padding]
    if len(padding) == 2 * n:
        return cast("list[tuple[int, int]]", pad_pairs(n, padding))
    raise ValueError(f"padding {tuple(padding)} needs 1, {n} or {2 * n} entries")


class _Train(ContextDecorator):
    """`with Tensor.train():` sets `Tensor.training` (True by default) and restores it on exit."""

    def __init__(self, cls: type[NNMixin], mode: bool) -> None:
        self.cls, self.mode = cls, mode

    def __enter__(self) -> None:
        self.prev, self.cls.training = self.cls.training, self.mode

    def __exit__(self, *exc: object) -> None:
        self.cls.training = self.prev


def _log_clamped(p: _N) -> _N:
    """max(log(p), -100), with log(0) = -inf built from a WHERE: log's gradient at 0 is inf, and inf times the
    clamp's zero would be NaN."""
    zero = p.eq(0)
    return zero.where(-math.inf, zero.where(1, p).log()).maximum(-100)


def _reduce(x: _N, reduction: str) -> _N:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, not {reduction!r}")
    return x.mean() if reduction == "mean" else x.sum() if reduction == "sum" else x


class NNMixin(TensorHooks):
    """Convolution, pooling, normalisation, losses, dropout and attention for Tensor."""

    __slots__ = ()
    training: ClassVar[bool] = False  # dropout (and the nn layers) act only while True
    no_grad: ClassVar[type[no_grad]] = no_grad

    @classmethod
    def train(cls, mode: bool = True) -> _Train:
        """A context manager (and decorator) that sets `Tensor.training` to `mode` inside."""
        return _Train(cls, mode)

    # ------------------------------------------------------------------ windows
    def _pool(self, k_: Sequence[int], stride: PerDim = 1, dilation: PerDim = 1) -> Self:
        """The sliding windows over the last len(k_) dims: shape (..., *out, *k_)."""
        x = self
        n = len(k_)
        if x.ndim < n:
            raise ValueError(f"a {n}-d window needs at least {n} dims, not shape {x.shape}")
        s_, d_ = _tuple(stride, n, "stride"), _tuple(dilation, n, "dilation")
        i_ = tuple(_int(s) for s in x.shape[-n:])
        lead = tuple(x.shape[:-n])
        noop: list[tuple[int, int] | None] = [None] * len(lead)
        o_ = [math.ceil((i - d * (k - 1)) / s) for i, d, k, s in zip(i_, d_, k_, s_)]
        if any(o <= 0 for o in o_):
            raise ArgumentError(
                f"the window {tuple(k_)} (dilation {d_}) does not fit the input {i_}; pad "
                "the input or use a smaller kernel"
            )
        if all(k <= s for k, s in zip(k_, s_)) and all(d == 1 for d in d_):
            # windows don't overlap: cut to out*stride, split each dim into (out, stride), keep k of stride
            x = x.pad([*noop, *((0, max(0, o * s - i)) for o, s, i in zip(o_, s_, i_))])
            x = x.shrink([*noop, *((0, o * s) for o, s in zip(o_, s_))])
            x = x.reshape(lead + tuple(v for o, s in zip(o_, s_) for v in (o, s)))
            x = x.shrink([*noop, *(p for o, k in zip(o_, k_) for p in ((0, o), (0, k)))])
            L = len(lead)
            return x.permute(*range(L), *(L + 2 * j for j in range(n)), *(L + 2 * j + 1 for j in range(n)))
        # overlapping windows: repeat each dim so that row j of a (k, i*f + d) reshape starts at j*d
        f_ = [max(1, math.ceil((o * s - d) / i)) for o, s, d, i in zip(o_, s_, d_, i_)]
        e_ = [i * f + d for i, f, d in zip(i_, f_, d_)]
        x = x.repeat([1] * len(lead) + [math.ceil(k * e / i) for k, e, i in zip(k_, e_, i_)])
        x = x.shrink([*noop, *((0, k * e) for k, e in zip(k_, e_))])
        x = x.reshape(lead + tuple(v for k, e in zip(k_, e_) for v in (k, e)))
        x = x.shrink([*noop, *(p for k, o, s in zip(k_, o_, s_) for p in ((0, k), (0, o * s)))])
        x = x.reshape(lead + tuple(v for k, o, s in zip(k_, o_, s_) for v in (k, o, s)))
        x = x.shrink([*noop, *(p for k, o in zip(k_, o_) for p in ((0, k), (0, o), (0, 1)))])
        x = x.reshape(lead + tuple(v for k, o in zip(k_, o_) for v in (k, o)))
        L = len(lead)
        return x.permute(*range(L), *(L + 2 * j + 1 for j in range(n)), *(L + 2 * j for j in range(n)))

    def _pad_spatial(self, padding: PerDim, n: int, value: float = 0.0) -> Self:
        """Pad (or, for negative amounts, cut) the last n dims: an int, one per dim, or PyTorch's flat
        2n-tuple (last dim first)."""
        full: list[tuple[int, int] | None] = [None] * (self.ndim - n) + list(_pairs(padding, n))
        if all(p is None or p == (0, 0) for p in full):
            return self
        return self._pad_mode(full, "constant", value)

    # ------------------------------------------------------------------ convolution
    def conv2d(
        self,
        weight: Self,
        bias: Self | None = None,
        groups: int = 1,
        stride: PerDim = 1,
        dilation: PerDim = 1,
        padding: PerDim = 0,
        dtype: Any = None,  # noqa: ANN401
    ) -> Self:
        """Convolution (PyTorch's conv2d, also 1-d and 3-d): self (N, Cin, *spatial), weight
        (Cout, Cin/groups, *kernel), bias (Cout,)."""
        hw = tuple(_int(s) for s in weight.shape[2:])
        n = len(hw)
        if self.ndim != n + 2:
            raise ValueError(
                f"conv input of shape {self.shape} needs {n + 2} dims for the weight {weight.shape}"
            )
        bs, cin_all = self.shape[:2]
        cout, cin = _int(weight.shape[0]), _int(weight.shape[1])
        if _int(cin_all) != groups * cin or cout % groups:
            raise ValueError(
                f"conv: input has {cin_all} channels, weight {weight.shape} with "
                f"groups={groups} needs {groups * cin} (and Cout divisible by groups)"
            )
        w = self._pad_spatial(padding, n)._pool(hw, stride, dilation)  # (N, Cin, *out, *kernel)
        oyx = tuple(w.shape[2 : 2 + n])
        rcout = cout // groups
        w = w.reshape((bs, groups, cin, 1) + oyx + hw).expand((bs, groups, cin, rcout) + oyx + hw)
        w = w.permute(0, 1, 3, *(4 + j for j in range(n)), 2, *(4 + n + j for j in range(n)))
        wt = weight.reshape((1, groups, rcout) + (1,) * n + (cin,) + hw)
        ret = (w * wt).sum(tuple(-1 - j for j in range(n + 1)), dtype=dtype).reshape((bs, cout) + oyx)
        return ret if bias is None else ret + bias.reshape((1, cout) + (1,) * n)

    def conv_transpose2d(
        self,
        weight: Self,
        bias: Self | None = None,
        groups: int = 1,
        stride: PerDim = 1,
        dilation: PerDim = 1,
        padding: PerDim = 0,
        output_padding: PerDim = 0,
    ) -> Self:
        """Transposed convolution (PyTorch's conv_transpose2d): weight (Cin, Cout/groups, *kernel).
        Built as a convolution of the input with zeros between its elements and the flipped kernel."""
        x = self
        hw = tuple(_int(s) for s in weight.shape[2:])
        n = len(hw)
        st, dl = _tuple(stride, n, "stride"), _tuple(dilation, n, "dilation")
        pd, op = _tuple(padding, n, "padding"), _tuple(output_padding, n, "output_padding")
        w = weight.unflatten(0, (groups, -1)).transpose(1, 2).flip(*range(3, 3 + n)).flatten(0, 1)
        if any(s > 1 for s in st):
            lead = tuple(x.shape[:2])
            x = x.reshape(lead + tuple(v for s in x.shape[2:] for v in (s, 1)))
            x = x.pad([None, None, *(p for s in st for p in (None, (0, s - 1)))])
            x = x.reshape(lead + tuple(_int(a) * s for a, s in zip(x.shape[2::2], st)))
            x = x.shrink([None, None, *((0, _int(a) - (s - 1)) for a, s in zip(x.shape[2:], st))])
        pads = [
            v
            for k, d, p, o in reversed(list(zip(hw, dl, pd, op)))
            for v in ((k - 1) * d - p, (k - 1) * d - p + o)
        ]
        return x.conv2d(w, bias, groups=groups, dilation=dl, padding=pads)

    # ------------------------------------------------------------------ pooling
    def _pool_setup(
        self,
        kernel_size: PerDim,
        stride: PerDim | None,
        dilation: PerDim,
        padding: PerDim,
        ceil_mode: bool,
    ) -> tuple[_Ints, _Ints, _Ints, list[int], list[int]]:
        """(kernel, stride, dilation, flat padding incl. the extra right padding of ceil_mode, the flat
        padding asked for). `padding` is an int, one per dim, or PyTorch's flat 2n-tuple (as F.pad's)."""
        k = _tuple(kernel_size, 2, "kernel_size") if isinstance(kernel_size, int) else tuple(kernel_size)
        n = len(k)
        s = k if stride is None else _tuple(stride, n, "stride")
        d, p = _tuple(dilation, n, "dilation"), _pairs(padding, n)
        extra = [0] * n
        if ceil_mode:
            for j, (before, after) in enumerate(p):
                size = _int(self.shape[self.ndim - n + j]) + before + after
                span = d[j] * (k[j] - 1) + 1
                out = math.ceil((size - span) / s[j]) + 1
                if (out - 1) * s[j] >= size - after:  # the last window must start before the right padding
                    out -= 1
                extra[j] = max(0, (out - 1) * s[j] + span - size)
        flat = [v for j in reversed(range(n)) for v in (p[j][0], p[j][1] + extra[j])]
        return k, s, d, flat, [v for j in reversed(range(n)) for v in p[j]]

    def max_pool2d(
        self,
        kernel_size: PerDim = (2, 2),
        stride: PerDim | None = None,
        dilation: PerDim = 1,
        padding: PerDim = 0,
        ceil_mode: bool = False,
        return_indices: bool = False,
    ) -> Self | tuple[Self, Self]:
        """Max over sliding windows of the last len(kernel_size) dims (stride defaults to the kernel). With
        return_indices, also the int32 position of each max in its input plane (flattened, row-major; the
        first one where a window holds it more than once), as PyTorch's; `max_unpool2d` inverts it."""
        k, s, d, flat, _ = self._pool_setup(kernel_size, stride, dilation, padding, ceil_mode)
        low = -math.inf if dtypes.is_float(self.dtype) else int(dtypes.min(self.dtype))
        win = self._pad_spatial(flat, len(k), low)._pool(k, s, d)
        axes = tuple(-1 - j for j in range(len(k)))
        mx = win.max(axes)
        if not return_indices:
            return mx
        plane = tuple(_int(v) for v in self.shape[-len(k) :])
        size = math.prod(plane)
        # rank = size - flat position (so the first position ranks highest); padding ranks 0, below them all
        rank = self.arange(size, 0, -1, device=self.device, dtype=dtypes.int32).reshape(plane)
        rank_win = rank._pad_spatial(flat, len(k), 0)._pool(k, s, d)
        best = win.eq(mx.reshape(mx.shape + (1,) * len(k))).where(rank_win, 0).max(axes)
        return mx, (size - best).cast(dtypes.int32)

    def max_unpool2d(
        self,
        indices: Self,
        kernel_size: PerDim = (2, 2),
        stride: PerDim | None = None,
        dilation: PerDim = 1,
        padding: PerDim = 0,
        output_size: Sequence[int] | None = None,
    ) -> Self:
        """The partial inverse of max_pool2d(return_indices=True): each value of self (N, C, *pooled) at its
        index in a zero plane of the input's size (`output_size`, whose last dims count, disambiguates)."""
        bs, c, *pooled = (_int(v) for v in self.shape)
        n = len(pooled)
        if output_size is None:
            k = _tuple(kernel_size, n, "kernel_size")
            s = k if stride is None else _tuple(stride, n, "stride")
            d = _tuple(dilation, n, "dilation")
            if isinstance(padding, int):
                pads = [(padding, padding)] * n
            elif len(padding) == n:
                pads = [(p, p) for p in padding]
            else:
                pads = [(int(a), int(b)) for a, b in cast("list[tuple[int, int]]", pad_pairs(n, padding))]
            # the input size whose pooling gives `pooled` with the last window ending at the input's end
            out = tuple(
                (i - 1) * st - (pa + pb) + dl * (kk - 1) + 1
                for i, kk, st, dl, (pa, pb) in zip(pooled, k, s, d, pads)
            )
        else:
            out = tuple(output_size)[-n:]
        size = math.prod(out)
        hit = indices.reshape(bs, c, 1, -1)._one_hot_along_dim(size, 2)  # (N, C, size, pooled)
        # overlapping windows can name one position more than once, always with its one value: take it once
        low = -math.inf if dtypes.is_float(self.dtype) else int(dtypes.min(self.dtype))
        picked = hit.where(self.reshape(bs, c, 1, -1), low).max(3)
        return hit.any(3).where(picked, 0).reshape(bs, c, *out)

    def avg_pool2d(
        self,
        kernel_size: PerDim = (2, 2),
        stride: PerDim | None = None,
        dilation: PerDim = 1,
        padding: PerDim = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> Self:
        """Mean over sliding windows; count_include_pad counts the zero padding (not ceil_mode's)."""
        k, s, d, flat, asked = self._pool_setup(kernel_size, stride, dilation, padding, ceil_mode)
        axes = tuple(-1 - j for j in range(len(k)))
        total = self._pad_spatial(flat, len(k))._pool(k, s, d).sum(axes)
        ones, rest = self.ones_like(), flat
        if count_include_pad:  # the padding asked for counts, ceil_mode's extra does not
            ones, rest = ones._pad_spatial(asked, len(k), 1.0), [f - v for f, v in zip(flat, asked)]
        count = ones._pad_spatial(rest, len(k))._pool(k, s, d).sum(axes)
        return total / count

    # ------------------------------------------------------------------ normalisation
    def batchnorm(
        self, weight: Self | None, bias: Self | None, mean: Self, invstd: Self, axis: int | Sequence[int] = 1
    ) -> Self:
        """(self - mean) * invstd * weight + bias, the statistics broadcast along `axis`."""
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        axes = tuple(self._axis(a) for a in axes)
        shape = tuple(s if d in axes else 1 for d, s in enumerate(self.shape))
        y = self - mean.reshape(shape)
        if weight is not None:
            y = y * weight.reshape(shape)
        y = y * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
        return y if bias is None else y + bias.reshape(shape)

    @dim_alias
    def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Self:
        """(self - mean) / sqrt(var + eps) over `axis` (biased variance, no affine part)."""
        y = self - self.mean(axis, keepdim=True)
        return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()

    # ------------------------------------------------------------------ losses
    def nll_loss(
        self, Y: Self, weight: Self | None = None, ignore_index: int | None = None, reduction: str = "mean"
    ) -> Self:
        """Negative log likelihood of log-probabilities self (N, C, ...) at int targets Y (N, ...)."""
        cdim = 0 if self.ndim == 1 else 1
        y = Y.to(self.device)
        safe = y if ignore_index is None else y.eq(ignore_index).where(0, y)
        w = y.full_like(1.0, dtype=self.dtype) if weight is None else weight.to(self.device)[safe]
        if ignore_index is not None:
            w = y.ne(ignore_index).where(w, 0)
        picked = self.gather(cdim, safe.unsqueeze(cdim)).squeeze(cdim)
        nll = -picked * w
        if reduction == "mean":
            return nll.sum() / w.sum()
        return _reduce(nll, reduction)

    def _class_targets(
        self, Y: Self | Sequence[Any] | np.ndarray, nc: int, ignore_index: int, op: str
    ) -> Self:
        """Class-index targets as a Tensor. Given as host data (a list, a tuple, a numpy array) they are
        checked here, where it costs nothing: a label outside [0, nc) other than ignore_index is an error (a
        Tensor's labels are not read back: that would wait for the device)."""
        if not isinstance(Y, (list, tuple, np.ndarray)):
            return cast(Self, Y)
        arr = np.asarray(Y)
        if arr.dtype.kind == "f":  # probabilities (cross_entropy's other form): nothing to check
            return self._from_data(arr, device=self.device, dtype=self.dtype)
        bad = (arr != ignore_index) & ((arr < 0) | (arr >= nc))
        if bad.any():
            raise ArgumentError(
                f"{op}: class label {arr[bad].flat[0]} is out of range for {nc} classes (0..{nc - 1}, or "
                f"ignore_index={ignore_index}); a Tensor holding it would give that sample a loss of 0"
            )
        return self._from_data(arr, device=self.device)

    def cross_entropy(
        self,
        Y: Self | Sequence[Any] | np.ndarray,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
        ignore_index: int = -100,
    ) -> Self:
        """Cross entropy of logits self (N, C, ...) against int class indices Y (N, ...) or class
        probabilities of self's shape, with label smoothing; index targets equal to ignore_index count
        for nothing (the mean is over the others), as PyTorch.

        Out-of-range labels: given as a list or numpy array, a label outside [0, C) other than ignore_index
        raises ArgumentError here. In a Tensor they are not checked (that would read the labels back from
        the device): such a sample's one-hot row is all zero, so its loss and its gradient are 0 while it
        still counts in the mean (PyTorch raises IndexError)."""
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1], not {label_smoothing}")
        cdim = 0 if self.ndim == 1 else 1
        nc = _int(self.shape[cdim])
        Y = self._class_targets(Y, nc, ignore_index, "cross_entropy")
        logp = self.log_softmax(cdim)
        if Y.shape == self.shape and dtypes.is_float(Y.dtype):
            probs = Y * (1 - label_smoothing) + label_smoothing / nc
            return _reduce(-(logp * probs).sum(cdim), reduction)
        want = tuple(s for d, s in enumerate(self.shape) if d != cdim)
        if tuple(Y.shape) != want:
            raise OperandShapeError(
                f"cross_entropy: class-index targets of shape {Y.shape} don't fit logits "
                f"of shape {self.shape}; they need shape {want} (or be probabilities, "
                "logits' shape)"
            )
        y = Y.to(self.device)
        valid = y.ne(ignore_index)
        safe = valid.where(y, 0).unsqueeze(cdim)
        onehot = safe._one_hot_along_dim(nc, cdim)
        if label_smoothing == 0:  # pick the target with WHERE: a -inf logit elsewhere times 0 would be NaN
            loss = valid.where(-onehot.where(logp, 0).sum(cdim), 0)
        else:
            probs = onehot.cast(logp.dtype) * (1 - label_smoothing) + label_smoothing / nc
            loss = valid.where(-(logp * probs).sum(cdim), 0)
        if reduction == "mean":
            return loss.sum() / valid.cast(logp.dtype).sum()
        return _reduce(loss, reduction)

    def binary_crossentropy(self, Y: Self, reduction: str = "mean") -> Self:
        """-(Y log(p) + (1 - Y) log(1 - p)) of probabilities self; each log is clamped at -100, as
        PyTorch does (and where the clamp holds, the gradient is the clamped function's: 0, never NaN)."""
        return _reduce(-(Y * _log_clamped(self) + (1 - Y) * _log_clamped(1 - self)), reduction)

    def binary_crossentropy_logits(
        self, Y: Self, reduction: str = "mean", pos_weight: Self | None = None
    ) -> Self:
        """Binary cross entropy of logits self, computed stably from logsigmoid."""
        log_p = self.logsigmoid()
        log_1mp = log_p - self
        pos = Y * log_p if pos_weight is None else pos_weight * Y * log_p
        return _reduce(-(pos + (1 - Y) * log_1mp), reduction)

    def sparse_categorical_crossentropy(
        self,
        Y: Self | Sequence[Any] | np.ndarray,
        ignore_index: int = -1,
        label_smoothing: float = 0.0,
        reduction: str = "mean",
    ) -> Self:
        """Cross entropy of logits self (classes on the LAST axis, unlike cross_entropy) against int class
        indices Y; targets equal to ignore_index count for nothing (the mean is over the others), and
        label_smoothing mixes in the uniform distribution, as PyTorch's CrossEntropyLoss. Out-of-range
        labels as in cross_entropy: an error when Y is a list or numpy array, else a loss of 0 for the
        sample (without label smoothing), counted in the mean."""
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1], not {label_smoothing}")
        Y = self._class_targets(Y, _int(self.shape[-1]), ignore_index, "sparse_categorical_crossentropy")
        if Y.device != self.device:
            raise DeviceError(
                f"sparse_categorical_crossentropy: targets on {Y.device}, logits on {self.device}"
            )
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {_REDUCTIONS}, not {reduction!r}")
        logp = self.log_softmax(-1)
        keep = Y.ne(ignore_index)
        # pick with WHERE, not a multiply: a -inf log-probability off the target times 0 would be NaN
        picked = Y.unsqueeze(-1)._one_hot_along_dim(_int(self.shape[-1]), -1).where(logp, 0).sum(-1)
        loss = -picked * (1 - label_smoothing)
        if label_smoothing:
            loss = loss - logp.mean(-1) * label_smoothing
        loss = keep.where(loss, 0)
        if reduction == "mean":
            return loss.sum() / keep.cast(loss.dtype).sum()
        return _reduce(loss, reduction)

    def newton_schulz(self, steps: int, params: Sequence[float], eps: float = 1.0e-7) -> Self:
        """Approximately orthogonalise the last two dims (Muon's step): X / |X|_F, then `steps` times
        X <- sum_i params[i] * (X X^T)^i X (an odd polynomial), on the wide orientation of X."""
        if self.ndim < 2:
            raise ValueError(f"newton_schulz needs at least 2 dims, not shape {self.shape}")
        if _int(self.shape[-2]) > _int(self.shape[-1]):
            return self.transpose(-2, -1).newton_schulz(steps, params, eps).transpose(-2, -1)
        g = self / (self.square().sum((-2, -1), keepdim=True).sqrt() + eps)
        for _ in range(steps):
            gram = g @ g.transpose(-2, -1)
            term, acc = g, g * params[0]
            for p in params[1:]:
                term = gram @ term
                acc = acc + term * p
            g = acc
        return g

    # ------------------------------------------------------------------ dropout and attention
    def dropout(self, p: float = 0.5) -> Self:
        """While Tensor.training, zero each element with probability p and scale the rest by 1/(1-p)."""
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], not {p}")
        if not self.training or p == 0:
            return self
        if p == 1:
            return self * 0
        keep = self.rand_like(requires_grad=False) >= p
        return keep.where(self * (1 / (1 - p)), 0)

    def scaled_dot_product_attention(
        self,
        key: Self,
        value: Self,
        attn_mask: Self | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        enable_gqa: bool = False,
    ) -> Self:
        """softmax(self @ key^T / sqrt(d) + mask) @ value; a bool mask keeps where True; is_causal masks
        the future (the upper triangle). enable_gqa: key and value have fewer heads (dim -3) than the query,
        each shared by a run of query heads (grouped-query attention)."""
        if enable_gqa:
            hq, hk, hv = (_int(t.shape[-3]) for t in (self, key, value))
            if hq % hk or hq % hv:
                raise ValueError(
                    f"enable_gqa: {hq} query heads are not a multiple of the {hk} key and {hv} value heads"
                )
            key, value = key.repeat_interleave(hq // hk, dim=-3), value.repeat_interleave(hq // hv, dim=-3)
        acc = least_upper_dtype(self.dtype, key.dtype, dtypes.float32)
        qk = self.matmul(key.transpose(-2, -1), dtype=acc)
        qk = qk / math.sqrt(_int(self.shape[-1]))
        if is_causal:
            if attn_mask is not None:
                raise ArgumentError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
            ones = self.ones(_int(qk.shape[-2]), _int(qk.shape[-1]), device=self.device, dtype=dtypes.bool)
            attn_mask = ones.tril(0)
        if attn_mask is not None:
            if attn_mask.dtype == dtypes.bool:
                attn_mask = attn_mask.where(0.0, -math.inf)
            qk = qk + attn_mask
        return qk.cast(self.dtype).softmax(-1).dropout(dropout_p) @ value
