"""PyTorch's spellings beside the reference's names (issue 36): `dim=` for `axis=` on every reduction and
scan, `Tensor.cat([a, b])` / `Tensor.stack((a, b))` on the class, and the typed error of a non-scalar
backward(). Each case is written as a PyTorch user writes it and checked against PyTorch, values and
gradients, in float64."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from uopgrad import Tensor
from uopgrad.errors import NonScalarGradientError

torch = pytest.importorskip("torch", reason="torch (an optional test dependency) is not installed")
F = torch.nn.functional

Op = Callable[[Any], Any]


def _x(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _np(t: Any) -> np.ndarray:
    return np.asarray(t.detach().numpy() if hasattr(t, "detach") else t.numpy())


# (name, the uopgrad call, the PyTorch call): the same text where PyTorch has the method. PyTorch's cummax
# and cummin along a dim return (values, indices), as uopgrad's do; max and min refuse dim= (below).
CASES: list[tuple[str, Op, Op]] = [
    ("sum dim keepdim", lambda x: x.sum(dim=1, keepdim=True), lambda x: x.sum(dim=1, keepdim=True)),
    ("sum dim tuple", lambda x: x.sum(dim=(0, 2)), lambda x: x.sum(dim=(0, 2))),
    ("sum dim list", lambda x: x.sum(dim=[0, 1]), lambda x: x.sum(dim=[0, 1])),
    ("prod dim", lambda x: x.prod(dim=1), lambda x: x.prod(dim=1)),
    ("mean dim keepdim", lambda x: x.mean(dim=-1, keepdim=True), lambda x: x.mean(dim=-1, keepdim=True)),
    ("var dim", lambda x: x.var(dim=0), lambda x: x.var(dim=0)),
    ("var dim correction", lambda x: x.var(dim=2, correction=0), lambda x: x.var(dim=2, correction=0)),
    ("std dim keepdim", lambda x: x.std(dim=1, keepdim=True), lambda x: x.std(dim=1, keepdim=True)),
    (
        "var_mean dim",
        lambda x: x.var_mean(dim=1)[0] + x.var_mean(dim=1)[1],
        lambda x: sum(torch.var_mean(x, dim=1)),
    ),
    (
        "std_mean dim",
        lambda x: x.std_mean(dim=-1, keepdim=True)[0],
        lambda x: torch.std_mean(x, dim=-1, keepdim=True)[0],
    ),
    ("logsumexp dim", lambda x: x.logsumexp(dim=1), lambda x: x.logsumexp(dim=1)),
    ("softmax dim", lambda x: x.softmax(dim=-1), lambda x: x.softmax(dim=-1)),
    ("log_softmax dim", lambda x: x.log_softmax(dim=0), lambda x: x.log_softmax(dim=0)),
    ("softmin dim", lambda x: x.softmin(dim=1), lambda x: F.softmin(x, dim=1)),
    ("cumsum dim", lambda x: x.cumsum(dim=1), lambda x: x.cumsum(dim=1)),
    ("cumprod dim", lambda x: x.cumprod(dim=2), lambda x: x.cumprod(dim=2)),
    ("cummax dim", lambda x: x.cummax(dim=1)[0], lambda x: x.cummax(dim=1).values),
    ("cummin dim", lambda x: x.cummin(dim=0)[0], lambda x: x.cummin(dim=0).values),
    ("logcumsumexp dim", lambda x: x.logcumsumexp(dim=-1), lambda x: x.logcumsumexp(dim=-1)),
    ("layernorm dim", lambda x: x.layernorm(dim=-1), lambda x: F.layer_norm(x, x.shape[-1:])),
]


@pytest.mark.parametrize("uop_call,torch_call", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_dim_spelling_matches_pytorch_values_and_gradients(uop_call: Op, torch_call: Op) -> None:
    x = _x(3, 4, 5)
    t, tt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, want = uop_call(t), torch_call(tt)
    np.testing.assert_allclose(out.numpy(), _np(want), rtol=1e-10, atol=1e-12)
    seed = _x(*want.shape, seed=1)  # weights every output element differently
    (out * Tensor(seed)).sum().backward()
    (want * torch.tensor(seed)).sum().backward()
    assert t.grad is not None and tt.grad is not None
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-9, atol=1e-10)


INDEX_CASES: list[tuple[str, Op, Op]] = [
    ("argmax dim", lambda x: x.argmax(dim=0), lambda x: x.argmax(dim=0)),
    (
        "argmax dim keepdim",
        lambda x: x.argmax(dim=-1, keepdim=True),
        lambda x: x.argmax(dim=-1, keepdim=True),
    ),
    ("argmin dim", lambda x: x.argmin(dim=1), lambda x: x.argmin(dim=1)),
    ("cummax indices", lambda x: x.cummax(dim=2)[1], lambda x: x.cummax(dim=2).indices),
    ("any dim", lambda x: (x > 1).any(dim=1), lambda x: (x > 1).any(dim=1)),
    (
        "all dim keepdim",
        lambda x: (x > -2).all(dim=0, keepdim=True),
        lambda x: (x > -2).all(dim=0, keepdim=True),
    ),
]


@pytest.mark.parametrize("uop_call,torch_call", [c[1:] for c in INDEX_CASES], ids=[c[0] for c in INDEX_CASES])
def test_dim_spelling_of_index_and_bool_results_matches_pytorch(uop_call: Op, torch_call: Op) -> None:
    x = _x(3, 4, 5)
    np.testing.assert_array_equal(uop_call(Tensor(x)).numpy(), _np(torch_call(torch.tensor(x))))


def test_axis_and_dim_together_agree_or_raise_naming_both() -> None:
    x = Tensor(_x(3, 4))
    np.testing.assert_allclose(x.sum(1, dim=1).numpy(), x.sum(axis=1).numpy())
    np.testing.assert_allclose(x.sum(axis=(0, 1), dim=[0, 1]).numpy(), x.sum().numpy())
    with pytest.raises(TypeError, match=r"axis=1 and dim=0"):
        x.sum(1, dim=0)
    with pytest.raises(TypeError, match=r"softmax\(\) got axis=0 and dim=-1"):
        x.softmax(axis=0, dim=-1)
    with pytest.raises(TypeError, match=r"axis=None and dim=1"):
        x.argmax(None, dim=1)


def test_the_reference_spellings_keep_working() -> None:
    x = _x(3, 4)
    t = Tensor(x)
    np.testing.assert_allclose(t.sum(1, True).numpy(), x.sum(1, keepdims=True))
    np.testing.assert_allclose(t.mean(axis=0).numpy(), x.mean(0))
    np.testing.assert_array_equal(t.argmax(1).numpy(), x.argmax(1))
    np.testing.assert_allclose(t.cumsum(1).numpy(), x.cumsum(1))


JOIN_CASES: list[tuple[str, Callable[[Any, Any, Any], Any], Callable[[Any, Any, Any], Any]]] = [
    (
        "cat list dim",
        lambda a, b, c: Tensor.cat([a, b, c], dim=1),
        lambda a, b, c: torch.cat([a, b, c], dim=1),
    ),
    ("cat tuple", lambda a, b, c: Tensor.cat((a, b)), lambda a, b, c: torch.cat((a, b))),
    ("cat one", lambda a, b, c: Tensor.cat([c], dim=-1), lambda a, b, c: torch.cat([c], dim=-1)),
    ("cat reference", lambda a, b, c: a.cat(b, c, dim=0), lambda a, b, c: torch.cat([a, b, c], dim=0)),
    ("stack tuple", lambda a, b, c: Tensor.stack((a, b)), lambda a, b, c: torch.stack((a, b))),
    (
        "stack list dim",
        lambda a, b, c: Tensor.stack([a, b, c], dim=1),
        lambda a, b, c: torch.stack([a, b, c], dim=1),
    ),
    (
        "stack negative dim",
        lambda a, b, c: Tensor.stack([a, c], dim=-1),
        lambda a, b, c: torch.stack([a, c], dim=-1),
    ),
    ("stack reference", lambda a, b, c: a.stack(b, dim=2), lambda a, b, c: torch.stack([a, b], dim=2)),
]


@pytest.mark.parametrize("uop_call,torch_call", [c[1:] for c in JOIN_CASES], ids=[c[0] for c in JOIN_CASES])
def test_cat_and_stack_on_the_class_match_pytorch(
    uop_call: Callable[[Any, Any, Any], Any], torch_call: Callable[[Any, Any, Any], Any]
) -> None:
    xs = [_x(2, 3, seed=s) for s in range(3)]
    ts = [Tensor(x, requires_grad=True) for x in xs]
    tts = [torch.tensor(x, requires_grad=True) for x in xs]
    out, want = uop_call(*ts), torch_call(*tts)
    np.testing.assert_allclose(out.numpy(), _np(want))
    seed = np.random.default_rng(7).standard_normal(tuple(want.shape))
    (out * Tensor(seed)).sum().backward()
    (want * torch.tensor(seed)).sum().backward()
    for t, tt in zip(ts, tts):
        if tt.grad is None:  # not an operand of this case
            assert t.grad is None
        else:
            assert t.grad is not None
            np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy())


@pytest.mark.parametrize("join", [Tensor.cat, Tensor.stack], ids=["cat", "stack"])
def test_joining_nothing_or_both_spellings_at_once_is_a_value_error(join: Callable[..., Any]) -> None:
    a = Tensor(_x(2, 3))
    with pytest.raises(ValueError, match=r"empty list"):
        join([], dim=0)
    with pytest.raises(ValueError, match=r"empty tuple"):
        join(())
    with pytest.raises(ValueError, match=r"either as one sequence or as arguments"):
        join([a], a)


def test_non_scalar_backward_is_a_typed_error_naming_the_shape_and_the_fix() -> None:
    x, tx = Tensor(_x(2, 3), requires_grad=True), torch.tensor(_x(2, 3), requires_grad=True)
    with pytest.raises(RuntimeError, match=r"scalar outputs"):  # what PyTorch raises for the same call
        (tx * 2).backward()
    with pytest.raises(RuntimeError, match=r"scalar outputs") as info:
        (x * 2).backward()
    err = info.value
    assert isinstance(err, NonScalarGradientError)
    assert isinstance(err, AssertionError)  # what the reference raises
    assert "(2, 3)" in str(err) and ".sum().backward()" in str(err) and "gradient=" in str(err)
    with pytest.raises(NonScalarGradientError, match=r"\(2, 3\)"):
        (x * 2).gradient(x)
    (x * 2).backward(Tensor(np.ones((2, 3))))  # with a seed it works, as in PyTorch
    (tx * 2).backward(torch.ones(2, 3, dtype=torch.float64))
    assert x.grad is not None and tx.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_and_min_refuse_dim_rather_than_return_another_result_than_torch(name: str) -> None:
    # torch's x.max(dim=1) is (values, indices): `x.max(dim=1)[0]` must not silently be a row of ours
    x = Tensor(np.arange(6.0).reshape(2, 3))
    with pytest.raises(TypeError, match=f"arg{name}"):
        getattr(x, name)(dim=1)
    values, indices = getattr(torch.arange(6.0).reshape(2, 3), name)(dim=1)
    np.testing.assert_array_equal(getattr(x, name)(axis=1).numpy(), values.numpy())
    np.testing.assert_array_equal(getattr(x, f"arg{name}")(dim=1).numpy(), indices.numpy())
