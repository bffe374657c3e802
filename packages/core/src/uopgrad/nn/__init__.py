"""Layers in tinygrad's layout (layer 17, above Tensor): each is a plain class whose Tensor attributes are
its parameters (found by `uopgrad.nn.state.get_parameters`) and whose `__call__` is its forward pass.

Parameters start as realized buffers, so an optimiser can assign to them in place. BatchNorm keeps
running statistics, updated (by assign) in each training-mode call; `Tensor.training` picks the mode.
Optimisers live in `uopgrad.nn.optim`, state dicts and safetensors files in `uopgrad.nn.state`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from uopgrad._util import prod
from uopgrad.dtype import dtypes
from uopgrad.tensor import Tensor
from uopgrad.tensor_args import concrete
from uopgrad.tensor_grad import no_grad

__all__ = [
    "BatchNorm",
    "BatchNorm2d",
    "BatchNorm3d",
    "Conv1d",
    "Conv2d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "Embedding",
    "GroupNorm",
    "InstanceNorm",
    "LSTMCell",
    "LayerNorm",
    "LayerNorm2d",
    "Linear",
    "RMSNorm",
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
                with no_grad():
                    self.running_mean.assign(self.running_mean * (1 - m) + mean.detach() * m)
                    unbiased = var.detach() * (n / max(n - 1, 1))
                    self.running_var.assign(self.running_var * (1 - m) + unbiased * m)
                    self.num_batches_tracked.assign(self.num_batches_tracked + 1)
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


from uopgrad.nn import optim, state  # noqa: E402  (nn.optim and nn.state as attributes, as the reference has)
