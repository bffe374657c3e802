"""uopgrad.nn.lr_scheduler against torch.optim.lr_scheduler: the optimiser's lr at each of 50 steps, and a
TinyJit step that reads each new rate without being captured again (issue 36)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from uopgrad import Device, Tensor, TinyJit
from uopgrad.errors import ArgumentError
from uopgrad.nn import lr_scheduler
from uopgrad.nn.optim import SGD, Adam, OptimizerGroup

torch = pytest.importorskip("torch", reason="torch (an optional test dependency) is not installed")
tsched = torch.optim.lr_scheduler

# (name, ours(opt), theirs(torch opt)) with PyTorch's own arguments
CASES: list[tuple[str, Callable[[Any], Any], Callable[[Any], Any]]] = [
    ("StepLR", lambda o: lr_scheduler.StepLR(o, 7, 0.5), lambda o: tsched.StepLR(o, 7, 0.5)),
    (
        "MultiStepLR",
        lambda o: lr_scheduler.MultiStepLR(o, [30, 5, 12], 0.3),
        lambda o: tsched.MultiStepLR(o, [30, 5, 12], 0.3),
    ),
    ("ExponentialLR", lambda o: lr_scheduler.ExponentialLR(o, 0.93), lambda o: tsched.ExponentialLR(o, 0.93)),
    (
        "CosineAnnealingLR",
        lambda o: lr_scheduler.CosineAnnealingLR(o, 20, eta_min=0.01),
        lambda o: tsched.CosineAnnealingLR(o, 20, eta_min=0.01),
    ),
    (
        "LambdaLR",
        lambda o: lr_scheduler.LambdaLR(o, lambda e: 1 / (1 + e) ** 0.5),
        lambda o: tsched.LambdaLR(o, lambda e: 1 / (1 + e) ** 0.5),
    ),
    (
        "LinearLR",
        lambda o: lr_scheduler.LinearLR(o, 0.1, 1.0, total_iters=10),
        lambda o: tsched.LinearLR(o, 0.1, 1.0, total_iters=10),
    ),
    (
        "OneCycleLR",
        lambda o: lr_scheduler.OneCycleLR(o, max_lr=1.0, total_steps=51),
        lambda o: tsched.OneCycleLR(o, max_lr=1.0, total_steps=51, cycle_momentum=False),
    ),
    (
        "OneCycleLR-linear-3phase",
        lambda o: lr_scheduler.OneCycleLR(
            o, 0.5, epochs=3, steps_per_epoch=17, anneal_strategy="linear", three_phase=True
        ),
        lambda o: tsched.OneCycleLR(
            o,
            0.5,
            epochs=3,
            steps_per_epoch=17,
            anneal_strategy="linear",
            three_phase=True,
            cycle_momentum=False,
        ),
    ),
]


def _pair() -> tuple[SGD, Any]:
    p = Tensor([1.0, 2.0], requires_grad=True)
    tp = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    return SGD([p], lr=0.1), torch.optim.SGD([tp], lr=0.1)


@pytest.mark.parametrize("name, ours, theirs", CASES, ids=[c[0] for c in CASES])
def test_scheduler_matches_torch_over_50_steps(
    name: str, ours: Callable[[Any], Any], theirs: Callable[[Any], Any]
) -> None:
    opt, topt = _pair()
    s, ts = ours(opt), theirs(topt)
    for step in range(50):
        want = topt.param_groups[0]["lr"]
        assert float(opt.lr.numpy()[0]) == pytest.approx(want, rel=1e-6, abs=1e-9), (name, step)
        assert s.get_last_lr()[0] == pytest.approx(ts.get_last_lr()[0], rel=1e-12, abs=1e-15), (name, step)
        topt.step()  # torch wants the optimiser's step first
        s.step()
        ts.step()


def test_reduce_on_plateau_matches_torch() -> None:
    opt, topt = _pair()
    s = lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=2, cooldown=1, min_lr=0.01)
    ts = tsched.ReduceLROnPlateau(topt, factor=0.5, patience=2, cooldown=1, min_lr=0.01)
    metrics = [5.0, 4.0, 4.0, 3.9999, 4.1, 4.2] + [3.0] * 14
    for k, m in enumerate(metrics):
        s.step(m)
        ts.step(m)
        assert float(opt.lr.numpy()[0]) == pytest.approx(topt.param_groups[0]["lr"], rel=1e-6), k
    assert s.get_last_lr()[0] == pytest.approx(0.01)  # it did reduce, down to min_lr


def test_a_group_sets_each_member() -> None:
    a, b = Tensor([1.0], requires_grad=True), Tensor([2.0], requires_grad=True)
    group = OptimizerGroup(SGD([a], lr=0.1), Adam([b], lr=0.01))
    s = lr_scheduler.StepLR(group, 1, gamma=0.5)
    s.step()
    assert [float(o.lr.numpy()[0]) for o in group.optimizers] == pytest.approx([0.05, 0.005])


def test_bad_arguments_are_argument_errors() -> None:
    opt, _ = _pair()
    with pytest.raises(ArgumentError, match="cycle_momentum"):
        lr_scheduler.OneCycleLR(opt, 1.0, 10, cycle_momentum=True)
    with pytest.raises(ArgumentError, match="step_size"):
        lr_scheduler.StepLR(opt, 0)
    s = lr_scheduler.OneCycleLR(opt, 1.0, 2)
    s.step()
    s.step()
    with pytest.raises(ArgumentError, match="past total_steps"):
        s.step()


def test_a_captured_step_reads_each_new_rate(training: None) -> None:
    """The rate is a buffer the step reads: a TinyJit step captured once follows the scheduler."""
    try:
        Device["CPU"]
    except Exception:  # any failure to open it: not available here
        pytest.skip("TinyJit captures on a compiled device: no CPU backend here")
    w = Tensor([0.0, 0.0], device="CPU", requires_grad=True)
    opt = SGD([w], lr=1.0)
    sched = lr_scheduler.ExponentialLR(opt, 0.5)

    @TinyJit
    def step(x: Tensor) -> Tensor:
        opt.zero_grad()
        loss = (w * x).sum()  # d loss / d w = x
        loss.backward()
        opt.step()
        return loss

    x = Tensor([1.0, 2.0], device="CPU")
    expected = np.zeros(2, np.float32)
    captured = None
    for k in range(6):
        step(Tensor(x.numpy(), device="CPU"))
        expected -= 0.5**k * np.array([1.0, 2.0], np.float32)
        np.testing.assert_allclose(w.numpy(), expected, rtol=1e-6)
        if k == 2:
            captured = step.captured
            assert captured is not None
        sched.step()
    assert step.captured is captured  # replayed with the new rates, never captured again
    assert math.isclose(float(opt.lr.numpy()[0]), 0.5**6)
