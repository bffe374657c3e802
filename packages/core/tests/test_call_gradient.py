"""call_gradient / compute_gradient structure at the UOp level (docs/semantics.md §3.2-3.9)."""

from __future__ import annotations

import math

import pytest

from uopgrad import Ops, UOp, dtypes
from uopgrad.gradient import NOOP, call_gradient, compute_gradient, pm_gradient, pm_transform_unique_const
from uopgrad.rewrite import graph_rewrite

DEV = "REFERENCE"


def buf(n: int = 6, dt=dtypes.float) -> UOp:
    return UOp.new_buffer(DEV, n, dt)


def p(slot: int, shape=(6,), dt=dtypes.float) -> UOp:
    return UOp.param(slot, dt, shape, DEV)


def sum_all(u: UOp) -> UOp:
    return u._rop(Ops.ADD, range(len(u.shape)))


def seed(loss: UOp) -> UOp:
    return loss.const_like(1.0)


def test_plus_backward_structure():
    a, b = buf(), buf()
    fn = (p(0) + p(1)).call(a, b)
    out = fn.gettuple(0)
    loss = sum_all(out)
    g = compute_gradient(loss, seed(loss), {a, b})
    ga, gb = g[a], g[b]
    assert ga.op is Ops.GETTUPLE and gb.op is Ops.GETTUPLE and (ga.arg, gb.arg) == (0, 1)
    bwd = ga.src[0]
    assert bwd is gb.src[0], "both arguments share one backward FUNCTION"
    assert bwd.op is Ops.FUNCTION and bwd.arg.name == "_backward" and bwd.arg.precompile is False
    body = bwd.src[0]
    # the output-gradient PARAM had slot 2 and is compacted to slot 0
    assert body.op is Ops.TUPLE and body.src[0] is body.src[1] and body.src[0].op is Ops.PARAM
    assert body.src[0].arg == 0
    assert len(bwd.src) == 2 and bwd.src[1] is g[fn].src[0]


def test_unused_input_gets_no_gradient():
    a, b, c = buf(), buf(), buf()
    fn = (p(0) + p(2)).call(a, b, c, name="f")
    loss = sum_all(fn.gettuple(0))
    g = compute_gradient(loss, seed(loss), {a, b, c})
    bwd = g[a].src[0]
    assert bwd.arg.name == "f_backward"
    assert bwd.src[0].op is Ops.TUPLE and len(bwd.src[0].src) == 2 and len(bwd.src) == 2
    assert b not in g
    assert (g[a].arg, g[c].arg) == (0, 1)


def test_precompile_backward_takes_forward_outputs():
    x = buf()
    fn = UOp.maketuple(p(0).exp2(), p(0) + 1).call(x, name="f", precompile=True)
    loss = sum_all(fn.gettuple(0))
    g = compute_gradient(loss, seed(loss), {x})
    bwd = g[x].src[0]
    assert bwd.arg.precompile is False
    # arguments: the output gradient (old slot 1) then GETTUPLE(forward, 0) (old slot 3)
    assert len(bwd.src) == 3 and bwd.src[2] is fn.gettuple(0)
    grad_expr = bwd.src[0].src[0]
    assert Ops.EXP2 not in {u.op for u in grad_expr.toposort()}, "forward output is an input"
    assert grad_expr.op is Ops.MUL and grad_expr.src[1].base.arg == pytest.approx(math.log(2), rel=1e-6)
    inner = grad_expr.src[0]
    assert inner.op is Ops.MUL and (inner.src[0].arg, inner.src[1].arg) == (1, 0)


def test_without_precompile_recomputes():
    x = buf()
    fn = UOp.maketuple(p(0).exp2(), p(0) + 1).call(x, name="f")
    loss = sum_all(fn.gettuple(0))
    g = compute_gradient(loss, seed(loss), {x})
    bwd = g[x].src[0]
    assert len(bwd.src) == 3 and bwd.src[1] is x
    assert Ops.EXP2 in {u.op for u in bwd.src[0].toposort()}


def test_precompile_backward_flag():
    x = buf()
    fn = UOp.maketuple(p(0) * 2).call(x, name="f", precompile=True, precompile_backward=True)
    loss = sum_all(fn.gettuple(0))
    bwd = compute_gradient(loss, seed(loss), {x})[x].src[0]
    info = bwd.arg
    assert (info.grad_fxn, info.metadata, info.name, info.precompile, info.precompile_backward) == (
        None,
        (),
        "f_backward",
        True,
        False,
    )


def test_backward_of_backward_name():
    x = buf()
    fn = (p(0) * p(0)).call(x, name="f")
    loss = sum_all(fn.gettuple(0))
    gx = compute_gradient(loss, seed(loss), {x})[x]
    loss2 = sum_all(gx)
    ggx = compute_gradient(loss2, seed(loss2), {x})[x]
    assert ggx.src[0].arg.name == "f_backward_backward" and ggx.src[0].arg.precompile is False


def test_needed_follows_python_set_order():
    args = [buf() for _ in range(10)]
    body = p(2) * p(9)
    fn = body.call(*args)
    ctx = UOp.maketuple(fn.gettuple(0).const_like(1.0))
    needed = {2, 9}
    assert list(needed) == [9, 2], "precondition: Python iterates {2, 9} as 9, 2"
    out = call_gradient(ctx, fn, needed)
    assert len(out) == 11 and out[0] is None
    assert (out[1 + 9].arg, out[1 + 2].arg) == (0, 1), "the backward TUPLE follows set iteration order"
    assert all(out[1 + i] is None for i in range(10) if i not in (2, 9))


def test_grad_fxn_calling_conventions():
    calls = []

    def grad_fxn(*gs, call=None):
        calls.append((len(gs), call is not None))
        return (gs[0], None)

    x, y = buf(), buf()
    fn = UOp.maketuple(p(0) + 1, p(1) + 2).call(x, y, grad_fxn=grad_fxn)
    g0, g1 = fn.gettuple(0).const_like(1.0), fn.gettuple(1).const_like(2.0)
    call_gradient(UOp.maketuple(g0, g1), fn, {0, 1})
    call_gradient(UOp.maketuple(NOOP, g1), fn, {0, 1})
    call_gradient(g0, fn, {0})
    # several real gradients: (*gs, call=k); one real: (g, k) positionally
    assert calls == [(2, True), (2, False), (2, False)]


def test_grad_fxn_passes_only_real_gradients_in_order():
    seen = []

    def grad_fxn(g, k):
        seen.append((g, k))
        return (None, g)

    x = buf()
    fn = UOp.maketuple(p(0) + 1, p(0) + 2).call(x, grad_fxn=grad_fxn)
    g1 = fn.gettuple(1).const_like(3.0)
    out = call_gradient(UOp.maketuple(NOOP, g1), fn, {0})
    assert seen == [(g1, fn)] and out == (None, None, g1)


def test_noop_param_gradient_is_kept():
    # the PARAM of slot 1 only reaches a comparison: its inner gradient is never real, slot 0 is
    a, b = buf(), buf()
    body = UOp.maketuple(p(0) * 2, (p(1) < 0).where(p(1).const_like(1.0), 0.0))
    fn = body.call(a, b)
    out = call_gradient(UOp.maketuple(fn.gettuple(0).const_like(1.0), NOOP), fn, {0, 1})
    assert out[1] is not None


def test_repeated_output_node_fails_like_the_reference():
    x = buf()
    t = p(0) * 2
    fn = UOp.maketuple(t, t).call(x)
    loss = sum_all(fn.gettuple(0))
    with pytest.raises(KeyError):
        compute_gradient(loss, seed(loss), {x})


def test_empty_backward_call_is_built():
    x, y = buf(), buf()
    fn = (p(0) + 1).call(x, y)
    out = call_gradient(UOp.maketuple(fn.gettuple(0).const_like(1.0)), fn, {1})
    assert out == (None, None, None)


def test_call_without_grad_fxn_needs_tuple_body():
    x = buf()
    kernel = UOp.param(0, dtypes.float.ptr(6)).store(UOp.param(0, dtypes.float.ptr(6)) + 1).sink()
    k = kernel.call(x)
    assert k.op is Ops.CALL
    with pytest.raises(AssertionError, match="expected TUPLE body for gradient, got SINK"):
        call_gradient(x, k, {0})


def test_gettuple_gradient_needs_function():
    t = UOp.maketuple(buf())
    with pytest.raises(AssertionError):
        compute_gradient(sum_all(t.gettuple(0)), sum_all(t.gettuple(0)).const_like(1.0), {t.src[0]})


def test_missing_rule_raises_runtime_error():
    x = buf(6, dtypes.int)
    y = x // 2
    loss = sum_all(y)
    with pytest.raises(RuntimeError, match="failed to compute gradient for Ops.FLOORDIV"):
        compute_gradient(loss, loss.const_like(1), {x})


def test_detach_blocks_flow_but_not_needed():
    x = buf()
    fn = (p(0) * 3).call(x.detach())
    loss = sum_all(fn.gettuple(0))
    g = compute_gradient(loss, seed(loss), {x})
    assert x not in g and x.detach() in g


def test_root_not_on_path():
    x, y = buf(), buf()
    loss = sum_all(y * 2)
    assert compute_gradient(loss, seed(loss), {x}) == {loss: seed(loss)}


def test_after_call_one_hot_and_tuple_merge():
    out_c, out_d, a = buf(), buf(), buf()
    ptr = [UOp.param(i, dtypes.float.ptr(6)) for i in range(3)]
    kernel = UOp.sink(ptr[0].store(ptr[2] * 2), ptr[1].store(ptr[2] * 3))
    seen = []

    def grad_fxn(*gs, call=None):
        seen.append(len(gs))
        return (None, None, gs[0] * 2 + gs[1] * 3)

    k = kernel.call(out_c, out_d, a, grad_fxn=grad_fxn)
    c, d = out_c.after(k), out_d.after(k)
    loss = sum_all(c) + sum_all(d)
    g = compute_gradient(loss, seed(loss), {a})
    assert seen == [2], "both outputs merge into one TUPLE on the CALL"
    assert a in g


def test_after_store_rule():
    view, src = buf(), buf()
    x = view.after(view.store(src))
    loss = sum_all(x * 2)
    g = compute_gradient(loss, seed(loss), {src})
    assert src in g


def test_pm_transform_unique_const_renumbers_from_zero():
    c1 = UOp.const(dtypes.float, 1.0, DEV, unique=True)
    c2 = UOp.const(dtypes.float, 1.0, DEV, unique=True)
    assert c1 is not c2
    import itertools

    t = graph_rewrite(UOp.maketuple(c1, c2), pm_transform_unique_const, ctx=(None, itertools.count(0)))
    assert [e.src[0].op for e in t.src] == [Ops.LUNIQUE, Ops.LUNIQUE]
    assert sorted(e.src[0].arg for e in t.src) == [0, 1]


def test_rule_shapes():
    x, y = UOp.variable("x", -10.0, 10.0, dtypes.float), UOp.variable("y", -10.0, 10.0, dtypes.float)
    g = UOp.const(dtypes.float, 1.0)
    r = x.reciprocal()
    (dr,) = pm_gradient.rewrite(r, ctx=g)
    assert dr is (g * -1) * r * r
    da, db = pm_gradient.rewrite(x * y, ctx=g)
    assert da is y * g and db is x * g
    assert pm_gradient.rewrite(x + y, ctx=g) == (g, g)
    assert pm_gradient.rewrite(x < y, ctx=g) == (None, None)
    e = x.exp2()
    assert pm_gradient.rewrite(e, ctx=g) == ((e * g) * math.log(2),)


def test_trunc_gradient_is_zeros():
    x = buf()
    loss = sum_all(x.trunc() * 3)
    g = compute_gradient(loss, seed(loss), {x})[x]
    assert g.op is Ops.EXPAND and g.base.op is Ops.CONST and g.base.arg == 0
