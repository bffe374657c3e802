"""A repeated eager training step on the CPU (issue 35, spec/realize.md "Structure caches"): from the
second step on, each realize takes its schedule from the structure cache and launches through the launch
plan kept with it (the core tests count the schedule cache's hits), building no kernel; the values are
those of a step computed in numpy."""

from __future__ import annotations

import numpy as np

from uopgrad import Device, Tensor
from uopgrad.backend import CompiledBackend
from uopgrad.nn.optim import SGD

CPU = "CPU"


def _relu_grad_step(
    ws: list[np.ndarray], x: np.ndarray, y: np.ndarray, lr: float
) -> tuple[float, list[np.ndarray]]:
    """The loss and the updated weights of one SGD step of the MLP below, in float64 numpy."""
    hs = [x.astype(np.float64)]
    for i, w in enumerate(ws):
        h = hs[-1] @ w
        hs.append(np.maximum(h, 0) if i < len(ws) - 1 else h)
    diff = hs[-1] - y
    loss = float((diff**2).mean())
    g = 2 * diff / diff.size
    new = list(ws)
    for i in reversed(range(len(ws))):
        gw = hs[i].T @ g
        g = g @ ws[i].T
        if i > 0:
            g = g * (hs[i] > 0)
        new[i] = ws[i] - lr * gw
    return loss, new


def test_a_repeated_step_launches_from_the_cached_plan_and_builds_nothing(monkeypatch) -> None:
    rng = np.random.default_rng(0)
    w_np = [(rng.standard_normal((8, 8)) / 8**0.5).astype(np.float32) for _ in range(3)]
    ws = [Tensor(w, device=CPU, requires_grad=True) for w in w_np]
    opt = SGD(ws, lr=0.1)
    backend = Device[CPU]
    assert isinstance(backend, CompiledBackend)
    prepared: list[int] = []
    real_prepare = backend.prepare
    monkeypatch.setattr(backend, "prepare", lambda calls: prepared.append(len(calls)) or real_prepare(calls))
    ref = [w.astype(np.float64) for w in w_np]
    old = Tensor.training
    Tensor.training = True
    try:
        for k in range(4):
            x_np, y_np = (rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2))
            x, y = Tensor(x_np, device=CPU), Tensor(y_np, device=CPU)
            opt.zero_grad()
            h = x
            for i, w in enumerate(ws):
                h = h @ w
                h = h.relu() if i < len(ws) - 1 else h
            loss = ((h - y) ** 2).mean()
            value = loss.item()  # as a PyTorch user logs it, before backward
            loss.backward()
            opt.step()
            want, ref = _relu_grad_step(ref, x_np, y_np, 0.1)
            np.testing.assert_allclose(value, want, rtol=1e-5)
            for w, r in zip(ws, ref):
                np.testing.assert_allclose(w.numpy(), r, rtol=1e-4, atol=1e-5)
            if k == 0:
                first, kernels = len(prepared), len(backend._kernels)
                assert first >= 2  # the forward's realize and the step's built their kernels
            else:  # the same two structures: neither realize prepares (or builds) a kernel again
                assert (len(prepared), len(backend._kernels)) == (first, kernels)
    finally:
        Tensor.training = old
