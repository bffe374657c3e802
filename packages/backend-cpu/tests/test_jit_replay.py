"""TinyJit replays against plain calls, torch and numpy (issue 31): random values drawn anew on each replay
(the generator is an input of the captured step), host data a step writes into refilled, returned inputs,
a returned output passed back in, a setitem at a variable offset, and the tinygrad names of the capture
(`captured.linear`, `prune=`, `Context(JIT=0)`, `Context(CAPTURING=0)`, `graph_class`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from uopgrad import Context, Device, Ops, Tensor, TinyJit, UOp, dtypes
from uopgrad.errors import JitError
from uopgrad.jit import graph_class


@pytest.fixture(autouse=True)
def _on_cpu():
    """Every tensor made without a device is on CPU (REFERENCE captures nothing)."""
    old, Device.DEFAULT = Device.DEFAULT, "CPU"
    yield
    Device.DEFAULT = old


def test_rand_in_a_jitted_step_is_new_on_every_call() -> None:
    @TinyJit
    def f() -> Tensor:
        return Tensor.rand(3).realize()

    Tensor.manual_seed(7)
    got = [f().numpy().copy() for _ in range(5)]
    assert len({tuple(g.tolist()) for g in got}) == 5
    Tensor.manual_seed(7)
    want = [Tensor.rand(3).numpy() for _ in range(5)]  # the plain calls draw the same values
    np.testing.assert_array_equal(np.stack(got), np.stack(want))


def test_random_draws_of_a_step_match_plain_calls_and_follow_manual_seed() -> None:
    def step(a: Tensor) -> tuple[Tensor, Tensor]:
        noise = Tensor.randn(*a.shape, dtype=dtypes.float64) * a
        idx = Tensor.randint(4, low=0, high=100)
        shift = Tensor.uniform(*a.shape, low=-1, high=1, dtype=dtypes.float64)
        return (noise + shift).realize(), idx.realize()

    a = Tensor(np.linspace(1, 2, 6).reshape(2, 3))
    Tensor.manual_seed(3)
    plain = [tuple(t.numpy().copy() for t in step(a)) for _ in range(5)]
    jf = TinyJit(step)
    Tensor.manual_seed(3)
    jitted = [tuple(t.numpy().copy() for t in jf(a)) for _ in range(5)]
    for (p0, p1), (j0, j1) in zip(plain, jitted):
        np.testing.assert_array_equal(p0, j0)
        np.testing.assert_array_equal(p1, j1)
    Tensor.manual_seed(3)  # a seed between replays restarts the sequence, as for a plain call
    again = jf(a)[0].numpy()
    np.testing.assert_array_equal(again, plain[0][0])
    # the noise is used by a kernel: the replayed product is torch's for the drawn values
    torch.testing.assert_close(torch.from_numpy(again), torch.from_numpy(plain[0][0]))


def test_dropout_mask_changes_on_replay() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        with Tensor.train():
            return x.dropout(0.5).realize()

    x = Tensor.ones(64).contiguous().realize()
    masks = {tuple((f(x).numpy() > 0).tolist()) for _ in range(5)}
    assert len(masks) == 5


def test_fresh_empty_like_assigned_inside_the_step() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        out = Tensor.empty_like(x)
        out.assign(x * 2)
        return out.realize()

    for i in range(5):
        x = torch.arange(6, dtype=torch.float64).reshape(2, 3) + i
        torch.testing.assert_close(torch.from_numpy(f(Tensor(x.numpy())).numpy()), x * 2)


def test_returned_input_is_this_calls_input() -> None:
    @TinyJit
    def f(a: Tensor, b: Tensor) -> Tensor:
        return b.assign(a + 1)

    outs = []
    for i in range(5):
        a = Tensor([i, 2 * i])
        b = Tensor.empty_like(a)
        c = f(a, b)
        outs.append(c)
        assert c.tolist() == [i + 1, 2 * i + 1]
        assert b.tolist() == [i + 1, 2 * i + 1]  # the call's own buffer was written
    assert outs[0].tolist() == [1, 1]  # an earlier call's result keeps its value


def test_returned_view_of_an_input_follows_the_input() -> None:
    @TinyJit
    def f(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        b.assign(a * 3)
        return b.reshape(2, 2).realize(), (a + 1).realize()

    for i in range(4):
        a = Tensor(np.arange(4, dtype=np.float32) + i)
        b = Tensor.zeros(4).contiguous().realize()
        view, plus = f(a, b)
        np.testing.assert_array_equal(view.numpy(), ((np.arange(4) + i) * 3).reshape(2, 2))
        np.testing.assert_array_equal(plus.numpy(), np.arange(4) + i + 1)


def test_host_data_written_in_place_is_refilled_on_replay() -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        x = Tensor([1.0, 2.0, 3.0])
        x += a
        return x.realize()

    for i in range(5):
        assert f(Tensor([float(i)] * 3)).tolist() == [1.0 + i, 2.0 + i, 3.0 + i]


def test_output_passed_back_in_is_read_before_it_is_written() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return (x.flip(0) + 1).realize()

    x, ref = Tensor(np.arange(7, dtype=np.float32)), np.arange(7, dtype=np.float32)
    for _ in range(6):
        x, ref = f(x), ref[::-1] + 1
        np.testing.assert_array_equal(x.numpy(), ref)


@pytest.mark.parametrize("how", ["slice", "shrink", "iadd"])
def test_setitem_at_a_variable_offset_on_replay(how: str) -> None:
    @TinyJit
    def f(t: Tensor, a: Tensor, v: UOp) -> Tensor:
        if how == "slice":
            t[v : v + 1] = a
        elif how == "shrink":
            t.shrink(((v, v + 1), None)).assign(a)
        else:
            t[v : v + 1] += a
        return t.realize()

    t, n = Tensor.zeros(6, 3).contiguous().realize(), np.zeros((6, 3))
    for i in (0, 3, 1, 5, 2, 4):
        f(t, Tensor.full((1, 3), float(i + 1)).contiguous(), UOp.variable("v", 0, 5).bind(i))
        n[i] = i + 1
        np.testing.assert_array_equal(t.numpy(), n)


def test_captured_linear_lists_the_replayed_kernels() -> None:
    @TinyJit
    def f(a: Tensor, b: Tensor) -> Tensor:
        c = (a + b).realize()
        return (c * 2).realize()

    for _ in range(3):
        f(Tensor.ones(4).contiguous(), Tensor.ones(4).contiguous())
    assert f.captured is not None and f.captured.linear.op is Ops.LINEAR
    assert [call.src[0].op for call in f.captured.linear.src] == [Ops.SINK, Ops.SINK]
    assert graph_class(Device[Device.DEFAULT]) is None


def test_prune_replays_only_what_depends_on_the_inputs() -> None:
    weights = Tensor.rand(16).realize()

    def step(x: Tensor) -> Tensor:
        return (weights * 2).contiguous() + x

    plain, pruned = TinyJit(step), TinyJit(step, prune=True)
    for jf in (plain, pruned):
        for _ in range(4):
            a = Tensor.rand(16).realize()
            np.testing.assert_allclose(jf(a).numpy(), weights.numpy() * 2 + a.numpy(), rtol=1e-6)
    assert plain.captured is not None and pruned.captured is not None
    assert len(pruned.captured.linear.src) < len(plain.captured.linear.src)


def test_context_jit_0_runs_the_function_every_call() -> None:
    calls = []

    @TinyJit
    def f(a: Tensor) -> Tensor:
        calls.append(1)
        return (a + 1).realize()

    with Context(JIT=0):
        for i in range(4):
            assert f(Tensor([i])).tolist() == [i + 1]
    assert len(calls) == 4 and f.captured is None


def test_context_capturing_0_keeps_work_out_of_the_capture() -> None:
    side = Tensor.zeros(4).contiguous().realize()

    @TinyJit
    def f(a: Tensor) -> Tensor:
        with Context(CAPTURING=0):
            side.assign(side + 1).realize()
        return (a + 1).realize()

    for i in range(5):
        assert f(Tensor([i])).tolist() == [i + 1]
    assert f.captured is not None and len(f.captured.linear.src) == 1
    assert side.tolist() == [2.0] * 4  # the one-off work ran on the two calls that ran the function


def test_tinyjit_inside_a_capture_is_a_runtime_error() -> None:
    @TinyJit
    def inner(t: Tensor) -> Tensor:
        return t + 1

    @TinyJit
    def outer(t: Tensor) -> Tensor:
        return inner(t) * 3

    outer(Tensor([1])).realize()
    with pytest.raises(RuntimeError, match="TinyJit inside another TinyJit is not supported") as e:
        outer(Tensor([1])).realize()
    assert isinstance(e.value, JitError)


def test_view_input_at_a_variable_offset_is_read_at_this_calls_offset() -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        return (a * 2 + 1).contiguous().realize()

    base_np = np.arange(30, dtype=np.float32).reshape(3, 10)
    base = Tensor(base_np)
    for i in (0, 4, 2, 7, 1):
        v = UOp.variable("i", 0, 8).bind(i)
        np.testing.assert_array_equal(f(base[:, v : v + 2]).numpy(), base_np[:, i : i + 2] * 2 + 1)
    with pytest.raises(JitError, match="another view of its buffer"):
        f(base[:, 3:5])  # a constant offset is part of the captured view


def test_reading_a_value_inside_the_capture_raises() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return x * x.sum().item()

    f(Tensor([1.0, 2.0]))
    with pytest.raises(JitError, match="baked into every replay"):
        f(Tensor([1.0, 2.0]))
