"""NVRTC compiles every kind of kernel the backend generates for sm_80 (A100) and sm_90 (H100): the sources
of float16 and bfloat16 matmuls on tensor cores, a float32 matmul, a reduction grouped over a block (shared
memory and barriers), a row reduction and an elementwise chain, rendered on the device `CUDA` and compiled
again for each architecture."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Device, Tensor, dtypes
from uopgrad_cuda import NVRTCCompiler
from uopgrad_cuda.compiler import is_cubin

ARCHS = ("sm_80", "sm_90")


@pytest.fixture(scope="module")
def kernels() -> dict[str, str]:
    """name -> the CUDA source of each representative kernel."""
    rng = np.random.default_rng(0)
    h = rng.standard_normal((64, 64)).astype(np.float16)
    f = rng.standard_normal((64, 64)).astype(np.float32)
    big = rng.standard_normal(65536 + 7).astype(np.float32)
    bf = Tensor(f, device="CUDA").cast(dtypes.bfloat16).realize()
    runs = {
        "half matmul (tensor cores)": lambda: Tensor(h, device="CUDA") @ Tensor(h, device="CUDA"),
        "bfloat16 matmul (tensor cores)": lambda: bf @ bf,
        "float32 matmul": lambda: Tensor(f, device="CUDA") @ Tensor(f, device="CUDA"),
        "grouped full sum": lambda: Tensor(big, device="CUDA").sum(),
        "row max": lambda: Tensor(f, device="CUDA").max(axis=1),
        "elementwise chain": lambda: ((Tensor(f, device="CUDA") * 2 + 1).exp2().sqrt() - 3).relu(),
    }
    # the sources the backend's renderer prints for each kernel of the schedule (linear_programs: lowered
    # for CUDA's target, whatever this process has compiled before)
    render = Device["CUDA"].renderer.render
    out: dict[str, str] = {}
    for name, run in runs.items():
        sources = [render(p) for p in run().linear_programs()]
        assert sources, f"{name}: no kernel"
        # the last kernel, or the one grouped over a block (a big sum is split in two stages first:
        # spec/opt.md §4.1, and either stage may be the grouped one)
        out[name] = next((src for src in sources if "__syncthreads" in src), sources[-1])
    assert "__uopgrad_mma_f16(" in out["half matmul (tensor cores)"]
    assert "__uopgrad_mma_bf16(" in out["bfloat16 matmul (tensor cores)"]
    assert "__syncthreads" in out["grouped full sum"]
    return out


@pytest.fixture(scope="module", params=ARCHS)
def compiler(request: pytest.FixtureRequest) -> NVRTCCompiler:
    try:
        return NVRTCCompiler(request.param)
    except RuntimeError as e:  # nvidia-cuda-nvrtc is not installed
        pytest.skip(f"NVRTC is missing: {e}")


@pytest.mark.parametrize(
    "name",
    [
        "half matmul (tensor cores)",
        "bfloat16 matmul (tensor cores)",
        "float32 matmul",
        "grouped full sum",
        "row max",
        "elementwise chain",
    ],
)
def test_nvrtc_compiles_the_kernel_for_each_arch(kernels, compiler, name):
    assert is_cubin(compiler.compile(kernels[name]))


def test_an_arch_before_tensor_cores_gets_no_mma(kernels):
    # the mma.sync in the helper needs sm_80; sm_75 rejects it, which is why its target has no tensor cores
    from uopgrad.errors import CompileError

    try:
        old = NVRTCCompiler("sm_75")
    except RuntimeError as e:
        pytest.skip(f"NVRTC is missing: {e}")
    with pytest.raises(CompileError):
        old.compile(kernels["half matmul (tensor cores)"])
    assert is_cubin(old.compile(kernels["float32 matmul"]))
