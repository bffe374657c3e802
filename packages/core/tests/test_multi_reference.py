"""Sharded tensors the way tinygrad's test_multitensor.py uses them: in-place writes into views of a sharded
tensor, clone, *_like, shard_like, bounds, allreduce and a schedule run by hand. Values are checked against
numpy on the unsharded data; each write is applied to a numpy copy in the same order."""

import numpy as np
import pytest

from uopgrad import Tensor
from uopgrad.backend import run_linear
from uopgrad.errors import DeviceError
from uopgrad.ops import Ops

D2 = ("REFERENCE", "REFERENCE:1")
D4 = ("REFERENCE", "REFERENCE:1", "REFERENCE:2", "REFERENCE:3")


def test_assign_into_a_column_of_a_row_sharded_tensor() -> None:
    out = Tensor.zeros(4, 4).contiguous().realize().shard(D2, 0).realize()
    ones = Tensor.ones(4, 1).shard(D2, 0).contiguous().realize()
    out[:, 2:3].assign(ones).realize()
    ref = np.zeros((4, 4), np.float32)
    ref[:, 2:3] = 1
    np.testing.assert_array_equal(out.numpy(), ref)


def test_inplace_add_through_a_view_runs_once_and_every_view_sees_it() -> None:
    out = Tensor.zeros(4, 4).contiguous().realize().shard(D2, 0).realize()
    rows = out[1:3]  # a view across both shards, taken before the writes
    v = out[:, 1:2]
    v.assign(v + 1).realize()
    v += 1  # pending: out and rows read it too, and it must not run twice
    ref = np.zeros((4, 4), np.float32)
    ref[:, 1:2] += 2
    np.testing.assert_array_equal(out.numpy(), ref)
    np.testing.assert_array_equal(v.numpy(), ref[:, 1:2])
    np.testing.assert_array_equal(rows.numpy(), ref[1:3])


def test_assign_into_rows_of_the_sharded_axis() -> None:
    a = np.arange(32, dtype=np.float32).reshape(8, 4)
    t = Tensor(a).contiguous().realize().shard(D4, 0).realize()
    t[1:6].assign(Tensor.full((5, 4), -1.0).shard(D4)).realize()  # crosses three shards
    ref = a.copy()
    ref[1:6] = -1
    np.testing.assert_array_equal(t.numpy(), ref)
    t[6:8].assign(t[6:8] * 10).realize()  # one shard, reading itself
    ref[6:8] *= 10
    np.testing.assert_array_equal(t.numpy(), ref)


def test_assign_into_a_flipped_view_of_the_sharded_axis() -> None:
    a = np.arange(8, dtype=np.float32)
    t = Tensor(a).contiguous().realize().shard(D2, 0).realize()
    t.flip(0)[0:3].assign(Tensor([10.0, 11.0, 12.0]).shard(D2)).realize()
    ref = a.copy()
    ref[::-1][0:3] = [10, 11, 12]
    np.testing.assert_array_equal(t.numpy(), ref)


@pytest.mark.parametrize("axis", [None, 0])
def test_clone_keeps_sharding_and_is_a_copy(axis: int | None) -> None:
    t = Tensor.arange(16).reshape(4, 4).shard(D2, axis=axis).contiguous().realize()
    c = t.clone().realize()
    assert c.device == D2 and c.uop.axis == axis
    c += 1
    np.testing.assert_array_equal(c.numpy(), np.arange(16).reshape(4, 4) + 1)
    np.testing.assert_array_equal(t.numpy(), np.arange(16).reshape(4, 4))


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_rand_like_of_a_sharded_tensor_is_sharded_the_same_way(axis: int | None) -> None:
    t = Tensor.empty(8, 4).shard(D2, axis=axis)
    r = t.rand_like()
    assert (r.shape, r.device, r.uop.axis, r.dtype) == (t.shape, D2, axis, t.dtype)
    v = r.numpy()
    assert v.shape == (8, 4) and ((v >= 0) & (v < 1)).all() and len(np.unique(v)) > 16
    assert (t + t).randn_like().uop.axis == axis
    with pytest.raises(RuntimeError):
        t.rand_like(device="REFERENCE:2")


def test_rand_on_a_device_tuple_is_refused() -> None:
    with pytest.raises(ValueError):
        Tensor.rand(8, device=D2)


def test_shard_like() -> None:
    x = Tensor.ones(8).shard(D2, 0)
    y = Tensor.arange(8).shard_like(x)
    assert y.device == D2 and y.uop.axis == 0
    np.testing.assert_array_equal(y.numpy(), np.arange(8))
    assert Tensor.zeros(8).shard_like(Tensor.ones(8).shard(D2)).uop.axis is None
    assert Tensor.zeros(8).shard_like(Tensor.ones(8, device="REFERENCE:1")).device == "REFERENCE:1"
    assert y.shard_like(x) is y
    with pytest.raises(RuntimeError):
        Tensor.ones(8).shard(D2).shard_like(x)


def test_bounds_and_per_shard_slices() -> None:
    a = np.arange(64).reshape(8, 8)
    x = Tensor(a).shard(D4, 0)
    assert x.uop.bounds == ((0, 2), (2, 4), (4, 6), (6, 8))
    out = [x[b:e] + i for i, (b, e) in enumerate(x.uop.bounds)]
    np.testing.assert_array_equal(out[0].cat(*out[1:]).numpy(), a + np.repeat(np.arange(4), 2)[:, None])
    with pytest.raises(RuntimeError):
        _ = Tensor(a).shard(D4).uop.bounds


def test_allreduce_sums_the_shards_on_every_device() -> None:
    a = np.random.default_rng(1).standard_normal((8, 3)).astype(np.float32)
    ts = Tensor(a).shard(D4, 0).realize()
    b = Tensor(ts.uop.allreduce(Ops.ADD, ts.device))
    assert b.device == D4 and b.uop.axis == 0
    parts = a.reshape(4, 2, 3)
    np.testing.assert_allclose(b.numpy(), np.tile(parts.sum(0), (4, 1)), rtol=1e-6, atol=1e-6)
    m = Tensor(ts.uop.allreduce(Ops.MAX, ts.device))
    np.testing.assert_array_equal(m.numpy(), np.tile(parts.max(0), (4, 1)))


def test_schedule_of_a_sharded_value_run_by_hand() -> None:
    a = np.arange(48, dtype=np.float32).reshape(8, 6)
    x = Tensor(a).contiguous().shard(D2, axis=1).realize()
    out = (x.reshape(4, 2, 6)[1] * 2).contiguous()
    linear, var_vals = out.linear_with_vars()
    assert linear.op is Ops.LINEAR and len(linear.src) > 0
    run_linear(linear, var_vals)
    np.testing.assert_array_equal(out.numpy(), a.reshape(4, 2, 6)[1] * 2)
    assert out.schedule_linear().op is Ops.LINEAR


def test_clone_of_a_sharded_parameter_gets_the_gradient() -> None:
    a = np.arange(8, dtype=np.float32)
    w = Tensor(a, requires_grad=True)
    ws = w.shard(D2, 0)
    (ws.clone() * ws).sum().backward()
    assert w.grad is not None
    np.testing.assert_allclose(w.grad.numpy(), 2 * a)


def test_assign_of_a_wrong_device_tuple_is_an_error() -> None:
    t = Tensor.zeros(4).contiguous().realize().shard(D2, 0).realize()
    with pytest.raises(DeviceError):
        t[0:2].assign(Tensor.ones(2).shard(("REFERENCE:2", "REFERENCE:3"), 0)).realize()
