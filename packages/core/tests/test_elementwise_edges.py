"""Unary ops, boolean reductions, clip and logcumsumexp at their edges, as a user meets them: build the
tensor, read the value, then backward, compared with PyTorch (float32 and float64) or the reference's
semantics where the two differ (each such place says so)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from uopgrad import Tensor

torch = pytest.importorskip("torch", reason="torch (an optional test dependency) is not installed")
F = torch.nn.functional
inf, nan = math.inf, math.nan

Fn = Callable[[Any], Any]

# every unary Tensor op with a gradient: (ours, PyTorch's)
UNARY: dict[str, tuple[Fn, Fn]] = {
    "relu": (lambda x: x.relu(), F.relu),
    "relu6": (lambda x: x.relu6(), F.relu6),
    "leaky_relu": (lambda x: x.leaky_relu(0.1), lambda x: F.leaky_relu(x, 0.1)),
    "elu": (lambda x: x.elu(0.7), lambda x: F.elu(x, 0.7)),
    "celu": (lambda x: x.celu(0.7), lambda x: F.celu(x, 0.7)),
    "selu": (lambda x: x.selu(1.6732632423543772, 1.0507009873554805), F.selu),
    "silu": (lambda x: x.silu(), F.silu),
    "swish": (lambda x: x.swish(), F.silu),
    "mish": (lambda x: x.mish(), F.mish),
    "softplus": (lambda x: x.softplus(), F.softplus),
    "softplus_beta": (lambda x: x.softplus(2.0), lambda x: F.softplus(x, 2.0)),
    "softsign": (lambda x: x.softsign(), F.softsign),
    "sigmoid": (lambda x: x.sigmoid(), torch.sigmoid),
    "logsigmoid": (lambda x: x.logsigmoid(), F.logsigmoid),
    "hardsigmoid": (lambda x: x.hardsigmoid(), F.hardsigmoid),
    "hardswish": (lambda x: x.hardswish(), F.hardswish),
    "hardtanh": (lambda x: x.hardtanh(), F.hardtanh),
    "tanh": (lambda x: x.tanh(), torch.tanh),
    "gelu": (lambda x: x.gelu(), lambda x: F.gelu(x, approximate="tanh")),
    "gelu_exact": (lambda x: x.gelu("none"), F.gelu),
    "quick_gelu": (lambda x: x.quick_gelu(), lambda x: x * torch.sigmoid(1.702 * x)),
    "sin": (lambda x: x.sin(), torch.sin),
    "cos": (lambda x: x.cos(), torch.cos),
    "tan": (lambda x: x.tan(), torch.tan),
    "exp": (lambda x: x.exp(), torch.exp),
    "exp2": (lambda x: x.exp2(), torch.exp2),
    "log": (lambda x: x.log(), torch.log),
    "log2": (lambda x: x.log2(), torch.log2),
    "log10": (lambda x: x.log10(), torch.log10),
    "sqrt": (lambda x: x.sqrt(), torch.sqrt),
    "rsqrt": (lambda x: x.rsqrt(), torch.rsqrt),
    "reciprocal": (lambda x: x.reciprocal(), torch.reciprocal),
    "square": (lambda x: x.square(), torch.square),
    "neg": (lambda x: -x, torch.neg),
    "abs": (lambda x: x.abs(), torch.abs),
    "sign": (lambda x: x.sign(), torch.sign),
    "sinh": (lambda x: x.sinh(), torch.sinh),
    "cosh": (lambda x: x.cosh(), torch.cosh),
    "asinh": (lambda x: x.asinh(), torch.asinh),
    "acosh": (lambda x: x.acosh(), torch.acosh),
    "atanh": (lambda x: x.atanh(), torch.atanh),
    "asin": (lambda x: x.asin(), torch.asin),
    "acos": (lambda x: x.acos(), torch.acos),
    "atan": (lambda x: x.atan(), torch.atan),
    "erf": (lambda x: x.erf(), torch.erf),
    "clip": (lambda x: x.clip(-2.0, 2.0), lambda x: x.clamp(-2.0, 2.0)),
    "floor": (lambda x: x.floor(), torch.floor),
    "ceil": (lambda x: x.ceil(), torch.ceil),
    "round": (lambda x: x.round(), torch.round),
    "trunc": (lambda x: x.trunc(), torch.trunc),
}
EDGES = [-300.0, -30.0, 30.0, 300.0, inf, -inf, 0.0, -0.0]
# the only places we knowingly differ from PyTorch at EDGES: PyTorch's exact gelu is NaN at +inf (our
# inf, gradient 1, is the limit) and its -inf * 0 gradient at -inf is NaN (ours 0: erf is flat there)
KNOWN = {("gelu_exact", inf), ("gelu_exact", -inf)}


def ours(fn: Fn, xs: list[float], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    x = Tensor(xs, dtype=dtype, requires_grad=True)
    y = fn(x)
    value = y.numpy()
    y.sum().backward()
    assert x.grad is not None
    return value, x.grad.numpy()


def theirs(fn: Fn, xs: list[float], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    x = torch.tensor(xs, dtype=getattr(torch, dtype), requires_grad=True)
    y = fn(x)
    y.sum().backward()
    grad = x.grad.numpy() if x.grad is not None else np.zeros(len(xs))
    return y.detach().numpy(), grad


def same(got: Any, want: Any, rtol: float, atol: float, what: str) -> None:
    """NaN exactly where PyTorch has NaN, infinities with their sign, finite values close."""
    np.testing.assert_allclose(
        np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol, err_msg=what
    )


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_value_and_gradient_at_large_magnitude_infinity_and_zero_as_torch(name: str, dtype: str):
    fn, tfn = UNARY[name]
    xs = [x for x in EDGES if (name, x) not in KNOWN]
    v, g = ours(fn, xs, dtype)
    tv, tg = theirs(tfn, xs, dtype)
    rtol = 1e-4 if dtype == "float32" else 1e-7  # PyTorch's float64 celu/hardsigmoid use float32 constants
    if name in ("sin", "cos", "tan") and dtype == "float32":
        rtol = 1e-3  # the gradient rule cos(x) = sin(pi/2 - x) rounds x = 300 to 3e-5
    # atol only for tails below 1e-12 (1e-15): there PyTorch's own (1 - s) * s rounds, sigmoid'(30) = 0
    atol = 1e-12 if dtype == "float32" else 1e-15
    same(v, tv, rtol, atol, f"{name} value at {xs}")
    same(g, tg, rtol, atol, f"{name} gradient at {xs}")


@pytest.mark.parametrize("name", ["sigmoid", "tanh", "gelu", "quick_gelu", "hardsigmoid", "silu"])
def test_activation_gradients_at_large_magnitude_are_zero_or_one_not_nan(name: str):
    fn, _ = UNARY[name]
    x = Tensor([-1000.0, -300.0, -100.0, -89.0, 89.0, 100.0, 300.0, 1000.0], requires_grad=True)
    fn(x).sum().backward()
    assert x.grad is not None
    g = x.grad.numpy()
    assert not np.isnan(g).any(), g
    assert np.all((np.abs(g) < 1e-30) | (np.abs(g - 1) < 1e-6)), g


def test_sigmoid_tails_keep_their_tiny_values_as_torch():
    # e ** -|x| never overflows, so sigmoid(-100) is e ** -100, not 1 / (1 + inf) = 0
    v, g = ours(lambda x: x.sigmoid(), [-100.0, -60.0, 0.0, 60.0], "float64")
    tv, tg = theirs(torch.sigmoid, [-100.0, -60.0, 0.0, 60.0], "float64")
    same(v, tv, 1e-12, 0, "sigmoid")
    same(g[:3], tg[:3], 1e-9, 0, "sigmoid'")
    same(g[3], math.exp(-60) / (1 + math.exp(-60)) ** 2, 1e-12, 0, "sigmoid'(60)")  # PyTorch: (1 - s) * s = 0


def test_silu_and_quick_gelu_at_minus_inf_have_nan_gradients_as_torch():
    # x * sigmoid(x) at -inf: -inf * 0 in the chain rule; the local slopes stay finite, so the NaN is
    # PyTorch's, not one made by an overflowing exponential
    for name in ("silu", "quick_gelu"):
        fn, tfn = UNARY[name]
        v, g = ours(fn, [-inf, -5.0], "float32")
        tv, tg = theirs(tfn, [-inf, -5.0], "float32")
        same(v, tv, 1e-6, 0, name)
        same(g, tg, 1e-5, 0, name)


def test_kinks_take_torchs_gradient():
    xs = [-3.0, -1.0, 0.0, 1.0, 3.0, 6.0]
    for name in (
        "relu",
        "relu6",
        "leaky_relu",
        "elu",
        "celu",
        "selu",
        "hardtanh",
        "hardsigmoid",
        "hardswish",
        "abs",
        "asinh",
        "asin",
        "atan",
        "erf",
    ):
        fn, tfn = UNARY[name]
        v, g = ours(fn, xs, "float64")
        tv, tg = theirs(tfn, xs, "float64")
        same(v, tv, 1e-7, 1e-12, name)
        same(g, tg, 1e-6, 1e-12, f"{name}' at {xs}")


def test_moderate_inputs_match_torch_float64():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(500) * 3
    u = np.tanh(x) * 0.99
    for name, data in [
        ("sigmoid", x * 5),
        ("tanh", x),
        ("sinh", x * 3),
        ("cosh", x * 3),
        ("cos", x * 10),
        ("atan", x * 3),
        ("asinh", x * 3),
        ("acosh", np.abs(x) + 1.01),
        ("atanh", u),
        ("asin", u),
        ("acos", u),
        ("erf", x),
        ("elu", x),
        ("hardswish", x * 2),
        ("hardtanh", x),
    ]:
        fn, tfn = UNARY[name]
        v, g = ours(fn, data.tolist(), "float64")
        tv, tg = theirs(tfn, data.tolist(), "float64")
        same(v, tv, 1e-6, 1e-6, name)  # asin/erf are float32-accurate polynomials (as the reference)
        same(g, tg, 1e-5, 1e-5, f"{name}'")


def test_sinh_cosh_finite_just_below_the_float32_limit():
    v, g = ours(lambda x: x.sinh(), [89.0, -89.0], "float32")
    tv, tg = theirs(torch.sinh, [89.0, -89.0], "float32")
    same(v, tv, 1e-5, 0, "sinh")
    same(g, tg, 1e-5, 0, "sinh'")
    assert np.isfinite(ours(lambda x: x.cosh(), [89.0], "float32")[0]).all()


def test_cos_and_tan_of_large_arguments():
    # pi/2 - x rounds away x's low bits; cos from sin(x / 2) keeps them
    xs = [1e4, 1e6, 1e10, -1e20]
    for fn, tfn in (UNARY["cos"], UNARY["tan"]):
        v, _ = ours(fn, xs, "float32")
        tv, _ = theirs(tfn, xs, "float32")
        same(v, tv, 1e-4, 1e-5, "cos/tan")


def test_atanh_at_plus_minus_one_and_acosh_below_minus_one():
    v, g = ours(lambda x: x.atanh(), [-1.0, 1.0, 0.5], "float32")
    tv, tg = theirs(torch.atanh, [-1.0, 1.0, 0.5], "float32")
    same(v, tv, 1e-6, 0, "atanh")
    same(g, tg, 1e-6, 0, "atanh'")  # inf, not inf * 0
    v, g = ours(lambda x: x.acosh(), [-300.0, -30.0, -inf, 1.0, 1e30], "float32")
    tv, tg = theirs(torch.acosh, [-300.0, -30.0, -inf, 1.0, 1e30], "float32")
    same(v, tv, 1e-6, 0, "acosh")
    same(g, tg, 1e-5, 1e-29, "acosh'")  # 1e-30 at 1e30 (PyTorch: rsqrt(inf) = 0)


# ---------------------------------------------------------------------- boolean ops and reductions
def test_logical_not_of_numbers_is_equal_to_zero():
    x = Tensor([1.0, 2.0, 0.0, 0.5, -0.0, nan, -3.0])
    t = torch.tensor([1.0, 2.0, 0.0, 0.5, -0.0, nan, -3.0])
    assert x.logical_not().numpy().tolist() == torch.logical_not(t).tolist()
    assert Tensor([3, 0, -1]).logical_not().numpy().tolist() == [False, True, False]
    assert Tensor([True, False]).logical_not().numpy().tolist() == [False, True]


@pytest.mark.parametrize("shape,axis", [((1, 0, 3, 0, 5), (1, 3)), ((0,), None), ((2, 0), 1), ((0, 4), 0)])
def test_all_and_any_over_an_empty_axis(shape: tuple[int, ...], axis: Any):
    a = np.ones(shape, np.float32)
    for keepdim in (False, True):
        kw = {} if axis is None else {"axis": axis, "keepdim": keepdim}
        tkw = {} if axis is None else {"dim": axis, "keepdim": keepdim}
        got_all, got_any = Tensor(a).all(**kw).numpy(), Tensor(a).any(**kw).numpy()
        np.testing.assert_array_equal(got_all, torch.tensor(a).bool().all(**tkw).numpy())  # all of nothing
        np.testing.assert_array_equal(got_any, torch.tensor(a).bool().any(**tkw).numpy())  # any of nothing


def test_clip_gradient_on_the_bounds_is_one_as_the_reference_and_torch_clamp():
    xs = [-3.0, -2.5, 0.0, 1.5, 2.0]
    v, g = ours(lambda x: x.clip(-2.5, 1.5), xs, "float32")
    tv, tg = theirs(lambda x: x.clip(-2.5, 1.5), xs, "float32")
    same(v, tv, 0, 0, "clip")
    same(g, tg, 0, 0, "clip'")
    v, g = ours(lambda x: x.clip(0, 0), [-1.0, 0.0, 1.0], "float32")
    same(g, theirs(lambda x: x.clip(0, 0), [-1.0, 0.0, 1.0], "float32")[1], 0, 0, "clip(0, 0)'")
    v, _ = ours(lambda x: x.clip(3, 0), [-1.0, 5.0], "float32")  # min > max: max everywhere
    same(v, [0.0, 0.0], 0, 0, "clip(3, 0)")
    with pytest.raises(RuntimeError):
        Tensor([1.0]).clip(None, None)


# ---------------------------------------------------------------------- logcumsumexp
def test_logcumsumexp_keeps_a_small_entry_before_a_large_one():
    v, g = ours(lambda x: x.logcumsumexp(), [0.0, 100.0], "float32")
    tv, tg = theirs(lambda x: torch.logcumsumexp(x, 0), [0.0, 100.0], "float32")
    same(v, tv, 0, 1e-7, "logcumsumexp")
    same(g, tg, 0, 1e-7, "logcumsumexp'")


@pytest.mark.parametrize("shape,axis", [((7,), 0), ((5, 9), 0), ((5, 9), 1), ((3, 4, 6), -1), ((3, 1, 5), 1)])
def test_logcumsumexp_against_torch_float64(shape: tuple[int, ...], axis: int):
    a = np.random.default_rng(1).standard_normal(shape) * 20
    x = Tensor(a, requires_grad=True)
    y = x.logcumsumexp(axis)
    w = np.random.default_rng(2).standard_normal(y.shape)
    value = y.numpy()
    (y * Tensor(w)).sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    ty = torch.logcumsumexp(tx, axis)
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(value, ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_logcumsumexp_with_infinities_and_ints():
    rows = [[-inf, 0.0, 1.0], [-inf, -inf, 2.0], [inf, 0.0, 1.0], [1000.0, 1000.0, -1000.0]]
    got = Tensor(rows).logcumsumexp(1).numpy()
    np.testing.assert_allclose(got, torch.logcumsumexp(torch.tensor(rows), 1).numpy(), rtol=1e-6)
    ints = Tensor([1, 2, 3]).logcumsumexp()
    np.testing.assert_allclose(
        ints.numpy(), torch.logcumsumexp(torch.tensor([1.0, 2.0, 3.0]), 0).numpy(), rtol=1e-6
    )
