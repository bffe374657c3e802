"""Reductions split over the whole grid in two kernels (uopgrad.split_reduce, spec/opt.md §4.1) on the
device `CUDA` (the emulator where there is no GPU): the threads the first kernel launches (its partials
grouped over blocks), values against numpy within the exactness policy, and OPT=0 keeping one kernel."""

from __future__ import annotations

import numpy as np

from uopgrad import Ops, Tensor
from uopgrad.config import Context
from uopgrad_conformance.kit.grouped import floats, launches, sequential_max

BIG = 1 << 22


def test_a_full_sum_of_4m_launches_at_least_4096_threads() -> None:
    a = floats(BIG)
    t = Tensor(a, device="CUDA").realize()
    counts = launches(t.sum())
    assert len(counts) == 2 and counts[0] >= 4096
    exact = a.astype(np.float64).sum()
    bound = 2 * BIG * np.finfo(np.float32).eps * np.abs(a).astype(np.float64).sum()
    assert abs(float(t.sum().numpy()) - exact) <= bound


def test_odd_rows_of_ints_and_maxes_are_exact() -> None:
    ints = np.random.default_rng(1).integers(-(2**31), 2**31, (3, 65536 + 3), dtype=np.int64).astype(np.int32)
    t = Tensor(ints, device="CUDA")
    assert len(launches(t.sum(1))) == 2
    assert np.array_equal(t.sum(1).numpy(), ints.sum(1, dtype=np.int32))
    a = -np.abs(floats(3 * (65536 + 3), seed=2)).reshape(3, -1)
    a[0, 5], a[0, 60000] = np.float32(0.0), np.float32(-0.0)  # a tie of signed zeros: the later one
    m = Tensor(a, device="CUDA")._reduce(Ops.MAX, 1, False)
    assert len(launches(m)) == 2
    assert m.numpy().tobytes() == sequential_max(a).tobytes()


def test_opt0_keeps_one_kernel() -> None:
    with Context(OPT=0):
        assert len(launches(Tensor(floats(BIG), device="CUDA").sum())) == 1
