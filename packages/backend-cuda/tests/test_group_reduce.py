"""Reductions split over a block (uopgrad.codegen.group, spec/opt.md §4) on the device `CUDA` (the
emulator where there is no GPU): full and per-row sums and maxes of odd and large sizes against numpy
within the exactness policy (integer sums and float maxes bit for bit, float sums within the suite's
bound), the shared memory a big reduce uses, and the same bits on every run."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Tensor
from uopgrad_cuda import CUDARenderer

SIZES = [1, 7, 1023, 65536 + 3]


def floats(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def sequential_max(rows: np.ndarray) -> np.ndarray:
    """The bits of the unoptimised `acc = max(acc, x)` along each row: the first NaN wins, else the last
    of the elements equal to the maximum."""
    out = []
    for row in rows:
        nans = np.flatnonzero(np.isnan(row))
        out.append(row[nans[0]] if nans.size else row[np.flatnonzero(row == row.max())[-1]])
    return np.array(out, dtype=rows.dtype)


@pytest.fixture
def sources(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The CUDA sources rendered while the test runs."""
    seen: list[str] = []
    real = CUDARenderer.render

    def recording(self: CUDARenderer, program: object) -> str:
        src = real(self, program)  # type: ignore[arg-type]
        seen.append(src)
        return src
    monkeypatch.setattr(CUDARenderer, "render", recording)
    return seen


@pytest.mark.parametrize("n", SIZES)
def test_sums_and_maxes_keep_the_policy(n: int) -> None:
    a = floats(n)
    got = float(Tensor(a, device="CUDA").sum().numpy())
    exact = float(a.astype(np.float64).sum())
    assert abs(got - exact) <= 2 * n * np.finfo(np.float32).eps * float(np.abs(a).astype(np.float64).sum())
    assert Tensor(a, device="CUDA").max().numpy().tobytes() == sequential_max(a[None])[0].tobytes()
    ints = np.random.default_rng(1).integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    assert Tensor(ints, device="CUDA").sum().numpy() == ints.sum(dtype=np.int32)


def test_max_ties_of_zeros_and_nan_payloads_keep_the_sequential_bits() -> None:
    n = 3001
    rows = np.stack([-np.abs(floats(n, s)) for s in range(4)])
    rows[0, 1000], rows[0, 2000] = 0.0, -0.0
    rows[1, 1000], rows[1, 2000] = -0.0, 0.0
    bits = rows.view(np.uint32)
    bits[2, 1500], bits[2, n - 1] = 0xFFC00001, 0x7FC00002
    bits[3, 0], bits[3, 1500] = 0x7FA00003, 0xFFC00004
    assert Tensor(rows, device="CUDA").max(axis=-1).numpy().tobytes() == sequential_max(rows).tobytes()


def test_a_big_reduce_uses_shared_memory_and_gives_the_same_bits_each_run(sources: list[str]) -> None:
    a = floats(65536 + 5, seed=3)  # a size no other test lowers, so its kernel is rendered here
    sums = {Tensor(a, device="CUDA").sum().numpy().tobytes() for _ in range(3)}
    assert len(sums) == 1
    assert any("__shared__" in s and "__syncthreads();" in s for s in sources)
    sources.clear()
    Tensor(floats(9), device="CUDA").sum().numpy()
    assert sources and not any("__shared__" in s for s in sources)
