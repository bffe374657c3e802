"""The scheduler (uopgrad.schedule, spec/kernels.md §1): fusion and kernel counts, the kernel form, FUNCTION
inlining and precompiled units, assigns, copies, custom kernels, the structure cache, and that running a
schedule on REFERENCE (kernels as custom kernels) gives what REFERENCE gives for the graph directly."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest
from conftest import rnd

from uopgrad import GroupOp, Ops, UOp
from uopgrad.backends.reference import evaluate, run_schedule
from uopgrad.config import Context
from uopgrad.function import function
from uopgrad.schedule import Schedule, clear_schedule_cache, schedule, schedule_cache_info
from uopgrad.tensor import Tensor

DEV = "REFERENCE"
# ops a scheduled kernel body never holds (spec/kernels.md §1)
NOT_IN_KERNELS = {
    Ops.FUNCTION,
    Ops.GETTUPLE,
    Ops.CONTIGUOUS,
    Ops.DETACH,
    Ops.CONTIGUOUS_BACKWARD,
    Ops.COPY,
    Ops.AFTER,
    Ops.BUFFER,
    Ops.BIND,
    Ops.DEVICE,
    Ops.TUPLE,
}


pytestmark = pytest.mark.usefixtures("reference_default")


def sched(*ts: Tensor) -> Schedule:
    return schedule(ts[0].uop.sink(*(t.uop for t in ts[1:])))


def n_kernels(*ts: Tensor) -> int:
    return len(sched(*ts).kernels)


def run(*ts: Tensor) -> list[np.ndarray]:
    """Schedule `ts`, run the items on REFERENCE as custom kernels, and read each tensor's output view."""
    s = sched(*ts)
    run_schedule(s, lower_kernels=False)
    return [evaluate(s.outputs[t.uop])[0] for t in ts]


def same_as_direct(*ts: Tensor) -> None:
    direct = evaluate(*(t.uop for t in ts))
    for got, want in zip(run(*ts), direct):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------- kernel counts
def test_elementwise_chain_is_one_kernel():
    x, y = rnd(4, 5), rnd(4, 5, seed=1)
    out = ((x * 2 + y).exp().sqrt() - x.sin()).relu().reshape(5, 4).T.flip(0)[1:3] * 3
    assert n_kernels(out) == 1
    same_as_direct(out)


def test_sum_is_one_kernel():
    x = rnd(4, 5)
    assert n_kernels(x.sum()) == 1
    assert n_kernels((x * 2).sum(1).sum(0)) == 1
    same_as_direct(x.sum(), (x * 2).sum(1).sum(0))


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_is_at_most_three_kernels(fn: str):
    x = rnd(3, 7)
    out = getattr(x, fn)()
    assert n_kernels(out) <= 3
    same_as_direct(out)


def test_a_broadcast_reduce_ends_a_kernel():
    x, w = rnd(4, 6), rnd(6, 5, seed=1)
    assert n_kernels(x.sum(1, keepdim=True) + x) == 2  # the reduce is read through an EXPAND
    assert n_kernels(x - x.mean()) == 2
    assert n_kernels((x @ w).relu()) == 1  # matmul: a reduce of a broadcast multiply
    assert n_kernels((x @ w).T + 1) == 1
    assert n_kernels(x.max(0) + x.prod(0)) == 1  # two reduces, one kernel
    same_as_direct(x.sum(1, keepdim=True) + x, (x @ w).relu(), x.max(0) + x.prod(0))


def test_an_embedding_lookup_is_one_kernel():
    # the one-hot mask `arange == idx` is a compare per element of one small int buffer: it stays fused into
    # the lookup's reduce (as in the reference) instead of getting a buffer and a launch of its own
    from uopgrad.nn import Embedding

    emb = Embedding(20, 30)
    emb.weight = Tensor(np.random.default_rng(0).standard_normal((20, 30)).astype(np.float32))
    idx = np.array([[1, 5, 9, 11], [12, 19, 8, 1]])
    out = emb(Tensor(idx))
    assert n_kernels(out) == 1
    np.testing.assert_array_equal(run(out)[0], emb.weight.numpy()[idx])
    x, w = rnd(4, 6), rnd(6, 5, seed=1)
    assert n_kernels((x * 2) @ w) == 2  # float work broadcast into a matmul is still computed once


def n_reduces(*ts: Tensor) -> int:
    return sum(u.op is Ops.REDUCE for k in sched(*ts).kernels for u in k.src[0].toposort())


def test_a_reduce_two_kernels_read_is_realized_once():
    x, w = rnd(4, 6), rnd(6, 5, seed=1)
    y = x @ w
    relu, col_sums = y.relu(), (y * 2).sum(0)  # two kernels that both read the matmul
    assert n_reduces(relu, col_sums) == 2  # the matmul once (read back by both), the column sums
    assert n_kernels(relu, col_sums) == 3
    assert n_reduces(relu) == 1 and n_kernels(relu) == 1  # one reader: fused as before
    same_as_direct(relu, col_sums)


def test_a_big_reduce_under_another_reduce_gets_its_own_kernel():
    # a mean-squared-error loss over a matmul, read before backward: fused, the loss's one-output loop ran
    # the matmul one output at a time (no lanes, no threads); a nested reduce of >= NESTED_OUTPUTS outputs
    # is realized. Small ones (and a sum of a sum) stay fused: a launch costs more than they do.
    from uopgrad.schedule import NESTED_OUTPUTS

    x, w, y = rnd(64, 32), rnd(32, 32, seed=1), rnd(64, 32, seed=2)
    assert 64 * 32 >= NESTED_OUTPUTS
    loss = ((x @ w - y) ** 2).mean()
    assert n_kernels(loss) == 2 and n_reduces(loss) == 2
    small = ((x[:4] @ w[:, :4] - y[:4, :4]) ** 2).mean()
    assert n_kernels(small) == 1
    assert n_kernels((x * 2).sum(1).sum(0)) == 1
    same_as_direct(loss, small)


def test_a_shared_reduce_is_realized_in_the_layout_its_readers_see():
    x, g = rnd(6, 4), rnd(6, 5, seed=1)
    grad = (g.T @ x).T  # a weight's gradient as a backward computes it: read transposed by everyone
    out = (grad * 2, (grad - 1).relu())
    s = sched(*out)
    assert len(s.kernels) == 3 and n_reduces(*out) == 1
    for k in s.kernels:  # the readers read the realized gradient in their own order: no PERMUTE left
        if not any(u.op is Ops.REDUCE for u in k.src[0].toposort()):
            assert not any(u.op is Ops.PERMUTE for u in k.src[0].toposort())
    same_as_direct(*out)


def test_contiguous_ends_a_kernel_and_wrappers_vanish():
    x = rnd(3, 4)
    out = (x * 2).contiguous().detach().contiguous_backward() + 1
    s = sched(out)
    assert len(s.kernels) == 2
    for k in s.kernels:
        assert not {u.op for u in k.src[0].toposort()} & NOT_IN_KERNELS
    same_as_direct(out)


def test_several_outputs_share_inputs_not_kernels():
    x = rnd(3, 4)
    outs = (x + 1, x.sum(0), (x * 2).T)
    assert n_kernels(*outs) == 3
    same_as_direct(*outs)


# ---------------------------------------------------------------------- the kernel form (spec/kernels.md §1)
def test_kernel_form():
    x, y = rnd(3, 4), rnd(4, seed=1)
    (k,) = sched((x + y).sum(1)).items
    body, bufs = k.src[0], k.src[1:]
    assert k.op is Ops.CALL and body.op is Ops.SINK and all(b.op is Ops.BUFFER for b in bufs)
    (st,) = body.src
    assert st.op is Ops.STORE and st.src[0].base.op is Ops.PARAM and st.src[0].base.arg == 0
    params = {u.arg: u for u in body.toposort() if u.op is Ops.PARAM}
    assert sorted(params) == list(range(len(bufs)))
    for slot, p in params.items():
        assert p.dtype == bufs[slot].dtype.ptr(bufs[slot].arg) and p.shape == (bufs[slot].arg,)
    assert not {u.op for u in body.toposort()} & NOT_IN_KERNELS


def test_identical_kernels_are_one_node():
    a, b = rnd(3, 4), rnd(3, 4, seed=1)
    (ka,) = sched(a * 2 + 1).items
    (kb,) = sched(b * 2 + 1).items
    assert ka.src[0] is kb.src[0] and ka is not kb  # same body, other buffers


def test_outputs_are_buffer_views():
    x = rnd(2, 3)
    out = x + 1
    s = sched(out, x)
    view = s.outputs[out.uop]
    assert view.op is Ops.RESHAPE and view.src[0].op is Ops.BUFFER and view.shape == (2, 3)
    assert s.outputs[x.uop] is x.uop  # already a buffer: no kernel
    assert len(s.items) == 1


# ---------------------------------------------------------------------- functions
def test_function_is_inlined():
    @function
    def f(a: Tensor, b: Tensor) -> Tensor:
        return (a * b + 1).exp()

    x, y = rnd(3, 4), rnd(3, 4, seed=1)
    out = f(x, y) * 2
    assert n_kernels(out) == 1
    same_as_direct(out)


def test_precompiled_function_is_a_unit_and_reused():
    @function(precompile=True)
    def f(a: Tensor) -> Tensor:
        return (a * 2 + 1).sum(0)

    x1, x2 = rnd(3, 4), rnd(3, 4, seed=1)
    out = f(x1) + f(x2)
    clear_schedule_cache()
    s = sched(out)
    info = schedule_cache_info()
    assert len(s.kernels) == 3  # one kernel per call (not fused into the add), plus the add
    assert info["hits"] >= 1  # the second call's body came from the cache
    same_as_direct(out)


def test_precompiled_function_with_several_outputs_and_gradient():
    @function(precompile=True, precompile_backward=True)
    def f(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        return a @ b, (a * 2).sum()

    a = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    b = Tensor(np.ones((3, 2), dtype=np.float32), requires_grad=True)
    p, q = f(a, b)
    loss = (p * p).sum() + q
    ga, gb = loss.gradient(a, b)
    same_as_direct(loss, ga, gb)


# ---------------------------------------------------------------------- assigns
def test_assign_into_a_view():
    b = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
    view = b[:, 1:3]
    s = schedule(view.uop.store((view * 10).uop).sink())
    assert len(s.items) == 1
    run_schedule(s, lower_kernels=False)
    want = np.arange(12, dtype=np.float32).reshape(3, 4)
    want[:, 1:3] *= 10
    np.testing.assert_array_equal(evaluate(b.uop)[0], want)


def test_assign_that_reads_other_elements_computes_the_value_first():
    b = Tensor(np.arange(9, dtype=np.float32).reshape(3, 3)).realize()
    s = schedule(b.uop.store(b.T.uop + 0).sink())
    assert len(s.items) == 2  # b.T into a buffer of its own, then copied into b
    run_schedule(s, lower_kernels=False)
    np.testing.assert_array_equal(evaluate(b.uop)[0], np.arange(9, dtype=np.float32).reshape(3, 3).T)


def test_assign_in_place_is_one_kernel_and_assigns_chain():
    b = Tensor(np.zeros(4, np.float32)).realize()
    b += 1
    b += 2
    s = sched(b)
    assert len(s.items) == 2
    run_schedule(s, lower_kernels=False)
    np.testing.assert_array_equal(evaluate(s.outputs[b.uop])[0], [3, 3, 3, 3])


def test_assign_into_a_computed_value():
    y = (Tensor(np.arange(4, dtype=np.float32)) * 2).uop
    out = Tensor(y.after(y.shrink(((1, 3),)).store(Tensor(np.full(2, 7, np.float32)).uop)))
    assert len(sched(out).items) == 2  # x*2 into a buffer of its own, then the assign into it
    assert run(out)[0].tolist() == [0, 7, 7, 6]
    same_as_direct(out)


def test_a_plain_read_runs_before_a_later_write():
    b = Tensor(np.arange(4, dtype=np.float32)).realize()
    old = b.uop
    before = Tensor(old) + 1  # reads b as it was
    st = old.store((Tensor(old) * 10).uop)
    s = schedule(before.uop.sink(st))
    run_schedule(s, lower_kernels=False)
    np.testing.assert_array_equal(evaluate(s.outputs[before.uop])[0], [1, 2, 3, 4])
    np.testing.assert_array_equal(evaluate(old)[0], [0, 10, 20, 30])


def test_assigns_that_read_each_others_old_values_both_see_them():
    # tinygrad's test_cross_assign_independence, in PyTorch's order of effects: each new value is computed
    # from the old contents of both, whichever tensor is read first
    for read_a_first in (True, False):
        a = Tensor(np.arange(4, dtype=np.float32)).realize()
        b = Tensor(np.arange(4, 8, dtype=np.float32)).realize()
        new_a, new_b = a + b, a * 2
        a.assign(new_a)
        b.assign(new_b)
        got = (a.numpy(), b.numpy()) if read_a_first else tuple(reversed((b.numpy(), a.numpy())))
        assert got[0].tolist() == [4, 6, 8, 10] and got[1].tolist() == [0, 2, 4, 6]


def test_a_value_read_by_a_pulled_in_assign_keeps_its_old_contents():
    # reading `a` runs its assign; b's pending assign read a's old contents, so it runs first, in the same
    # run, and overwrites b, which c's pending assign read: that one must run before it too (PyTorch: 5, 1, 2)
    a, b, c = (Tensor(np.full(3, v, np.float32)).realize() for v in (1.0, 2.0, 3.0))
    new_b, new_c = a * 1, b * 1
    a.assign(Tensor(np.full(3, 5.0, np.float32)))
    b.assign(new_b)
    c.assign(new_c)
    assert [t.numpy().tolist() for t in (a, b, c)] == [[5.0] * 3, [1.0] * 3, [2.0] * 3]


def test_halves_swapped_through_values_taken_before_the_writes():
    a = Tensor(np.arange(4, dtype=np.float32)).realize()
    b = Tensor(np.arange(10, 14, dtype=np.float32)).realize()
    new_a, new_b = b[:2] + 0, a.flip(0)[2:] * 1  # a view read in the cycle: a copy serves it the same way
    a[:2].assign(new_a)
    b[:2].assign(new_b)
    assert b.numpy().tolist() == [1, 0, 12, 13] and a.numpy().tolist() == [10, 11, 2, 3]


def test_a_swap_and_a_rotation_through_assigns_in_a_loop():
    # each step reads the old values (a copy taken first) and the schedule cache replays the copies
    a, b, c = (Tensor(np.full(3, v, np.float32)).realize() for v in (1.0, 2.0, 3.0))
    for step in range(3):
        old_a = a + 0
        a.assign(b + 0)
        b.assign(old_a)
        Tensor.realize(a, b)
        assert a.numpy().tolist() == [2.0 if step % 2 == 0 else 1.0] * 3
        assert b.numpy().tolist() == [1.0 if step % 2 == 0 else 2.0] * 3
    a, b, c = (Tensor(np.full(3, v, np.float32)).realize() for v in (1.0, 2.0, 3.0))
    for step in range(4):
        olds = (a * 1, b * 1, c * 1)
        a.assign(olds[1])
        b.assign(olds[2])
        c.assign(olds[0])
        values = [t.numpy()[0] for t in (a, b, c)]
        assert values == [[2.0, 3.0, 1.0], [3.0, 1.0, 2.0], [1.0, 2.0, 3.0], [2.0, 3.0, 1.0]][step]


def test_a_shared_value_stored_whole_into_an_untouched_buffer_is_computed_into_it():
    # what realize makes of a gradient that is kept (stored into its own output buffer) and read by an update
    a = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    b = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    g = a @ b
    out = UOp.new_buffer(DEV, 8, g.dtype)
    update = g * 2 + 1
    s = schedule(out.store(g.reshape(8).uop).sink(update.uop))
    assert len(s.items) == 2  # the reduce into `out` and the update: no copy of the reduce into `out`
    run_schedule(s, lower_kernels=False)
    want = np.arange(6, dtype=np.float32).reshape(2, 3) @ np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(evaluate(s.outputs[update.uop])[0], want * 2 + 1)
    np.testing.assert_array_equal(evaluate(s.outputs[out.store(g.reshape(8).uop)])[0], want.reshape(8))


def test_a_shared_value_stored_into_a_buffer_read_elsewhere_keeps_its_own_buffer():
    a = Tensor(np.arange(4, dtype=np.float32)).realize()
    g = (Tensor(np.ones((4, 4), np.float32)) @ a.reshape(4, 1)).reshape(4)
    before = Tensor(a.uop) + g  # reads a as it was, and g
    s = schedule(a.uop.store(g.uop).sink(before.uop))
    assert len(s.items) == 3  # g, before, then g copied into a (a is read: g can't be computed into it)
    run_schedule(s, lower_kernels=False)
    np.testing.assert_array_equal(evaluate(s.outputs[before.uop])[0], [6, 7, 8, 9])
    np.testing.assert_array_equal(evaluate(a.uop)[0], [6, 6, 6, 6])


def test_a_shared_value_stored_into_a_view_that_is_also_read_keeps_its_own_buffer():
    # the STORE's target view itself is read by another value: that read sees the contents before the write
    a = Tensor(np.arange(8, dtype=np.float32)).realize()
    view = a.reshape(2, 4)
    g = Tensor(np.ones((2, 3), np.float32)) @ Tensor(np.ones((3, 4), np.float32))
    before = view + g  # reads the view as it was, and g
    s = schedule(view.uop.store(g.uop).sink(before.uop))
    run_schedule(s, lower_kernels=False)
    np.testing.assert_array_equal(evaluate(s.outputs[before.uop])[0], np.arange(8).reshape(2, 4) + 3)
    np.testing.assert_array_equal(evaluate(a.uop)[0], np.full(8, 3))


# ---------------------------------------------------------------------- copies, custom kernels, variables
def test_copy_is_an_item_of_its_own():
    a = rnd(4)
    out = (a * 2).to("REFERENCE:1") + 1
    s = sched(out)
    ops = [it.src[0].op for it in s.items]
    assert ops == [Ops.SINK, Ops.COPY, Ops.SINK]
    copy = s.items[1]
    assert copy.src[0].src[0].op is Ops.PARAM and copy.src[0].src[1].arg == "REFERENCE:1"
    assert s.outputs[out.uop].device == "REFERENCE:1"
    same_as_direct(out)


def test_custom_kernel_passes_through():
    a = Tensor(np.arange(4, dtype=np.float32))
    o, _ = Tensor.empty(4).custom_kernel(a, fxn=lambda out, x: out.store(x * 2 + 1).sink())
    r = o + 1
    s = sched(r)
    assert len(s.items) == 2 and s.items[0].src[0] is o.uop.src[1].src[0]  # the custom body, unchanged
    assert run(r)[0].tolist() == [2, 4, 6, 8]


def test_bound_variable_becomes_a_kernel_argument():
    n = UOp.variable("n", 1, 8)
    a = Tensor(np.arange(8, dtype=np.float32))
    out = a[: n.bind(5)] * 2
    s = sched(out)
    (k,) = s.kernels
    assert s.var_vals == {"n": 5}
    ops = {u.op for u in k.src[0].toposort()}
    assert Ops.DEFINE_VAR in ops and Ops.BIND not in ops
    run_schedule(s, lower_kernels=False)
    assert evaluate(s.outputs[out.uop])[0].tolist() == [0, 2, 4, 6, 8]


# ---------------------------------------------------------------------- the structure cache
def test_cache_hit_on_a_second_training_step_with_other_buffers():
    clear_schedule_cache()
    rng = np.random.default_rng(0)
    w = Tensor(rng.standard_normal((4, 3)).astype(np.float32), requires_grad=True).realize()
    w_ref = evaluate(w.uop)[0]
    for step in range(3):
        xb = Tensor(rng.standard_normal((5, 4)).astype(np.float32)).realize()
        loss = ((xb @ w).relu() ** 2).mean()
        (g,) = loss.gradient(w)
        w.assign(w - g * 0.1)
        s = sched(loss, w)
        assert schedule_cache_info() == {"hits": step, "misses": 1, "size": 1}
        run_schedule(s, lower_kernels=False)
        x_np = evaluate(xb.uop)[0]
        h = x_np @ w_ref
        want_loss = (np.maximum(h, 0) ** 2).mean()
        w_ref = w_ref - 0.1 * (x_np.T @ (2 * np.maximum(h, 0) / h.size))
        np.testing.assert_allclose(evaluate(s.outputs[loss.uop])[0], want_loss, rtol=1e-5)
        np.testing.assert_allclose(evaluate(s.outputs[w.uop])[0], w_ref, rtol=1e-5)
        w = Tensor(s.outputs[w.uop], requires_grad=True)


def test_a_cache_hit_takes_the_bound_values_of_its_graph():
    n = UOp.variable("n", 1, 8)
    a = Tensor(np.arange(8, dtype=np.float32))
    for v in (5, 3):
        out = a[: n.bind(v)] * 2
        s = sched(out)
        assert s.var_vals == {"n": v}
        run_schedule(s, lower_kernels=False)
        assert evaluate(s.outputs[out.uop])[0].tolist() == [2.0 * i for i in range(v)]


def test_a_cache_hit_gets_fresh_output_buffers():
    x = rnd(3)
    s1, s2 = sched(x + 1), sched(x + 1)
    assert s1.items[0].src[0] is s2.items[0].src[0]
    assert s1.items[0].src[1] is not s2.items[0].src[1]  # the output buffer
    assert s1.items[0].src[2] is s2.items[0].src[2]  # the input buffer


# ---------------------------------------------------------------------- whole programs and scale
def test_mlp_forward_and_backward_equals_direct_reference():
    rng = np.random.default_rng(3)
    x = Tensor(rng.standard_normal((8, 5)).astype(np.float32))
    w1 = Tensor(rng.standard_normal((5, 7)).astype(np.float32), requires_grad=True)
    w2 = Tensor(rng.standard_normal((7, 3)).astype(np.float32), requires_grad=True)
    labels = Tensor(rng.integers(0, 3, 8).astype(np.int32))
    logits = (x @ w1).relu() @ w2
    loss = logits.sparse_categorical_crossentropy(labels)
    g1, g2 = loss.gradient(w1, w2)
    same_as_direct(loss, g1, g2, logits.softmax())


def test_a_2001_op_chain_and_its_gradient_schedule_fast():
    x = Tensor(np.linspace(0.5, 1.5, 8).astype(np.float32), requires_grad=True)
    y = x
    for i in range(2001):
        y = y * 1.001 if i % 2 else y + 0.01
    (g,) = y.sum().gradient(x)
    limit = sys.getrecursionlimit()
    start = time.perf_counter()
    assert n_kernels(y, g) == 2
    elapsed = time.perf_counter() - start
    print(f"scheduling a 2001-op chain and its gradient: {elapsed:.3f}s")
    assert sys.getrecursionlimit() == limit
    same_as_direct(y, g)


def _long_backward(n: int) -> tuple[Tensor, Tensor]:
    x = Tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), requires_grad=True)
    y = x
    for i in range(n):
        y = (y * 1.01 + 0.1).sin() if i % 2 else y.exp2() * 0.5 - y
    (g,) = y.sum().gradient(x)
    return y, g


def _kernel_ops(k: UOp) -> int:
    return sum(u.op in GroupOp.ALU for u in k.src[0].toposort())


@pytest.mark.parametrize("budget", [40, 150])
def test_a_kernel_over_the_op_budget_is_cut_and_computes_the_same(budget):
    with Context(KERNEL_OPS=0):  # never cut: the reference values and kernel count
        y, g = _long_backward(60)
        whole = sched(y, g)
        want = run(y, g)
    with Context(KERNEL_OPS=budget):
        y, g = _long_backward(60)
        cut = sched(y, g)
        got = run(y, g)
    assert len(cut.kernels) > len(whole.kernels) == 2
    # no kernel passes (sources + 1) x budget: a node is cut once its sources' sizes add up past it
    assert max(map(_kernel_ops, cut.kernels)) <= 3 * budget + 1 < max(map(_kernel_ops, whole.kernels))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)  # the same ops in the same order: bit-identical


def test_the_op_budget_is_part_of_the_schedule_cache_key():
    y, g = _long_backward(20)
    with Context(KERNEL_OPS=0):
        n_whole = n_kernels(y, g)
    with Context(KERNEL_OPS=20):
        n_cut = n_kernels(y, g)
    assert n_cut > n_whole
