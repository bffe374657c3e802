"""Tensor behaviour a tinygrad user relies on, written as such a user writes it and checked against numpy,
torch and values the reference (tinygrad ffa1aac7b1) computes: lists of numpy arrays as data, a dtype's
element size, clones in buffers of their own, and the seeded random stream."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Tensor, dtypes
from uopgrad.dtype import DTYPES_DICT

pytestmark = pytest.mark.usefixtures("reference_default")


# ---------------------------------------------------------------------- data
@pytest.mark.parametrize(
    "data,kind",
    [
        ([np.array([1, 2, 3]), np.array([4, 5, 6])], dtypes.int32),
        ([np.array([1.5, 2.0, 3.0]), np.array([1, 2, 3])], dtypes.float32),
        ([np.array(1.0), np.array(2.0), np.array(3.0)], dtypes.float32),
        ([np.array([True, False]), np.array([False, False])], dtypes.bool),
        ([np.int64(7), np.int64(-2)], dtypes.int32),
        ([[np.float32(0.5)], [np.float32(2.0)]], dtypes.float32),
    ],
)
def test_a_list_of_numpy_arrays_or_scalars_is_data(data: list, kind: object) -> None:
    t = Tensor(data)
    want = np.array(data)
    assert t.shape == want.shape and t.dtype == kind
    np.testing.assert_array_equal(t.numpy(), want)


def test_a_node_is_taken_as_it_is() -> None:
    x = Tensor([1, 2], dtype=dtypes.int32)
    y = Tensor(x.uop)  # a tensor over another's node: the same values and device
    assert y.dtype == dtypes.int32 and y.device == x.device and y.tolist() == [1, 2]
    assert Tensor(x.uop, dtype=dtypes.int32).tolist() == [1, 2]
    with pytest.raises(AssertionError, match="cast"):  # the reference asserts; ours is DataDTypeError too
        Tensor(x.uop, dtype=dtypes.float32)
    assert Tensor(x.uop).cast(dtypes.float32).tolist() == [1.0, 2.0]


def test_every_dtype_name_has_its_element_size() -> None:
    assert {"float32", "float", "half", "int8", "uint64", "bool", "bfloat16"} <= set(DTYPES_DICT)
    assert "void" not in DTYPES_DICT and "index" not in DTYPES_DICT
    for name, dt in DTYPES_DICT.items():
        size = Tensor.randn(3, dtype=dt).element_size()
        assert size == dt.itemsize == np.dtype(dtypes.to_numpy(dt)).itemsize, name


# ---------------------------------------------------------------------- clone
def test_clone_is_stored_in_a_buffer_of_its_own() -> None:
    a = Tensor.rand(16, 16).realize()
    b = a.clone()
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert a.uop.base.buffer is not b.uop.base.buffer
    b.realize()
    assert b.uop.buffer is not a.uop.buffer and b.uop.buffer is b.uop.base.buffer
    c = a.shrink(((2, 10), None)).clone().realize()  # a clone of a view: a new (8, 16) buffer
    assert c.uop.buffer is not a.uop.buffer and c.uop.buffer.arg == 8 * 16
    np.testing.assert_array_equal(c.numpy(), a.numpy()[2:10])
    assert a[2:10].uop.buffer is a.uop.buffer  # a view reads the buffer it views
    c[0, 0] = 5.0  # as torch's clone: writing the copy leaves the original alone
    assert a.numpy()[2, 0] != 5.0 and c.numpy()[0, 0] == 5.0
    with pytest.raises(ValueError, match="not stored in a buffer"):
        _ = (a + 1).uop.buffer


# ---------------------------------------------------------------------- the random stream
def test_rand_draws_the_reference_stream_after_manual_seed() -> None:
    # values the reference prints for the same calls
    Tensor.manual_seed(1337)
    np.testing.assert_array_equal(
        Tensor.rand(7).numpy(),
        np.array(
            [
                0.4886598587036133,
                0.3479880094528198,
                0.6593245267868042,
                0.6364744901657104,
                0.4711652994155884,
                0.14146876335144043,
                0.27809083461761475,
            ],
            np.float32,
        ),
    )
    np.testing.assert_array_equal(
        Tensor.rand(2, 2).numpy(),
        np.array(  # the stream goes on
            [[0.28590357303619385, 0.546087384223938], [0.9001840353012085, 0.6165095567703247]], np.float32
        ),
    )
    Tensor.manual_seed(2)
    np.testing.assert_array_equal(
        Tensor.rand(3, dtype=dtypes.float16).numpy(),
        np.array([0.294921875, 0.6142578125, 0.623046875], np.float16),
    )
    np.testing.assert_array_equal(
        Tensor.rand(2, dtype=dtypes.float64).numpy(), [0.7124053854561765, 0.24078813941096144]
    )


def test_each_device_has_its_own_stream() -> None:
    Tensor.manual_seed(5)
    first = Tensor.rand(3).numpy()
    other = Tensor.rand(3, device="REFERENCE:1").numpy()
    then = Tensor.rand(3).numpy()  # the draw on the other device did not move this one
    np.testing.assert_array_equal(
        first, np.array([0.3820037841796875, 0.4123044013977051, 0.4209791421890259], np.float32)
    )
    np.testing.assert_array_equal(
        other, np.array([0.7402219772338867, 0.6731693744659424, 0.315280556678772], np.float32)
    )
    np.testing.assert_array_equal(
        then, np.array([0.9723021984100342, 0.1385207176208496, 0.5825724601745605], np.float32)
    )


def test_randperm_and_randint_follow_the_stream() -> None:
    Tensor.manual_seed(2)
    perm = Tensor.randperm(8)
    assert perm.dtype == dtypes.int32
    np.testing.assert_array_equal(perm.numpy(), [0, 1, 5, 3, 4, 6, 2, 7])
    Tensor.manual_seed(2)
    np.testing.assert_array_equal(perm.numpy(), np.argsort(Tensor.rand(8).numpy(), kind="stable"))
    Tensor.manual_seed(2)
    np.testing.assert_array_equal(Tensor.randint(8, low=-3, high=4).numpy(), [-2, -2, 3, -1, 2, -1, 2, 3])
    Tensor.manual_seed(0)
    big = Tensor.randperm(1000).numpy()
    assert sorted(big.tolist()) == list(range(1000))
    r = Tensor.randint(10000, low=0, high=2**30).numpy()  # never `high`, however the product rounds
    assert r.min() >= 0 and r.max() < 2**30
    n = Tensor.randn(20000).numpy()
    assert abs(n.mean()) < 0.03 and abs(n.std() - 1) < 0.03


@pytest.mark.parametrize("make", ["rand", "randn", "uniform", "normal", "randint", "empty", "zeros"])
def test_random_and_filled_tensors_refuse_a_negative_size(make: str) -> None:
    with pytest.raises(ValueError, match="non-negative"):
        getattr(Tensor, make)(-3, 2)
