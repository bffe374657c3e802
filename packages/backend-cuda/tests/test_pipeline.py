"""The whole pipeline on CUDA (schedule -> lower for the grid -> render -> NVRTC -> launch; emulated where no
GPU is lent) against REFERENCE: tensor ops x dtypes, casts, reductions (NaN and empty ones), movement,
grids of every shape, an MLP's forward and backward, a precompiled @function, kernel reuse across training
steps, COPY to and from another device, and the reversed thread order giving the same results. The cases
are tables, one parametrised test each (ready to move onto a shared backend test kit)."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Device, Tensor, dtypes, function
from uopgrad_cuda import DTYPES

CUDA, REF = "CUDA", "REFERENCE"
FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]
INTS = [dt for dt in dtypes.ints if dt in DTYPES]


def both(fn, *arrays, dtype=None, devices=(CUDA, REF)):
    """fn applied to tensors of `arrays` on each device: (CUDA result, REFERENCE result)."""
    out = []
    for dev in devices:
        ts = [Tensor(a, device=dev, dtype=dtype) for a in arrays]
        with np.errstate(all="ignore"):
            out.append(fn(*ts).numpy())
    return out[0], out[1]


def assert_same(got: np.ndarray, want: np.ndarray, rtol: float = 0.0) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind != "f":
        np.testing.assert_array_equal(got, want)
        return
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    if rtol:
        np.testing.assert_allclose(got[ok], want[ok], rtol=rtol, atol=rtol)
    else:
        np.testing.assert_array_equal(got[ok], want[ok])
        np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))  # -0.0 kept


FLOAT_VALUES = np.array([0.0, -0.0, 1.0, -1.5, 2.5, 7.0, -7.0, 0.1, 100.0, np.inf, -np.inf, np.nan])
INT_VALUES = np.array([0, 1, -1, 2, -2, 3, 7, -7, 100, -100, 127, -128, 2**31 - 1, -2**31])
BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "maximum": lambda a, b: a.maximum(b), "lt": lambda a, b: a < b, "ne": lambda a, b: a != b,
    "where": lambda a, b: (a < b).where(a, b),
}
FLOAT_BINARY = {"div": lambda a, b: a / b, "pow": lambda a, b: a ** b}
INT_BINARY = {"floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "xor": lambda a, b: a ^ b,
              "shl": lambda a, b: a << (b & 7), "shr": lambda a, b: a >> (b & 7)}
UNARY = {"neg": lambda a: -a, "exp2": lambda a: a.exp2(), "log2": lambda a: a.log2(),
         "sin": lambda a: a.sin(), "sqrt": lambda a: a.sqrt(), "reciprocal": lambda a: a.reciprocal(),
         "trunc": lambda a: a.trunc(), "relu": lambda a: a.relu(), "exp": lambda a: a.exp()}
TRANSCENDENTAL = {"exp2", "log2", "sin", "exp", "pow"}
RTOL = {dtypes.float16: 2e-3, dtypes.float32: 2e-6, dtypes.float64: 1e-13}


def pairs(values: np.ndarray, dt) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(all="ignore"):
        v = values.astype(dtypes.to_numpy(dt))
    a, b = np.meshgrid(v, v)
    return a.reshape(-1), b.reshape(-1)


BINARY_CASES = [(name, dt) for dt in FLOATS + INTS for name in BINARY] + \
    [(name, dt) for dt in FLOATS for name in FLOAT_BINARY] + \
    [(name, dt) for dt in INTS for name in INT_BINARY]


@pytest.mark.parametrize(("name", "dt"), BINARY_CASES, ids=str)
def test_binary_ops(name, dt):
    # int add/sub/mul of int32/int64 extremes wrap (defined in the source: NVRTC has no -fwrapv)
    fn = {**BINARY, **FLOAT_BINARY, **INT_BINARY}[name]
    a, b = pairs(FLOAT_VALUES if dtypes.is_float(dt) else INT_VALUES, dt)
    if name in ("floordiv", "mod"):
        a, b = a[b != 0], b[b != 0]
    got, want = both(fn, a, b, dtype=dt)
    assert_same(got, want, RTOL.get(dt, 0.0) if name in TRANSCENDENTAL else 0.0)


@pytest.mark.parametrize(("name", "dt"), [(n, dt) for dt in FLOATS for n in UNARY], ids=str)
def test_unary_ops(name, dt):
    a = np.concatenate([FLOAT_VALUES, np.linspace(-20, 20, 81)]).astype(dtypes.to_numpy(dt))
    got, want = both(UNARY[name], a, dtype=dt)
    assert_same(got, want, RTOL[dt] if name in TRANSCENDENTAL else 0.0)


CAST_FROM = [dtypes.bool, dtypes.int8, dtypes.uint16, dtypes.int32, dtypes.uint64, *FLOATS]
CAST_TO = [dtypes.bool, dtypes.int8, dtypes.uint32, dtypes.int64, *FLOATS]


@pytest.mark.parametrize(("src", "dst"), [(s, d) for s in CAST_FROM for d in CAST_TO if s != d], ids=str)
def test_casts(src, dst):
    values = np.concatenate([FLOAT_VALUES, [300.7, -1.7, 65535.5, 3e9, -3e9, 1e20, -1e30]]) \
        if dtypes.is_float(src) else INT_VALUES
    with np.errstate(all="ignore"):
        a = values.astype(dtypes.to_numpy(src))
    assert_same(*both(lambda t: t.cast(dst), a, dtype=src))


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint8, dtypes.int64,
                                dtypes.float16, dtypes.bool], ids=str)
def test_reductions(dt):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((5, 7)) * 4).astype(dtypes.to_numpy(dt))
    for fn in (lambda t: t.sum(axis=1), lambda t: t.max(axis=0), lambda t: t.sum(), lambda t: t.prod(axis=1)):
        got, want = both(fn, a, dtype=dt)
        assert_same(got, want, 1e-2 if dt == dtypes.float16 else 1e-6 if dtypes.is_float(dt) else 0.0)


def test_max_propagates_nan_and_empty_reductions():
    a = np.array([[1.0, np.nan, 2.0], [-np.inf, -0.0, 0.0], [np.inf, 1.0, np.nan]], dtype=np.float32)
    for fn in (lambda t: t.max(axis=1), lambda t: t.sum(axis=1), lambda t: t.maximum(t.flip(1))):
        assert_same(*both(fn, a))
    empty = np.zeros((3, 0), dtype=np.float32)
    for fn in (lambda t: t.sum(axis=1), lambda t: t.max(axis=1)):
        assert_same(*both(fn, empty))


@pytest.mark.parametrize("shape", [(1,), (7,), (129,), (4096,), (3, 5, 7), (2, 3, 4, 5), (3, 1000), (70000,)],
                         ids=str)
def test_grid_shapes_and_movement(shape):
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) % 17 - 8
    assert_same(*both(lambda t: t * 2 + 1, a))
    assert_same(*both(lambda t: t.sum(axis=-1), a), rtol=1e-6)
    if len(shape) > 1:
        assert_same(*both(lambda t: t.permute(*reversed(range(len(shape)))).contiguous(), a))
        assert_same(*both(lambda t: t.flip(0).pad(((1, 0),) + ((0, 0),) * (len(shape) - 1)), a))


def mlp_grads(dev: str, ws: list[np.ndarray], x: np.ndarray) -> list[np.ndarray]:
    params = [Tensor(w, device=dev, requires_grad=True) for w in ws]
    h = Tensor(x, device=dev)
    for i, w in enumerate(params):
        h = h @ w
        h = h.relu() if i < len(params) - 1 else h
    loss = (h * h).sum()
    loss.backward()
    return [loss.numpy(), *(p.grad.numpy() for p in params if p.grad is not None)]


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64], ids=str)
def test_mlp_forward_and_backward(dt):
    rng = np.random.default_rng(2)
    npdt = dtypes.to_numpy(dt)
    ws = [(rng.standard_normal((16, 16)) / 4).astype(npdt) for _ in range(3)]
    x = rng.standard_normal((8, 16)).astype(npdt)
    got, want = mlp_grads(CUDA, ws, x), mlp_grads(REF, ws, x)
    assert len(got) == len(want) == 4
    for g, w in zip(got, want):
        assert g.dtype == npdt
        np.testing.assert_allclose(g, w, rtol=1e-4 if dt == dtypes.float32 else 1e-12, atol=1e-5)


def test_precompiled_function_forward_and_backward():
    @function(precompile=True)
    def layer(x: Tensor, w: Tensor) -> Tensor:
        return (x @ w).relu().sum(axis=1)

    rng = np.random.default_rng(3)
    xv, wv = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    results = []
    for dev in (CUDA, REF):
        x, w = Tensor(xv, device=dev, requires_grad=True), Tensor(wv, device=dev, requires_grad=True)
        y = layer(x, w) + layer(x * 2, w)
        y.sum().backward()
        assert x.grad is not None and w.grad is not None
        results.append((y.numpy(), x.grad.numpy(), w.grad.numpy()))
    for g, w in zip(*results):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_a_repeated_training_step_builds_nothing_new():
    cuda = Device[CUDA]
    rng = np.random.default_rng(4)
    w = Tensor(rng.standard_normal((8, 8)).astype(np.float32), device=CUDA, requires_grad=True)

    def step(x: np.ndarray) -> None:
        loss = (Tensor(x, device=CUDA) @ w).relu().sum()
        (g,) = loss.gradient(w)
        w.assign(w - g * 0.01).realize()

    step(rng.standard_normal((4, 8)).astype(np.float32))
    kernels, compiled = len(cuda._kernels), dict(cuda.compiler.stats)
    for _ in range(3):
        step(rng.standard_normal((4, 8)).astype(np.float32))
    assert len(cuda._kernels) == kernels and dict(cuda.compiler.stats) == compiled


@pytest.mark.parametrize(("src", "dst"), [(REF, CUDA), (CUDA, REF), (CUDA, "CUDA:1")], ids=str)
def test_copy_forward_and_backward(src, dst):
    rng = np.random.default_rng(5)
    xv = rng.standard_normal((3, 5)).astype(np.float32)
    x = Tensor(xv, device=src, requires_grad=True)
    y = x.to(dst)
    loss = (y * y * 0.5 + y.exp()).sum()
    loss.backward()
    assert x.grad is not None and x.grad.device == src
    np.testing.assert_allclose(loss.numpy(), (xv * xv * 0.5 + np.exp(xv)).sum(), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), xv + np.exp(xv), rtol=1e-5)


def test_reversed_thread_order_gives_the_same_results(monkeypatch):
    # a fresh backend object in reversed order: every kernel codegen emits is free of order dependence
    from uopgrad_cuda import CUDABackend

    if Device[CUDA].gpu is not None:
        pytest.skip("a GPU is present: thread order is the hardware's")
    monkeypatch.setenv("UOPGRAD_CUDA_EMULATE", "reverse")
    rev = CUDABackend("CUDA:7")
    assert rev.runtime.reverse
    monkeypatch.setitem(Device._instances, "CUDA:7", rev)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((33, 130)).astype(np.float32)
    for fn in (lambda t: t.softmax(axis=-1), lambda t: t.sum(axis=0), lambda t: t.permute(1, 0) * 3):
        got, want = both(fn, a, devices=("CUDA:7", REF))
        assert_same(got, want, rtol=1e-6)
