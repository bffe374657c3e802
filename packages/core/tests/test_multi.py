"""Sharded and replicated tensors (uopgrad.multi, Tensor.shard), used the way a data-parallel program uses
them, on REFERENCE devices; every value is checked against numpy or torch on the unsharded data."""

import numpy as np
import pytest

from uopgrad import Tensor, function
from uopgrad.errors import DeviceError, ShapeError
from uopgrad.multi import set_allreduce
from uopgrad.ops import Ops
from uopgrad.realized import is_realized
from uopgrad.uop import UOp

D2 = ("REFERENCE", "REFERENCE:1")
D4 = ("REFERENCE", "REFERENCE:1", "REFERENCE:2", "REFERENCE:3")


def data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------- what a sharded tensor is
def test_shard_has_a_device_tuple_an_axis_and_the_global_shape() -> None:
    x = Tensor(data(4, 6)).shard(D2, axis=1)
    assert x.device == D2 and x.uop.axis == 1 and x.shape == (4, 6)
    assert x.uop.op is Ops.MULTI and x.uop.src[0].shape == (4, 3)
    r = Tensor(data(4, 6)).shard(D2)  # replicated: a copy onto the tuple, no MULTI
    assert r.device == D2 and r.uop.axis is None and r.uop.op is Ops.COPY
    assert Tensor(data(4, 6)).to(D2).uop.op is Ops.COPY


def test_shard_of_one_device_is_to() -> None:
    x = Tensor(data(4))
    assert x.shard(("REFERENCE:1",)).device == "REFERENCE:1"


def test_numpy_of_a_sharded_tensor_is_the_whole_value() -> None:
    a = data(8, 4)
    for axis in (0, 1, -2, None):
        devs = D2 if axis in (1, None) else D4
        np.testing.assert_array_equal(Tensor(a).shard(devs, axis).numpy(), a)


def test_shard_on_the_last_axis_and_the_single_device_view() -> None:
    a = data(3, 8)
    x = Tensor(a).shard(D4, axis=-1)
    assert x.uop.axis == 1
    np.testing.assert_array_equal(x.to("REFERENCE:2").numpy(), a)
    assert x.to("REFERENCE:2").device == "REFERENCE:2"


# ---------------------------------------------------------------------- ops
@pytest.mark.parametrize("ax,ay", [(0, 0), (0, None), (None, 0), (0, 1), (1, 0), (None, None)])
def test_elementwise_with_any_mix_of_axes(ax: int | None, ay: int | None) -> None:
    a, b = data(4, 6), data(4, 6, seed=1)
    x, y = Tensor(a).shard(D2, ax), Tensor(b).shard(D2, ay)
    out = (x * y + 1).relu() - y.exp()
    np.testing.assert_allclose(out.numpy(), np.maximum(a * b + 1, 0) - np.exp(b), rtol=1e-6, atol=1e-6)
    want = [s for s in (ax, ay) if s is not None]
    assert out.uop.axis == (want[-1] if want else None)


def test_broadcast_of_a_replicated_row_against_sharded_rows() -> None:
    a, b = data(8, 3), data(3, seed=1)
    out = Tensor(a).shard(D4, 0) + Tensor(b).to(D4)
    assert out.uop.axis == 0
    np.testing.assert_allclose(out.numpy(), a + b)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_reduce_over_and_beside_the_sharded_axis(axis: int) -> None:
    a = data(4, 6, 2)
    x = Tensor(a).shard(D2, axis)
    for ax in (0, 1, 2, (0, 2), None):
        np.testing.assert_allclose(x.sum(ax).numpy(), a.sum(ax), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(x.max(ax).numpy(), a.max(ax))
    assert x.sum(axis).uop.axis is None  # all-reduced: whole on every device
    other = (axis + 1) % 3
    assert x.sum(other, keepdim=True).uop.axis == axis


def test_mean_of_a_sharded_batch_matches_numpy() -> None:
    a = data(8, 5)
    x = Tensor(a).shard(D4, 0)
    np.testing.assert_allclose(x.mean().numpy(), a.mean(), rtol=1e-6)
    np.testing.assert_allclose(x.mean(0).numpy(), a.mean(0), rtol=1e-5)


@pytest.mark.parametrize("ax,aw", [(0, None), (1, 0), (None, 1), (1, None), (0, 1)])
def test_matmul_sharded_either_way(ax: int | None, aw: int | None) -> None:
    a, w = data(4, 6), data(6, 2, seed=1)
    out = Tensor(a).shard(D2, ax) @ Tensor(w).shard(D2, aw)
    np.testing.assert_allclose(out.numpy(), a @ w, rtol=1e-5, atol=1e-6)


def test_movement_ops_keep_or_drop_the_axis() -> None:
    a = data(4, 6)
    x = Tensor(a).shard(D2, 0)
    cases = [
        (x.reshape(2, 2, 6), a.reshape(2, 2, 6), 0),
        (x.reshape(4, 3, 2), a.reshape(4, 3, 2), 0),
        (x.permute(1, 0), a.T, 1),
        (x.reshape(4, 1, 6).expand(4, 5, 6), np.broadcast_to(a[:, None], (4, 5, 6)), 0),
        (x.pad(((0, 0), (1, 2))), np.pad(a, ((0, 0), (1, 2))), 0),
        (x.shrink(((0, 4), (1, 3))), a[:, 1:3], 0),
        (x.flip(1), a[:, ::-1], 0),
        # across the shards: computed on the gathered value, then whole on every device
        (x.pad(((1, 0), (0, 0))), np.pad(a, ((1, 0), (0, 0))), None),
        (x[1:3], a[1:3], None),
        (x.flip(0), a[::-1], None),
        (x[2:], a[2:], None),
    ]
    for t, want, axis in cases:
        np.testing.assert_array_equal(t.numpy(), want)
        assert t.uop.axis == axis


def test_reshape_that_moves_elements_between_shards_raises() -> None:
    x = Tensor(data(4, 6)).shard(D2, 1)
    with pytest.raises(ShapeError, match="moves elements between the shards"):
        x.reshape(24).numpy()


def test_cast_comparison_where_and_bool_gather() -> None:
    a = data(4, 4)
    x = Tensor(a).shard(D2, 1)
    m = x > 0
    np.testing.assert_array_equal(m.numpy(), a > 0)
    np.testing.assert_array_equal(m.where(x, 0).numpy(), np.where(a > 0, a, 0))
    np.testing.assert_array_equal(x.cast("int32").numpy(), a.astype(np.int32))


def test_realized_sharded_value_is_reused_and_not_recomputed() -> None:
    a = data(4, 2)
    x = (Tensor(a).shard(D2, 0) * 2).realize()
    assert is_realized(x.uop) and x.device == D2 and x.uop.axis == 0
    y = x + 1
    np.testing.assert_array_equal(y.numpy(), a * 2 + 1)
    np.testing.assert_array_equal(x.numpy(), a * 2)


def test_copies_across_device_tuples_and_back() -> None:
    a = data(8, 2)
    x = Tensor(a, device="REFERENCE:3").shard(D2, 0)
    np.testing.assert_array_equal((x + 0).to("REFERENCE:3").numpy(), a)
    np.testing.assert_allclose(x.sum(0).to("REFERENCE:2").numpy(), a.sum(0), rtol=1e-6)


def test_allreduce_hook_takes_over_and_can_be_removed() -> None:
    seen: list[tuple[int, Ops]] = []

    def hook(partials: list[UOp], op: Ops, devices: tuple[str, ...]) -> list[UOp]:
        seen.append((len(partials), op))
        total = partials[0]
        for p in partials[1:]:
            total = total.alu(op, p.copy_to_device(str(partials[0].device)))
        return [total.copy_to_device(d) for d in devices]

    a = data(4, 2)
    set_allreduce(hook)
    try:
        np.testing.assert_allclose(Tensor(a).shard(D2, 0).sum(0).numpy(), a.sum(0), rtol=1e-6)
    finally:
        set_allreduce(None)
    assert seen == [(2, Ops.ADD)]
    Tensor(a).shard(D2, 0).sum(0).numpy()
    assert len(seen) == 1


# ---------------------------------------------------------------------- errors
def test_bad_shards_raise_clear_errors() -> None:
    x = Tensor(data(3, 4))
    with pytest.raises(IndexError, match="out of range"):
        x.shard(D2, 2)
    with pytest.raises(ShapeError, match="multiple of 2"):
        x.shard(D2, 0)
    with pytest.raises(DeviceError, match="can't shard a multi-device tensor"):
        x.shard(D2, 1).shard(D2, 1)
    with pytest.raises(DeviceError, match="each device once"):
        x.shard(("REFERENCE", "REFERENCE:0"), 1)
    with pytest.raises(DeviceError, match="different devices"):
        _ = x.shard(D2, 1) + x.shard(D4[2:], 1)
    with pytest.raises(DeviceError, match="different devices"):
        _ = x.shard(D2, 1) + x


# ---------------------------------------------------------------------- gradients, in a user's order
def test_data_parallel_backward_after_reading_the_loss_matches_torch() -> None:
    torch = pytest.importorskip("torch", reason="torch (the CPU wheel) is an optional test oracle")
    a, w, b = data(8, 3), data(3, 4, seed=1), data(4, seed=2)
    x = Tensor(a).shard(D4, 0)
    wt = Tensor(w, requires_grad=True).shard(D4)
    bt = Tensor(b, requires_grad=True).shard(D4)
    loss = (x @ wt + bt).relu().square().mean()
    first = loss.item()
    loss.backward()
    tw, tb = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)
    tl = (torch.tensor(a) @ tw + tb).relu().square().mean()
    tl.backward()
    assert first == pytest.approx(tl.item(), rel=1e-6)
    assert wt.grad is not None and bt.grad is not None and wt.grad.device == D4
    np.testing.assert_allclose(wt.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bt.grad.numpy(), tb.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_gradient_of_a_sharded_input_is_sharded_like_it() -> None:
    a = data(4, 2)
    x = Tensor(a, requires_grad=True).shard(D2, 0)
    w = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True).shard(D2)
    (x @ w).sum().backward()
    assert x.grad is not None and x.grad.device == D2
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((4, 2)) @ np.array([[1, 2], [3, 4]]).T)
    assert w.grad is not None
    np.testing.assert_allclose(w.grad.numpy(), a.T @ np.ones((4, 2)), rtol=1e-6)


def test_gradients_accumulate_over_two_steps() -> None:
    a = data(4, 2)
    w = Tensor(np.eye(2, dtype=np.float32), requires_grad=True).shard_(D2)
    for _ in range(2):
        (Tensor(a).shard(D2, 0) @ w).sum().backward()
    assert w.grad is not None
    np.testing.assert_allclose(w.grad.numpy(), 2 * a.T @ np.ones((4, 2)), rtol=1e-6)


# ---------------------------------------------------------------------- functions over sharded values
@pytest.mark.parametrize("precompile", [False, True])
def test_function_with_sharded_and_replicated_arguments(precompile: bool) -> None:
    @function(precompile=precompile)
    def f(x: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
        return x @ w, (x * 2).sum(1)

    a, w = data(4, 3), data(3, 3, seed=1)
    y, s = f(Tensor(a).shard(D2, 0), Tensor(w).shard(D2))
    assert y.uop.axis == 0 and s.uop.axis == 0
    np.testing.assert_allclose(y.numpy(), a @ w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s.numpy(), (a * 2).sum(1), rtol=1e-5)


def test_function_backward_with_an_implicit_replicated_weight() -> None:
    w = Tensor(data(3, 2, seed=1), requires_grad=True).shard(D2).realize()

    @function
    def f(x: Tensor) -> Tensor:
        return (x @ w).tanh()

    a = data(4, 3)
    x = Tensor(a, requires_grad=True).shard(D2, 0)
    f(x).sum().backward()
    wn = w.numpy()
    dy = 1 - np.tanh(a @ wn) ** 2
    assert w.grad is not None and x.grad is not None
    np.testing.assert_allclose(w.grad.numpy(), a.T @ dy, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), dy @ wn.T, rtol=1e-5, atol=1e-6)


def test_tensor_call_with_a_sharded_param() -> None:
    a = Tensor.ones(10, 10).shard(D2, 0).realize()
    c = Tensor.call(a, fxn=a.as_param(0).sum(0))
    np.testing.assert_array_equal(c.numpy(), np.full(10, 10.0))


def test_gradient_flows_back_through_shard_to_the_single_device_input() -> None:
    torch = pytest.importorskip("torch", reason="torch (the CPU wheel) is an optional test oracle")
    a, b = data(4, 3), data(4, 3, seed=1)
    x, y = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    xs, ys = x.shard(D2, 0), y.shard(D2)
    loss = ((xs * ys).sin().sum(0) + (xs.exp() * ys).sum(1).sum()).sum()
    loss.backward()
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ((tx * ty).sin().sum(0) + (tx.exp() * ty).sum(1).sum()).sum().backward()
    assert x.grad is not None and y.grad is not None and x.grad.device == "REFERENCE"
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_tinyjit_over_sharded_inputs_gives_each_calls_values() -> None:
    from uopgrad.jit import TinyJit

    @TinyJit
    def f(x: Tensor, w: Tensor) -> Tensor:
        return (x @ w).relu().sum(0).realize()

    for k in range(4):  # REFERENCE launches no kernels: every call runs the function, with the same checks
        xn, wn = data(4, 3, seed=k), data(3, 2, seed=k + 9)
        out = f(Tensor(xn).shard(D2, 0), Tensor(wn).shard(D2))
        np.testing.assert_allclose(out.numpy(), np.maximum(xn @ wn, 0).sum(0), rtol=1e-5, atol=1e-6)


def test_loss_read_after_an_update_of_replicated_weights_is_the_loss_before_it() -> None:
    # the optimiser's assign writes the weights' buffers: the loss built on the old weights is computed first
    wn, xn = data(3, 2), data(4, 3, seed=1)
    w = Tensor(wn).shard(D2).contiguous().realize()
    loss = (Tensor(xn).shard(D2, 0) @ w).sum()
    w.assign(w * 3).realize()
    np.testing.assert_allclose(loss.item(), (xn @ wn).sum(), rtol=1e-5)
    np.testing.assert_allclose(w.numpy(), wn * 3, rtol=1e-6)


@pytest.mark.parametrize("axis", [0, None])
def test_setitem_at_a_bound_variable_column_of_a_sharded_tensor(axis: int | None) -> None:
    t = Tensor(np.zeros((4, 6), np.float32)).shard(D2, axis).contiguous().realize()
    v = UOp.variable("i", 0, 5)
    for i in (1, 4):
        t[:, v.bind(i) : v.bind(i) + 1] = Tensor(np.full((4, 1), i, np.float32)).shard(D2, axis)
    want = np.zeros((4, 6), np.float32)
    want[:, 1], want[:, 4] = 1, 4
    np.testing.assert_array_equal(t.numpy(), want)
