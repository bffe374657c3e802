"""Layers in tinygrad's layout (layer 17, above Tensor): each is a plain class whose Tensor attributes are
its parameters (found by `uopgrad.nn.state.get_parameters`) and whose `__call__` is its forward pass.

Parameters start as realized buffers, so an optimiser can assign to them in place. BatchNorm keeps
running statistics, updated (by assign) in each training-mode call and realized by the next optimiser step
(`optim.buffer_updated`), or by the next training-mode call if no step came between; `Tensor.training` picks
the mode.
Optimisers live in `uopgrad.nn.optim`, state dicts and safetensors files in `uopgrad.nn.state`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from uopgrad._util import prod
from uopgrad.config import ALLOW_DEVICE_USAGE
from uopgrad.dtype import dtypes
from uopgrad.errors import ArgumentError, DTypeError, OperandShapeError
from uopgrad.nn.optim import buffer_updated
from uopgrad.tensor import Tensor
from uopgrad.tensor_args import concrete
from uopgrad.tensor_grad import no_grad
from uopgrad.tensor_registry import is_realized

__all__ = [
    "AvgPool2d",
    "BatchNorm",
    "BatchNorm2d",
    "BatchNorm3d",
    "Conv1d",
    "Conv2d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "Dropout",
    "Embedding",
    "GroupNorm",
    "InstanceNorm",
    "LSTMCell",
    "LayerNorm",
    "LayerNorm2d",
    "Linear",
    "MaxPool2d",
    "MultiheadAttention",
    "RMSNorm",
    "lr_scheduler",
    "no_grad",
    "optim",
    "state",
]


def _tuple(x: int | Sequence[int], n: int) -> tuple[int, ...]:
    return (x,) * n if isinstance(x, int) else tuple(x)


def _uniform(bound: float, *shape: int) -> Tensor:
    return Tensor.uniform(*shape, low=-bound, high=bound)


def _filled(value: float, *shape: int) -> Tensor:
    """A realized buffer of `value` (not a constant: optimisers and running statistics assign to it)."""
    return Tensor(np.full(shape, value, np.float32))


class Linear:
    """y = x @ weight.T + bias, with weight (out_features, in_features), both uniform in ±1/sqrt(in)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        bound = 1 / math.sqrt(in_features)
        self.weight = _uniform(bound, out_features, in_features)
        self.bias = _uniform(bound, out_features) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        """The forward pass."""
        return x.linear(self.weight.transpose(), self.bias)


class Conv2d:
    """2-d convolution (N, Cin, H, W) -> (N, Cout, H', W'); weight (Cout, Cin/groups, *kernel) uniform in
    ±1/sqrt(Cin/groups * prod(kernel)), as PyTorch initialises it. padding may be "same" (stride 1)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] | str = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        self.kernel_size = _tuple(kernel_size, 2)
        self.stride, self.dilation, self.groups = stride, dilation, groups
        if isinstance(padding, str):
            if padding.lower() != "same":
                raise ValueError(f"padding must be an int, a tuple or 'same', not {padding!r}")
            if any(s != 1 for s in _tuple(stride, len(self.kernel_size))):
                raise ValueError("padding='same' needs stride 1")
            d = _tuple(dilation, len(self.kernel_size))
            pads = [(dk * (k - 1)) for dk, k in zip(d, self.kernel_size)]
            self.padding: int | Sequence[int] = [v for p in reversed(pads) for v in (p // 2, p - p // 2)]
        else:
            self.padding = padding
        bound = 1 / math.sqrt(in_channels // groups * prod(self.kernel_size))
        self.weight = _uniform(bound, out_channels, in_channels // groups, *self.kernel_size)
        self.bias = _uniform(bound, out_channels) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        """The forward pass."""
        return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding)


class Conv1d(Conv2d):
    """1-d convolution (N, Cin, L) -> (N, Cout, L')."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int | str = 0,
        dilation: int = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias)


class ConvTranspose2d:
    """Transposed 2-d convolution (N, Cin, H, W) -> (N, Cout, H', W'); weight (Cin, Cout/groups, *kernel)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        output_padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        self.kernel_size = _tuple(kernel_size, 2)
        self.stride, self.padding, self.output_padding = stride, padding, output_padding
        self.dilation, self.groups = dilation, groups
        bound = 1 / math.sqrt(out_channels // groups * prod(self.kernel_size))
        self.weight = _uniform(bound, in_channels, out_channels // groups, *self.kernel_size)
        self.bias = _uniform(bound, out_channels) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        """The forward pass."""
        return x.conv_transpose2d(
            self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding, self.output_padding
        )


class ConvTranspose1d(ConvTranspose2d):
    """Transposed 1-d convolution (N, Cin, L) -> (N, Cout, L'); weight (Cin, Cout/groups, kernel)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int = 0,
        output_padding: int = 0,
        dilation: int = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__(
            in_channels, out_channels, (kernel_size,), stride, padding, output_padding, dilation, groups, bias
        )


class BatchNorm:
    """Batch normalisation over every axis but 1 (channels): batch statistics while Tensor.training
    (and the running statistics updated with `momentum`, variance unbiased, as PyTorch), else the
    running statistics."""

    def __init__(
        self,
        sz: int,
        eps: float = 1e-5,
        affine: bool = True,
        track_running_stats: bool = True,
        momentum: float = 0.1,
    ) -> None:
        self.eps, self.momentum, self.track_running_stats = eps, momentum, track_running_stats
        self.weight: Tensor | None = _filled(1.0, sz) if affine else None
        self.bias: Tensor | None = _filled(0.0, sz) if affine else None
        self.num_batches_tracked = Tensor(np.zeros((), np.int64), requires_grad=False)  # 0-d int64, as torch
        if track_running_stats:
            self.running_mean = _filled(0.0, sz).requires_grad_(False)
            self.running_var = _filled(1.0, sz).requires_grad_(False)

    def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(mean, biased variance) over every axis but 1."""
        axes = tuple(a for a in range(x.ndim) if a != 1)
        mean = x.mean(axes)
        shape = tuple(s if a == 1 else 1 for a, s in enumerate(x.shape))
        y = x - mean.detach().reshape(shape)  # d var / d mean is zero: detaching it changes no gradient
        return mean, (y * y).mean(axes)

    def __call__(self, x: Tensor) -> Tensor:
        """The forward pass."""
        if Tensor.training or not self.track_running_stats:
            mean, var = self.calc_stats(x)
            if Tensor.training and self.track_running_stats:
                n = concrete(prod(s for a, s in enumerate(x.shape) if a != 1), "BatchNorm")
                m = self.momentum
                stats = (self.running_mean, self.running_var, self.num_batches_tracked)
                # the last call's update still pending (no optimiser step since): run it now, so that calls
                # without steps (calibrating the statistics) don't chain one update onto the next
                if ALLOW_DEVICE_USAGE and not all(is_realized(t.uop) for t in stats):
                    Tensor.realize(*stats)
                with no_grad():
                    self.running_mean.assign(self.running_mean * (1 - m) + mean.detach() * m)
                    unbiased = var.detach() * (n / max(n - 1, 1))
                    self.running_var.assign(self.running_var * (1 - m) + unbiased * m)
                    self.num_batches_tracked.assign(self.num_batches_tracked + 1)
                buffer_updated(*stats)  # the next optimiser step realizes them with the parameters
        else:
            mean, var = self.running_mean, self.running_var
        return x.batchnorm(self.weight, self.bias, mean, (var + self.eps).rsqrt())


BatchNorm2d = BatchNorm3d = BatchNorm


class LayerNorm:
    """Normalise over the trailing `normalized_shape` dims, then scale and shift elementwise."""

    def __init__(
        self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True
    ) -> None:
        self.normalized_shape = _tuple(normalized_shape, 1)
        self.axis = tuple(-1 - i for i in range(len(self.normalized_shape)))
        self.eps = eps
        self.weight = _filled(1.0, *self.normalized_shape) if elementwise_affine else None
        self.bias = _filled(0.0, *self.normalized_shape) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        """The forward pass."""
        if tuple(x.shape[-len(self.normalized_shape) :]) != self.normalized_shape:
            raise ValueError(f"LayerNorm{self.normalized_shape} got an input of shape {x.shape}")
        y = x.layernorm(self.axis, self.eps)
        return y if self.weight is None or self.bias is None else y * self.weight + self.bias


class LayerNorm2d(LayerNorm):
    """LayerNorm over the channels of (N, C, H, W): each pixel's C values normalised, then scaled and shifted
    per channel."""

    def __call__(self, x: Tensor) -> Tensor:
        """The forward pass."""
        return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def _norm_groups(x: Tensor, groups: int, eps: float, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """(N, C, ...) normalised over each of `groups` groups of channels (with their spatial dims), then
    scaled and shifted per channel where the layer is affine."""
    y = x.reshape(x.shape[0], groups, -1).layernorm(eps=eps).reshape(x.shape)
    if weight is None or bias is None:
        return y
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return y * weight.reshape(shape) + bias.reshape(shape)


class GroupNorm:
    """Normalise each of `num_groups` channel groups of (N, C, ...), then scale and shift per channel."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True) -> None:
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: {num_channels} channels don't split into {num_groups} groups")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.weight = _filled(1.0, num_channels) if affine else None
        self.bias = _filled(0.0, num_channels) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        """The forward pass."""
        return _norm_groups(x, self.num_groups, self.eps, self.weight, self.bias)


class InstanceNorm:
    """Normalise each channel of each sample of (N, C, ...) over its spatial dims, then scale and shift per
    channel (PyTorch's InstanceNorm with affine=True by default, and no running statistics)."""

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True) -> None:
        self.num_features, self.eps = num_features, eps
        self.weight = _filled(1.0, num_features) if affine else None
        self.bias = _filled(0.0, num_features) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        """The forward pass."""
        if x.ndim < 3 or x.shape[1] != self.num_features:
            raise ValueError(
                f"InstanceNorm({self.num_features}) needs (N, {self.num_features}, ...), not shape {x.shape}"
            )
        return _norm_groups(x, self.num_features, self.eps, self.weight, self.bias)


class Embedding:
    """A lookup table: int indices of any shape -> their rows of weight (vocab_size, embed_size)."""

    def __init__(self, vocab_size: int, embed_size: int) -> None:
        self.vocab_sz, self.embed_sz = vocab_size, embed_size
        self.weight = Tensor.glorot_uniform(vocab_size, embed_size)

    def __call__(self, idx: Tensor) -> Tensor:
        """The forward pass."""
        if not dtypes.is_int(idx.dtype):
            raise TypeError(f"Embedding needs integer indices, not {idx.dtype}")
        return self.weight[idx]


class RMSNorm:
    """x / sqrt(mean(x²) + eps) over the last dim, times weight."""

    def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True) -> None:
        self.eps = eps
        self.weight = _filled(1.0, dim) if elementwise_affine else None

    def _norm(self, x: Tensor) -> Tensor:
        return x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt()

    def __call__(self, x: Tensor) -> Tensor:
        """The forward pass."""
        y = self._norm(x.float()).cast(x.dtype)
        return y if self.weight is None else y * self.weight


class LSTMCell:
    """One step of an LSTM: (x (N, input_size), (h, c) each (N, hidden_size), zeros when None) -> (h', c'),
    PyTorch's gate order (input, forget, cell, output) in weight_ih (4H, input) and weight_hh (4H, H), both
    uniform in ±1/sqrt(H); the biases start at zero."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True) -> None:
        bound = 1.0 / math.sqrt(hidden_size)
        self.weight_ih = _uniform(bound, hidden_size * 4, input_size)
        self.weight_hh = _uniform(bound, hidden_size * 4, hidden_size)
        self.bias_ih: Tensor | None = _filled(0.0, hidden_size * 4) if bias else None
        self.bias_hh: Tensor | None = _filled(0.0, hidden_size * 4) if bias else None

    def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        """The forward pass: the new (hidden, cell) state."""
        if hc is None:
            zeros = Tensor.zeros(x.shape[0], self.weight_hh.shape[1], dtype=x.dtype, device=x.device)
            hc = (zeros, zeros)
        gates = x.linear(self.weight_ih.T, self.bias_ih) + hc[0].linear(self.weight_hh.T, self.bias_hh)
        i, f, g, o = gates.chunk(4, dim=1)
        c = f.sigmoid() * hc[1] + i.sigmoid() * g.tanh()
        return o.sigmoid() * c.tanh(), c


class Dropout:
    """Zero each element with probability p and scale the rest by 1/(1-p) while Tensor.training; the identity
    in eval mode (Tensor.dropout)."""

    def __init__(self, p: float = 0.5) -> None:
        if not 0.0 <= p <= 1.0:
            raise ArgumentError(f"Dropout probability must be in [0, 1], not {p}")
        self.p = p

    def __call__(self, x: Tensor) -> Tensor:
        """The forward pass."""
        return x.dropout(self.p)


class MaxPool2d:
    """Max over kernel_size windows of the last two dims (PyTorch's arguments; stride defaults to the
    kernel); with return_indices the call gives (values, indices) as Tensor.max_pool2d."""

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def __call__(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        """The forward pass."""
        k, s, p, d = self.kernel_size, self.stride, self.padding, self.dilation
        return x.max_pool2d(k, s, d, p, self.ceil_mode, self.return_indices)


class AvgPool2d:
    """Mean over kernel_size windows of the last two dims (PyTorch's arguments; stride defaults to the
    kernel; divisor_override, when given, replaces the window size as the divisor)."""

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> None:
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad, self.divisor_override = (
            ceil_mode,
            count_include_pad,
            divisor_override,
        )

    def __call__(self, x: Tensor) -> Tensor:
        """The forward pass."""
        k, s, p = self.kernel_size, self.stride, self.padding
        if self.divisor_override is None:
            return x.avg_pool2d(k, s, 1, p, self.ceil_mode, self.count_include_pad)
        # the window sums: the mean with every position (padding included) counted, times the window size
        n = prod(_tuple(k, 2))
        return x.avg_pool2d(k, s, 1, p, self.ceil_mode, True) * (n / self.divisor_override)


class MultiheadAttention:
    """Attention over num_heads heads in PyTorch's parameter layout, so that its state dicts load:
    in_proj_weight (3E, E) (query, key, value rows) glorot-uniform, in_proj_bias (3E) zero, out_proj a Linear
    (E, E) with zero bias. Inputs are (L, N, E), or (N, L, E) with batch_first, or unbatched (L, E)."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        batch_first: bool = False,
    ) -> None:
        if embed_dim % num_heads:
            raise ArgumentError(
                f"MultiheadAttention: embed_dim {embed_dim} doesn't split into {num_heads} heads"
            )
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = (
            embed_dim,
            num_heads,
            dropout,
            batch_first,
        )
        self.head_dim = embed_dim // num_heads
        self.in_proj_weight = Tensor.glorot_uniform(3 * embed_dim, embed_dim)
        self.in_proj_bias = _filled(0.0, 3 * embed_dim) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias)
        if self.out_proj.bias is not None:
            self.out_proj.bias = _filled(0.0, embed_dim)

    def _heads(self, x: Tensor, part: int) -> Tensor:
        """(N, L, E) projected by the part-th third of in_proj -> (N, H, L, D)."""
        e = self.embed_dim
        w = self.in_proj_weight[part * e : (part + 1) * e]
        b = None if self.in_proj_bias is None else self.in_proj_bias[part * e : (part + 1) * e]
        n, length = x.shape[0], x.shape[1]
        return x.linear(w.T, b).reshape(n, length, self.num_heads, self.head_dim).transpose(1, 2)

    def __call__(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """(output shaped as query, the attention weights (N, L, S), per head (N, H, L, S) unless
        average_attn_weights, or None unless need_weights). Masks as PyTorch's: a bool attn_mask (L, S) or
        (N * H, L, S) is True where attention is NOT allowed, a float one is added to the scores;
        key_padding_mask (N, S) likewise (bool: True at keys to ignore); is_causal masks the future when
        attn_mask is None."""
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        elif query.ndim != 3:
            raise OperandShapeError(
                f"MultiheadAttention needs (L, N, E), (N, L, E) or (L, E), not {query.shape}"
            )
        if not self.batch_first or unbatched:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        n, length, e = (concrete(s, "MultiheadAttention") for s in query.shape)
        if e != self.embed_dim:
            raise OperandShapeError(f"MultiheadAttention({self.embed_dim}) got embeddings of size {e}")
        src = concrete(key.shape[1], "MultiheadAttention")
        q, k, v = self._heads(query, 0), self._heads(key, 1), self._heads(value, 2)
        scores = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(self.head_dim))  # (N, H, L, S)
        if attn_mask is None and is_causal:
            attn_mask = Tensor.ones(length, src, dtype=dtypes.bool, device=query.device).triu(1)
        if attn_mask is not None:
            mask = attn_mask if attn_mask.ndim == 2 else attn_mask.reshape(n, self.num_heads, length, src)
            scores = mask.where(-math.inf, scores) if mask.dtype == dtypes.bool else scores + mask
        if key_padding_mask is not None:
            kpm = key_padding_mask.reshape(n, 1, 1, src)
            if kpm.dtype == dtypes.bool:
                scores = kpm.where(-math.inf, scores)
            elif dtypes.is_float(kpm.dtype):
                scores = scores + kpm
            else:
                raise DTypeError(
                    f"key_padding_mask must be bool (True: ignore) or float (added), not {kpm.dtype}"
                )
        attn = scores.softmax(-1).dropout(self.dropout)
        out = self.out_proj((attn @ v).transpose(1, 2).reshape(n, length, e))
        if not self.batch_first or unbatched:
            out = out.transpose(0, 1)
        weights = (attn.mean(1) if average_attn_weights else attn) if need_weights else None
        if unbatched:
            out = out.squeeze(1)
            weights = None if weights is None else weights.squeeze(0)
        return out, weights


from uopgrad.nn import lr_scheduler, optim, state  # noqa: E402  (nn.optim and nn.state as attributes, as the reference has)
