"""The host emulator's CUDA semantics, on hand-written kernels (each one also compiled by NVRTC):
`__syncthreads` as a barrier of the whole block (shared memory written before it is read after it, in either
thread order), a barrier some thread never reaches and threads at different barriers are clear errors,
atomics return the old value and never lose an update, divergent branches and early returns, grid indices
of every dimension, reversed order exposes a kernel that races, and whole tensor programs in reversed
order give REFERENCE's results."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Device
from uopgrad.backend import CompileError
from uopgrad_conformance.kit.pipeline import assert_close, both
from uopgrad_cuda import CUDABackend

REVERSE_IN_BLOCK = """
extern "C" __global__ void __launch_bounds__(64) rev(float* __restrict__ out, const float* __restrict__ in) {
  __shared__ float tile[64];
  const int t = threadIdx.x, base = blockIdx.x * blockDim.x;
  tile[t] = in[base + t];
  __syncthreads();
  out[base + t] = tile[blockDim.x - 1 - t];
}
"""


@pytest.mark.parametrize("reverse", [False, True])
def test_barrier_orders_shared_memory_between_threads(launch, reverse):
    x = np.arange(256, dtype=np.float32)
    out, _ = launch(REVERSE_IN_BLOCK, "rev", (4, 1, 1), (64, 1, 1), np.zeros_like(x), x, reverse=reverse)
    np.testing.assert_array_equal(out, x.reshape(4, 64)[:, ::-1].reshape(-1))


RACY = REVERSE_IN_BLOCK.replace("__syncthreads();", "").replace("rev(", "racy(")


def test_reversed_order_exposes_a_missing_barrier(launch):
    # without the barrier a thread reads its partner's slot before or after the partner wrote it, depending on
    # the order: forward reads garbage (zeros) for the upper half, reverse for the lower half
    x = np.arange(1, 65, dtype=np.float32)
    fwd, _ = launch(RACY, "racy", (1, 1, 1), (64, 1, 1), np.zeros_like(x), x)
    rev, _ = launch(RACY, "racy", (1, 1, 1), (64, 1, 1), np.zeros_like(x), x, reverse=True)
    want = x[::-1]
    assert not np.array_equal(fwd, want) or not np.array_equal(rev, want)
    assert not np.array_equal(fwd, rev)


SEVERAL_BARRIERS = """
extern "C" __global__ void __launch_bounds__(32) scan(int* __restrict__ out) {
  __shared__ int s[32];
  const int t = threadIdx.x;
  s[t] = t + 1;
  for (int d = 1; d < 32; d *= 2) {
    __syncthreads();
    int v = t >= d ? s[t - d] : 0;
    __syncthreads();
    s[t] += v;
  }
  __syncthreads();
  out[t] = s[t];
}
"""


@pytest.mark.parametrize("reverse", [False, True])
def test_a_loop_of_barriers_gives_the_prefix_sum(launch, reverse):
    (out,) = launch(SEVERAL_BARRIERS, "scan", (1, 1, 1), (32, 1, 1), np.zeros(32, np.int32), reverse=reverse)
    np.testing.assert_array_equal(out, np.cumsum(np.arange(1, 33)))


EARLY_RETURN_BEFORE_BARRIER = """
extern "C" __global__ void __launch_bounds__(8) bad(int* __restrict__ out) {
  __shared__ int s[8];
  if (threadIdx.x == 5) return;
  s[threadIdx.x] = 1;
  __syncthreads();
  out[threadIdx.x] = s[0];
}
"""


def test_a_barrier_not_every_thread_reaches_is_an_error(launch):
    with pytest.raises(
        RuntimeError,
        match=r"reached by 7 of the 8 threads of block \(1,0,0\).*"
        r"thread \(5,0,0\) returned without reaching it",
    ):
        launch(EARLY_RETURN_BEFORE_BARRIER, "bad", (2, 1, 1), (8, 1, 1), np.zeros(8, np.int32), reverse=True)


DIFFERENT_BARRIERS = """
extern "C" __global__ void __launch_bounds__(4) split(int* __restrict__ out) {
  if (threadIdx.x < 2) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}
"""


def test_threads_at_different_barriers_is_an_error(launch):
    with pytest.raises(RuntimeError, match=r"wait at different __syncthreads\(\).*line 4.*line 6"):
        launch(DIFFERENT_BARRIERS, "split", (1, 1, 1), (4, 1, 1), np.zeros(4, np.int32))


DIVERGENT = """
extern "C" __global__ void __launch_bounds__(16) div(int* __restrict__ out, const int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;               /* the tail of the last block does nothing */
  if (i % 3 == 0) out[i] = -i;
  else if (i % 3 == 1) { for (int k = 0; k < i; k++) out[i] += 2; }
  else out[i] = i * i;
}
"""


@pytest.mark.parametrize("reverse", [False, True])
def test_divergent_branches_and_early_returns(launch, reverse):
    n = 40
    (out,) = launch(
        DIVERGENT, "div", (3, 1, 1), (16, 1, 1), np.full(48, 7, np.int32), vals=(n,), reverse=reverse
    )
    i = np.arange(n)
    want = np.where(i % 3 == 0, -i, np.where(i % 3 == 1, 7 + 2 * i, i * i))
    np.testing.assert_array_equal(out[:n], want)
    np.testing.assert_array_equal(out[n:], 7)  # threads past n returned first


ATOMICS = """
extern "C" __global__ void __launch_bounds__(64) atom(int* __restrict__ slots, int* __restrict__ counter,
                                                      float* __restrict__ fsum, unsigned int* mx) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  int old = atomicAdd(counter, 1);
  slots[old] = i;                  /* every old value is distinct: a permutation of the thread ids */
  atomicAdd(fsum, 0.5f);
  atomicMax(mx, (unsigned int)(i * 7 % 101));
}
"""


@pytest.mark.parametrize("reverse", [False, True])
def test_atomics_return_the_old_value_and_lose_nothing(launch, reverse):
    slots, counter, fsum, mx = launch(
        ATOMICS,
        "atom",
        (4, 1, 1),
        (64, 1, 1),
        np.full(256, -1, np.int32),
        np.zeros(1, np.int32),
        np.zeros(1, np.float32),
        np.zeros(1, np.uint32),
        reverse=reverse,
    )
    assert counter[0] == 256 and fsum[0] == 128.0 and mx[0] == max(i * 7 % 101 for i in range(256))
    np.testing.assert_array_equal(np.sort(slots), np.arange(256))
    assert (slots[0] == 255) == reverse  # the launch order is the one asked for


GRID3 = """
extern "C" __global__ void __launch_bounds__(24) ids(int* __restrict__ out) {
  const int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
  const int bx = blockIdx.x, by = blockIdx.y, bz = blockIdx.z;
  const int t = tx + blockDim.x * (ty + blockDim.y * tz);
  const int b = bx + gridDim.x * (by + gridDim.y * bz);
  out[b * (blockDim.x * blockDim.y * blockDim.z) + t] =
      ((bz * 10 + by) * 10 + bx) * 1000 + (tz * 10 + ty) * 10 + tx;
}
"""


def test_grid_and_block_indices_in_three_dimensions(launch):
    (out,) = launch(GRID3, "ids", (2, 3, 2), (4, 3, 2), np.zeros(12 * 24, np.int32))
    b = np.arange(12)
    t = np.arange(24)
    bx, by, bz = b % 2, b // 2 % 3, b // 6
    tx, ty, tz = t % 4, t // 4 % 3, t // 12
    want = ((bz * 10 + by) * 10 + bx)[:, None] * 1000 + ((tz * 10 + ty) * 10 + tx)[None, :]
    np.testing.assert_array_equal(out, want.reshape(-1))


def test_nvrtc_checks_the_source_before_the_host_build(emu):
    # valid host C++ under the emulator's header that CUDA rejects: a host function called in a kernel
    src = 'extern "C" __global__ void k(int* __restrict__ out) { out[0] = getcontext(0); }'
    with pytest.raises(CompileError, match=r"(?s)NVRTC 13.*identifier \"getcontext\" is undefined"):
        emu.compile(src)
    assert emu.nvrtc.compile(REVERSE_IN_BLOCK)[:4] == b"\x7fELF"


def test_reversed_thread_order_gives_the_same_results(monkeypatch):
    # a fresh backend object in reversed order: every kernel codegen emits is free of order dependence
    if Device["CUDA"].gpu is not None:
        pytest.skip("a GPU is present: thread order is the hardware's")
    monkeypatch.setenv("UOPGRAD_CUDA_EMULATE", "reverse")
    rev = CUDABackend("CUDA:7")
    assert rev.runtime.reverse
    monkeypatch.setitem(Device._instances, "CUDA:7", rev)
    a = np.random.default_rng(7).standard_normal((33, 130)).astype(np.float32)
    for fn in (lambda t: t.softmax(axis=-1), lambda t: t.sum(axis=0), lambda t: t.permute(1, 0) * 3):
        assert_close(*both("CUDA:7", fn, a), rtol=1e-6)
