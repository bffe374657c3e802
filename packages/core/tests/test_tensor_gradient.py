"""Tensor-level gradients on REFERENCE (docs/semantics.md §4.1, §3.1-3.4): `gradient`, `backward`,
custom kernels with several outputs (CALL + grad_fxn, the AFTER rule, TUPLE merging) and gradients of
intermediate views."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Ops, UOp, dtypes
from uopgrad.tensor import Tensor


# ---------------------------------------------------------------------- TestTensorGradient
def test_example():
    x = Tensor.eye(3)
    y = Tensor([[2.0, 0.0, -2.0]])
    z = (y @ x).sum()
    dx, dy = z.gradient(x, y)
    assert dx.tolist() == [[2, 2, 2], [0, 0, 0], [-2, -2, -2]]
    assert dy.tolist() == [[1, 1, 1]]


def test_zero_if_not_used():
    x = Tensor([1.0, 2.0, 3.0])
    w = Tensor.randn(3)
    (gw,) = x.sum().gradient(w)
    assert gw.shape == (3,) and gw.tolist() == [0, 0, 0]


def test_with_custom_gradient():
    x = Tensor([1.0, 2.0, 3.0])
    z = (x * x).sum()
    assert z.shape == ()
    (gx,) = z.gradient(x, gradient=Tensor([3.0]))  # a (1,) seed for a () loss: reshaped, then broadcast
    assert gx.tolist() == [6, 12, 18]


def test_broadcast_gradient():
    x = Tensor([[1.0], [2.0], [3.0]])
    y = Tensor([[10.0, 20.0, 30.0, 40.0]])
    dx, dy = (x + y).sum().gradient(x, y)
    assert dx.tolist() == [[4], [4], [4]]
    assert dy.tolist() == [[3, 3, 3, 3]]


def test_non_scalar_output():
    x = Tensor([1.0, 2.0, 3.0])
    z = x * x
    with pytest.raises(AssertionError):
        z.gradient(x)
    (gx,) = z.gradient(x, gradient=Tensor([1.0, 1.0, 1.0]))
    assert gx.tolist() == [2, 4, 6]


def test_cast_before_view():
    x = Tensor([1.0, 1.0, 1.0, 1.0]).reshape(2, 2)
    (gx,) = x.cast(dtypes.float16).mean().gradient(x)
    # the half EXPAND gradient is summed in float32 (sum_acc_dtype) and cast back
    assert gx.dtype == dtypes.float32
    np.testing.assert_equal(gx.numpy(), np.full((2, 2), 0.25))


def test_non_float_tensor_raise():
    x = Tensor([1, 2, 3])
    with pytest.raises(RuntimeError, match="float"):
        x.sum().gradient(x)
    with pytest.raises(RuntimeError, match="float"):
        x.float().sum().gradient(x)  # the loss is float, the target is not


def test_copy_to_device_gradient():
    t = Tensor([1.0, 2.0, 3.0], requires_grad=True).realize()
    t.to("REFERENCE:1").square().sum().backward()
    assert t.grad is not None
    assert t.grad.device == t.device
    np.testing.assert_equal(t.grad.numpy(), [2, 4, 6])


def test_multiple_backward_accumulates_into_the_same_tensor():
    x = Tensor([3.0], requires_grad=True)
    (x * 2)[0].backward()
    first = x.grad
    assert first is not None and first.tolist() == [2]
    (x * 3)[0].backward()
    assert x.grad is first and x.grad.tolist() == [5]
    (x * x)[0].backward()
    assert x.grad is first and x.grad.tolist() == [11]


def test_gradient_through_clone_from_non_grad_src():
    src = Tensor([1.0, 2.0, 3.0, 4.0])
    x = src.clone().requires_grad_(True)
    (x * 2).sum().backward()
    assert x.grad is not None and x.grad.tolist() == [2, 2, 2, 2]
    assert src.grad is None


def test_gradient_through_clone_from_grad_src():
    src = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    x = src.clone().requires_grad_(True)
    assert x.uop.op is Ops.AFTER and x.uop.src[1].op is Ops.STORE
    (x * 2).sum().backward()
    assert x.grad is not None and src.grad is not None
    assert src.grad.tolist() == [2, 2, 2, 2] and x.grad.tolist() == [2, 2, 2, 2]


def _pad_gradient_seeded_by_chained_setitem(row: int) -> np.ndarray:
    """d pad(x) / dx for a seed built by two unrealized setitems: a one at [row, 2], zeros elsewhere."""
    g1 = Tensor.zeros(4).contiguous()
    g1[2] = 1
    g2 = Tensor.zeros(5, 4).contiguous()
    g2[row] = g1
    x = Tensor.randn(4, 4)
    (gx,) = x.pad(((1, 0), (0, 0))).gradient(x, gradient=g2)
    return gx.numpy()


def test_gradient_through_chained_unrealized_setitem():
    # only row 0 of the seed is non-zero: the PAD cuts it away
    np.testing.assert_equal(_pad_gradient_seeded_by_chained_setitem(0), np.zeros((4, 4)))


def test_gradient_of_chained_setitem_seed_keeps_its_rows():
    # the same chain with the non-zero row where the PAD keeps it, so that the check above can fail
    gx = _pad_gradient_seeded_by_chained_setitem(3)
    expected = np.zeros((4, 4))
    expected[2, 2] = 1  # seed row 3 is x's row 2
    np.testing.assert_equal(gx, expected)


# ---------------------------------------------------------------------- TestMultiOutputGradient
def add_mul_kernel(c: UOp, d: UOp, a: UOp, b: UOp) -> UOp:
    """C = A + B and D = A * B."""
    return UOp.sink(c.store(a + b), d.store(a * b))


def add_mul_sub_kernel(c: UOp, d: UOp, e: UOp, a: UOp, b: UOp) -> UOp:
    """C = A + B, D = A * B and E = A - B."""
    return UOp.sink(c.store(a + b), d.store(a * b), e.store(a - b))


def add_mul_grad(grad_c: UOp, grad_d: UOp, call: UOp) -> tuple[UOp | None, ...]:
    a, b = Tensor(call.src[3]), Tensor(call.src[4])
    gc, gd = Tensor(grad_c), Tensor(grad_d)
    return None, None, (gc + gd * b).uop, (gc + gd * a).uop


def add_mul_sub_grad(gc: UOp, gd: UOp, ge: UOp, call: UOp) -> tuple[UOp | None, ...]:
    a, b = Tensor(call.src[4]), Tensor(call.src[5])
    tc, td, te = Tensor(gc), Tensor(gd), Tensor(ge)
    return None, None, None, (tc + td * b + te).uop, (tc + td * a - te).uop


def _inputs() -> tuple[Tensor, Tensor]:
    a = Tensor.randn(4, 4, requires_grad=True).realize()
    b = Tensor.randn(4, 4, requires_grad=True).realize()
    return a, b


def _eager_grads(a: Tensor, b: Tensor, loss_fn) -> tuple[np.ndarray, np.ndarray]:
    """The same loss written without the kernel, differentiated by the ordinary rules."""
    a2 = Tensor(a.numpy(), requires_grad=True)
    b2 = Tensor(b.numpy(), requires_grad=True)
    ga, gb = loss_fn(a2, b2).gradient(a2, b2)
    return ga.numpy(), gb.numpy()


def test_custom_kernel_multi_output_backward():
    a, b = _inputs()
    c, d, _, _ = Tensor.custom_kernel(
        Tensor.empty(4, 4), Tensor.empty(4, 4), a, b, fxn=add_mul_kernel, grad_fxn=add_mul_grad
    )
    assert c.uop.op is Ops.AFTER and c.uop.src[1] is d.uop.src[1] and c.uop.src[1].op is Ops.CALL
    (c.sum() + d.sum()).backward()
    assert a.grad is not None and b.grad is not None
    ea, eb = _eager_grads(a, b, lambda x, y: (x + y).sum() + (x * y).sum())
    np.testing.assert_allclose(a.grad.numpy(), ea, rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), eb, rtol=1e-5)
    np.testing.assert_allclose(a.grad.numpy(), 1 + b.numpy(), rtol=1e-5)


def test_custom_kernel_multi_output_backward_interacting():
    a, b = _inputs()
    c, d, _, _ = Tensor.custom_kernel(
        Tensor.empty(4, 4), Tensor.empty(4, 4), a, b, fxn=add_mul_kernel, grad_fxn=add_mul_grad
    )
    (c * d).sum().backward()
    assert a.grad is not None and b.grad is not None
    na, nb = a.numpy(), b.numpy()
    np.testing.assert_allclose(a.grad.numpy(), na * nb + (na + nb) * nb, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b.grad.numpy(), na * nb + (na + nb) * na, rtol=1e-5, atol=1e-7)


def test_custom_kernel_three_output_backward():
    a, b = _inputs()
    outs = Tensor.custom_kernel(
        Tensor.empty(4, 4),
        Tensor.empty(4, 4),
        Tensor.empty(4, 4),
        a,
        b,
        fxn=add_mul_sub_kernel,
        grad_fxn=add_mul_sub_grad,
    )
    c, d, e = outs[:3]
    (c.sum() + d.sum() + e.sum()).backward()
    assert a.grad is not None and b.grad is not None
    np.testing.assert_allclose(a.grad.numpy(), 2 + b.numpy(), rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), a.numpy(), rtol=1e-5)


def test_custom_kernel_outputs_merge_into_one_call_gradient():
    # gradients reaching the CALL through several AFTERs merge element by element into one TUPLE, so the
    # grad_fxn runs once with every real output gradient and the call by keyword
    seen: list[tuple[int, bool]] = []

    def grad(*gs: UOp, call: UOp | None = None) -> tuple[UOp | None, ...]:
        seen.append((len(gs), call is not None))
        return add_mul_grad(gs[0], gs[1], call) if call is not None else (None,) * 4

    a, b = _inputs()
    c, d, _, _ = Tensor.custom_kernel(
        Tensor.empty(4, 4), Tensor.empty(4, 4), a, b, fxn=add_mul_kernel, grad_fxn=grad
    )
    (c.sum() * 2 + d.sum()).gradient(a, b)
    assert seen == [(2, True)]


def test_custom_kernel_forward_values():
    a, b = _inputs()
    c, d, _, _ = Tensor.custom_kernel(Tensor.empty(4, 4), Tensor.empty(4, 4), a, b, fxn=add_mul_kernel)
    np.testing.assert_allclose(c.numpy(), a.numpy() + b.numpy(), rtol=1e-6)
    np.testing.assert_allclose(d.numpy(), a.numpy() * b.numpy(), rtol=1e-6)


# ---------------------------------------------------------------------- TestViewGradient
def test_expand():
    x = Tensor.randn(5, 2)
    a = Tensor([3.0], requires_grad=True)
    aex = a.expand(10)
    (aex.reshape(5, 2) * x).sum().backward()
    assert aex.grad is not None and a.grad is not None
    # an intermediate that requires grad gets its own gradient, not its source's broadcast
    np.testing.assert_allclose(aex.grad.numpy(), x.reshape(10).numpy())
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(aex.grad.numpy(), a.grad.expand(10).numpy())
