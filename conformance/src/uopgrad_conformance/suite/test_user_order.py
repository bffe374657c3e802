"""Programs in a PyTorch user's order (docs/conformance.md "What it checks" 4): values are read before
backward, intermediates are realized, gradients accumulate over two backward calls and parameters are
updated in place. The backend must give what REFERENCE gives for the same program with nothing realized
before differentiating, which core's own tests hold to torch's gradients.

A backend that drops the graph at realize (so `loss.item(); loss.backward()` leaves no gradient) fails
every case here."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from uopgrad import DType, Tensor, dtypes
from uopgrad_conformance.plugin import case_rng, claimed_cases, parametrize_suite
from uopgrad_conformance.report import Case, Recorder
from uopgrad_conformance.target import REFERENCE, Target

# how a user reads a value before differentiating
READS: dict[str, Callable[[Tensor], object]] = {
    "item": lambda t: t.item(),
    "numpy": lambda t: t.numpy(),
    "realize": lambda t: t.realize(),
    "realize twice": lambda t: (t.realize(), t.numpy()),
}
STEPS = 3
# the inputs of each program: name -> (shape, scale of its standard-normal values)
SNIPPET_INPUTS = {"x": ((4, 3), 1.0), "w": ((3, 2), 1.0), "y": ((4, 2), 1.0)}
MLP_INPUTS = {
    "x": ((8, 4), 1.0),
    "y": ((8, 1), 1.0),
    "w1": ((4, 5), 0.5),
    "b1": ((5,), 0.1),
    "w2": ((5, 1), 0.5),
    "b2": ((1,), 0.1),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per program and float dtype the backend claims (float32 and float64)."""
    rows = {f"user order: {kind}": kind for kind in (*READS, "training loop")}
    dts = (dtypes.float32, dtypes.float64)
    parametrize_suite(metafunc, lambda target, _: claimed_cases(target, rows, dts, "grad", "program"))


def _tolerance(dt: DType) -> float:
    return 1e-4 if dt == dtypes.float32 else 1e-10


def _compare(what: str, got: np.ndarray, want: np.ndarray, dt: DType, record: Recorder) -> None:
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    err = float(np.max(np.abs(got - want))) / max(scale, 1e-30) if want.size else 0.0
    record.error(err)
    assert err <= _tolerance(dt), (
        f"{what}: backend {got.tolist()} != REFERENCE with nothing realized "
        f"{want.tolist()} (relative error {err:.3g})"
    )


def _snippet(device: str, dt: DType, data: dict[str, np.ndarray], read: str | None) -> list[np.ndarray]:
    """loss = mean((x @ w - y)**2); read it (or not); backward. Returns [loss, w.grad]."""
    x, y = Tensor(data["x"], device=device, dtype=dt), Tensor(data["y"], device=device, dtype=dt)
    w = Tensor(data["w"], device=device, dtype=dt, requires_grad=True)
    loss = ((x @ w - y) ** 2).mean()
    if read is not None:
        READS[read](loss)
    loss.backward()
    assert w.grad is not None, "backward() left w.grad None"
    return [loss.numpy(), w.grad.numpy()]


def _train(device: str, dt: DType, data: dict[str, np.ndarray], user_order: bool) -> list[np.ndarray]:
    """A 2-layer MLP, SGD with momentum, two micro-batches per step. In user order the loss is read before
    backward and the hidden layer is realized; otherwise nothing is read until the step's update."""
    params = {
        k: Tensor(v, device=device, dtype=dt, requires_grad=True) for k, v in data.items() if k[0] in "wb"
    }
    bufs = {
        k: Tensor.zeros(*p.shape, device=device, dtype=dt).contiguous().realize() for k, p in params.items()
    }
    x, y = Tensor(data["x"], device=device, dtype=dt), Tensor(data["y"], device=device, dtype=dt)
    losses: list[Tensor] = []
    for _ in range(STEPS):
        for lo, hi in ((0, 4), (4, 8)):
            h = (x[lo:hi] @ params["w1"] + params["b1"]).relu()
            if user_order:
                h.realize()
            loss = ((h @ params["w2"] + params["b2"] - y[lo:hi]) ** 2).mean()
            if user_order:
                loss.item()
            losses.append(loss)
            loss.backward()
        for k, p in params.items():
            assert p.grad is not None, f"backward() left {k}.grad None"
            bufs[k].assign(bufs[k] * 0.9 + p.grad)
            p.assign(p - 0.05 * bufs[k])
        Tensor.realize(*params.values(), *bufs.values(), *losses)
        for p in params.values():
            p.grad = None
    return [np.array([float(v.item()) for v in losses]), *(p.numpy() for p in params.values())]


def test_user_order(case: Case, target: Target, record: Recorder) -> None:
    """The program in user order on the backend against REFERENCE with nothing realized early."""
    dt, kind = case.dtype, case.payload
    assert dt is not None
    rng = case_rng(case)
    inputs = MLP_INPUTS if kind == "training loop" else SNIPPET_INPUTS
    data = {k: rng.standard_normal(shape) * scale for k, (shape, scale) in inputs.items()}
    if kind == "training loop":
        got, want = _train(target.name, dt, data, True), _train(REFERENCE, dt, data, False)
        names = ["losses", *(k for k in data if k[0] in "wb")]
    else:
        got, want = _snippet(target.name, dt, data, kind), _snippet(REFERENCE, dt, data, None)
        names = ["loss", "w.grad"]
    for what, g, w in zip(names, got, want):
        _compare(what, g.astype(np.float64), w.astype(np.float64), dt, record)
