"""The order an unrolled float sum takes on the CPU (spec/opt.md §2), bit for bit: `accs` vector
accumulators, accumulator k summing the vectors k, k+accs, ... of a row in turn, combined lane-wise
pairwise, then the pairwise lane tree. The policy only bounds the error of a reordered sum; this pins the
order down, so that a change of it is a decision, not an accident."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Ops, Tensor
from uopgrad.backend import Device
from uopgrad.codegen.opt import ACCS, ACCS_DEFAULT

WIDTH = Device["CPU"].capabilities.vector_width
pytestmark = pytest.mark.skipif(WIDTH == 0, reason="this CPU has no vector width: the opt pass is off")


def pairwise(xs: list[np.ndarray]) -> np.ndarray:
    while len(xs) > 1:
        xs = [a + b for a, b in zip(xs[::2], xs[1::2])]
    return xs[0]


def documented_order(row: np.ndarray) -> np.float32:
    lanes = WIDTH // row.itemsize
    accs = ACCS.get(WIDTH, ACCS_DEFAULT)
    vecs = row.reshape(-1, lanes)  # float32 vectors: numpy adds them lane by lane, rounding each add
    parts = [np.zeros(lanes, np.float32) for _ in range(accs)]
    for i, v in enumerate(vecs):
        parts[i % accs] = parts[i % accs] + v
    v = pairwise(parts)
    return pairwise([v[k : k + 1] for k in range(lanes)])[0]


def test_a_row_sum_takes_the_documented_order_bit_for_bit():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((16, 1024)) * np.logspace(0, 6, 1024)).astype(np.float32)  # rounding shows
    got = Tensor(x, device="CPU").sum(axis=1).numpy()
    want = np.array([documented_order(r) for r in x], np.float32)
    assert got.tobytes() == want.tobytes()


def test_a_full_sum_and_a_loss_take_the_documented_order_bit_for_bit():
    # no output loop (`x.sum()`, a mean squared error): the reduce is unrolled as a row's is, the vectors
    # numbered along the flattened input (the inner axis is a multiple of the lanes and accumulators)
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((64, 256)) * np.logspace(0, 6, 256)).astype(np.float32)
    y = rng.standard_normal((64, 256)).astype(np.float32)
    assert Tensor(x, device="CPU").sum().numpy().tobytes() == documented_order(x.ravel()).tobytes()
    loss = ((Tensor(x, device="CPU") - Tensor(y, device="CPU")) ** 2).mean().numpy()
    squares = (x + y * np.float32(-1)) ** 2  # x - y as the kernel computes it; squares are exact-rounded
    want = documented_order(squares.ravel()) * np.float32(1 / x.size)
    assert loss.tobytes() == want.tobytes()


# the three matmuls of a linear layer's step: forward, the input's gradient, the weight's gradient
STEP_MATMULS = {
    "x @ w": lambda x, g, w: x @ w,
    "g @ w.T": lambda x, g, w: g @ w.T,
    "x.T @ g": lambda x, g, w: x.T @ g,
}


@pytest.mark.parametrize("shape", list(STEP_MATMULS))
def test_the_small_matmuls_of_a_training_step_run_on_every_core_and_keep_their_values(shape):
    # a 64x256 @ 256x256 matmul tiles into a nest of only 16k loop iterations, each of 16-lane vector ops:
    # the parallel decision counts lane-operations, so these kernels are split over the cores (counting
    # iterations kept the backward of a training step's layers serial). Each output's reduce stays inside
    # one iteration of the parallel loop, so the values do not depend on the thread count
    rng = np.random.default_rng(1)
    x, g = (rng.standard_normal((64, 256)).astype(np.float32) for _ in range(2))
    w = rng.standard_normal((256, 256)).astype(np.float32)
    out = STEP_MATMULS[shape](*(Tensor(v, device="CPU") for v in (x, g, w)))
    items = out.linear_with_vars()[0].src
    kernels = [Device["CPU"].kernel(it) for it in items if it.src[0].op is Ops.SINK]
    assert len(kernels) == 1 and "#pragma omp parallel for" in kernels[0].src
    np.testing.assert_allclose(out.numpy(), STEP_MATMULS[shape](x, g, w), rtol=1e-4, atol=1e-4)


def test_a_long_elementwise_chain_over_few_elements_stays_serial():
    # 600 ops on 1k elements are microseconds of vector code: OpenMP would pay a fork and join, and it
    # tripled the compile time of such kernels (the split backward of a long chain has dozens of them)
    x = Tensor(np.linspace(-1, 1, 1024, dtype=np.float32), device="CPU")
    y = x
    for _ in range(300):
        y = y * 1.001 + 0.5
    items = y.linear_with_vars()[0].src
    kernels = [Device["CPU"].kernel(it) for it in items if it.src[0].op is Ops.SINK]
    assert len(kernels) == 1 and "#pragma" not in kernels[0].src
    want = np.linspace(-1, 1, 1024, dtype=np.float32)
    for _ in range(300):
        want = want * np.float32(1.001) + np.float32(0.5)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5)
