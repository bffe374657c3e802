"""Gradients by template (uopgrad.gradient_template), the way a training loop meets them: the second step's
backward is built from the first's template. Each test reads values the way a user does (the loss first,
then backward) and compares with torch or with the derivative by hand; the nodes themselves are compared
with `compute_gradient` in spec/test_gradient_props.py (c)."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import UOp, dtypes
from uopgrad.config import Context
from uopgrad.gradient_template import template_cache_info
from uopgrad.nn.optim import SGD
from uopgrad.tensor import Tensor

torch = pytest.importorskip("torch", reason="torch (an optional test dependency) is not installed")


def _hits() -> int:
    return template_cache_info()["hits"]


@Tensor.train()
def test_a_training_loop_matches_torch_at_every_step_and_reuses_the_template():
    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    ours = [Tensor(w1, requires_grad=True), Tensor(w2, requires_grad=True)]
    theirs = [torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)]
    opt, topt = SGD(ours, lr=0.1), torch.optim.SGD(theirs, lr=0.1)
    hits = _hits()
    for step in range(5):
        x, y = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
        opt.zero_grad()
        loss = (((Tensor(x) @ ours[0]).relu() @ ours[1] - Tensor(y)) ** 2).mean()
        value = loss.item()  # printed first, as a user does
        loss.backward()
        opt.step()
        topt.zero_grad()
        tloss = (((torch.tensor(x) @ theirs[0]).relu() @ theirs[1] - torch.tensor(y)) ** 2).mean()
        tloss.backward()
        topt.step()
        assert value == pytest.approx(tloss.item(), rel=1e-5), f"step {step}"
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(
                a.numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=f"step {step}"
            )
    assert _hits() >= hits + 4  # every step after the first was built from the template


@pytest.mark.parametrize("c", [2.0, 3.0, 0.0, -0.0, float("nan")])
def test_graphs_that_differ_only_in_a_constant_get_their_own_gradient(c: float):
    x = Tensor([1.0, -2.0, 3.0], requires_grad=True)
    (x * 5.0).sum().backward()  # the structure, derived once with another constant
    x.grad = None
    (x * c).sum().backward()
    assert x.grad is not None
    got = x.grad.numpy()
    np.testing.assert_array_equal(got, np.full(3, c, np.float32))
    assert list(np.signbit(got)) == [np.signbit(c)] * 3  # -0.0 is not 0.0


def test_powers_that_differ_only_in_the_exponent():
    for e in (2.0, 3.0, 0.5, 2.0):
        x = Tensor([1.5, 2.0, 4.0], requires_grad=True)
        (x**e).sum().backward()
        assert x.grad is not None
        np.testing.assert_allclose(x.grad.numpy(), e * np.array([1.5, 2.0, 4.0]) ** (e - 1), rtol=1e-6)


def test_which_nodes_are_shared_is_part_of_the_structure():
    a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 5.0], requires_grad=True)
    (ga,) = (a * b).sum().gradient(a)
    (gs,) = (a * a).sum().gradient(a)  # the same ops, one operand twice
    assert ga.tolist() == [3.0, 5.0] and gs.tolist() == [2.0, 4.0]


def test_a_users_grad_fxn_runs_on_every_backward():
    calls: list[float] = []
    scale = [1.0]

    def grad_fxn(grad: UOp, call: UOp) -> tuple[UOp | None, ...]:
        calls.append(scale[0])
        return (grad * scale[0],)

    p0 = UOp.param(0, dtypes.float32, (3,), "REFERENCE")
    for s in (1.0, 2.0, 4.0):
        scale[0] = s
        x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
        Tensor.call(x, fxn=p0 * 1.0, grad_fxn=grad_fxn).sum().backward()
        assert x.grad is not None and x.grad.tolist() == [s, s, s]
    assert calls == [1.0, 2.0, 4.0]


def test_verify_checks_a_template_against_the_derivation():
    with Context(VERIFY=1):
        for _ in range(3):
            x = Tensor([0.5, -1.0], requires_grad=True)
            (x.sigmoid() * x).sum().backward()
            assert x.grad is not None
            v = np.array([0.5, -1.0])
            s = 1 / (1 + np.exp(-v))
            np.testing.assert_allclose(x.grad.numpy(), s + v * s * (1 - s), rtol=1e-6)


def test_graphs_that_differ_only_in_a_movement_or_an_axis_get_their_own_gradient():
    w = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    for order in [(1, 0, 2), (0, 2, 1), (2, 0, 1), (1, 0, 2)]:
        x = Tensor(np.ones((2, 2, 2), np.float32), requires_grad=True)
        (x.permute(*order) * Tensor(w)).sum().backward()
        assert x.grad is not None
        np.testing.assert_array_equal(x.grad.numpy(), w.transpose(np.argsort(order)), err_msg=f"{order}")
    for axis in (0, 1, 0):
        x = Tensor(np.ones((2, 2), np.float32), requires_grad=True)
        (x.sum(axis) * Tensor(np.array([10.0, 20.0], np.float32))).sum().backward()
        assert x.grad is not None
        want = np.array([[10.0, 20.0], [10.0, 20.0]]) if axis == 0 else np.array([[10.0, 10.0], [20.0, 20.0]])
        np.testing.assert_array_equal(x.grad.numpy(), want, err_msg=f"axis {axis}")
