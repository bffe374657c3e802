"""numpy and torch interop as users write it: np.asarray(t), torch.from_dlpack(t), Tensor(torch_tensor),
Tensor.from_dlpack(x); checked against the values numpy or torch compute themselves."""

import numpy as np
import pytest

from uopgrad import Tensor, dtypes


def test_asarray_gives_the_values_not_an_object_array():
    t = Tensor([[1.5, -2.0], [3.0, 4.25]]) * 2
    arr = np.asarray(t)
    assert arr.dtype == np.float32 and arr.shape == (2, 2)
    np.testing.assert_array_equal(arr, np.array([[3.0, -4.0], [6.0, 8.5]], dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(t, dtype=np.float64), arr.astype(np.float64))
    with pytest.raises(ValueError, match="copied to the host"):
        np.asarray(t, copy=False)


def test_asarray_after_an_in_place_update_sees_the_new_values():
    t = Tensor.zeros(3).contiguous().realize()
    before = np.asarray(t)
    t += 1
    np.testing.assert_array_equal(np.asarray(t), [1, 1, 1])
    np.testing.assert_array_equal(before, [0, 0, 0])  # the earlier export was a copy


def test_numpy_from_dlpack_round_trip_keeps_dtype_and_values():
    t = Tensor(np.arange(-3, 3, dtype=np.int16)).reshape(2, 3).permute(1, 0)
    arr = np.from_dlpack(t)
    assert arr.dtype == np.int16
    np.testing.assert_array_equal(arr, np.arange(-3, 3, dtype=np.int16).reshape(2, 3).T)
    back = Tensor.from_dlpack(arr)
    assert back.dtype == dtypes.int16 and back.tolist() == arr.tolist()


def test_torch_both_ways():
    torch = pytest.importorskip("torch", reason="torch (the CPU wheel) is an optional test oracle")
    x = torch.linspace(-2, 2, 12, dtype=torch.float64).reshape(3, 4)
    t = Tensor(x)
    assert t.dtype == dtypes.float64 and t.shape == (3, 4)
    got = torch.from_dlpack(t.exp().sum(axis=1))
    torch.testing.assert_close(got, x.exp().sum(dim=1), rtol=1e-12, atol=0)
    w = torch.ones(2, 2, requires_grad=True)  # values only: the torch graph is not followed
    assert Tensor(w).tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert Tensor(torch.tensor([1, 2, 3], dtype=torch.uint8)).dtype == dtypes.uint8
    t2 = Tensor.from_dlpack(torch.arange(5, dtype=torch.int32))
    assert t2.dtype == dtypes.int32 and (t2 * 2).tolist() == [0, 2, 4, 6, 8]


def test_non_array_objects_still_fail_clearly():
    with pytest.raises(TypeError, match="can't make a Tensor from object"):
        Tensor(object())


def test_bfloat16_values_come_back_as_ml_dtypes_bfloat16():
    import ml_dtypes

    t = Tensor([1.0, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 3.0], dtype="bfloat16") * 3
    out = t.numpy()
    assert out.dtype == ml_dtypes.bfloat16
    rounded = np.array([1.0, 1.0, 1 + 2.0**-6, 3.0], dtype=np.float32)  # the inputs as bfloat16 holds them
    expected = (rounded * 3).astype(ml_dtypes.bfloat16)  # one rounding of the float32 product
    np.testing.assert_array_equal(out.view(np.uint16), expected.view(np.uint16))
    back = Tensor(out)  # a bfloat16 array makes a bfloat16 tensor, bit for bit
    assert back.dtype == dtypes.bfloat16
    assert back.numpy().view(np.uint16).tolist() == out.view(np.uint16).tolist()
    assert np.asarray(t).dtype == ml_dtypes.bfloat16
