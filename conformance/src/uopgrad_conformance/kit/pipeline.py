"""The whole pipeline on the backend (schedule -> lower -> render -> compile -> launch) against REFERENCE:
tensor ops x dtypes, casts, reductions (empty ones too), NaN, movement, outputs of many shapes (grid-style
backends pad, merge and split them), an MLP's forward and backward, a precompiled @function, kernel reuse
across training steps, and COPY to and from every other installed device, forward and backward.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from uopgrad import Device, DType, Ops, Tensor, dtypes, function
from uopgrad.backend import CompiledBackend
from uopgrad.errors import EmptyReduceError

__all__ = ["assert_close", "both"]

REF = "REFERENCE"
FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]
INTS = list(dtypes.ints)
ALL = [dtypes.bool, *INTS, *FLOATS]
FLOAT_VALUES = np.array([0.0, -0.0, 1.0, -1.5, 2.5, 7.0, -7.0, 0.1, 100.0, np.inf, -np.inf, np.nan])
INT_VALUES = np.array([0, 1, -1, 2, -2, 3, 7, -7, 100, -100, 127, -128])
RTOL = {dtypes.float16: 2e-3, dtypes.float32: 1e-6, dtypes.float64: 1e-13}
Fn = Callable[..., Tensor]


def _claimed(device: str, *dts: DType) -> None:
    if missing := [dt.name for dt in dts if dt not in Device[device].capabilities.dtypes]:
        pytest.skip(f"not claimed: {device} does not declare {missing} in its capabilities")


def both(
    device: str, fn: Fn, *arrays: np.ndarray, dtype: DType | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """`fn` applied to tensors of `arrays` on `device` and on REFERENCE: (backend result, REFERENCE's)."""
    out = []
    for dev in (device, REF):
        ts = [Tensor(a, device=dev, dtype=dtype) for a in arrays]
        with np.errstate(all="ignore"):
            out.append(fn(*ts).numpy())
    return out[0], out[1]


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float = 0.0) -> None:
    """Same dtype, shape and NaNs; floats equal (signs of zeros too) or within `rtol`; others equal."""
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


def _pairs(values: np.ndarray, dt: DType) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(all="ignore"):
        v = values.astype(dtypes.to_numpy(dt))
    a, b = np.meshgrid(v, v)
    return a.reshape(-1), b.reshape(-1)


BINARY: dict[str, Fn] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "maximum": lambda a, b: a.maximum(b),
    "lt": lambda a, b: a < b,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "where": lambda a, b: (a < b).where(a, b),
}
FLOAT_BINARY: dict[str, Fn] = {"div": lambda a, b: a / b, "pow": lambda a, b: a**b}
INT_BINARY: dict[str, Fn] = {
    "floordiv": lambda a, b: a // b,
    "mod": lambda a, b: a % b,
    "xor": lambda a, b: a ^ b,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
}
UNARY: dict[str, Fn] = {
    "neg": lambda a: -a,
    "exp2": lambda a: a.exp2(),
    "log2": lambda a: a.log2(),
    "sin": lambda a: a.sin(),
    "sqrt": lambda a: a.sqrt(),
    "reciprocal": lambda a: a.reciprocal(),
    "trunc": lambda a: a.trunc(),
    "relu": lambda a: a.relu(),
    "exp": lambda a: a.exp(),
    "square": lambda a: a * a,
}
TRANSCENDENTAL = {"exp2", "log2", "sin", "exp", "pow"}
BINARY_CASES = (
    [(n, dt) for dt in FLOATS + INTS for n in BINARY]
    + [(n, dt) for dt in FLOATS for n in FLOAT_BINARY]
    + [(n, dt) for dt in INTS for n in INT_BINARY]
)


@pytest.mark.parametrize(("name", "dt"), BINARY_CASES, ids=str)
def test_pipeline_binary_ops(kit_device: str, name: str, dt: DType) -> None:
    """Tensor binary ops on every pair of special values (floor semantics for // and %)."""
    _claimed(kit_device, dt)
    fn = {**BINARY, **FLOAT_BINARY, **INT_BINARY}[name]
    a, b = _pairs(FLOAT_VALUES if dtypes.is_float(dt) else INT_VALUES, dt)
    if name in ("floordiv", "mod"):  # -7 // 2 == -4, -7 % 3 == 2; zero divisors aside
        a, b = a[b != 0], b[b != 0]
    got, want = both(kit_device, fn, a, b, dtype=dt)
    assert_close(got, want, RTOL.get(dt, 0.0) if name in TRANSCENDENTAL else 0.0)


@pytest.mark.parametrize(("name", "dt"), [(n, dt) for dt in FLOATS for n in UNARY], ids=str)
def test_pipeline_unary_ops(kit_device: str, name: str, dt: DType) -> None:
    """Tensor unary ops on special values and a spread of ordinary ones."""
    _claimed(kit_device, dt)
    a = np.concatenate([FLOAT_VALUES, np.linspace(-20, 20, 81)]).astype(dtypes.to_numpy(dt))
    got, want = both(kit_device, UNARY[name], a, dtype=dt)
    assert_close(got, want, RTOL[dt] if name in TRANSCENDENTAL else 0.0)


@pytest.mark.parametrize(("src", "dst"), [(s, d) for s in ALL for d in ALL if s != d], ids=str)
def test_pipeline_casts(kit_device: str, src: DType, dst: DType) -> None:
    """Casts: float -> int truncates toward zero and wraps out-of-range values as REFERENCE defines."""
    _claimed(kit_device, src, dst)
    values = (
        np.concatenate([FLOAT_VALUES, [300.7, -1.7, 65535.5, 3e9, -3e9, 1e20, -1e30]])
        if dtypes.is_float(src)
        else INT_VALUES
    )
    with np.errstate(all="ignore"):
        a = values.astype(dtypes.to_numpy(src))
    assert_close(*both(kit_device, lambda t: t.cast(dst), a, dtype=src))


@pytest.mark.parametrize(
    "dt",
    [
        dtypes.float32,
        dtypes.float64,
        dtypes.int32,
        dtypes.int8,
        dtypes.uint8,
        dtypes.int64,
        dtypes.float16,
        dtypes.bool,
    ],
    ids=str,
)
def test_pipeline_reductions(kit_device: str, dt: DType) -> None:
    """sum, max and prod over one axis and over all."""
    _claimed(kit_device, dt)
    a = (np.random.default_rng(0).standard_normal((5, 7)) * 4).astype(dtypes.to_numpy(dt))
    for fn in (
        lambda t: t.sum(axis=1),
        lambda t: t.max(axis=0),
        lambda t: t.sum(),
        lambda t: t.max(),
        lambda t: t.prod(axis=1),
    ):
        got, want = both(kit_device, fn, a, dtype=dt)
        assert_close(got, want, 1e-2 if dt == dtypes.float16 else 1e-6 if dtypes.is_float(dt) else 0.0)


def test_pipeline_max_propagates_nan_and_empty_reductions(kit_device: str) -> None:
    """MAX keeps NaN; reductions over empty axes give their identities."""
    a = np.array([[1.0, np.nan, 2.0], [-np.inf, -0.0, 0.0], [np.inf, 1.0, np.nan]], dtype=np.float32)
    for fn in (
        lambda t: t.max(axis=1),
        lambda t: t.sum(axis=1),
        lambda t: t.max(axis=0),
        lambda t: t.maximum(t.flip(1)),
    ):
        assert_close(*both(kit_device, fn, a))
    # over an empty axis the kernels' reduces give their identities (MAX: the dtype's minimum); Tensor.max
    # has no value there and raises before anything reaches the backend, as PyTorch does
    empty = np.zeros((3, 0), dtype=np.float32)
    for fn in (lambda t: t.sum(axis=1), lambda t: t._reduce(Ops.MAX, 1, False), lambda t: t.prod(axis=1)):
        assert_close(*both(kit_device, fn, empty))
    assert_close(
        *both(
            kit_device,
            lambda t: t._reduce(Ops.MAX, 1, False),
            np.zeros((2, 0), dtype=np.int32),
            dtype=dtypes.int32,
        )
    )
    with pytest.raises(EmptyReduceError, match=r"max\(\)"):
        Tensor(empty, device=kit_device).max(axis=1)


def test_pipeline_movement_and_matmul(kit_device: str) -> None:
    """The movement ops, softmax and a matmul."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((6, 5)).astype(np.float32)
    cases: list[Fn] = [
        lambda t: t.permute(1, 0) + 1,
        lambda t: t.pad(((1, 2), (0, 3))) * 2,
        lambda t: t.shrink(((1, 3), (2, 5))),
        lambda t: t.flip(0),
        lambda t: t.reshape(2, 12).sum(axis=0),
        lambda t: t[:, None, :].expand(4, 3, 6),
        lambda t: t.softmax(axis=-1),
    ]
    for fn in cases:
        assert_close(*both(kit_device, fn, a), rtol=1e-6)
    assert_close(*both(kit_device, lambda x, y: x @ y, a, b), rtol=1e-5)


@pytest.mark.parametrize(
    "shape",
    [
        (1,),
        (7,),
        (100,),
        (129,),
        (4096,),
        (3, 5, 7),
        (2, 3, 4, 5),
        (1000, 3),
        (3, 1000),
        (70000,),
        (5, 300, 2),
    ],
    ids=str,
)
def test_pipeline_output_shapes(kit_device: str, shape: tuple[int, ...]) -> None:
    """Sizes that divide a work-group size and sizes that pad it; 1-4 output axes; reduces inside."""
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) % 17 - 8
    assert_close(*both(kit_device, lambda t: t * 2 + 1, a))
    assert_close(*both(kit_device, lambda t: t.sum(axis=-1), a), rtol=1e-6)
    if len(shape) > 1:
        assert_close(*both(kit_device, lambda t: t.permute(*reversed(range(len(shape)))).contiguous(), a))


def _mlp_grads(dev: str, ws: list[np.ndarray], x: np.ndarray) -> list[np.ndarray]:
    params = [Tensor(w, device=dev, requires_grad=True) for w in ws]
    h = Tensor(x, device=dev)
    for i, w in enumerate(params):
        h = h @ w
        h = h.relu() if i < len(params) - 1 else h
    loss = (h * h).sum()
    loss.backward()
    return [loss.numpy(), *(p.grad.numpy() for p in params if p.grad is not None)]


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64], ids=str)
def test_pipeline_mlp_forward_and_backward(kit_device: str, dt: DType) -> None:
    """A three-layer MLP's loss and gradients."""
    _claimed(kit_device, dt)
    rng = np.random.default_rng(2)
    npdt = dtypes.to_numpy(dt)
    ws = [(rng.standard_normal((16, 16)) / 4).astype(npdt) for _ in range(3)]
    x = rng.standard_normal((8, 16)).astype(npdt)
    got, want = _mlp_grads(kit_device, ws, x), _mlp_grads(REF, ws, x)
    assert len(got) == len(want) == 4
    for g, w in zip(got, want):
        assert g.dtype == npdt
        np.testing.assert_allclose(g, w, rtol=1e-4 if dt == dtypes.float32 else 1e-12, atol=1e-5)


def test_pipeline_precompiled_function_forward_and_backward(kit_device: str) -> None:
    """A precompiled @function called twice, forward and backward."""

    @function(precompile=True)
    def layer(x: Tensor, w: Tensor) -> Tensor:
        return (x @ w).relu().sum(axis=1)

    rng = np.random.default_rng(3)
    xv, wv = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    results = []
    for dev in (kit_device, REF):
        x, w = Tensor(xv, device=dev, requires_grad=True), Tensor(wv, device=dev, requires_grad=True)
        y = layer(x, w) + layer(x * 2, w)
        y.sum().backward()
        assert x.grad is not None and w.grad is not None
        results.append((y.numpy(), x.grad.numpy(), w.grad.numpy()))
    for g, w2 in zip(*results):
        np.testing.assert_allclose(g, w2, rtol=1e-5, atol=1e-5)


def test_pipeline_a_repeated_training_step_builds_nothing_new(kit_device: str) -> None:
    """After the first step, a training step reuses every kernel and compiles nothing."""
    backend = Device[kit_device]
    if not isinstance(backend, CompiledBackend):
        pytest.skip(f"{kit_device} compiles no kernels")
    rng = np.random.default_rng(4)
    w = Tensor(rng.standard_normal((8, 8)).astype(np.float32), device=kit_device, requires_grad=True)

    def step(x: np.ndarray) -> None:
        loss = (Tensor(x, device=kit_device) @ w).relu().sum()
        (g,) = loss.gradient(w)
        w.assign(w - g * 0.01).realize()

    step(rng.standard_normal((4, 8)).astype(np.float32))
    kernels, compiled = len(backend._kernels), dict(backend.compiler.stats)
    for _ in range(3):
        step(rng.standard_normal((4, 8)).astype(np.float32))
    assert len(backend._kernels) == kernels and dict(backend.compiler.stats) == compiled


# the other end of a copy: REFERENCE, a second device of the backend under test, the in-tree backends
OTHERS = [REF, "second", "CPU", "CL", "CUDA"]


def _device_or_skip(name: str, device: str) -> None:
    if name == device:
        pytest.skip(f"{name} is the backend under test (see 'second')")
    if name.partition(":")[0] not in Device:
        pytest.skip(f"{name} is not installed")
    try:
        Device[name]
    except Exception as e:  # a backend that is installed but has no device here (no GPU, no driver)
        pytest.skip(f"{name} can't open a device here: {e}")


@pytest.mark.parametrize("direction", ["to", "from"])
@pytest.mark.parametrize("other", OTHERS)
def test_pipeline_copy_forward_and_backward(kit_device: str, other: str, direction: str) -> None:
    """y = f(x.to(dst)) on the other device; the gradient comes back to x's device."""
    other = f"{kit_device}:1" if other == "second" else other
    _device_or_skip(other, kit_device)
    src, dst = (kit_device, other) if direction == "to" else (other, kit_device)
    xv = np.random.default_rng(5).standard_normal((3, 5)).astype(np.float32)
    x = Tensor(xv, device=src, requires_grad=True)
    y = x.to(dst)
    assert y.device == Device.canonicalize(dst)
    loss = (y * y * 0.5 + y.exp()).sum()
    loss.backward()
    assert x.grad is not None and x.grad.device == Device.canonicalize(src)
    np.testing.assert_allclose(loss.numpy(), (xv * xv * 0.5 + np.exp(xv)).sum(), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), xv + np.exp(xv), rtol=1e-5)


@pytest.mark.parametrize("dt", ALL, ids=str)
def test_pipeline_copy_round_trip_every_dtype(kit_device: str, dt: DType) -> None:
    """Every claimed dtype survives REFERENCE -> backend -> (computed on) -> REFERENCE."""
    _claimed(kit_device, dt)
    values = np.concatenate([FLOAT_VALUES, [65504.0, 1e-7]]) if dtypes.is_float(dt) else INT_VALUES
    with np.errstate(all="ignore"):
        a = values.astype(dtypes.to_numpy(dt))
        want = (a | a) if dt == dtypes.bool else (a + a)
    t = Tensor(a, device=REF, dtype=dt).to(kit_device)
    back = ((t | t) if dt == dtypes.bool else (t + t)).to(REF)
    assert_close(back.numpy(), want)


def test_pipeline_a_graph_mixing_devices(kit_device: str) -> None:
    """Part of a model on REFERENCE, part on the backend: both parameters get gradients on their own
    devices, equal to an all-REFERENCE run."""
    rng = np.random.default_rng(6)
    xv = rng.standard_normal((4, 3)).astype(np.float32)
    w1v, w2v = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((5, 2)).astype(np.float32)
    grads = []
    for d1, d2 in ((REF, kit_device), (kit_device, REF), (REF, REF)):
        w1, w2 = Tensor(w1v, device=d1, requires_grad=True), Tensor(w2v, device=d2, requires_grad=True)
        h = (Tensor(xv, device=d1) @ w1).relu().to(d2)
        loss = (h @ w2).square().sum()
        loss.backward()
        assert w1.grad is not None and w2.grad is not None
        assert (w1.grad.device, w2.grad.device) == (Device.canonicalize(d1), Device.canonicalize(d2))
        grads.append((loss.numpy(), w1.grad.numpy(), w2.grad.numpy()))
    for run in grads[:2]:
        for g, w in zip(run, grads[2]):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
