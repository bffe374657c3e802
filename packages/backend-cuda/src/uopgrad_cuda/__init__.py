"""uopgrad_cuda: the CUDA backend of uopgrad (CUDA C++ compiled with NVRTC, launched with cupy, or run on
the host by the emulator).

`CUDABackend` is the `uopgrad.backends` entry point `CUDA`: core's `CompiledBackend` with this package's
parts, `CUDARenderer` (renderer.py), `NVRTCCompiler` (compiler.py) and, on a GPU, `CUDAAllocator` and
`CUDAProgram` (runtime.py, on cupy). Without a GPU, `Device["CUDA"]` raises `NoGPUError` unless
`UOPGRAD_CUDA_EMULATE=1` asks for the emulator (emulator.py): then every kernel is compiled by NVRTC for
`$UOPGRAD_CUDA_ARCH` (default sm_90) and run from the same source built for the host.
"""

from __future__ import annotations

from uopgrad import dtypes
from uopgrad.backend import CompiledBackend
from uopgrad.codegen import GridLimits
from uopgrad.config import getenv_str
from uopgrad_cuda import runtime
from uopgrad_cuda.compiler import NVRTCCompiler, nvrtc_library
from uopgrad_cuda.emulator import EmulatedCompiler
from uopgrad_cuda.renderer import CUDARenderer
from uopgrad_cuda.runtime import (
    ARCH_ENV,
    EMULATE_ENV,
    CUDAAllocator,
    CUDAProgram,
    EmulatedAllocator,
    EmulatedProgram,
    NoGPUError,
)

__all__ = [
    "ARCH_ENV",
    "CUDAAllocator",
    "CUDABackend",
    "CUDAProgram",
    "CUDARenderer",
    "EMULATE_ENV",
    "EmulatedAllocator",
    "EmulatedCompiler",
    "EmulatedProgram",
    "NVRTCCompiler",
    "NoGPUError",
]

# every dtype: CUDA has 64-bit ints and doubles; float16 and bfloat16 are bits computed in float
DTYPES = frozenset(
    {dtypes.bool, *dtypes.ints, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64}
)
# CUDA's launch limits: 2^31-1 blocks along x, 65535 along y and z; 1024 threads a block (64 along z); 48 KiB
# of static shared memory a block, where a block splits a reduce (uopgrad.codegen.group)
GRID = GridLimits(
    global_max=(2**31 - 1, 65535, 65535),
    local_max=(1024, 1024, 64),
    local_prod_max=1024,
    local_size=128,
    local_memory=48 * 1024,
)


class CUDABackend(CompiledBackend):
    """A CUDA device: every kernel is an `extern "C" __global__` launched on a grid of blocks. `CUDA:n` is
    GPU n (modulo the count); emulated, each `CUDA:n` is another logical device with its own buffers."""

    def __init__(self, device: str) -> None:
        self.mode = runtime.emulation()
        if self.mode is None:
            self.gpu: runtime.GPU | None = runtime.open_gpu(device)
            # a cubin of the driver's CUDA major: NVRTC 13 for a CUDA 13 driver, 12 for 12 (the cuda12 extra)
            compiler = NVRTCCompiler(self.gpu.arch, nvrtc_library(self.gpu.driver // 1000))
            super().__init__(
                device,
                CUDARenderer(GRID, self.gpu.arch),
                compiler,
                CUDAAllocator(self.gpu),
                runtime.gpu_program_class(self.gpu),
                DTYPES,
            )
            return
        self.gpu = None
        self.nvrtc = NVRTCCompiler(getenv_str(ARCH_ENV))
        super().__init__(
            device,
            CUDARenderer(GRID, self.nvrtc.arch),
            EmulatedCompiler(self.nvrtc),
            EmulatedAllocator(),
            runtime.emulated_program_class(self.mode == "reverse"),
            DTYPES,
        )

    def __repr__(self) -> str:
        where = (
            self.gpu.name
            if self.gpu is not None
            else f"emulated on the host ({self.mode} order, NVRTC for {self.nvrtc.arch})"
        )
        return f"<CUDABackend {self.name}: {where}>"
