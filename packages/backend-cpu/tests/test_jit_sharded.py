"""TinyJit over sharded and replicated tensors on CPU:1/CPU:2, as a data-parallel program jits its step, and
the rest of issue 31: a kv cache filled by a prefill call then decode calls at a bound position, memory
given back with `captured.free_intermediates()` (GlobalCounters.mem_used), and one kernel per
`contiguous().realize()`. Every value is checked against numpy or the same calls without the jit."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from uopgrad import GlobalCounters, Tensor, TinyJit, UOp
from uopgrad.errors import BackendError

D2 = ("CPU:1", "CPU:2")


def data(k: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(k).standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------- a data-parallel training step
def test_jitted_data_parallel_sgd_step_matches_numpy() -> None:
    """Batch sharded on axis 0, weight replicated: the loss and the weight after each of 5 jitted steps
    (captured on the second, replayed after) are numpy's."""
    w_np = data(0, 6, 3) * 0.5
    w = Tensor(w_np, device="CPU").shard(D2).contiguous().realize()
    w.requires_grad = True
    lr = 0.1

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        assert w.grad is not None
        w.assign((w - lr * w.grad).detach()).realize()
        w.grad = None
        return loss.realize()

    for k in range(5):
        x_np, y_np = data(10 + k, 8, 6), data(20 + k, 8, 3)
        x = Tensor(x_np, device="CPU").shard(D2, axis=0).realize()
        y = Tensor(y_np, device="CPU").shard(D2, axis=0).realize()
        loss = step(x, y)
        err = x_np @ w_np - y_np
        np.testing.assert_allclose(loss.item(), (err**2).mean(), rtol=1e-5)
        w_np = w_np - lr * (2 / err.size) * x_np.T @ err
        np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-5, atol=1e-6)
    assert step.captured is not None


@pytest.mark.parametrize("axis", [0, None])
def test_jitted_sharded_inputs_in_a_list_and_mixed_sharding_give_this_calls_values(axis: int | None) -> None:
    @TinyJit
    def f(a: Tensor, more: list[Tensor]) -> tuple[Tensor, Tensor]:
        return (a + more[0] * 2).realize(), (a * more[1]).sum(0).realize()

    for k in range(4):
        a_np, b_np, c_np = data(k, 4, 4), data(k + 10, 4, 4), data(k + 20, 4, 4)
        a = Tensor(a_np, device="CPU").shard(D2, axis=0).realize()
        b = Tensor(b_np, device="CPU").shard(D2, axis=axis).realize()
        c = Tensor(c_np, device="CPU").shard(D2, axis=axis).realize()
        s, r = f(a, [b, c])
        np.testing.assert_allclose(s.numpy(), a_np + b_np * 2, rtol=1e-6)
        np.testing.assert_allclose(r.numpy(), (a_np * c_np).sum(0), rtol=1e-5, atol=1e-6)
    assert f.captured is not None


def test_a_sharded_input_assigned_and_returned_is_updated_on_every_shard() -> None:
    @TinyJit
    def f(out: Tensor, x: Tensor) -> Tensor:
        out.assign((out * 2 + x).contiguous()).realize()
        return out

    for k in range(4):
        o_np, x_np = data(k, 4, 2), data(k + 5, 4, 2)
        out = Tensor(o_np, device="CPU").shard(D2, axis=0).contiguous().realize()
        ret = f(out, Tensor(x_np, device="CPU").shard(D2, axis=0).realize())
        assert ret is out
        np.testing.assert_allclose(out.numpy(), o_np * 2 + x_np, rtol=1e-6)


@pytest.mark.parametrize("axis", [0, None])
def test_jitted_setitem_at_a_bound_column_of_a_sharded_tensor(axis: int | None) -> None:
    out = Tensor.zeros(4, 6, device="CPU").contiguous().realize().shard(D2, axis).realize()
    ones = Tensor.ones(4, 1, device="CPU").shard(D2, axis).contiguous().realize()

    @TinyJit
    def f(out: Tensor, i: UOp) -> None:
        out[:, i : i + 1].assign(ones).realize()
        ones.assign(ones + 1).realize()

    i = UOp.variable("i", 0, 5)
    for k in range(1, 5):
        f(out, i.bind(k))
    assert out.tolist() == [[0, 1, 2, 3, 4, 0]] * 4


# ---------------------------------------------------------------------- a kv cache: prefill, then decode
@pytest.mark.parametrize("devices", ["CPU", D2])
def test_kv_cache_prefill_then_jitted_decode_steps(devices: str | tuple[str, ...]) -> None:
    """The first call (the prompt, a plain start_pos=0) may differ from the captured decode steps (one token
    at a bound start_pos); the step branches on `start_pos > 0` and concatenates at a symbolic length."""
    ctx = 8
    cache = Tensor.zeros(2, ctx, 3, device="CPU")
    cache = (cache.shard(devices) if isinstance(devices, tuple) else cache).contiguous().realize()

    @TinyJit
    def attend(xk: Tensor, start_pos: int | UOp) -> Tensor:
        n = xk.shape[1]
        keys = cache[:, :start_pos].cat(xk, dim=1) if start_pos > 0 else xk  # live: realized before the write
        cache.assign(keys.pad((None, (0, ctx - start_pos - n), None)).contiguous()).realize()
        return (cache * 1).sum(1).realize()

    want = np.zeros((2, ctx, 3), np.float32)

    def tokens(k: int, n: int) -> Tensor:
        t = Tensor(data(k, 2, n, 3), device="CPU")
        return t.shard(devices) if isinstance(devices, tuple) else t

    got = attend(tokens(0, 3), 0)
    want[:, :3] = data(0, 2, 3, 3)
    np.testing.assert_allclose(got.numpy(), want.sum(1), rtol=1e-5, atol=1e-6)
    pos = UOp.variable("start_pos", 1, ctx - 1)
    for p in range(3, 7):
        got = attend(tokens(p, 1), pos.bind(p))
        want[:, p : p + 1] = data(p, 2, 1, 3)
        np.testing.assert_allclose(got.numpy(), want.sum(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cache.numpy(), want, rtol=1e-6)
    assert attend.captured is not None


@pytest.mark.parametrize("shape", [(2, 8, 3), (8, 3), (1, 8, 3), (8,)])
def test_a_concatenation_at_a_symbolic_length_realizes_into_its_own_buffer(shape: tuple[int, ...]) -> None:
    """The kernel that stores (cache[:start_pos] ++ new) at its symbolic length: the store and the value
    loop over one range (the index pass made a second, of the same size simplified, and raised LoweringError
    "the loops of STORE are not nested")."""
    d = len(shape) - 2 if len(shape) > 1 else 0
    cache_np, new_np = data(0, *shape), data(1, *shape[:d], 1, *shape[d + 1 :])
    cache, new = Tensor(cache_np, device="CPU").realize(), Tensor(new_np, device="CPU").realize()
    sp = UOp.variable("start_pos", 1, 7)
    for p in (3, 5):
        cut = tuple((0, sp.bind(p)) if a == d else None for a in range(len(shape)))
        keys = cache.shrink(cut).cat(new, dim=d).realize()
        full = keys.pad(tuple((0, 7 - sp.bind(p)) if a == d else None for a in range(len(shape)))).numpy()
        want = np.concatenate([cache_np.take(range(p), axis=d), new_np], axis=d)
        np.testing.assert_allclose(full.take(range(p + 1), axis=d), want)


# ---------------------------------------------------------------------- memory
def test_free_intermediates_gives_memory_back_and_the_next_call_is_right() -> None:
    ext = Tensor([1, 24, 23, 45, 1], device="CPU").realize()
    state = Tensor([0], device="CPU").realize()

    @TinyJit
    def f(x: Tensor) -> Tensor:
        t1 = (x * 2).contiguous().realize()
        t2 = (t1 + ext).contiguous().realize()
        state.assign(state + 1).realize()  # updated in place: kept
        return t2.sum().contiguous().realize()

    for k in range(4):
        assert f(Tensor([k, 1, 2, 3, 4], device="CPU")).item() == 114 + 2 * k
    assert f.captured is not None
    before = GlobalCounters.mem_used
    freed = f.captured.free_intermediates()
    assert freed >= 5 * 4 * 2 + 4 and before - GlobalCounters.mem_used == freed  # t1, t2 and the output
    assert f.captured.free_intermediates() == 0  # nothing left to give back
    with pytest.raises(BackendError, match="free_intermediates"):  # its values are gone until the next call
        f.captured.ret.numpy()  # type: ignore[attr-defined]
    assert f(Tensor([11, 1, 2, 3, 4], device="CPU")).item() == 136
    assert GlobalCounters.mem_used == before
    assert state.item() == 5


def test_mem_used_counts_a_buffer_until_it_is_collected() -> None:
    before = GlobalCounters.mem_used
    t = Tensor.ones(1000, device="CPU").contiguous().realize()
    assert GlobalCounters.mem_used - before == 4000 and GlobalCounters.mem_used_per_device["CPU"] >= 4000
    GlobalCounters.reset()  # counts the kernels run, not the memory held
    assert GlobalCounters.mem_used - before == 4000
    del t
    assert GlobalCounters.mem_used == before


def test_a_loop_over_sharded_batches_gives_their_memory_back() -> None:
    gc.collect()  # what earlier tests left for the collector goes first, so `before` is only live memory
    before = GlobalCounters.mem_used
    for k in range(3):
        x = Tensor(data(k, 8, 4), device="CPU").shard(D2, axis=0).realize()
        np.testing.assert_allclose((x * 2).sum(0).numpy(), data(k, 8, 4).sum(0) * 2, rtol=1e-5)
        del x
        gc.collect()
        assert GlobalCounters.mem_used == before  # each device's slice went with the tensor


def test_contiguous_realize_is_one_kernel_and_the_capture_holds_one_launch_each() -> None:
    GlobalCounters.reset()
    Tensor.zeros(4, 4, device="CPU").contiguous().realize()
    assert GlobalCounters.kernel_count == 1

    @TinyJit
    def add(a: Tensor, b: Tensor) -> Tensor:
        Tensor.zeros(4, 4, device="CPU").contiguous().realize()
        return (a + b).contiguous().realize()

    for k in range(4):
        np.testing.assert_equal(add(Tensor([k], device="CPU"), Tensor([k], device="CPU")).numpy(), [2 * k])
    assert add.captured is not None and len(add.captured.linear.src) == 2
