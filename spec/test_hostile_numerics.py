"""Hostile numerics (docs/semantics.md §5): NaN, ±inf, overflow and empty inputs, used as a user would (build
the tensor, read the value, then backward), on REFERENCE, CPU and the default device (run with
UOPGRAD_DEVICE=CL, or UOPGRAD_DEVICE=CUDA UOPGRAD_CUDA_EMULATE=1, to add those).

Each case checks against PyTorch where our rule is PyTorch's, and against the reference's value (written
down, with the reference's rule in a comment) where we keep the reference's. Never allowed: an index out of
range, a NaN where the op has a finite answer, a silent value where PyTorch raises. `HOSTILE_STATS` counts
the cases under "numerics"."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from uopgrad import Device, Tensor
from uopgrad.errors import EmptyReduceError

try:
    import torch
except ImportError:  # an optional test dependency: the reference-value cases still run
    torch = None

HOSTILE_STATS: Counter[str] = Counter()
NEEDS_TORCH = pytest.mark.skipif(torch is None, reason="torch (an optional test dependency) is not installed")
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DEVICES = list(dict.fromkeys(["REFERENCE", *(["CPU"] if "CPU" in Device else []), Device.DEFAULT]))
nan, inf = math.nan, math.inf

Fn = Callable[[Any], Any]


def ours(fn: Fn, data: Any, device: str, grad: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """(value, gradient of the value's sum) as a user gets them: build, read, then backward."""
    x = Tensor(np.asarray(data, np.float32), device=device, requires_grad=grad)
    out = fn(x)
    value = out.numpy()
    if not grad:
        return value, None
    (out.sum() if out.ndim else out).backward()
    assert x.grad is not None
    HOSTILE_STATS["numerics"] += 1
    return value, x.grad.numpy()


def theirs(fn: Fn, data: Any, grad: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    x = torch.tensor(np.asarray(data, np.float32), requires_grad=grad)
    out = fn(x)
    if not grad:
        return out.detach().numpy(), None
    (out.sum() if out.ndim else out).backward()
    return out.detach().numpy(), (x.grad.numpy() if x.grad is not None else np.zeros(x.shape, np.float32))


def same(got: Any, want: Any, rtol: float = 1e-6, atol: float = 0.0) -> None:
    """Equal values, NaN where NaN, infinities with their sign (zeros of either sign are equal)."""
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol, atol)


def against_torch(
    fn: Fn, tfn: Fn, data: Any, device: str, grad: bool = True, rtol: float = 1e-6, atol: float = 0.0
) -> None:
    v, g = ours(fn, data, device, grad)
    tv, tg = theirs(tfn, data, grad)
    same(v, tv, rtol, atol)
    if grad:
        same(g, tg, rtol, atol)


# ---------------------------------------------------------------------- reductions without identity, NaN rows
SPECIAL = st.sampled_from([nan, inf, -inf])
ELEMENT = st.one_of(st.sampled_from([-2.0, 0.0, 1.0, 3.0]), st.floats(-4, 4, width=32), SPECIAL)
ROWS = st.lists(st.lists(ELEMENT, min_size=5, max_size=5), min_size=3, max_size=3)


def _max_grad_rule(rows: np.ndarray) -> np.ndarray:
    """Our rule for the gradient of a row's max: each NaN gets it whole if the row has one (so one NaN:
    PyTorch's max()), else tied maxima share it (the reference's rule, PyTorch's max())."""
    out = np.zeros_like(rows)
    for r, row in enumerate(rows):
        if np.isnan(row).any():
            out[r] = np.isnan(row)
        else:
            hit = row == row.max()
            out[r] = hit / hit.sum()
    return out


@pytest.mark.parametrize("device", DEVICES)
@FAST
@given(rows=ROWS)
def test_argmax_and_argmin_pick_the_first_nan_as_numpy_and_torch(device: str, rows: list[list[float]]):
    a = np.asarray(rows, np.float32)
    for axis in (1, None):
        got_max, _ = ours(lambda x, axis=axis: x.argmax(axis), a, device, grad=False)
        got_min, _ = ours(lambda x, axis=axis: x.argmin(axis), a, device, grad=False)
        np.testing.assert_array_equal(got_max, np.argmax(a, axis))  # numpy: the first NaN, else the first max
        np.testing.assert_array_equal(got_min, np.argmin(a, axis))
        assert 0 <= got_max.min() and got_max.max() < (a.size if axis is None else a.shape[1])  # in range
        if torch is not None:
            np.testing.assert_array_equal(got_max, torch.tensor(a).argmax(axis).numpy())
            np.testing.assert_array_equal(got_min, torch.tensor(a).argmin(axis).numpy())
    HOSTILE_STATS["numerics"] += 1


@pytest.mark.parametrize("device", DEVICES)
@FAST
@given(rows=ROWS)
def test_max_and_min_of_rows_with_nan_and_inf_and_their_gradients(device: str, rows: list[list[float]]):
    a = np.asarray(rows, np.float32)
    v, g = ours(lambda x: x.max(1), a, device)
    same(v, np.max(a, 1))  # numpy's max: NaN wins
    same(g, _max_grad_rule(a))
    v, g = ours(lambda x: x.min(1), a, device)
    same(v, np.min(a, 1))
    same(g, _max_grad_rule(-a))
    if torch is not None:  # row by row, PyTorch's max() (it splits among the NaNs: equal with one NaN)
        for row in a:
            if np.isnan(row).sum() <= 1:
                against_torch(lambda x: x.max(), lambda x: x.max(), row, device)
                against_torch(lambda x: x.min(), lambda x: x.min(), row, device)


@pytest.mark.parametrize("device", DEVICES)
def test_a_row_with_two_nans_gives_each_nan_the_whole_gradient(device: str):
    v, g = ours(lambda x: x.max(), [nan, 1.0, nan], device)
    assert np.isnan(v)
    same(g, [1.0, 0.0, 1.0])  # our rule; PyTorch's max() splits it ([0.5, 0, 0.5]), its amax gives NaN


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["max", "min", "argmax", "argmin"])
def test_reductions_without_identity_over_an_empty_axis_raise(device: str, op: str):
    for shape, axis in [((0,), None), ((0, 3), 0), ((3, 0), 1), ((0, 0), 0)]:
        x = Tensor.ones(*shape, device=device)
        with pytest.raises(EmptyReduceError) as info:
            getattr(x, op)(axis)
        assert f"{op}()" in str(info.value) and "empty" in str(info.value) and str(shape) in str(info.value)
        with pytest.raises(RuntimeError if torch is None else (RuntimeError, IndexError)):
            getattr(x, op)(axis)  # the builtins PyTorch raises here
        if torch is not None:
            with pytest.raises((RuntimeError, IndexError)):
                getattr(torch.ones(*shape), op)(*(() if axis is None else (axis,)))
        HOSTILE_STATS["numerics"] += 1
    # a non-empty reduced axis with an empty output is fine, as at PyTorch
    assert Tensor.ones(0, 3, device=device).max(1).shape == (0,)
    assert Tensor.ones(3, 0, device=device).argmax(0).shape == (0,)


@NEEDS_TORCH
@pytest.mark.parametrize("device", DEVICES)
def test_reductions_with_identity_over_empty_input_as_torch(device: str):
    cases: list[tuple[Fn, Fn]] = [
        (lambda x: x.sum(), lambda x: x.sum()),
        (lambda x: x.prod(), lambda x: x.prod()),
        (lambda x: x.mean(), lambda x: x.mean()),  # 0/0: NaN, as PyTorch
        (lambda x: x.logsumexp(0), lambda x: x.logsumexp(0)),  # log(0) = -inf
        (lambda x: x.softmax(0), lambda x: x.softmax(0)),
        (lambda x: x.cummax(0)[0], lambda x: x.cummax(0)[0]),
        (lambda x: x.sort()[0], lambda x: x.sort()[0]),
        (lambda x: x.topk(0)[0], lambda x: x.topk(0)[0]),
        (lambda x: x.any(), lambda x: x.any()),
        (lambda x: x.all(), lambda x: x.all()),
    ]
    for fn, tfn in cases:
        against_torch(fn, tfn, np.zeros(0, np.float32), device, grad=False)
    with pytest.warns(UserWarning):  # PyTorch warns and gives NaN; so do we, without the warning
        for fn in (lambda x: x.var(), lambda x: x.std()):
            against_torch(fn, fn, np.zeros(0, np.float32), device, grad=False)
            against_torch(fn, fn, np.ones(1, np.float32), device)  # one element, Bessel's correction: 0/0


# ---------------------------------------------------------------------- sorting and scans with NaN
@NEEDS_TORCH
@pytest.mark.parametrize("device", DEVICES)
@FAST
@given(row=st.lists(ELEMENT, min_size=6, max_size=6))
def test_sort_topk_and_cummax_put_nan_where_torch_does(device: str, row: list[float]):
    a = np.asarray(row, np.float32)
    for desc in (False, True):
        v, _ = ours(lambda x, desc=desc: x.sort(descending=desc)[0], a, device, grad=False)
        tv = torch.tensor(a).sort(descending=desc, stable=True)
        same(v, tv.values.numpy())  # NaN above +inf, as PyTorch
        i, _ = ours(lambda x, desc=desc: x.sort(descending=desc)[1], a, device, grad=False)
        np.testing.assert_array_equal(i, tv.indices.numpy())  # stable: equal values (NaNs too) keep order
    distinct_nan = np.isnan(a).sum() <= 1  # PyTorch's topk/cummax gradients pick one of tied values
    v, g = ours(lambda x: x.topk(3)[0], a, device)
    tv, tg = theirs(lambda x: x.topk(3)[0], a)
    same(v, tv)
    if distinct_nan and len(set(a[~np.isnan(a)].tolist())) == int((~np.isnan(a)).sum()):
        same(g, tg)
    v, _ = ours(lambda x: x.cummax(0)[0], a, device, grad=False)
    same(v, torch.tensor(a).cummax(0).values.numpy())
    i, _ = ours(lambda x: x.cummax(0)[1], a, device, grad=False)
    np.testing.assert_array_equal(i, torch.tensor(a).cummax(0).indices.numpy())  # the latest NaN or max
    v, _ = ours(lambda x: x.cummin(0)[0], a, device, grad=False)
    same(v, torch.tensor(a).cummin(0).values.numpy())
    HOSTILE_STATS["numerics"] += 1


@pytest.mark.parametrize("device", DEVICES)
def test_cummax_gradient_on_a_leading_minus_inf_is_the_references(device: str):
    # the reference pads each window with MAX's identity (-inf) and shares a tie with the padding: a lone
    # -inf at the start gets 1/4 (PyTorch gives 1); a finite value, the real maximum, is unaffected
    _, g = ours(lambda x: x.cummax(0)[0], [-inf, 1.0, inf, 2.0], device)
    same(g, [0.25, 1.0, 2.0, 0.0])


# ---------------------------------------------------------------------- softmax family with ±inf and NaN
LSE_ROWS = [
    [-inf, 0.0, 1.0],
    [-inf, -inf, -inf],
    [inf, 0.0, 1.0],
    [nan, 0.0, 1.0],
    [1000.0, 1000.0, -1000.0],
    [inf, inf, 0.0],
]


@NEEDS_TORCH
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("row", LSE_ROWS)
def test_softmax_log_softmax_and_logsumexp_rows_as_torch(device: str, row: list[float]):
    # logsumexp: -inf for an all -inf row and inf with a +inf (the reference's infinite shift gives NaN);
    # PyTorch's gradient divides by its rounded result (0.49998 for two equal maxima of 1000), ours is 0.5
    against_torch(lambda x: x.logsumexp(0), lambda x: x.logsumexp(0), row, device, rtol=1e-4)
    against_torch(lambda x: x.softmax(0), lambda x: x.softmax(0), row, device)
    against_torch(lambda x: x.log_softmax(0), lambda x: x.log_softmax(0), row, device, rtol=1e-6)
    against_torch(lambda x: x.logcumsumexp(0), lambda x: x.logcumsumexp(0), row, device, grad=False)
    # logaddexp of +inf and a finite value: inf as PyTorch, but its gradient is inf / inf = NaN (PyTorch: the
    # limits 1 and 0), so the gradient is compared only without +inf
    against_torch(
        lambda x: x.logaddexp(x.flip(0)),
        lambda x: torch.logaddexp(x, x.flip(0)),
        row,
        device,
        grad=inf not in row,
    )


# ---------------------------------------------------------------------- activations at ±inf and large |x|
WIDE = [-inf, -1000.0, -100.0, -20.0, 20.0, 100.0, 1000.0, inf]
F_NAMES: dict[str, tuple[Fn, Fn, list[float]]] = {  # our op, PyTorch's, the inputs where they agree
    "sigmoid": (lambda x: x.sigmoid(), lambda x: x.sigmoid(), WIDE),
    "tanh": (lambda x: x.tanh(), lambda x: x.tanh(), WIDE),
    "softplus": (lambda x: x.softplus(), lambda x: torch.nn.functional.softplus(x), WIDE),
    "logsigmoid": (lambda x: x.logsigmoid(), lambda x: torch.nn.functional.logsigmoid(x), WIDE[1:]),
    "elu": (lambda x: x.elu(), lambda x: torch.nn.functional.elu(x), WIDE),
    "exp": (lambda x: x.exp(), lambda x: x.exp(), WIDE),
    "erf": (lambda x: x.erf(), lambda x: torch.erf(x), WIDE),
    # x * f(x): the value at -inf is -inf * 0 = NaN for PyTorch and us; finite inputs only
    "silu": (lambda x: x.silu(), lambda x: torch.nn.functional.silu(x), WIDE[1:-1]),
    "gelu": (lambda x: x.gelu(), lambda x: torch.nn.functional.gelu(x, approximate="tanh"), WIDE[1:-1]),
    "mish": (lambda x: x.mish(), lambda x: torch.nn.functional.mish(x), [-20.0, 20.0, 100.0, 1000.0]),
    "quick_gelu": (lambda x: x.quick_gelu(), lambda x: x * torch.sigmoid(1.702 * x), WIDE[1:-1]),
}


@NEEDS_TORCH
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(F_NAMES))
def test_activations_at_infinity_and_large_magnitude_as_torch(device: str, name: str):
    fn, tfn, xs = F_NAMES[name]
    v, g = ours(fn, xs, device)
    tv, tg = theirs(tfn, xs)
    # softplus and logsigmoid are log(1 + e ** x) as at the reference (PyTorch: log1p), so their tails below
    # 1e-7 (softplus(-20) = 2e-9) are 0; sigmoid's gradient at 20 is 2e-9 for us and 0 for PyTorch
    same(v, tv, rtol=1e-5, atol=1e-7)
    assert not np.isnan(g).any(), f"{name}: a NaN gradient at {np.asarray(xs)[np.isnan(g)]}"
    same(g, tg, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_sigmoid_where_exp_overflows_keeps_torchs_tiny_tail(device: str):
    # sigmoid is built from e ** -|x| <= 1: at -100 the value and gradient are e ** -100 (a float32
    # subnormal; PyTorch's CPU kernel flushes it to 0), not 1 / (1 + inf) with an inf * 0 = NaN gradient
    v, g = ours(lambda x: x.sigmoid(), [-100.0, -89.0, 0.0], device)
    same(v, [math.exp(-100), math.exp(-89), 0.5], rtol=1e-5, atol=1e-38)
    same(g, [math.exp(-100), math.exp(-89), 0.25], rtol=1e-5, atol=1e-38)


# ---------------------------------------------------------------------- elementwise NaN: reference rules
@pytest.mark.parametrize("device", DEVICES)
def test_clamp_relu_and_maximum_with_nan_follow_the_reference(device: str):
    # clamp is two comparisons and WHEREs at the reference: (x < lo).where(lo, x), then (r > hi).where(hi, r);
    # NaN compares false, so it stays NaN with gradient 1 (PyTorch: gradient 0); a value on a bound keeps 1
    v, g = ours(lambda x: x.clamp(-1, 1), [nan, -5.0, 5.0, 0.5, 1.0], device)
    same(v, [nan, -1.0, 1.0, 0.5, 1.0])
    same(g, [1.0, 0.0, 0.0, 1.0, 1.0])
    # relu is (x > 0).where(x, 0) at the reference: relu(NaN) = 0 with gradient 0 (PyTorch: NaN, 1)
    v, g = ours(lambda x: x.relu(), [nan, -inf, inf], device)
    same(v, [0.0, 0.0, inf])
    same(g, [0.0, 0.0, 1.0])
    # MAX's rule: (x > y) gets it, a tie splits it; a NaN is neither, so 0 (PyTorch: 1); the value is NaN
    v, g = ours(lambda x: x.maximum(0.5), [nan, 1.0, 0.5], device)
    same(v, [nan, 1.0, 0.5])
    same(g, [0.0, 1.0, 0.5])


@NEEDS_TORCH
@pytest.mark.parametrize("device", DEVICES)
def test_division_by_zero_overflow_and_logs_as_torch(device: str):
    data = [1.0, -1.0, 0.0, -0.0, inf, -inf]
    for fn in (
        lambda x: x / 0.0,
        lambda x: 1.0 / x,
        lambda x: x.log(),
        lambda x: x.sqrt(),
        lambda x: x.exp(),
        lambda x: x.clamp(-2, 2),
        lambda x: x.abs(),
        lambda x: x * 1e38 * 10,
    ):
        against_torch(fn, fn, data, device)


# ---------------------------------------------------------------------- losses with ±inf logits
@NEEDS_TORCH
@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_with_a_minus_inf_logit_off_the_target_is_finite(device: str):
    logits = [[0.0, -inf, 1.0], [2.0, 0.0, -inf]]
    y = [0, 1]
    F = torch.nn.functional
    for ls in (0.0, 0.1):  # with smoothing the -inf class counts: inf, as PyTorch
        against_torch(
            lambda x, ls=ls: x.cross_entropy(Tensor(y, device=device), label_smoothing=ls),
            lambda x, ls=ls: F.cross_entropy(x, torch.tensor(y), label_smoothing=ls),
            logits,
            device,
        )
    v, g = ours(lambda x: x.cross_entropy(Tensor(y, device=device)), logits, device)
    assert np.isfinite(v) and np.isfinite(g).all()
    # the reference picks with a multiply its rewrites fold into a WHERE: the same finite 1.3132616 for row 0
    against_torch(
        lambda x: x.sparse_categorical_crossentropy(Tensor(y, device=device)),
        lambda x: F.cross_entropy(x, torch.tensor(y)),
        logits,
        device,
    )
    against_torch(
        lambda x: x.cross_entropy(Tensor([1, 2], device=device)),  # the target at -inf: inf
        lambda x: F.cross_entropy(x, torch.tensor([1, 2])),
        logits,
        device,
    )
    against_torch(
        lambda x: x.log_softmax(1).nll_loss(Tensor(y, device=device)),
        lambda x: F.nll_loss(x.log_softmax(1), torch.tensor(y)),
        logits,
        device,
    )
    probs = [[0.5, 0.0, 0.5], [1.0, 0.0, 0.0]]  # probability targets: 0 * -inf = NaN, as PyTorch
    against_torch(
        lambda x: x.cross_entropy(Tensor(probs, device=device)),
        lambda x: F.cross_entropy(x, torch.tensor(probs)),
        logits,
        device,
        grad=False,
    )


@NEEDS_TORCH
@pytest.mark.parametrize("device", DEVICES)
def test_binary_cross_entropy_at_certain_probabilities_and_infinite_logits(device: str):
    F = torch.nn.functional
    p, y = [0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]
    v, g = ours(lambda x: x.binary_crossentropy(Tensor(y, device=device)), p, device)
    same(v, F.binary_cross_entropy(torch.tensor(p), torch.tensor(y)).numpy())  # each log clamped at -100
    # the gradient is the clamped function's: d/dp of -log(1 - p) at p=0 is 1 (/4), and 0 where the clamp
    # holds; PyTorch divides by max(p(1 - p), 1e-12) instead ([0, 0, 2.5e11, -2.5e11])
    same(g, [0.25, -0.25, 0.0, 0.0])
    logits, yl = [inf, -inf, inf, -inf, 100.0, -100.0], [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
    against_torch(
        lambda x: x.binary_crossentropy_logits(Tensor(yl, device=device), reduction="none"),
        lambda x: F.binary_cross_entropy_with_logits(x, torch.tensor(yl), reduction="none"),
        logits,
        device,
        rtol=1e-6,
    )


@NEEDS_TORCH
@pytest.mark.parametrize("device", DEVICES)
def test_max_pool_with_a_nan_as_torch(device: str):
    x = [[[[1.0, nan, 0.0, 2.0], [3.0, 2.0, 5.0, 5.0]]]]
    v, g = ours(lambda t: t.max_pool2d(2), x, device)
    tv, tg = theirs(lambda t: torch.nn.functional.max_pool2d(t, 2), x)
    same(v, tv)
    same(g[..., :2], tg[..., :2])  # the NaN window; the tie (5, 5) is split by us and given to one by PyTorch
    same(g[..., 2:], [[[[0.0, 0.0], [0.5, 0.5]]]])


def test_zz_report_counts():
    print(f"\nhostile numerics: {dict(HOSTILE_STATS)}")
    assert HOSTILE_STATS["numerics"] > 0
