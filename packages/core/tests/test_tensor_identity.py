"""Identity and aliasing of tensors, written as a PyTorch user writes them and compared with torch (float64):
a leaf the user made is its own node even when its value equals another's; a write reaches every tensor that
shares the storage (a view, a realized view, `detach()`); a lazy copy to another device taken before a write
keeps the old values (spec/realize.md, spec/ir.md "Interning and leaves")."""

import numpy as np
import pytest
import torch

from uopgrad import Device, Tensor, dtypes

F64 = dtypes.float64


def close(t: Tensor, want: object) -> None:
    got = t.numpy()
    want = want.detach().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


# ---------------------------------------------------------------------- equal values, separate leaves
@pytest.mark.parametrize(
    "make",
    [
        lambda: Tensor(3.0, dtype=F64),
        lambda: Tensor([1.0, 2.0], dtype=F64),
        lambda: Tensor.ones(2, dtype=F64),
        lambda: Tensor(np.float64(3.0)),
    ],
    ids=["scalar", "list", "ones", "numpy-scalar"],
)
def test_equal_leaves_with_requires_grad_set_later_get_their_own_gradients(make):
    a, b = make(), make()
    print(a.numpy(), b.numpy())  # read first, as a user does
    a.requires_grad = True  # afterwards, as an optimiser does
    b.requires_grad = True
    (a * 2 + b * 5).sum().backward()
    ta, tb = (torch.tensor(a.numpy(), requires_grad=True) for _ in range(2))
    (ta * 2 + tb * 5).sum().backward()
    assert a.grad is not None and b.grad is not None
    close(a.grad, ta.grad)
    close(b.grad, tb.grad)


def test_requires_grad_underscore_on_equal_scalars():
    a, b = Tensor(-1.5, dtype=F64).requires_grad_(), Tensor(-1.5, dtype=F64).requires_grad_()
    (a * a * 3 + b).backward()
    ta, tb = (
        torch.tensor(-1.5, dtype=torch.float64, requires_grad=True),
        torch.tensor(-1.5, dtype=torch.float64, requires_grad=True),
    )
    (ta * ta * 3 + tb).backward()
    close(a.grad, ta.grad)
    close(b.grad, tb.grad)


def test_an_assign_into_a_realized_scalar_leaves_an_equal_one_alone():
    a, b = Tensor(3.0, dtype=F64), Tensor(3.0, dtype=F64)
    a.realize()
    b.realize()
    a.assign(Tensor(5.0, dtype=F64))
    a += 1
    assert a.item() == 6.0 and b.item() == 3.0


# ---------------------------------------------------------------------- detach shares storage
def test_setitem_through_detach_reaches_the_tensor():
    base = np.array([1.0, 2.0, 3.0])
    t, tt = Tensor(base.copy(), dtype=F64), torch.tensor(base.copy())
    d, td = t.detach(), tt.detach()
    d[0] = 5
    td[0] = 5
    d += 1
    td += 1
    close(t, tt)
    close(d, td)
    t.assign(t * 2)  # and the other way: a write into t reaches d
    tt.mul_(2)
    close(d, td)


def test_a_detached_view_of_a_realized_parameter_is_written_through():
    w = Tensor(np.arange(6.0).reshape(2, 3), dtype=F64, requires_grad=True).realize()
    tw = torch.arange(6.0, dtype=torch.float64).reshape(2, 3).requires_grad_()
    d, td = w.detach(), tw.detach()
    d.realize()
    d[1, 1:] = -1.0
    td[1, 1:] = -1.0
    close(w, tw)
    (w * w).sum().backward()  # the parameter is still a gradient target
    (tw * tw).sum().backward()
    close(w.grad, tw.grad)


# ---------------------------------------------------------------------- realized views keep aliasing
@pytest.mark.parametrize(
    "view",
    [
        (lambda t: t[1:3], lambda a: a[1:3]),
        (lambda t: t[::2], lambda a: a[::2]),
        (lambda t: t.flip(0), lambda a: np.flip(a, 0)),
        (lambda t: t.reshape(2, 2).permute(1, 0), lambda a: a.reshape(2, 2).transpose(1, 0)),
        (lambda t: t.reshape(1, 4).expand(2, 4), lambda a: np.broadcast_to(a.reshape(1, 4), (2, 4))),
    ],
    ids=["slice", "stride", "flip", "permute", "expand"],
)
def test_a_realized_view_sees_later_writes_into_its_base(view):
    # numpy is the oracle: all five are views there (torch copies on flip)
    ours, theirs = view
    t, tn = Tensor.arange(4).contiguous().realize(), np.arange(4)
    v, vn = ours(t), theirs(tn)
    v.realize()
    print(v.numpy())
    t[1] = 9
    tn[1] = 9
    t.realize()
    close(v, vn)
    t.assign(t + 10)  # not realized: the view reads after the write all the same
    tn += 10
    close(v, vn)


def test_assign_and_setitem_into_a_realized_view_write_the_base():
    t, tt = Tensor.arange(5).contiguous().realize(), torch.arange(5)
    v, tv = t[1:4], tt[1:4]
    v.realize()
    v.assign(Tensor([7, 8, 9]))
    tv.copy_(torch.tensor([7, 8, 9]))
    close(t, tt)
    v[0] = -1
    tv[0] = -1
    v += 100
    tv += 100
    close(t, tt)
    close(v, tv)


def test_swapping_rows_through_a_realized_row():
    t = Tensor.arange(6, dtype=F64).reshape(3, 2).contiguous().realize()
    tt = torch.arange(6, dtype=torch.float64).reshape(3, 2)
    tmp, ttmp = t[0].realize(), tt[0]  # a view: it sees the next write
    t[0] = t[1].realize()
    tt[0] = tt[1]
    t[2] = tmp.realize()
    tt[2] = ttmp
    close(t, tt)


# ---------------------------------------------------------------------- copies keep the old contents
def _two_devices() -> tuple[str, str]:
    return f"{Device.DEFAULT}:0", f"{Device.DEFAULT}:1"


def test_a_lazy_copy_to_another_device_keeps_the_contents_before_a_write():
    _, dev1 = _two_devices()
    w, tw = Tensor([1.0, 2.0], dtype=F64), torch.tensor([1.0, 2.0], dtype=torch.float64)
    x, scaled = w.to(dev1), w.to(dev1) * 3
    tx = tw.clone()  # torch copies at once
    w += 1
    tw += 1
    w.realize()
    close(x, tx)
    close(scaled, tx * 3)
    close(w, tw)


@pytest.mark.parametrize("axis", [None, 0])
def test_a_lazy_shard_keeps_the_contents_before_a_write(axis):
    w = Tensor([1.0, 2.0, 3.0, 4.0], dtype=F64)
    x = w.shard(_two_devices(), axis)
    w += 1
    w.realize()
    close(x, [1.0, 2.0, 3.0, 4.0])
    close(w, [2.0, 3.0, 4.0, 5.0])


def test_clone_clones_the_gradient():
    a = Tensor(np.linspace(-1, 1, 6), dtype=F64, requires_grad=True)
    (a * a).sum().backward()
    b = a.clone()
    assert a.grad is not None and b.grad is not None and b.grad is not a.grad
    close(b.grad, a.grad)
    b.grad.assign(b.grad * 0)
    close(a.grad, 2 * np.linspace(-1, 1, 6))


def test_a_slice_of_a_parameter_keeps_its_gradient_across_an_in_place_update():
    w = Tensor(np.arange(4.0), dtype=F64, requires_grad=True).realize()
    tw = torch.arange(4.0, dtype=torch.float64, requires_grad=True)
    h, th = w[0:2], tw[0:2]
    w.assign(w.detach() * 0.5).realize()
    with torch.no_grad():
        tw.mul_(0.5)
    close(h, th)  # the view sees the update
    (h * 3).sum().backward()  # and its gradient still reaches the parameter
    (th * 3).sum().backward()
    close(w.grad, tw.grad)
