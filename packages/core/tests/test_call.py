"""Calls on REFERENCE (docs/semantics.md §4.4, §3.7): `Tensor.call` on PARAM bodies with and without a
grad_fxn, output shapes of FUNCTIONs over symbolic inputs, precompiled functions that realize, and the
worked backward structures of §3.7. Sharded variants (TestCallMultiSharded, test_call_plus_sharded,
test_precompile_multi_sharded) are in test_multi.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uopgrad import Ops, UOp, dtypes
from uopgrad.function import function
from uopgrad.tensor import Tensor


def p(slot: int, shape: tuple[int, ...] = (10, 10)) -> UOp:
    """A float PARAM with no device."""
    return UOp.param(slot, dtypes.float, shape)


def backward_of(grad: Tensor) -> UOp:
    assert grad.uop.op is Ops.GETTUPLE and grad.uop.src[0].op is Ops.FUNCTION
    return grad.uop.src[0]


def first_function(t: Tensor) -> UOp:
    return next(u for u in t.uop.toposort() if u.op is Ops.FUNCTION)


# ---------------------------------------------------------------------- TestCall
class TestCall:
    def test_call_plus(self):
        a, b = Tensor.randn(10, 10), Tensor.randn(10, 10)
        c = Tensor.call(a, b, fxn=p(0) + p(1))
        np.testing.assert_equal(c.numpy(), a.numpy() + b.numpy())

    def test_call_plus_backward(self):
        calls: list[UOp] = []

        def grad_fxn(grad: UOp, call: UOp) -> tuple[UOp | None, ...]:
            calls.append(call)  # one output gradient: (g, call) positionally
            return grad, grad

        a, b = Tensor.ones(10, 10, requires_grad=True), Tensor.ones(10, 10, requires_grad=True)
        c = Tensor.call(a, b, fxn=p(0) + p(1), grad_fxn=grad_fxn)
        c.mean().backward()
        assert a.grad is not None and b.grad is not None
        np.testing.assert_allclose(a.grad.numpy(), np.full((10, 10), 0.01), rtol=1e-5)
        np.testing.assert_allclose(b.grad.numpy(), np.full((10, 10), 0.01), rtol=1e-5)
        assert len(calls) == 1 and calls[0] is c.uop.src[0]

    def test_call_plus_backward_auto(self):
        a, b = Tensor.ones(10, 10, requires_grad=True), Tensor.ones(10, 10, requires_grad=True)
        (a + b).mean().backward()
        assert a.grad is not None and b.grad is not None
        ref_a, ref_b = a.grad.numpy(), b.grad.numpy()
        a.grad = b.grad = None
        Tensor.call(a, b, fxn=p(0) + p(1)).mean().backward()
        assert a.grad is not None and b.grad is not None
        np.testing.assert_allclose(a.grad.numpy(), ref_a, rtol=1e-5)
        np.testing.assert_allclose(b.grad.numpy(), ref_b, rtol=1e-5)
        np.testing.assert_allclose(ref_a, np.full((10, 10), 0.01), rtol=1e-5)

    def test_call_gemm(self):
        a, b = Tensor.randn(4, 8), Tensor.randn(8, 4)
        c = Tensor.call(a, b, fxn=a.as_param(0) @ b.as_param(1))
        np.testing.assert_allclose(c.numpy(), a.numpy() @ b.numpy(), rtol=1e-5, atol=1e-6)

    def test_call_gemm_uop(self):
        a, b = Tensor.randn(4, 8), Tensor.randn(8, 4)
        body = Tensor(UOp.param(0, dtypes.float, (4, 8))) @ Tensor(UOp.param(1, dtypes.float, (8, 4)))
        c = Tensor.call(a, b, fxn=body)
        np.testing.assert_allclose(c.numpy(), a.numpy() @ b.numpy(), rtol=1e-5, atol=1e-6)

    def test_call_complex_backward_auto(self):
        a = Tensor.randn(10, 10, requires_grad=True)
        b = Tensor(Tensor.randn(10, 10).numpy() + 2, requires_grad=True)  # keeps 1/b finite
        Tensor.realize(a, b)
        ((a * b + a).exp2() * b.reciprocal()).mean().backward()
        assert a.grad is not None and b.grad is not None
        ref_a, ref_b = a.grad.numpy(), b.grad.numpy()
        a.grad = b.grad = None
        p0, p1 = p(0), p(1)  # MUL, ADD, EXP2, RECIPROCAL, and P1 used twice
        Tensor.call(a, b, fxn=(p0 * p1 + p0).exp2() * p1.reciprocal()).mean().backward()
        assert a.grad is not None and b.grad is not None
        np.testing.assert_allclose(a.grad.numpy(), ref_a, rtol=1e-5)
        np.testing.assert_allclose(b.grad.numpy(), ref_b, rtol=1e-5)


# ---------------------------------------------------------------------- TestCallShape
class TestCallShape:
    def test_call_shape_int(self):
        @function
        def f(x: Tensor) -> Tensor:
            return x * 2

        assert f(Tensor.empty(4, 8)).shape == (4, 8)

    def test_call_shape_param_substitution(self):
        @function
        def f(x: Tensor) -> Tensor:
            return x * 2

        sz = UOp.variable("sz", 1, 8)
        shape = f(Tensor.empty(8)[: sz.bind(5)]).shape
        # inside the body the size is a PARAM; the output's shape is in the caller's terms: the BIND itself
        assert isinstance(shape[0], UOp) and shape[0].op is not Ops.PARAM
        assert shape[0] is sz.bind(5)

    def test_call_shape_expr_substitution(self):
        @function
        def f(x: Tensor) -> Tensor:
            return x + 1

        sz = UOp.variable("sz", 1, 10)
        shape = f(Tensor.empty(10, 4)[: sz.bind(3)]).shape
        assert isinstance(shape[0], UOp) and shape[0].op is not Ops.PARAM
        assert Ops.PARAM not in {u.op for u in shape[0].toposort()}
        assert shape[1] == 4

    def test_call_shape_no_param_passthrough(self):
        @function
        def f(x: Tensor) -> Tensor:
            return x * 3

        sz = UOp.variable("sz", 1, 8)
        assert f(Tensor.empty(8)[: sz.bind(5)]).shape[0] is sz.bind(5)

    def test_bind_is_an_implicit_input(self):
        @function
        def f(x: Tensor) -> Tensor:
            return x * 3

        sz = UOp.variable("sz", 1, 8)
        out = f(Tensor.empty(8)[: sz.bind(5)])
        fn = out.uop.src[0]
        assert sz.bind(5) in fn.src[1:], "the BIND in the PARAM's shape vector is captured as an argument"


# ---------------------------------------------------------------------- TestCallSchedule: realizing
class TestCallSchedule:
    def test_reshape_precompile(self):
        a = Tensor.zeros(4, 8).contiguous().realize()
        values = np.arange(32, dtype=np.float32).reshape(4, 4, 2)
        a = a.reshape(4, 4, 2).assign(Tensor(values)).reshape(8, 4)

        @function(precompile=True)
        def s(x: Tensor) -> Tensor:
            return x.sum(axis=0)

        out = (s(a) * 3).realize()
        np.testing.assert_allclose(out.numpy(), values.reshape(8, 4).sum(0) * 3)

    def test_call_precompiled(self):
        a = Tensor.arange(32).reshape(4, 8).float()

        @function(precompile=True)
        def s(x: Tensor) -> Tensor:
            return x * 2

        np.testing.assert_equal((s(a) * 3).realize().numpy(), np.arange(32).reshape(4, 8) * 6)

    def test_double_call(self):
        a = Tensor.arange(32).reshape(4, 8).float()

        @function(precompile=True)
        def s(x: Tensor) -> Tensor:
            return x * 2

        np.testing.assert_equal(s(s(a)).realize().numpy(), np.arange(32).reshape(4, 8) * 4)

    def test_double_call_contiguous(self):
        a = Tensor.arange(32).reshape(4, 8).float()

        @function(precompile=True)
        def s(x: Tensor) -> Tensor:
            return x * 2

        np.testing.assert_equal(s(s(a).contiguous()).realize().numpy(), np.arange(32).reshape(4, 8) * 4)

    def test_call_double_gemm(self):
        rng = np.random.default_rng(1)
        na, nb, nc, nref = (rng.standard_normal(s) for s in ((4, 8), (8, 12), (12, 16), (4, 16)))
        a, b, c = (Tensor(v, requires_grad=True) for v in (na, nb, nc))
        ref = Tensor(nref)
        Tensor.realize(a, b, c, ref)

        @function(precompile=True)
        def gemm(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
            return (a @ b) @ c

        out = gemm(a, b, c)
        ((out - ref).square()).mean().backward()
        assert a.grad is not None and b.grad is not None and c.grad is not None
        out.realize(a.grad, b.grad, c.grad)
        d = 2 * ((na @ nb) @ nc - nref) / nref.size
        np.testing.assert_allclose(out.numpy(), (na @ nb) @ nc, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(a.grad.numpy(), d @ nc.T @ nb.T, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(b.grad.numpy(), na.T @ d @ nc.T, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(c.grad.numpy(), (na @ nb).T @ d, rtol=1e-4, atol=1e-6)

    def test_precompile_symbolic_shape(self):
        @function(precompile=True)
        def f(x: Tensor) -> Tensor:
            return x * 2

        sz = UOp.variable("sz", 1, 8)
        out = f(Tensor([1.0, 2, 3, 4, 5, 6, 7, 8])[: sz.bind(5)])
        assert isinstance(out.shape[0], UOp)
        np.testing.assert_equal(out[:5].numpy(), [2, 4, 6, 8, 10])

    def test_precompile_symbolic_shape_contiguous(self):
        @function(precompile=True)
        def f(x: Tensor) -> Tensor:
            return (x * 2).contiguous() + 1

        sz = UOp.variable("sz", 1, 8)
        out = f(Tensor([1.0, 2, 3, 4, 5, 6, 7, 8])[: sz.bind(3)])
        assert isinstance(out.shape[0], UOp)
        np.testing.assert_equal(out[:3].numpy(), [3, 5, 7])

    def test_precompile_symbolic_shape_chain(self):
        @function(precompile=True)
        def f(x: Tensor) -> Tensor:
            return x * 2

        sz = UOp.variable("sz", 1, 8)
        out = f(Tensor([1.0, 2, 3, 4, 5, 6, 7, 8])[: sz.bind(4)]) + 10
        assert isinstance(out.shape[0], UOp)
        np.testing.assert_equal(out[:4].numpy(), [12, 14, 16, 18])

    def test_precompile_bind_arg(self):
        @function(precompile=True)
        def f(x: Tensor, scale: UOp) -> Tensor:
            return x * Tensor(scale).float()

        scale = UOp.variable("scale", 1, 100)
        np.testing.assert_equal(f(Tensor([1.0, 2.0, 3.0]), scale.bind(5)).numpy(), [5, 10, 15])

    def test_precompile_schedule_cache_hit(self):
        @function(precompile=True)
        def f(x: Tensor) -> Tensor:
            return x + Tensor.full(x.shape, -1.0)

        o1, o2 = f(Tensor.empty(4, 8)), f(Tensor.empty(4, 8))
        b1, b2 = first_function(o1).src[0], first_function(o2).src[0]
        # the unique constants of both traces are renumbered to LUNIQUE from 0: equal bodies, equal keys
        assert b1.key == b2.key
        assert [u.arg for u in b1.toposort() if u.op is Ops.LUNIQUE] == [0]

    def test_precompile_symbolic_2d(self):
        @function(precompile=True)
        def f(x: Tensor) -> Tensor:
            return x * 2 + 1

        sz = UOp.variable("sz", 1, 16)
        out = f(Tensor.arange(64).reshape(16, 4).float()[: sz.bind(5)])
        assert isinstance(out.shape[0], UOp) and out.shape[1] == 4
        np.testing.assert_equal(out[:5].numpy(), np.arange(20).reshape(5, 4) * 2 + 1)


# ---------------------------------------------------------------------- §3.7 worked examples
class TestWorkedExamples:
    def test_plus_with_automatic_gradient(self):
        a, b = Tensor.ones(10, 10), Tensor.ones(10, 10)
        c = Tensor.call(a, b, fxn=p(0) + p(1))
        fwd = c.uop.src[0]
        assert c.uop.op is Ops.GETTUPLE and c.uop.arg == 0 and fwd.op is Ops.FUNCTION
        assert fwd.src[0].op is Ops.TUPLE and fwd.src[0].src == (p(0) + p(1),)
        assert fwd.src[1:] == (a.uop, b.uop)
        info = fwd.arg
        assert (info.grad_fxn, info.metadata, info.name, info.precompile, info.precompile_backward) == (
            None,
            (),
            None,
            False,
            False,
        )
        ga, gb = c.mean().gradient(a, b)
        bwd = backward_of(ga)
        assert backward_of(gb) is bwd and (ga.uop.arg, gb.uop.arg) == (0, 1)
        assert bwd.arg.name == "_backward" and bwd.arg.precompile is False
        body = bwd.src[0]
        assert body.op is Ops.TUPLE and len(body.src) == 2 and body.src[0] is body.src[1]
        assert body.src[0].op is Ops.PARAM and body.src[0].arg == 0, "output-gradient slot 2 compacted to 0"
        assert len(bwd.src) == 2
        np.testing.assert_allclose(ga.numpy(), np.full((10, 10), 0.01), rtol=1e-6)
        np.testing.assert_allclose(gb.numpy(), np.full((10, 10), 0.01), rtol=1e-6)

    @staticmethod
    def _exp2_and_inc(precompile: bool, precompile_backward: bool = False) -> tuple[UOp, UOp, Tensor, Tensor]:
        @function(precompile=precompile, precompile_backward=precompile_backward)
        def f(x: Tensor) -> tuple[Tensor, Tensor]:
            return x.exp2(), x + 1

        x = Tensor([0.5, 1.0, 2.0])
        out0, _ = f(x)
        (gx,) = out0.sum().gradient(x)
        return out0.uop.src[0], backward_of(gx), gx, x

    def test_precompile_backward_takes_the_forward_output(self):
        fwd, bwd, gx, x = self._exp2_and_inc(True)
        # old slots: x=0, g0=1, g1=2, fwd0=3, fwd1=4; the gradient's EXP2(P0) becomes PARAM 3; kept {1, 3}
        assert len(bwd.src) == 3 and bwd.src[2] is fwd.gettuple(0)
        (expr,) = bwd.src[0].src
        assert expr.op is Ops.MUL and expr.src[1].base.arg == pytest.approx(math.log(2), rel=1e-6)
        inner = expr.src[0]
        assert inner.op is Ops.MUL and [s.op for s in inner.src] == [Ops.PARAM, Ops.PARAM]
        assert [s.arg for s in inner.src] == [1, 0], "(P1 * P0) * ln2: the forward output times g0"
        assert Ops.EXP2 not in {u.op for u in bwd.src[0].toposort()}
        assert bwd.arg.name.endswith("f_backward") and bwd.arg.precompile is False
        np.testing.assert_allclose(gx.numpy(), np.exp2(x.numpy()) * math.log(2), rtol=1e-6)

    def test_without_precompile_the_backward_recomputes(self):
        _, bwd, gx, x = self._exp2_and_inc(False)
        assert len(bwd.src) == 3 and bwd.src[1] is x.uop
        (expr,) = bwd.src[0].src
        inner = expr.src[0]
        assert inner.op is Ops.MUL and inner.src[0].op is Ops.EXP2 and inner.src[0].src[0].arg == 0
        assert inner.src[1].op is Ops.PARAM and inner.src[1].arg == 1, "(EXP2(P0) * P1) * ln2"
        np.testing.assert_allclose(gx.numpy(), np.exp2(x.numpy()) * math.log(2), rtol=1e-6)

    def test_both_flags(self):
        _, bwd, gx, x = self._exp2_and_inc(True, True)
        info = bwd.arg
        flags = (info.grad_fxn, info.metadata, info.precompile, info.precompile_backward)
        assert flags == (None, (), True, False)
        assert info.name.endswith("f_backward")
        np.testing.assert_allclose(gx.numpy(), np.exp2(x.numpy()) * math.log(2), rtol=1e-6)
