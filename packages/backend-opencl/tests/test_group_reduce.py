"""Reductions split over a work-group (uopgrad.codegen.group, spec/opt.md §4): full and per-row sums and
maxes of odd and large sizes against numpy within the exactness policy (integer sums and float maxes bit
for bit, float sums within the suite's bound), the local memory a big reduce uses, and the same bits on
every run. The split is on by default on GPUs only (runtime.GROUP_ENV): here every test turns it on."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from uopgrad import Device, Ops, Tensor
from uopgrad.config import Context
from uopgrad_conformance.kit.grouped import (
    assert_sum_policy,
    floats,
    recorded_sources,
    sequential_max,
    tricky_rows,
)
from uopgrad_opencl import OpenCLRenderer
from uopgrad_opencl.runtime import GROUP_ENV, split_reduces

SIZES = [1, 7, 1023, 4096, 4096 * 1024 + 3]


@pytest.fixture(autouse=True)
def grouped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CL device's work-groups split big reduces, as on a GPU (a new grid, so a new target that the
    renderer builds: programs of their own)."""
    cl = Device["CL"]
    renderer = cl.renderer  # type: ignore[attr-defined]
    monkeypatch.setattr(renderer, "grid", dataclasses.replace(renderer.grid, local_memory=32768))
    monkeypatch.setattr(cl, "capabilities", renderer.target(cl.capabilities.dtypes))


def test_the_split_is_on_for_gpus_and_where_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GROUP_ENV, raising=False)
    assert split_reduces(is_cpu=False) and not split_reduces(is_cpu=True)
    monkeypatch.setenv(GROUP_ENV, "1")
    assert split_reduces(is_cpu=True)
    monkeypatch.setenv(GROUP_ENV, "0")
    assert not split_reduces(is_cpu=False)


@pytest.fixture
def sources(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The OpenCL sources rendered while the test runs."""
    return recorded_sources(monkeypatch, OpenCLRenderer)


@pytest.mark.parametrize("n", SIZES)
def test_float_sum_is_within_the_bound(n: int) -> None:
    assert_sum_policy("CL", floats(n))


@pytest.mark.parametrize("n", SIZES)
def test_int_sum_is_exact(n: int) -> None:
    assert_sum_policy(
        "CL", np.random.default_rng(1).integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    )  # wraps


@pytest.mark.parametrize("n", SIZES)
def test_float_max_is_bit_exact(n: int) -> None:
    a = floats(n)
    got = Tensor(a, device="CL")._reduce(Ops.MAX, None, False).numpy()
    assert got.tobytes() == sequential_max(a[None])[0].tobytes()


@pytest.mark.parametrize("n", [1023, 4096, 100003])
def test_max_ties_of_zeros_and_nan_payloads_keep_the_sequential_bits(n: int) -> None:
    rows = tricky_rows(n)
    want = sequential_max(rows)
    # the MAX reduce itself: Tensor.max composes it with a sum of the NaNs (docs/semantics.md §5)
    assert Tensor(rows, device="CL")._reduce(Ops.MAX, -1, False).numpy().tobytes() == want.tobytes()
    for r in rows:  # and each row as a full reduce
        got = Tensor(np.ascontiguousarray(r), device="CL")._reduce(Ops.MAX, None, False).numpy()
        assert got.tobytes() == sequential_max(r[None]).tobytes()


def test_per_row_sums_of_an_odd_width() -> None:
    assert_sum_policy("CL", floats(33 * 3001).reshape(33, 3001), axis=-1)
    ints = (np.arange(33 * 3001, dtype=np.int64) * 7919 % 65536 - 32768).astype(np.int32).reshape(33, 3001)
    assert_sum_policy("CL", ints, axis=-1)


def test_a_big_reduce_uses_local_memory_and_a_small_one_does_not(sources: list[str]) -> None:
    big = floats(4096 * 1024 + 5)  # a size no other test lowers, so its kernel is rendered here
    with Context(OPT=0):  # one kernel: split over the grid (§4.1), its second kernel is every big sum's
        Tensor(big, device="CL").sum().numpy()
    assert any("__local" in s and "barrier(CLK_LOCAL_MEM_FENCE)" in s for s in sources)
    sources.clear()
    Tensor(floats(9), device="CL").sum().numpy()
    assert sources and not any("__local" in s for s in sources)


def test_repeated_runs_give_the_same_bits() -> None:
    a = floats(4096 * 1024 + 3, seed=4)
    sums = {Tensor(a, device="CL").sum().numpy().tobytes() for _ in range(4)}
    maxes = {Tensor(a, device="CL")._reduce(Ops.MAX, None, False).numpy().tobytes() for _ in range(4)}
    assert len(sums) == 1 and len(maxes) == 1
