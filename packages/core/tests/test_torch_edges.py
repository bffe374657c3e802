"""Edge cases of Tensor ops against PyTorch in float64 (and in the integer dtypes where an op keeps them):
the special norms of normalize, mixed-dtype maximum / minimum, pooling with padding per side, nonzero with
a size and bilinear interpolation of uint8 images."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uopgrad import Tensor

torch = pytest.importorskip("torch", reason="torch (an optional test dependency) is not installed")
F = torch.nn.functional


def _x(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("p,dim", [(0, 1), (-1, 1), (math.inf, 0), (-math.inf, 1), (3, 0)])
def test_normalize_has_pytorchs_vector_norms(p: float, dim: int) -> None:
    x = _x(9, 13)
    if p == 0:
        x[2, 4] = 0.0  # a zero that the 0-norm does not count
    v = _x(9, 13, seed=1)
    t, tt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, want = t.normalize(p=p, dim=dim), F.normalize(tt, p=p, dim=dim)
    (want * torch.tensor(v)).sum().backward()
    (grad,) = (out * Tensor(v)).sum().gradient(t)
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12)
    assert tt.grad is not None
    np.testing.assert_allclose(grad.numpy(), tt.grad.numpy(), rtol=1e-9, atol=1e-9)


_I32 = np.iinfo(np.int32)
MIXED = {
    "int32 extremes": (np.array([-1234, 0, 1234, _I32.max, _I32.min], np.int32), [_I32.max, _I32.min]),
    "uint8": (np.array([0, 5, 250, 255], np.uint8), [0, 3, 255]),
    "bool": (np.array([True, False, False]), [True, False, 3, 1.2, -2]),
    "int with floats": (np.array([1, -2, 3], np.int32), [1.2, -2.5]),
    "float64": (np.array([1.5, -0.0, np.nan, -np.inf]), [0.0, -1, np.inf]),
}


@pytest.mark.parametrize("case", list(MIXED))
@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_maximum_minimum_promote_like_pytorch(case: str, op: str) -> None:
    a, others = MIXED[case]
    tf = getattr(torch, op)
    for b in others:
        got = getattr(Tensor(a), op)(b)
        want = tf(torch.tensor(a), torch.tensor(b))
        assert got.numpy().dtype.kind == want.numpy().dtype.kind, (b, got.dtype, want.dtype)
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=f"{op}({case}, {b})")
    pair = np.resize(a[::-1], a.shape)
    got = getattr(Tensor(a), op)(Tensor(pair)).numpy()
    np.testing.assert_array_equal(got, tf(torch.tensor(a), torch.tensor(pair)).numpy())


@pytest.mark.parametrize("pad", [(0, 1, 0, 1), (2, 1, 2, 1), (2, 0, 2, 1), (1, 2, 0, 1)])
@pytest.mark.parametrize("kernel,stride", [((3, 3), None), ((3, 2), (2, 1))])
def test_pooling_takes_pytorchs_flat_padding_as_f_pad(
    pad: tuple[int, ...], kernel: tuple[int, int], stride: tuple[int, int] | None
) -> None:
    # padding=(left, right, top, bottom) pools as the input padded by F.pad (-inf for max, counted 0s for avg)
    x, v = _x(2, 3, 13, 11), _x(1, seed=1)
    t, tt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    mx, avg = t.max_pool2d(kernel, stride, padding=pad), t.avg_pool2d(kernel, stride, padding=pad)
    want_mx = F.max_pool2d(F.pad(tt, pad, value=-math.inf), kernel, stride)
    want_avg = F.avg_pool2d(F.pad(tt, pad), kernel, stride)
    (want_mx.sum() + v[0] * want_avg.sum()).backward()
    (grad,) = (mx.sum() + float(v[0]) * avg.sum()).gradient(t)
    np.testing.assert_allclose(mx.numpy(), want_mx.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(avg.numpy(), want_avg.detach().numpy(), rtol=1e-12, atol=1e-12)
    assert tt.grad is not None
    np.testing.assert_allclose(grad.numpy(), tt.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pad", [1, (1, 0), (0, 0, 1, 1), (1, 1, 1, 1)])
def test_ceil_mode_pooling_with_padding_per_side_as_pytorchs(pad: int | tuple[int, ...]) -> None:
    # windows may end in the extra right padding of ceil_mode but never start in the right padding
    x = _x(2, 2, 13, 11)
    tp = pad if isinstance(pad, int) or len(pad) == 2 else (pad[2], pad[0])
    for kernel, stride in [((3, 3), None), ((4, 4), (3, 3)), ((3, 2), (2, 2))]:
        got = Tensor(x).max_pool2d(kernel, stride, padding=pad, ceil_mode=True)
        want = F.max_pool2d(torch.tensor(x), kernel, stride, padding=tp, ceil_mode=True)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
        got = Tensor(x).avg_pool2d(kernel, stride, padding=pad, ceil_mode=True)
        want = F.avg_pool2d(torch.tensor(x), kernel, stride, padding=tp, ceil_mode=True)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


def test_nonzero_with_a_size_keeps_int_indices_whatever_the_fill() -> None:
    a = np.array([[1.5, 0.0, -2.0], [0.0, 0.0, 3.0]])
    want = np.argwhere(a)  # as torch.nonzero: row-major indices of the nonzero entries
    np.testing.assert_array_equal(torch.nonzero(torch.tensor(a)).numpy(), want)
    for fill, as_int in [(-1.5, -1), (7, 7), (2.9, 2)]:
        got = Tensor(a).nonzero(size=5, fill_value=fill)
        assert got.numpy().dtype.kind == "i", got.dtype
        np.testing.assert_array_equal(got.numpy(), np.concatenate([want, np.full((2, 2), as_int)]))
    np.testing.assert_array_equal(Tensor(a).nonzero(size=2).numpy(), want[:2])


@pytest.mark.parametrize("channels", [3, 5])  # PyTorch's vectorised (<= 4 channels) and generic kernels
@pytest.mark.parametrize("shape,size", [((64, 64), (10, 10)), ((7, 9), (13, 20)), ((5, 33), (17, 8))])
@pytest.mark.parametrize("align", [False, True])
def test_bilinear_interpolation_of_uint8_images_is_pytorchs_to_the_bit(
    channels: int, shape: tuple[int, int], size: tuple[int, int], align: bool
) -> None:
    x = np.random.default_rng(2).integers(0, 256, (2, channels, *shape)).astype(np.uint8)
    want = F.interpolate(torch.tensor(x), size=size, mode="bilinear", align_corners=align).numpy()
    got = Tensor(x).interpolate(size, mode="linear", align_corners=align).numpy()
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, want)
