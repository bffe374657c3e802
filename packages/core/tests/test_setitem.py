"""Tensor.__setitem__ as a PyTorch/tinygrad user writes it: duplicate indices, gradients through the write,
in-place ops on a slice, symbolic offsets, sequence indices, sharded tensors, dtypes. Values are compared
with numpy/torch (float64), gradients with torch where it allows the same program and otherwise with the
reference's rule (tinygrad ffa1aac7b1, Tensor.__setitem__)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from uopgrad import Tensor, UOp, dtypes
from uopgrad.errors import DTypeMismatchError, GradientError

# ---------------------------------------------------------------------- duplicates: the last write wins


def test_duplicate_list_index_last_write_wins() -> None:
    t = Tensor.zeros(3).contiguous()
    t[[1, 1]] = Tensor([5.0, 6.0])
    assert t.tolist() == [0.0, 6.0, 0.0]
    t = Tensor([1, 2, 3, 4])  # a realized buffer; a zero as the last write still wins
    t[[1, 1]] = Tensor([1, 0])
    assert t.tolist() == [1, 0, 3, 4]


def test_duplicate_2d_broadcast_index_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    rows, cols = np.array([[0, 2, 0], [2, 2, 1]]), np.array([1, 3, 1])
    val = rng.standard_normal((2, 3)).astype(np.float32)
    ref = np.zeros((3, 4), np.float32)
    ref[rows, cols] = val  # numpy: the last of the duplicates (row-major over the broadcast index) wins
    t = Tensor.zeros(3, 4).contiguous()
    t[Tensor(rows), Tensor(cols)] = Tensor(val)
    np.testing.assert_array_equal(t.numpy(), ref)


def test_duplicate_rows_with_slices_and_broadcast_value() -> None:
    t = Tensor.arange(12, dtype=dtypes.float32).reshape(3, 4).contiguous()
    t[[2, 0, 2], 1:3] = Tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    ref = np.arange(12, dtype=np.float32).reshape(3, 4)
    ref[[2, 0, 2], 1:3] = [[1, 2], [3, 4], [5, 6]]
    np.testing.assert_array_equal(t.numpy(), ref)
    t[[1, 1], :] = Tensor([7.0, 8.0, 9.0, 10.0])  # one row broadcast to both index entries
    ref[[1, 1], :] = [7, 8, 9, 10]
    np.testing.assert_array_equal(t.numpy(), ref)


def test_duplicate_gradient_goes_to_the_winning_value() -> None:
    # the reference's rule: the overwritten entry does not reach the result, so its gradient is zero
    v = Tensor([5.0, 6.0, 7.0], requires_grad=True)
    t = Tensor.zeros(4)
    t[[1, 1, 3]] = v
    (t * Tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    assert t.tolist() == [0.0, 6.0, 0.0, 7.0]
    assert v.grad is not None and v.grad.tolist() == [0.0, 2.0, 4.0]


# ---------------------------------------------------------------------- gradients through setitem


def _torch_grads(build, *arrays: np.ndarray) -> list[np.ndarray]:
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    build(torch, *ts).backward()
    return [t.grad.numpy() for t in ts]


def _our_grads(build, *arrays: np.ndarray) -> list[np.ndarray]:
    ts = [Tensor(a.astype(np.float32), requires_grad=True) for a in arrays]
    build(Tensor, *ts).backward()
    return [t.grad.numpy() for t in ts]


SLICE_WRITES = {  # name: (our index, the same for torch (which has no negative steps), value shape)
    "slice": (slice(1, 3), slice(1, 3), (2,)),
    "stride": (slice(0, 6, 2), slice(0, 6, 2), (3,)),
    "neg_stride": (slice(5, 0, -2), [5, 3, 1], (3,)),
    "int": (4, 4, ()),
    "list": ([4, 0], [4, 0], (2,)),
}


@pytest.mark.parametrize("name", list(SLICE_WRITES))
def test_gradient_through_setitem_on_a_nonleaf_matches_torch(name: str) -> None:
    ours_idx, torch_idx, yshape = SLICE_WRITES[name]
    rng = np.random.default_rng(1)
    x, y, w = rng.standard_normal(6), rng.standard_normal(yshape), rng.standard_normal(6)

    def build(lib, xt, yt):
        z = xt * 2 if lib is torch else (xt * 2).contiguous()
        z[torch_idx if lib is torch else ours_idx] = yt * 3
        wt = torch.tensor(w) if lib is torch else Tensor(w.astype(np.float32))
        return (z * wt).sum()

    for ours, theirs in zip(_our_grads(build, x, y), _torch_grads(build, x, y)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_gradient_through_setitem_of_a_constant_value_on_a_nonleaf() -> None:
    x = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    z = x * 2
    z[:2] = Tensor([10.0, 20.0])
    assert z.tolist() == [10.0, 20.0, 6.0, 8.0]
    z.sum().backward()
    assert x.grad is not None and x.grad.tolist() == [0.0, 0.0, 2.0, 2.0]


def test_gradient_through_two_overlapping_writes() -> None:
    z = Tensor.zeros(6, requires_grad=True)
    x = Tensor.ones(4, requires_grad=True)
    y = Tensor.ones(4, requires_grad=True) * 2
    z[:4] = x
    z[2:] = y
    assert z.tolist() == [1.0, 1.0, 2.0, 2.0, 2.0, 2.0]
    z.sum().backward()
    assert x.grad is not None and x.grad.tolist() == [1.0, 1.0, 0.0, 0.0]


def test_gradient_through_advanced_setitem_matches_torch() -> None:
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((4, 5)), rng.standard_normal((2, 5))

    def build(lib, xt, yt):
        z = xt * xt if lib is torch else (xt * xt).contiguous()
        idx = torch.tensor([3, 0]) if lib is torch else Tensor([3, 0])
        z[idx] = yt * yt
        return (z * z).sum()

    for ours, theirs in zip(_our_grads(build, x, y), _torch_grads(build, x, y)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------- in-place ops on a slice


def test_iadd_on_a_slice_of_a_leaf_backward() -> None:
    z = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    x = Tensor([10.0, 20.0], requires_grad=True)
    z[:2] += x
    assert z.tolist() == [11.0, 22.0, 3.0, 4.0]
    z.sum().backward()  # z now is the value after the write: its own gradient is ones
    assert z.grad is not None and z.grad.tolist() == [1.0, 1.0, 1.0, 1.0]
    assert x.grad is not None and x.grad.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("op", ["+=", "-=", "*="])
def test_inplace_op_on_a_slice_of_a_nonleaf_matches_torch(op: str) -> None:
    rng = np.random.default_rng(3)
    a, x = rng.standard_normal(5), rng.standard_normal(2)

    def build(lib, at, xt):
        z = at * 1.5
        view = z[1:3]
        if op == "+=":
            view += xt
        elif op == "-=":
            view -= xt
        else:
            view *= xt
        z[1:3] = view
        return (z * z).sum()

    for ours, theirs in zip(_our_grads(build, a, x), _torch_grads(build, a, x)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_inplace_op_on_a_slice_without_grad() -> None:
    t = Tensor.arange(4).reshape(2, 2).contiguous().realize()
    t[1] += 2
    t[1] -= 1
    t[0] *= 3
    assert t.tolist() == [[0, 3], [3, 4]]


# ---------------------------------------------------------------------- errors


def test_setitem_on_a_tensor_with_other_uses_that_requires_grad_raises() -> None:
    z = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    s = z.sum()
    with pytest.raises(RuntimeError, match="another live tensor"):
        z[:2] = Tensor([0.0, 0.0])
    with pytest.raises(GradientError):
        z[:2] = Tensor([0.0, 0.0])
    assert s.item() == 10.0 and z.tolist() == [1.0, 2.0, 3.0, 4.0]  # nothing was written


def test_setitem_dtype_rules() -> None:
    t = Tensor.zeros(6).contiguous().realize()
    with pytest.raises(RuntimeError, match="int"):
        t[2:4] = Tensor([1, 2], dtype=dtypes.int32)
    with pytest.raises(DTypeMismatchError):
        t[[0, 1]] = Tensor([1, 2], dtype=dtypes.int32)
    for dt in (dtypes.int32, dtypes.float32, dtypes.bool):
        for v in (5.0, 5, True):  # Python values take the tensor's dtype
            u = Tensor.ones(3, 3, dtype=dt).contiguous()
            u[1] = v
            u[[0, 2], 1] = v
            assert u.dtype == dt
            ref = np.ones((3, 3), dtypes.to_numpy(dt))
            ref[1] = v
            ref[[0, 2], 1] = v
            np.testing.assert_array_equal(u.numpy(), ref)
    u = Tensor.zeros(2, 3).contiguous()
    u[0] = [1, 2, 3]  # a list value too
    assert u.tolist() == [[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]


# ---------------------------------------------------------------------- symbolic offsets


@pytest.mark.parametrize("realized", [True, False])
def test_setitem_at_a_variable_offset(realized: bool) -> None:
    v = UOp.variable("i", 0, 3).bind(2)
    t = Tensor.zeros(5, 3).contiguous()
    if realized:
        t.realize()
    t[v] = Tensor([1.0, 2.0, 3.0])
    ref = np.zeros((5, 3), np.float32)
    ref[2] = [1, 2, 3]
    np.testing.assert_array_equal(t.numpy(), ref)
    w = UOp.variable("j", 0, 3).bind(1)
    t[w : w + 2] = 7.0
    ref[1:3] = 7
    np.testing.assert_array_equal(t.numpy(), ref)
    t[w : w + 2, 1] = Tensor([8.0, 9.0])
    ref[1:3, 1] = [8, 9]
    np.testing.assert_array_equal(t.numpy(), ref)
    assert t[w : w + 2].shape == (2, 3)


def test_gradient_through_setitem_at_a_variable_offset() -> None:
    x = Tensor([1.0, 2.0, 3.0, 4.0, 5.0], requires_grad=True)
    y = Tensor([10.0, 20.0], requires_grad=True)
    z = x * 2
    w = UOp.variable("k", 0, 3).bind(2)
    z[w : w + 2] = y
    assert z.tolist() == [2.0, 4.0, 10.0, 20.0, 10.0]
    z.sum().backward()
    assert x.grad is not None and x.grad.tolist() == [2.0, 2.0, 0.0, 0.0, 2.0]
    assert y.grad is not None and y.grad.tolist() == [1.0, 1.0]


# ---------------------------------------------------------------------- sequence indices


def test_sequences_in_a_list_index_are_per_dimension_indices_like_torch() -> None:
    a = np.arange(12).reshape(3, 4)
    for idx in ([(0, 1), (1, 2)], [[0, 2], [3, 1]], [(0, 1), slice(1, 3)]):
        theirs = torch.tensor(a)[tuple(idx)]
        np.testing.assert_array_equal(Tensor(a)[idx].numpy(), theirs.numpy())
        t, ref = Tensor.zeros(3, 4, dtype=dtypes.int32).contiguous(), torch.zeros(3, 4, dtype=torch.int32)
        t[idx] = 5
        ref[tuple(idx)] = 5
        np.testing.assert_array_equal(t.numpy(), ref.numpy())
    np.testing.assert_array_equal(Tensor(a)[(0, 2), 1].numpy(), a[[0, 2], 1])  # a tuple inside a tuple index
    np.testing.assert_array_equal(Tensor(a)[[2, 0]].numpy(), a[[2, 0]])  # a list of ints: one index tensor


def test_bool_index_is_refused() -> None:
    t = Tensor.zeros(3).contiguous()
    with pytest.raises(IndexError):
        t[Tensor([True, False, True])] = 1.0
    with pytest.raises(IndexError):
        t[[True, False, True]] = 1.0


# ---------------------------------------------------------------------- sharded tensors

DEVICES = ("CPU", "CPU:1")


@pytest.mark.parametrize("axis", [0, None])
@pytest.mark.parametrize("realized", [True, False])
def test_setitem_into_a_sharded_tensor(axis: int | None, realized: bool) -> None:
    def fresh() -> Tensor:
        t = Tensor.arange(16).contiguous()
        return t.realize().shard(DEVICES, axis=axis).realize() if realized else t.shard(DEVICES, axis=axis)

    cases = [
        (1, 99),
        (slice(2, 10), 99),
        (slice(None), 42),
        (slice(None, None, 4), 0),
        (13, 7),
        ([3, 12, 3], Tensor([1, 2, 3])),
    ]
    for idx, v in cases:
        t, ref = fresh(), np.arange(16)
        t[idx] = v if not isinstance(v, Tensor) else v.to(DEVICES)
        ref[idx] = v if not isinstance(v, Tensor) else v.numpy()
        assert t.device == DEVICES
        np.testing.assert_array_equal(t.numpy(), ref)


def test_setitem_of_a_sharded_value_into_a_sharded_tensor() -> None:
    t = Tensor.arange(16).contiguous().realize().shard(DEVICES, axis=0)
    t[::4] = Tensor([90, 91, 92, 93]).shard(DEVICES, axis=0)
    assert t.tolist() == [90, 1, 2, 3, 91, 5, 6, 7, 92, 9, 10, 11, 93, 13, 14, 15]
    t = Tensor.zeros(4, 4).contiguous().shard(DEVICES, axis=0)
    t[1] = 5
    assert t.numpy()[1].tolist() == [5.0] * 4 and t.numpy().sum() == 20


@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("how", ["lazy view", "realized view", "detach"])
def test_views_of_a_sharded_tensor_see_a_later_setitem_like_torch(axis: int | None, how: str) -> None:
    t = Tensor(np.arange(8, dtype=np.float32).reshape(4, 2)).shard(DEVICES, axis=axis).realize()
    ref = torch.arange(8.0).reshape(4, 2)
    v, rv = (t.detach(), ref.detach()) if how == "detach" else (t[1:3], ref[1:3])
    if how == "realized view":
        v.realize()
    assert v.tolist() == rv.tolist()  # read before the write, as a user prints it
    t[1] = 100
    ref[1] = 100
    np.testing.assert_array_equal(v.numpy(), rv.numpy())
    v[0] = -1  # and a write through the view reaches the sharded base
    rv[0] = -1
    np.testing.assert_array_equal(t.numpy(), ref.numpy())


# ---------------------------------------------------------------------- views of the written buffer


def test_a_view_read_after_a_write_sees_it_like_torch() -> None:
    t = Tensor.arange(6, dtype=dtypes.float32).reshape(3, 2).contiguous().realize()
    ref = torch.arange(6.0).reshape(3, 2)
    tmp, rtmp = t[0], ref[0]
    t[0], ref[0] = t[1], ref[1]
    t[2], ref[2] = tmp, rtmp  # tmp is a view of row 0: it holds the row written above
    np.testing.assert_array_equal(t.numpy(), ref.numpy())
    assert t.tolist() == [[2.0, 3.0], [2.0, 3.0], [2.0, 3.0]]
