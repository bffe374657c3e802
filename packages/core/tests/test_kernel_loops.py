"""Custom kernels written with explicit loops (UOp.range, view[i], store, end, group, KernelInfo),
Tensor.invalids, Tensor.linear_with_vars and the launch counters (GlobalCounters)."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import GlobalCounters, Ops, Tensor, UOp, function
from uopgrad.codegen import Target
from uopgrad.pipeline import lower
from uopgrad.uop import KernelInfo


def add_mul(c: UOp, d: UOp, a: UOp, b: UOp) -> UOp:
    c, d, a, b = c.flatten(), d.flatten(), a.flatten(), b.flatten()
    i = UOp.range(c.numel(), 0)
    return UOp.group(c[i].store(a[i] + b[i]), d[i].store(a[i] * b[i])).end(i).sink(arg=KernelInfo("addmul"))


def add_mul_grad(gc: UOp, gd: UOp, call: UOp) -> tuple[UOp | None, ...]:
    a, b = Tensor(call.src[3]), Tensor(call.src[4])
    return None, None, (Tensor(gc) + Tensor(gd) * b).uop, (Tensor(gc) + Tensor(gd) * a).uop


def n_kernels(*ts: Tensor) -> int:
    linear, _ = ts[0].linear_with_vars(*ts[1:])
    return sum(1 for it in linear.src if it.src[0].op is Ops.SINK)


def test_one_loop_two_outputs_values_and_gradients():
    rng = np.random.default_rng(1)
    an, bn = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    a, b = Tensor(an, requires_grad=True).realize(), Tensor(bn, requires_grad=True).realize()
    c, d, _, _ = Tensor.custom_kernel(
        Tensor.empty(3, 5), Tensor.empty(3, 5), a, b, fxn=add_mul, grad_fxn=add_mul_grad
    )
    (c * d).sum().backward()  # both outputs, interacting: d/da (a+b)ab = ab + (a+b)b
    assert a.grad is not None and b.grad is not None
    np.testing.assert_allclose(c.numpy(), an + bn, rtol=1e-6)
    np.testing.assert_allclose(d.numpy(), an * bn, rtol=1e-6)
    np.testing.assert_allclose(a.grad.numpy(), an * bn + (an + bn) * bn, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), an * bn + (an + bn) * an, rtol=1e-5, atol=1e-6)


def test_simplify_keeps_a_kernel_runnable():
    def kernel(c: UOp, a: UOp) -> UOp:
        i = UOp.range(a.numel(), 0)
        return c[i].store(a[i] * 1.0 + 0.0).end(i).sink(arg=KernelInfo("plain")).simplify()

    a = Tensor([1.5, -2.0, 3.0])
    out = Tensor.custom_kernel(Tensor.empty(3), a, fxn=kernel)[0]
    np.testing.assert_array_equal(out.numpy(), [1.5, -2.0, 3.0])


def test_two_loops_of_different_sizes():
    def kernel(c: UOp, d: UOp, a: UOp) -> UOp:
        i, j = UOp.range(a.shape[0], 0), UOp.range(d.shape[0], 1)
        return UOp.sink(c[i].store(a[i] * 2.0).end(i), d[j].store(a[j]).end(j), arg=KernelInfo("two"))

    c, d, _ = Tensor.custom_kernel(Tensor.empty(4), Tensor.empty(3), Tensor([1.0, 2.0, 3.0, 4.0]), fxn=kernel)
    assert c.tolist() == [2, 4, 6, 8] and d.tolist() == [1, 2, 3]


def test_nested_loops_index_views():
    # C (4x6) = A (6x4) transposed, written through 2-d views of the flat pointer PARAMs
    def transpose(c: UOp, a: UOp) -> UOp:
        i, j = UOp.range(6, 0), UOp.range(4, 1)
        return c.reshape((4, 6))[j, i].store(a.reshape((6, 4))[i, j]).end(i, j).sink()

    an = np.arange(24, dtype=np.float32).reshape(6, 4)
    out = Tensor.custom_kernel(Tensor.empty(4, 6), Tensor(an), fxn=transpose)[0]
    np.testing.assert_array_equal(out.numpy(), an.T)


def test_gather_through_a_loaded_index():
    def gather(out: UOp, idx: UOp, src: UOp) -> UOp:
        i = UOp.range(idx.numel(), 0)
        return out[i].store(src[idx[i]]).end(i).sink()

    src = np.array([10.0, 20.0, 30.0, 40.0], dtype=np.float32)
    idx = np.array([3, 0, 0, 2, 1], dtype=np.int32)
    out = Tensor.custom_kernel(Tensor.empty(5), Tensor(idx), Tensor(src), fxn=gather)[0]
    np.testing.assert_array_equal(out.numpy(), src[idx])


def test_kernel_info_names_the_program():
    c, _, _, _ = Tensor.custom_kernel(
        Tensor.empty(4), Tensor.empty(4), Tensor.ones(4), Tensor.ones(4), fxn=add_mul
    )
    call = c.uop.src[1]
    assert call.src[0].arg == KernelInfo("addmul")
    assert lower(call, Target.for_ops(frozenset(Ops))).name == "addmul"


def test_kernel_errors_name_the_node():
    with pytest.raises(TypeError, match="pointer PARAM"):
        _ = Tensor([1.0]).uop[0]
    p = UOp.param(0, Tensor([1.0]).dtype.ptr(4))
    with pytest.raises(IndexError, match="2 indices"):
        _ = p[0, 1]
    with pytest.raises(TypeError, match="RANGE"):
        p[0].store(p[1]).end(p[0])
    assert UOp.group(p[0].store(p[1])) is p[0].store(p[1])  # one effect is itself
    assert p.flatten() is p and p.numel() == 4


# ---------------------------------------------------------------------- Tensor.invalids
def test_invalids_is_a_value_that_no_kernel_fills():
    t = Tensor.invalids(2, 3)
    assert t.shape == (2, 3) and t.uop.op is not Ops.BUFFER  # a value, so function bodies may make one
    assert n_kernels(t) == 0
    assert t.numpy().shape == (2, 3)


def test_invalids_inside_a_precompiled_function_costs_no_kernel():
    def double(c: UOp, a: UOp) -> UOp:
        i = UOp.range(a.shape[0], 0)
        return c[i].store(a[i] * 2.0).end(i).sink(arg=KernelInfo("double"))

    def grad(g: UOp, call: UOp) -> tuple[UOp | None, ...]:
        return None, (Tensor(g) * 2.0).uop

    @function(precompile=True, precompile_backward=True)
    def f(a: Tensor) -> Tensor:  # no allow_implicit needed: invalids is no buffer
        return Tensor.custom_kernel(Tensor.invalids(*a.shape, dtype=a.dtype), a, fxn=double, grad_fxn=grad)[0]

    a = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True).realize()
    c = f(a)
    assert n_kernels(c) == 1  # the custom kernel alone: the scratch output is allocated, never filled
    before = c.uop
    c.sum().backward()
    assert c.uop is before  # linear_with_vars ran nothing and changed nothing
    assert a.grad is not None
    np.testing.assert_array_equal(a.grad.numpy(), [2, 2, 2, 2])
    np.testing.assert_array_equal(c.numpy(), [2, 4, 6, 8])


def test_linear_with_vars_gives_the_bound_values():
    n = UOp.variable("n", 1, 8)
    x = Tensor(np.arange(8, dtype=np.float32))
    linear, var_vals = (x[: n.bind(5)] * 2).linear_with_vars()
    assert linear.op is Ops.LINEAR and var_vals == {"n": 5}
    assert all(it.op is Ops.CALL for it in linear.src)


# ---------------------------------------------------------------------- GlobalCounters
def test_counters_count_a_matmul_as_two_ops_per_multiply_add():
    n = 32
    a, b = Tensor.ones(n, n).contiguous().realize(), Tensor.ones(n, n).contiguous().realize()
    GlobalCounters.reset()
    assert (GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.kernel_count) == (0, 0, 0)
    (a @ b).realize()  # REFERENCE evaluates the MUL over n**3 elements and reduces them; a kernel's loop
    assert GlobalCounters.global_ops == 2 * n**3  # does a MUL and an ADD per step (its addressing is free)
    assert GlobalCounters.global_mem == 3 * n * n * 4  # each buffer once, however often it is re-read


def test_estimates_use_the_bound_trip_count():
    n = UOp.variable("n", 1, 8)
    x = Tensor(np.arange(8, dtype=np.float32)).realize()
    linear, var_vals = (x[: n.bind(3)] * 2 + 1).linear_with_vars()
    (kernel,) = linear.src
    est = lower(kernel, Target.for_ops(frozenset(Ops))).estimates
    assert est.at(var_vals) == (2 * 3, 2 * 3 * 4)  # a MUL and an ADD per element; 3 floats read, 3 written
    assert est.at({"n": 7}) == (2 * 7, 2 * 7 * 4)


def test_backward_of_three_matmuls_does_no_matmul_twice():
    # forward 3 matmuls, backward 5 (x needs no gradient): the elementwise loss gradient feeding a matmul is
    # computed once into a buffer, not again for every multiply-add. (p3 is made contiguous as the reference's
    # test does: a REDUCE read by two kernels is still computed in each.)
    n = 32
    x, ref = Tensor.ones(n, n).contiguous(), Tensor.ones(n, n).contiguous()
    ws = [Tensor.ones(n, n, requires_grad=True).contiguous() for _ in range(3)]
    Tensor.realize(x, ref, *ws)
    p3 = (x @ ws[0] @ ws[1] @ ws[2]).contiguous()
    loss = (p3 - ref).square().mean()
    loss.backward()
    GlobalCounters.reset()
    loss.realize(*(w.grad for w in ws if w.grad is not None))
    matmuls = 8 * 2 * n**3
    assert matmuls <= GlobalCounters.global_ops < matmuls + 2 * n**3
