"""Reductions split over the whole grid in two kernels (uopgrad.split_reduce, spec/opt.md §4.1) on CL: the
work-items the first kernel launches, values against numpy within the exactness policy (integer sums and
the MAX reduce bit for bit, Tensor.max and min but for NaN payloads, float sums within the suite's bound),
odd sizes, keepdim and axis tuples, gradients through the split, and OPT=0 and the CPU backend keeping
their one kernel."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Ops, Tensor
from uopgrad.config import Context
from uopgrad_conformance.kit.grouped import floats, launches, sequential_max, tricky_rows

BIG = 1 << 22


def within_sum_bound(got: np.ndarray, a: np.ndarray, axis: int | tuple[int, ...] | None) -> bool:
    """|got - exact| <= 2·k·eps·Σ|terms| for every output (k terms each)."""
    exact = a.astype(np.float64).sum(axis)
    k = a.size // max(np.size(exact), 1)
    bound = 2 * k * np.finfo(np.float32).eps * np.abs(a).astype(np.float64).sum(axis)
    return bool(np.all(np.abs(got.astype(np.float64) - exact) <= bound))


@pytest.mark.parametrize(
    "shape, axis",
    [((BIG,), None), ((64, 65536), 1), ((4, 1 << 20), 1), ((1 << 20, 4), 0)],
)
def test_a_big_sum_spreads_over_at_least_256_work_items(shape: tuple[int, ...], axis: int | None) -> None:
    a = floats(int(np.prod(shape))).reshape(shape)
    t = Tensor(a, device="CL").realize()
    counts = launches(t.sum(axis))
    assert len(counts) == 2 and counts[0] >= 256
    assert within_sum_bound(t.sum(axis).numpy(), a, axis)


@pytest.mark.parametrize(
    "shape, axis",
    [((2048, 2048), 0), ((4096, 1024), 0), ((1024, 4096), 1), ((2048, 2048), 1), ((8, 512, 1024), (0, 2))],
)
@pytest.mark.parametrize("op", ["sum", "max"])
def test_every_reduction_of_2_22_elements_launches_at_least_256_work_items(
    shape: tuple[int, ...], axis: int | tuple[int, ...], op: str
) -> None:
    """Column reduces are not split (their outputs fill the grid); the opt pass's lanes and tile rows must
    not take that back (spec/opt.md §5: a tile gets fewer rows, then fewer lanes, above 256 work-items)."""
    a = floats(int(np.prod(shape))).reshape(shape)
    t = getattr(Tensor(a, device="CL").realize(), op)(axis)
    assert launches(t)[0] >= 256
    want = a.astype(np.float64).sum(axis) if op == "sum" else a.max(axis)
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-4, atol=1e-3)


def test_a_big_max_spreads_and_keeps_the_sequential_bits() -> None:
    a = floats(BIG, seed=2)
    a[BIG // 3], a[BIG // 2] = np.float32(-0.0), np.float32(0.0)
    t = Tensor(-np.abs(a), device="CL").realize()  # its maximum is a tie of 0.0 and -0.0
    m = t._reduce(Ops.MAX, None, False)
    counts = launches(m)
    assert len(counts) == 2 and counts[0] >= 256
    assert m.numpy().tobytes() == sequential_max(-np.abs(a)[None])[0].tobytes()


@pytest.mark.parametrize("n", [BIG + 3, 1000003, 65537])
def test_odd_sizes_against_numpy(n: int) -> None:
    a = floats(n, seed=n % 7)
    assert within_sum_bound(Tensor(a, device="CL").sum().numpy(), a, None)
    ints = np.random.default_rng(n).integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    assert Tensor(ints, device="CL").sum().numpy() == ints.sum(dtype=np.int32)
    assert Tensor(ints, device="CL").max().numpy() == ints.max()
    assert Tensor(a, device="CL")._reduce(Ops.MAX, None, False).numpy().tobytes() == a.max().tobytes()


def same_but_nan_payloads(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal bits, except that a NaN may be any NaN (Tensor.max takes a row's NaN from a float sum)."""
    nan = np.isnan(want)
    return bool(np.array_equal(np.isnan(got), nan) and got[~nan].tobytes() == want[~nan].tobytes())


def test_maxes_and_mins_with_nans_and_signed_zeros_match_the_cpu_backend() -> None:
    rows = tricky_rows(300001)
    t = Tensor(rows, device="CL")
    got = t._reduce(Ops.MAX, -1, False).numpy()
    assert got.tobytes() == sequential_max(rows).tobytes()
    for cl, cpu in [
        (t.max(-1), Tensor(rows, device="CPU").max(-1)),
        (t.min(-1), Tensor(rows, device="CPU").min(-1)),
        ((-t).min(), (-Tensor(rows, device="CPU")).min()),
    ]:
        assert same_but_nan_payloads(np.atleast_1d(cl.numpy()), np.atleast_1d(cpu.numpy()))


def test_keepdim_and_axis_tuples() -> None:
    a = floats(8 * 64 * 16384, seed=5).reshape(8, 64, 16384)
    t = Tensor(a, device="CL")
    got = t.sum((0, 2), keepdim=True).numpy()
    assert got.shape == (1, 64, 1) and within_sum_bound(got[0, :, 0], a, (0, 2))
    assert len(launches(t.sum((0, 2)))) == 2
    got = t.sum((1, 2)).numpy()
    assert got.shape == (8,) and within_sum_bound(got, a, (1, 2))
    ints = (a * 1000).astype(np.int32)
    assert np.array_equal(Tensor(ints, device="CL").sum((0, 2)).numpy(), ints.sum((0, 2), dtype=np.int32))


def test_gradients_through_the_split() -> None:
    a = floats(BIG + 1, seed=3)
    x = Tensor(a, device="CL", requires_grad=True)
    loss = (x * x).sum()
    loss.backward()
    assert x.grad is not None
    assert np.array_equal(x.grad.numpy(), 2 * a)
    assert within_sum_bound(loss.numpy(), a * a, None)


def test_opt0_and_the_cpu_backend_keep_one_kernel() -> None:
    a = floats(BIG, seed=4)
    with Context(OPT=0):
        assert len(launches(Tensor(a, device="CL").sum())) == 1
    assert len(launches(Tensor(a, device="CPU").sum())) == 1
    assert len(launches(Tensor(a, device="CL").sum())) == 2


def test_small_reduces_stay_one_kernel() -> None:
    assert len(launches(Tensor(floats(1000), device="CL").sum())) == 1
    assert len(launches(Tensor(floats(4096 * 64).reshape(4096, 64), device="CL").sum(1))) == 1
