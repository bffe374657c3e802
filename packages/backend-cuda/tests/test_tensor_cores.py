"""Tensor cores on the device `CUDA` (the emulator where there is no GPU; uopgrad.codegen.tc, spec/opt.md §6):
a float16 matmul goes through the WMMA op, its float32 result is the stated rounding bit for bit, its
float16 result is within the bound of numpy's float32 matmul; shapes the pass does not take stay correct,
OPT=0 keeps the plain kernel, and a target without tensor cores (OpenCL, an older GPU) never sees the op."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Context, Device, Ops, Tensor, dtypes, pipeline
from uopgrad_conformance.kit.grouped import recorded_sources
from uopgrad_cuda import CUDARenderer
from uopgrad_cuda.renderer import tensor_core_shapes

MMA = "__uopgrad_mma_f16("


@pytest.fixture
def sources(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return recorded_sources(monkeypatch, CUDARenderer)


@pytest.fixture
def programs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    """The linear programs lowered while the test runs (any device)."""
    seen: list[tuple[object, ...]] = []
    monkeypatch.setattr(pipeline, "tracers", [*pipeline.tracers])
    pipeline.tracers.append(lambda name, value: seen.append(value) if name == "linearize" else None)
    return seen


def halves(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """float16 values of both signs and several magnitudes, some exact zeros."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 2.0 ** rng.integers(-4, 4, shape)
    x[rng.random(shape) < 0.05] = 0
    return x.astype(np.float16)


def stated(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """spec/opt.md §6 as the emulator computes it: per K step of 16, the 16 products (exact in float32) summed
    in float32 in k order from +0.0; the steps' sums added to a float32 accumulator in order."""
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for s in range(0, a.shape[1], 16):
        part = np.zeros_like(acc)
        for k in range(s, s + 16):
            part = part + a32[:, k : k + 1] * b32[k : k + 1, :]
        acc = acc + part
    return acc


@pytest.mark.parametrize("m,k,n", [(16, 16, 8), (32, 48, 16), (64, 32, 40), (48, 64, 24)])
def test_a_float32_result_of_half_inputs_is_the_stated_rounding(sources, m, k, n):
    a, b = halves((m, k), 1), halves((k, n), 2)
    got = (Tensor(a, device="CUDA").float() @ Tensor(b, device="CUDA").float()).numpy()
    assert any(MMA in s for s in sources)
    np.testing.assert_array_equal(got, stated(a, b))


def bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (nearest even), kept as float32: what a bfloat16 buffer holds."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).view(np.float32)


def on_cuda_bf16(x: np.ndarray) -> Tensor:
    return Tensor(x, device="CUDA").cast(dtypes.bfloat16).realize()  # a bfloat16 buffer


@pytest.mark.parametrize("m,k,n", [(16, 16, 8), (32, 48, 24)])
def test_bfloat16_inputs_take_the_bf16_instruction_with_the_stated_rounding(sources, m, k, n):
    a, b = bf16(halves((m, k), 20).astype(np.float32)), bf16(halves((k, n), 21).astype(np.float32))
    ta, tb = on_cuda_bf16(a), on_cuda_bf16(b)
    sources.clear()
    got = (ta.float() @ tb.float()).numpy()
    assert any("__uopgrad_mma_bf16(" in s for s in sources)
    np.testing.assert_array_equal(got, stated(a, b))
    got16 = (ta @ tb).float().numpy()  # the bfloat16 result: the float32 sum rounded once
    np.testing.assert_array_equal(got16, bf16(stated(a, b)))


@pytest.mark.parametrize("m,k,n", [(32, 48, 16), (128, 256, 64)])
def test_a_half_matmul_goes_through_wmma_within_the_bound(sources, programs, m, k, n):
    a, b = halves((m, k), 3), halves((k, n), 4)
    got = (Tensor(a, device="CUDA") @ Tensor(b, device="CUDA")).numpy()
    assert got.dtype == np.float16
    assert any(MMA in s for s in sources)
    assert any(u.op is Ops.WMMA for prg in programs for u in prg)
    want = a.astype(np.float32) @ b.astype(np.float32)
    terms = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    # float32 sums (2·k·eps·Σ|terms|), then one rounding to float16 (half an ulp of float16)
    bound = 2 * k * np.finfo(np.float32).eps * terms + np.abs(want) * 2.0**-11 + 2.0**-25
    assert np.all(np.abs(got.astype(np.float64) - want) <= bound)


def test_transposed_operands_and_an_epilogue(sources):
    a, b, bias = halves((48, 32), 5), halves((16, 32), 6), halves((16,), 7)
    ta, tb = Tensor(a.T.copy(), device="CUDA").T, Tensor(b, device="CUDA").T  # a read by columns, b by rows
    got = (ta.float() @ tb.float() + Tensor(bias, device="CUDA").float()).relu().numpy()
    assert any(MMA in s for s in sources)
    np.testing.assert_array_equal(got, np.maximum(stated(a, b.T) + bias.astype(np.float32), 0))


@pytest.mark.parametrize("m,k,n", [(17, 16, 8), (16, 20, 8), (16, 16, 12), (5, 7, 3)])
def test_shapes_off_the_tile_stay_correct(sources, m, k, n):
    a, b = halves((m, k), 8), halves((k, n), 9)
    got = (Tensor(a, device="CUDA") @ Tensor(b, device="CUDA")).numpy()
    want = (Tensor(a, device="REFERENCE") @ Tensor(b, device="REFERENCE")).numpy()
    assert not any(MMA in s for s in sources)  # the pass takes multiples of the tile only (spec/opt.md §6)
    np.testing.assert_array_equal(got, want)


def test_opt_0_keeps_the_plain_kernel(sources):
    a, b = halves((32, 32), 10), halves((32, 16), 11)
    with Context(OPT=0):
        got = (Tensor(a, device="CUDA") @ Tensor(b, device="CUDA")).numpy()
    assert sources and not any(MMA in s for s in sources)
    want = (Tensor(a, device="REFERENCE") @ Tensor(b, device="REFERENCE")).numpy()
    np.testing.assert_array_equal(got, want)  # each product rounded to float16, as REFERENCE computes it


def test_opt_0_after_opt_1_in_one_process_is_still_the_plain_kernel(sources):
    a, b = halves((48, 32), 16), halves((32, 24), 17)
    with_tc = (Tensor(a, device="CUDA") @ Tensor(b, device="CUDA")).numpy()
    assert any(MMA in s for s in sources)
    with Context(OPT=0):
        plain = (Tensor(a, device="CUDA") @ Tensor(b, device="CUDA")).numpy()
    want = (Tensor(a, device="REFERENCE") @ Tensor(b, device="REFERENCE")).numpy()
    np.testing.assert_array_equal(plain, want)  # a kernel built with OPT=1 is not reused under OPT=0
    assert not np.array_equal(with_tc, want)  # the inputs tell the two roundings apart


def test_float32_inputs_do_not_use_tensor_cores(sources):
    a, b = halves((32, 32), 12).astype(np.float32), halves((32, 16), 13).astype(np.float32)
    (Tensor(a, device="CUDA") @ Tensor(b, device="CUDA")).numpy()
    assert sources and not any(MMA in s for s in sources)


def test_the_target_declares_tensor_cores_by_architecture():
    assert Device["CUDA"].capabilities.tensor_cores == ((16, 8, 16),)
    assert tensor_core_shapes("sm_80") == tensor_core_shapes("sm_90") == ((16, 8, 16),)
    assert tensor_core_shapes("sm_75") == () and tensor_core_shapes(None) == ()
    target = CUDARenderer(arch="sm_75").target(frozenset({dtypes.float16, dtypes.float32}))
    assert target.tensor_cores == ()


def test_opencl_never_sees_the_op(programs):
    try:
        cl = Device["CL"]
    except Exception as e:  # pragma: no cover - a machine without pyopencl/PoCL
        pytest.skip(f"no OpenCL device: {e}")
    assert cl.capabilities.tensor_cores == ()
    a, b = halves((32, 32), 14), halves((32, 16), 15)
    (Tensor(a, device="CL") @ Tensor(b, device="CL")).numpy()
    assert programs and not any(u.op is Ops.WMMA for prg in programs for u in prg)


def test_the_tensor_core_kernel_passes_the_well_formedness_checks(sources):
    a, b = halves((80, 48), 22), halves((48, 56), 23)  # a shape no other test lowers: lowered here
    with Context(VERIFY=1):
        got = (Tensor(a, device="CUDA").float() @ Tensor(b, device="CUDA").float()).numpy()
    assert any(MMA in s for s in sources)
    np.testing.assert_array_equal(got, stated(a, b))
