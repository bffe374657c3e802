"""`print(t)` / `repr(t)`: PyTorch's form with the values of a realized tensor (numpy's summary for big ones),
and what an unrealized one will be, without computing it (issue 36)."""

from __future__ import annotations

import numpy as np

from uopgrad import Context, Tensor, dtypes
from uopgrad.tensor_registry import is_realized


def test_a_realized_tensor_shows_its_values_like_torch() -> None:
    t = Tensor([[1.0, 2.0], [3.5, -4.0]])
    dev = t.device
    assert repr(t) == f"Tensor([[ 1. ,  2. ],\n        [ 3.5, -4. ]], device={dev!r}, dtype=dtypes.float)"
    assert str(t) == repr(t)  # print(t) shows the same


def test_ints_bools_scalars_and_requires_grad() -> None:
    dev = repr(Tensor([1]).device)
    assert repr(Tensor([1, 2], dtype=dtypes.int64)) == f"Tensor([1, 2], device={dev}, dtype=dtypes.long)"
    assert repr(Tensor([True, False])) == f"Tensor([ True, False], device={dev}, dtype=dtypes.bool)"
    assert repr(Tensor(3.0)) == f"Tensor(3., device={dev}, dtype=dtypes.float)"
    assert repr(Tensor([0.5], requires_grad=True)).endswith("dtype=dtypes.float, requires_grad=True)")


def test_a_big_tensor_is_summarized_as_numpy_does() -> None:
    a = np.arange(3000, dtype=np.float32).reshape(30, 100)
    r = repr(Tensor(a))
    assert "..." in r and r.count("\n") < 40
    assert (
        r == "Tensor(" + np.array2string(a, separator=", ", prefix="Tensor(") + r[r.index("], device") + 1 :]
    )


def test_an_unrealized_tensor_is_described_not_computed() -> None:
    t = Tensor([1.0, 2.0, 3.0]) + 1
    before = t.uop
    r = repr(t)
    assert r == f"<Tensor unrealized shape=(3,) dtype=dtypes.float device={t.device!r} op=ADD>"
    assert t.uop is before and not is_realized(t.uop)  # nothing ran
    t.realize()
    assert repr(t).startswith("Tensor([2., 3., 4.]")


def test_where_nothing_may_be_read_it_is_described() -> None:
    t = Tensor([1.0, 2.0]).realize()
    with Context(ALLOW_DEVICE_USAGE=0):  # as while a function is traced
        assert repr(t).startswith("<Tensor realized shape=(2,)")
