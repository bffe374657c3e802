"""The whole pipeline on CPU (schedule -> lower -> render -> compile -> launch) against REFERENCE: tensor ops
x dtypes, reductions (empty ones too), movement, an MLP's forward and backward, a precompiled @function,
kernel reuse across training steps, and a 2001-op gradient."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from uopgrad import Device, Tensor, dtypes, function

CPU, REF = "CPU", "REFERENCE"
FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]
INTS = list(dtypes.ints)


def both(fn, *arrays, dtype=None):
    """fn applied to tensors of `arrays` on CPU and on REFERENCE: (cpu result, reference result)."""
    out = []
    for dev in (CPU, REF):
        ts = [Tensor(a, device=dev, dtype=dtype) for a in arrays]
        with np.errstate(all="ignore"):
            out.append(fn(*ts).numpy())
    return out[0], out[1]


def assert_same(got: np.ndarray, want: np.ndarray, rtol: float = 0.0) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind == "f":
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        if rtol:
            np.testing.assert_allclose(got[ok], want[ok], rtol=rtol, atol=rtol)
        else:
            np.testing.assert_array_equal(got[ok], want[ok])
            np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))  # -0.0 kept
    else:
        np.testing.assert_array_equal(got, want)


def test_acceptance_one_liner():
    code = "from uopgrad import Tensor; print((Tensor([1.,2.,3.], device='CPU')*2).sum().numpy())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "12.0"


def test_the_cpu_is_the_default_device_when_installed(monkeypatch):
    monkeypatch.delenv("UOPGRAD_DEVICE", raising=False)
    code = "from uopgrad import Device; print(Device.DEFAULT)"
    env = {k: v for k, v in __import__("os").environ.items() if k != "UOPGRAD_DEVICE"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "CPU"


# ---------------------------------------------------------------------- elementwise op x dtype
FLOAT_VALUES = np.array([0.0, -0.0, 1.0, -1.5, 2.5, 7.0, -7.0, 0.1, 100.0, np.inf, -np.inf, np.nan])
INT_VALUES = np.array([0, 1, -1, 2, -2, 3, 7, -7, 100, -100, 127, -128])

BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "maximum": lambda a, b: a.maximum(b), "lt": lambda a, b: a < b, "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b, "where": lambda a, b: (a < b).where(a, b),
}
FLOAT_BINARY = {"div": lambda a, b: a / b, "pow": lambda a, b: a ** b}
INT_BINARY = {"floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "xor": lambda a, b: a ^ b,
              "and": lambda a, b: a & b, "or": lambda a, b: a | b}
UNARY = {"neg": lambda a: -a, "exp2": lambda a: a.exp2(), "log2": lambda a: a.log2(),
         "sin": lambda a: a.sin(), "sqrt": lambda a: a.sqrt(), "reciprocal": lambda a: a.reciprocal(),
         "trunc": lambda a: a.trunc(),
         "relu": lambda a: a.relu(), "exp": lambda a: a.exp(), "square": lambda a: a * a}
TRANSCENDENTAL = {"exp2", "log2", "sin", "exp", "pow"}


def pairs(values: np.ndarray, dt) -> tuple[np.ndarray, np.ndarray]:
    npdt = dtypes.to_numpy(dt)
    with np.errstate(all="ignore"):
        v = values.astype(npdt)
    a, b = np.meshgrid(v, v)
    return a.reshape(-1), b.reshape(-1)


def binary_cases():
    out = [(name, dt) for dt in FLOATS + INTS for name in BINARY]
    out += [(name, dt) for dt in FLOATS for name in FLOAT_BINARY]
    return out + [(name, dt) for dt in INTS for name in INT_BINARY]


@pytest.mark.parametrize(("name", "dt"), binary_cases(), ids=str)
def test_binary_ops(name, dt):
    fn = {**BINARY, **FLOAT_BINARY, **INT_BINARY}[name]
    a, b = pairs(FLOAT_VALUES if dtypes.is_float(dt) else INT_VALUES, dt)
    if name in ("floordiv", "mod"):  # division by zero is left undefined by the spec
        a, b = a[b != 0], b[b != 0]
    got, want = both(fn, a, b, dtype=dt)
    rtol = {dtypes.float16: 2e-3, dtypes.float32: 1e-6, dtypes.float64: 1e-13}.get(dt, 0.0)
    assert_same(got, want, rtol if name in TRANSCENDENTAL else 0.0)


@pytest.mark.parametrize(("name", "dt"), [(n, dt) for dt in FLOATS for n in UNARY], ids=str)
def test_unary_ops(name, dt):
    a = np.concatenate([FLOAT_VALUES, np.linspace(-20, 20, 81)]).astype(dtypes.to_numpy(dt))
    got, want = both(UNARY[name], a, dtype=dt)
    rtol = {dtypes.float16: 2e-3, dtypes.float32: 1e-6, dtypes.float64: 1e-13}[dt]
    assert_same(got, want, rtol if name in TRANSCENDENTAL else 0.0)


@pytest.mark.parametrize(("src", "dst"), [(s, d) for s in [dtypes.bool, *INTS, *FLOATS]
                                          for d in [dtypes.bool, *INTS, *FLOATS] if s != d], ids=str)
def test_casts(src, dst):
    values = np.concatenate([FLOAT_VALUES, [300.7, -1.7, 65535.5, 3e9, -3e9, 1e20]]) if dtypes.is_float(src) \
        else INT_VALUES
    with np.errstate(all="ignore"):
        a = values.astype(dtypes.to_numpy(src))
    got, want = both(lambda t: t.cast(dst), a, dtype=src)
    assert_same(got, want)


ROUND_TRIPS = [(dtypes.float64, dtypes.float32), (dtypes.float32, dtypes.float16),
               (dtypes.float64, dtypes.float16), (dtypes.int64, dtypes.int32)]


@pytest.mark.parametrize("n", [1, 2, 3, 6, 7, 64])
@pytest.mark.parametrize(("wide", "narrow"), ROUND_TRIPS, ids=str)
def test_narrowing_round_trips_round(n, wide, narrow):
    # GCC 12.2's straight-line vectoriser turned (double)(float)x into x for 2, 3, 6, 7 elements
    values = np.array([1 / 3, 2**40 + 5.5, -7.1, 1e10] * 16)[:n]
    with np.errstate(all="ignore"):
        a = values.astype(dtypes.to_numpy(wide))
    got, want = both(lambda t: t.cast(narrow).cast(wide) * 1, a, dtype=wide)
    assert_same(got, want)


# ---------------------------------------------------------------------- reductions and movement
@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int8, dtypes.uint8,
                                dtypes.float16, dtypes.bool], ids=str)
def test_reductions(dt):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((5, 7)) * 4).astype(dtypes.to_numpy(dt))
    for fn in (lambda t: t.sum(axis=1), lambda t: t.max(axis=0), lambda t: t.sum(), lambda t: t.max(),
               lambda t: t.prod(axis=1)):
        got, want = both(fn, a, dtype=dt)
        assert_same(got, want, 1e-2 if dt == dtypes.float16 else 1e-6 if dtypes.is_float(dt) else 0.0)


def test_max_propagates_nan_and_empty_reductions():
    a = np.array([[1.0, np.nan, 2.0], [-np.inf, -0.0, 0.0]], dtype=np.float32)
    for fn in (lambda t: t.max(axis=1), lambda t: t.sum(axis=1)):
        assert_same(*both(fn, a))
    empty = np.zeros((3, 0), dtype=np.float32)
    for fn in (lambda t: t.sum(axis=1), lambda t: t.max(axis=1), lambda t: t.prod(axis=1)):
        assert_same(*both(fn, empty))
    assert_same(*both(lambda t: t.max(axis=1), np.zeros((2, 0), dtype=np.int32), dtype=dtypes.int32))


def test_movement_and_matmul():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((6, 5)).astype(np.float32)
    cases = [
        lambda t: t.permute(1, 0) + 1, lambda t: t.pad(((1, 2), (0, 3))) * 2,
        lambda t: t.shrink(((1, 3), (2, 5))),
        lambda t: t.flip(0), lambda t: t.reshape(2, 12).sum(axis=0), lambda t: t[:, None, :].expand(4, 3, 6),
        lambda t: t.softmax(axis=-1) if hasattr(t, "softmax") else t.exp(),
    ]
    for fn in cases:
        assert_same(*both(fn, a), rtol=1e-6)
    assert_same(*both(lambda x, y: x @ y, a, b), rtol=1e-5)


# ---------------------------------------------------------------------- training
def mlp_grads(dev: str, ws: list[np.ndarray], x: np.ndarray) -> list[np.ndarray]:
    params = [Tensor(w, device=dev, requires_grad=True) for w in ws]
    h = Tensor(x, device=dev)
    for i, w in enumerate(params):
        h = h @ w
        h = h.relu() if i < len(params) - 1 else h
    loss = (h * h).sum()
    loss.backward()
    return [loss.numpy(), *(p.grad.numpy() for p in params if p.grad is not None)]


def test_mlp_forward_and_backward():
    rng = np.random.default_rng(2)
    ws = [rng.standard_normal((16, 16)).astype(np.float32) / 4 for _ in range(3)]
    x = rng.standard_normal((8, 16)).astype(np.float32)
    got, want = mlp_grads(CPU, ws, x), mlp_grads(REF, ws, x)
    assert len(got) == len(want) == 4
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_precompiled_function_forward_and_backward():
    @function(precompile=True)
    def layer(x: Tensor, w: Tensor) -> Tensor:
        return (x @ w).relu().sum(axis=1)

    rng = np.random.default_rng(3)
    xv, wv = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    results = []
    for dev in (CPU, REF):
        x, w = Tensor(xv, device=dev, requires_grad=True), Tensor(wv, device=dev, requires_grad=True)
        y = layer(x, w) + layer(x * 2, w)  # the same FUNCTION called twice
        y.sum().backward()
        assert x.grad is not None and w.grad is not None
        results.append((y.numpy(), x.grad.numpy(), w.grad.numpy()))
    for g, w in zip(*results):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_a_repeated_training_step_compiles_nothing_new():
    cpu = Device[CPU]
    rng = np.random.default_rng(4)
    w = Tensor(rng.standard_normal((8, 8)).astype(np.float32), device=CPU, requires_grad=True)

    def step(x: np.ndarray) -> None:
        loss = (Tensor(x, device=CPU) @ w).relu().sum()
        (g,) = loss.gradient(w)
        w.assign(w - g * 0.01).realize()

    step(rng.standard_normal((4, 8)).astype(np.float32))
    kernels, compiled = len(cpu._kernels), dict(cpu.compiler.stats)
    for _ in range(3):
        step(rng.standard_normal((4, 8)).astype(np.float32))
    assert len(cpu._kernels) == kernels and dict(cpu.compiler.stats) == compiled


def test_gradient_of_a_2001_op_chain_compiles_in_seconds():
    x = Tensor(np.linspace(0, 1, 64).astype(np.float32), device=CPU, requires_grad=True)
    y = x
    for _ in range(667):
        y = y * y * 0.5 + 0.25
    t = time.perf_counter()
    (g,) = y.sum().gradient(x)
    got = g.numpy()
    assert time.perf_counter() - t < 60
    xs = np.linspace(0, 1, 64).astype(np.float64)  # the chain rule in float64, as a check
    d = np.ones_like(xs)
    v = xs
    for _ in range(667):
        d, v = d * v, v * v * 0.5 + 0.25
    np.testing.assert_allclose(got, d, rtol=1e-3, atol=1e-30)
