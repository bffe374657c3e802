"""DType's public attributes as tinygrad code reads them."""

from __future__ import annotations

from uopgrad import dtypes


def test_a_dtype_knows_its_bounds_as_tinygrad_spells_them() -> None:
    assert (dtypes.int32.min, dtypes.int32.max) == (-(2**31), 2**31 - 1)
    assert (dtypes.uint8.min, dtypes.uint8.max) == (0, 255)
    assert (dtypes.bool.min, dtypes.bool.max) == (False, True)
    assert dtypes.float32.max == float("inf") and dtypes.float16.min == float("-inf")
    assert dtypes.int64.max == dtypes.max(dtypes.int64)
