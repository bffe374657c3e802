"""Reductions split over a block (uopgrad.codegen.group, spec/opt.md §4) on the device `CUDA` (the
emulator where there is no GPU): full and per-row sums and maxes of odd and large sizes against numpy
within the exactness policy (integer sums and float maxes bit for bit, float sums within the suite's
bound), the shared memory a big reduce uses, and the same bits on every run."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Ops, Tensor
from uopgrad.config import Context
from uopgrad_conformance.kit.grouped import (
    assert_sum_policy,
    floats,
    recorded_sources,
    sequential_max,
    tricky_rows,
)
from uopgrad_cuda import CUDARenderer

SIZES = [1, 7, 1023, 65536 + 3]


@pytest.fixture
def sources(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The CUDA sources rendered while the test runs."""
    return recorded_sources(monkeypatch, CUDARenderer)


@pytest.mark.parametrize("n", SIZES)
def test_sums_and_maxes_keep_the_policy(n: int) -> None:
    a = floats(n)
    assert_sum_policy("CUDA", a)
    # the MAX reduce itself: Tensor.max composes it with a sum of the NaNs (docs/semantics.md §5)
    got = Tensor(a, device="CUDA")._reduce(Ops.MAX, None, False).numpy()
    assert got.tobytes() == sequential_max(a[None])[0].tobytes()
    assert_sum_policy(
        "CUDA", np.random.default_rng(1).integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    )


def test_max_ties_of_zeros_and_nan_payloads_keep_the_sequential_bits() -> None:
    rows = tricky_rows(3001)
    got = Tensor(rows, device="CUDA")._reduce(Ops.MAX, -1, False).numpy()
    assert got.tobytes() == sequential_max(rows).tobytes()


def test_a_big_reduce_uses_shared_memory_and_gives_the_same_bits_each_run(sources: list[str]) -> None:
    a = floats(65536 + 5, seed=3)  # a size no other test lowers, so its kernel is rendered here
    with Context(OPT=0):  # one kernel: split over the grid (§4.1), its second kernel is every big sum's
        sums = {Tensor(a, device="CUDA").sum().numpy().tobytes() for _ in range(3)}
    assert len(sums) == 1
    assert any("__shared__" in s and "__syncthreads();" in s for s in sources)
    sources.clear()
    Tensor(floats(9), device="CUDA").sum().numpy()
    assert sources and not any("__shared__" in s for s in sources)
