"""The order an unrolled float sum takes on the CPU (spec/opt.md §2), bit for bit: `accs` vector
accumulators, accumulator k summing the vectors k, k+accs, ... of a row in turn, combined lane-wise
pairwise, then the pairwise lane tree. The policy only bounds the error of a reordered sum; this pins the
order down, so that a change of it is a decision, not an accident."""
from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Tensor
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
    return pairwise([v[k:k + 1] for k in range(lanes)])[0]


def test_a_row_sum_takes_the_documented_order_bit_for_bit():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((16, 1024)) * np.logspace(0, 6, 1024)).astype(np.float32)  # rounding shows
    got = Tensor(x, device="CPU").sum(axis=1).numpy()
    want = np.array([documented_order(r) for r in x], np.float32)
    assert got.tobytes() == want.tobytes()
