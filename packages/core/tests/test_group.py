"""Reduces split over a workgroup (uopgrad.codegen.group, spec/opt.md §4), run as linear programs on
REFERENCE (lockstep lanes, one local array per workgroup): integer sums and float maxes byte for byte
against the unsplit kernel, float sums within the suite's bound; the program's form (local
memory, barriers, one workgroup per output); no split without local memory or for a float product.

A float MAX is split by contiguous chunks here: the default (interleaved, then the exact fallback of
spec/opt.md §2 where the result is a zero or a NaN) has a loop whose bound differs between workgroups,
which REFERENCE's lockstep lanes do not run; the backends' tests check that one."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Ops, Tensor
from uopgrad.backends.reference import REFERENCE_OPS, evaluate, run_schedule
from uopgrad.codegen import GridLimits
from uopgrad.codegen import group as grp
from uopgrad.pipeline import lower
from uopgrad.schedule import schedule

pytestmark = pytest.mark.usefixtures("reference_default")

GRID = GridLimits(local_size=16, local_memory=1024)
PLAIN = GridLimits(local_size=16)  # no local memory: the unsplit kernel, the reference for bits


@pytest.fixture(autouse=True)
def small_reduces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Split reduces from 16 elements on (2 per thread), so small cases run through the tree; float MAX
    by contiguous chunks."""
    monkeypatch.setattr(grp, "MIN_REDUCE", 16)
    monkeypatch.setattr(grp, "MIN_CHUNK", 2)
    monkeypatch.setitem(grp.LAYOUTS, (Ops.MAX, True), True)


def run(out: Tensor, grid: GridLimits = GRID) -> np.ndarray:
    s = schedule(out.uop.sink())
    run_schedule(s, ops=REFERENCE_OPS, grid=grid)
    return evaluate(s.outputs[out.uop])[0]


def programs(out: Tensor, grid: GridLimits = GRID) -> list:
    s = schedule(out.uop.sink())
    return [lower(it, REFERENCE_OPS, grid) for it in s.items if it.src[0].op is Ops.SINK]


def floats(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def tricky(n: int) -> np.ndarray:
    """Rows whose maximum is a tie of signed zeros (both orders) or that hold two NaNs of other payloads."""
    rows = np.stack([-np.abs(floats(n, seed=s)) for s in range(4)])
    rows[0, n // 3], rows[0, 2 * n // 3] = 0.0, -0.0
    rows[1, n // 3], rows[1, 2 * n // 3] = -0.0, 0.0
    bits = rows.view(np.uint32)
    bits[2, n // 2], bits[2, n - 1] = 0xFFC00001, 0x7FC00002
    bits[3, 1], bits[3, n // 2] = 0x7FA00003, 0xFFC00004
    return rows


@pytest.mark.parametrize("n", [16, 17, 31, 100, 1000])
def test_full_reduces_keep_the_policy(n: int) -> None:
    a = floats(n)
    got, want = run(Tensor(a).sum()), a.astype(np.float64).sum()
    assert abs(float(got) - want) <= 2 * n * np.finfo(np.float32).eps * np.abs(a).sum()
    ints = np.random.default_rng(1).integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    assert run(Tensor(ints).sum()) == ints.sum(dtype=np.int32)
    assert run(Tensor(ints).max()) == ints.max()
    for row in tricky(n):
        t = Tensor(np.ascontiguousarray(row))
        assert run(t.max()).tobytes() == run(t.max(), PLAIN).tobytes()


def test_row_reduces_and_reduces_over_two_axes() -> None:
    rows = tricky(301)
    t = Tensor(rows)
    assert run(t.max(axis=-1)).tobytes() == run(t.max(axis=-1), PLAIN).tobytes()
    a = floats(5, 7, 9, seed=2)
    got = run(Tensor(a).sum(axis=(1, 2)))
    np.testing.assert_allclose(got, a.astype(np.float64).sum(axis=(1, 2)), rtol=1e-5, atol=1e-5)
    cube = (np.arange(5 * 7 * 9) % 13).astype(np.int32).reshape(5, 7, 9)
    assert np.array_equal(run(Tensor(cube).sum(axis=(0, 2))), cube.sum(axis=(0, 2), dtype=np.int32))


def test_a_split_kernel_has_local_memory_barriers_and_one_workgroup_per_output() -> None:
    [prg] = programs(Tensor(floats(6, 100)).sum(axis=-1))
    ops = [u.op for u in prg.uops]
    assert Ops.DEFINE_LOCAL in ops and ops.count(Ops.BARRIER) == 1 + 4  # 16 threads: 4 tree steps
    assert prg.local_size == (16, 1, 1) and prg.global_size == (6, 1, 1)
    assert prg.outs == (0,) and prg.ins == (1,)  # local memory is not a buffer slot


def test_by_default_a_float_max_is_interleaved_with_the_exact_fallback(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(grp.LAYOUTS, (Ops.MAX, True), grp.CHUNKED_MAX)
    [prg] = programs(Tensor(floats(1001, seed=5))._reduce(Ops.MAX, None, False))  # the bare MAX reduce
    bounds = [u.src[0].op for u in prg.uops if u.op is Ops.RANGE]
    assert Ops.DEFINE_LOCAL in [u.op for u in prg.uops] and Ops.WHERE in bounds  # runs only where needed


@pytest.mark.parametrize("grid", [PLAIN, None])
def test_no_split_without_local_memory(grid: GridLimits | None) -> None:
    [prg] = programs(Tensor(floats(1000)).sum(), grid)  # type: ignore[arg-type]
    assert Ops.DEFINE_LOCAL not in [u.op for u in prg.uops]


def test_a_float_product_and_a_short_reduce_stay_loops() -> None:
    [prod] = programs(Tensor(floats(1000)).prod())
    [short] = programs(Tensor(floats(15)).sum())
    assert all(Ops.DEFINE_LOCAL not in [u.op for u in p.uops] for p in (prod, short))
