"""Unit tests of the harness parts behind the classes of state and limits (setitem programs, TinyJit
replays, unary ops at extreme inputs, zero-size reductions, equal leaves), on REFERENCE: the closed forms are
right, every unary Tensor op is covered, the numpy oracles agree with numpy where numpy is defined, the
generated programs run, and a backend with one device does not claim sharding."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uopgrad import Tensor, dtypes
from uopgrad_conformance import target as target_module
from uopgrad_conformance.forward import Failure
from uopgrad_conformance.identities import check_empty, check_leaves, empty_reductions, equal_leaves
from uopgrad_conformance.jit_programs import ROWS as JIT_ROWS
from uopgrad_conformance.jit_programs import check_jit, jit_programs
from uopgrad_conformance.report import Recorder
from uopgrad_conformance.setitem_programs import ROWS as SETITEM_ROWS
from uopgrad_conformance.setitem_programs import Write, _apply, check_setitem, setitem_programs
from uopgrad_conformance.target import Target, no_second_device
from uopgrad_conformance.unary_edges import EDGES, FAMILIES, UNARY_EDGE_OPS, check_family, closed_form

REF = Target.load("REFERENCE")
PROFILE = settings(max_examples=6, derandomize=True, deadline=None, database=None)
# methods that take a tensor alone and give one of its shape, with a gradient, but are not elementwise (or
# are the identity): the introspection below finds them too
NOT_UNARY = {
    "clone",
    "contiguous",
    "contiguous_backward",
    "cumprod",
    "cumsum",
    "detach",
    "empty_like",
    "layernorm",
    "log_softmax",
    "logcumsumexp",
    "ones_like",
    "rand_like",
    "randn_like",
    "softmax",
    "softmin",
    "zeros_like",
}


# ---------------------------------------------------------------------- unary ops at extreme inputs
def test_every_unary_tensor_op_with_a_gradient_has_a_closed_form():
    x = Tensor(np.array([0.5, 1.5], np.float32), requires_grad=True)
    found = set()
    for n in dir(Tensor):
        static = inspect.getattr_static(Tensor, n, None)
        special = isinstance(static, (staticmethod, classmethod, property))
        if n.startswith("_") or special or not callable(static):
            continue
        params = list(inspect.signature(static).parameters.values())[1:]
        if any(p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
            continue
        try:
            y = getattr(x, n)()
            if not (isinstance(y, Tensor) and y is not x and y.shape == x.shape and y.dtype == x.dtype):
                continue
            y.sum().gradient(x)[0].numpy()
        except Exception:
            continue
        found.add(n)
    assert found - NOT_UNARY <= set(UNARY_EDGE_OPS), sorted(found - NOT_UNARY - set(UNARY_EDGE_OPS))


@pytest.mark.parametrize("name", sorted(UNARY_EDGE_OPS))
def test_closed_form_derivatives_agree_with_finite_differences(name):
    # away from the edges and the kinks (0, ±1, ±2, ±3, ±6, integers for the rounding ops)
    op = UNARY_EDGE_OPS[name]
    x = np.array([-2.7, -1.3, -0.45, 0.35, 0.8, 1.6, 2.45, 4.3])
    if name in ("acosh",):
        x = x + 4
    if name in ("asin", "acos", "atanh"):
        x = x / 5
    with np.errstate(all="ignore"):
        h = 1e-6
        fd = (op.value(x + h) - op.value(x - h)) / (2 * h)
        g = op.grad(x)
        ok = np.isfinite(fd) & np.isfinite(op.value(x))
    np.testing.assert_allclose(g[ok], fd[ok], rtol=1e-5, atol=1e-6, err_msg=name)


def test_closed_forms_at_the_edges_are_the_documented_values():
    def grad(name: str, x: np.ndarray | None = None) -> np.ndarray:
        return closed_form(UNARY_EDGE_OPS[name], np.array(EDGES) if x is None else x, dtypes.float32)[1]

    large = np.array([-300.0, -89.0, 89.0, 300.0])
    for name in ("sigmoid", "tanh", "gelu", "quick_gelu", "hardsigmoid", "erf", "silu"):  # 0 or 1, not NaN
        g = grad(name, large)
        assert np.all((np.abs(g) < 1e-30) | (np.abs(g - 1) < 1e-6)), (name, g)
    for name in ("sigmoid", "tanh", "hardsigmoid", "erf"):  # also at ±inf
        assert not np.isnan(grad(name)).any(), name
    assert np.isnan(grad("softsign")[-2:]).all()  # inf/inf, as PyTorch
    assert grad("gelu_exact")[-2:].tolist() == [1.0, 0.0]  # the limits (docs/semantics.md §5.3)
    exp300 = closed_form(UNARY_EDGE_OPS["exp"], np.array([300.0]), dtypes.float32)[0]
    assert np.isinf(exp300).all()  # rounded to the dtype: e^300 overflows float32


@pytest.mark.parametrize("family", FAMILIES)
def test_reference_matches_the_closed_forms(family):
    for dt in (dtypes.float32, dtypes.float64):
        check_family(REF, family, dt, Recorder())


def test_a_wrong_gradient_is_reported_with_a_repro(monkeypatch):
    original = Tensor.sigmoid
    monkeypatch.setattr(Tensor, "sigmoid", lambda self: (1 + (-self).exp()).reciprocal())
    with pytest.raises(Failure) as e:
        check_family(REF, "sigmoids", dtypes.float32, Recorder())
    text = str(e.value)
    assert "[sigmoid] gradient of x.sigmoid() differs from the closed form" in text
    assert "got nan, closed form 0" in text and "y = x.sigmoid()" in text
    monkeypatch.setattr(Tensor, "sigmoid", original)


# ---------------------------------------------------------------------- setitem, jit, identities
def test_the_setitem_oracle_is_numpy_where_numpy_is_defined():
    a, b = np.arange(12, dtype=np.float32).reshape(3, 4), np.arange(12, dtype=np.float32).reshape(3, 4)
    v = np.array([[10, 11], [12, 13]], np.float32)
    _apply(a, Write("t", "[2, 0], 1:3", ([2, 0], slice(1, 3)), "", v, "=", 1))
    b[[2, 0], 1:3] = v
    np.testing.assert_array_equal(a, b)
    c = np.zeros(4, np.float32)
    _apply(c, Write("t", "[1, 3, 1]", ([1, 3, 1],), "", np.array([5, 6, 7], np.float32), "=", 1))
    assert c.tolist() == [0, 7, 0, 6]  # the last of the duplicates


@pytest.mark.parametrize("row", SETITEM_ROWS)
@PROFILE
@given(data=st.data())
def test_setitem_programs_pass_on_reference(row, data):
    check_setitem(REF, data.draw(setitem_programs(row)), Recorder())


@pytest.mark.parametrize("row", JIT_ROWS)
@PROFILE
@given(data=st.data())
def test_jit_programs_pass_on_reference(row, data):
    check_jit(REF, data.draw(jit_programs(row)), Recorder())


@PROFILE
@given(data=st.data())
def test_identity_programs_pass_on_reference(data):
    dt = data.draw(st.sampled_from([dtypes.int32, dtypes.float32]))
    check_empty(REF, data.draw(empty_reductions(dt)), Recorder())
    check_leaves(
        REF, data.draw(equal_leaves(dtypes.float32 if dt == dtypes.int32 else dtypes.float64)), Recorder()
    )


def test_a_backend_with_one_device_does_not_claim_sharding(monkeypatch):
    def refuse(self: Tensor, device: object) -> Tensor:
        raise RuntimeError(f"{device}: one device only")

    monkeypatch.setattr(target_module, "_SECOND", {})
    monkeypatch.setattr(Tensor, "to", refuse)
    why = no_second_device(REF)
    assert why is not None and why.startswith("not claimed: REFERENCE exposes no second device REFERENCE:1")
    monkeypatch.undo()
    assert no_second_device(REF) is None
