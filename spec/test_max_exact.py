"""`Tensor.max` on the CPU backend keeps the unoptimised kernel's bits (spec/opt.md §2) now that its
accumulator takes a plain maximum (codegen/reduce.py `never_nan`: x86 maxps) and its NaN sum shares the
maximum's loop: rows with NaNs of different payloads and signs, signed zeros in either order, infinities,
along both axes, float32 and float64, on lane multiples and odd sizes."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from uopgrad import Tensor
from uopgrad.config import Context

pytest.importorskip("uopgrad_cpu")


def _nan(dt: type, payload: int, negative: bool = False) -> float:
    if dt is np.float32:
        bits = 0x7FC00000 | payload | (0x80000000 if negative else 0)
        return float(np.frombuffer(struct.pack("<I", bits), np.float32)[0])
    bits = 0x7FF8000000000000 | payload | (1 << 63 if negative else 0)
    return float(np.frombuffer(struct.pack("<Q", bits), np.float64)[0])


def _rows(dt: type, cols: int, seed: int) -> np.ndarray:
    a = np.random.default_rng(seed).standard_normal((16, cols)).astype(dt)
    a[1] = 0.0
    a[1, ::2] = -0.0  # a tie of zeros, -0.0 first
    a[2] = -0.0
    a[2, cols // 2] = 0.0
    a[3] = -np.inf
    a[4, cols - 1] = np.inf
    a[5] = -1.0
    a[5, 0], a[5, cols // 2] = -0.0, 0.0
    a[6, cols // 3] = _nan(dt, 5)  # one NaN: its payload
    a[7, 1 % cols], a[7, cols - 1] = _nan(dt, 7, True), _nan(dt, 9)  # two: which one is the NaN sum's order
    a[8] = np.nan
    a[9] = -np.abs(a[9])
    a[9, 0], a[9, cols - 1] = 0.0, -0.0
    a[10] = -np.inf
    a[10, cols - 1] = _nan(dt, 3, True)
    a[11, :] = np.inf
    return a


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.uint32 if x.dtype == np.float32 else np.uint64)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("cols", [1024, 1000, 64, 17, 3])
@pytest.mark.parametrize("axis", [-1, 0])
def test_a_max_keeps_the_unoptimised_bits(dt: type, cols: int, axis: int):
    a = _rows(dt, cols, cols)
    for x in (a, np.ascontiguousarray(a.T)):
        with Context(OPT=0):
            want = Tensor(x, device="CPU").max(axis=axis).numpy()
        got = Tensor(x, device="CPU").max(axis=axis).numpy()
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(_bits(got[~nan]), _bits(want[~nan]))  # zeros' signs included
        ref = x.max(axis=axis)
        assert np.array_equal(got[~nan], ref[~nan]) and np.array_equal(nan, np.isnan(ref))
        if axis == -1 and x is a:  # a row with one NaN returns it, payload and sign
            assert _bits(got)[6] == _bits(np.asarray(x[6, cols // 3]))
            assert _bits(got)[10] == _bits(np.asarray(x[10, cols - 1]))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("cols", [1024, 1000, 64, 17])
def test_a_full_max_keeps_the_unoptimised_bits(dt: type, cols: int):
    # a max with no output loop (`x.max()`): its reduces are unrolled like a row's (opt.py `_full_reduce`)
    a = _rows(dt, cols, cols + 1)
    for k, row in enumerate(a):
        x = np.tile(row, (4, 1))
        with Context(OPT=0):
            want = Tensor(x, device="CPU").max().numpy()
        got = Tensor(x, device="CPU").max().numpy()
        assert np.isnan(got) == np.isnan(want) == np.isnan(row).any()
        if not np.isnan(want) or k in (6, 10):  # one NaN payload: that one, its sign included
            assert _bits(got) == _bits(want), (k, got, want)
