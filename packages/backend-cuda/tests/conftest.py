"""Shared fixtures: the kit's private compile cache for the whole run, NVRTC and the emulator, and a helper
that builds CUDA source with the emulator and launches it on host buffers."""

from __future__ import annotations

import os

import numpy as np
import pytest

from uopgrad_conformance.kit import private_compile_cache  # noqa: F401  (an autouse fixture)
from uopgrad_cuda import EmulatedCompiler, NVRTCCompiler
from uopgrad_cuda.runtime import emulated_program_class


@pytest.fixture(scope="session")
def nvrtc():
    return NVRTCCompiler("sm_90")


@pytest.fixture(scope="session")
def emu(nvrtc):
    return EmulatedCompiler(nvrtc)


@pytest.fixture(scope="session")
def launch(emu):
    """launch(src, name, grid, block, *arrays, vals=(), reverse=False): build `src` (NVRTC, then the host),
    run kernel `name` on copies of `arrays`; returns the arrays after the launch."""

    def run(src, name, grid, block, *arrays, vals=(), reverse=False):
        prg = emulated_program_class(reverse)(name, emu.compile_cached(src))
        bufs = [np.array(a, copy=True) for a in arrays]
        prg(*[b.view(np.uint8).reshape(-1) for b in bufs], vals=vals, global_size=grid, local_size=block)
        return bufs

    return run


def _gpu_present() -> bool:
    try:
        from uopgrad_cuda.runtime import open_gpu

        open_gpu("CUDA")
    except Exception:
        return False
    return True


# the kit's tests run on the device `CUDA`: a GPU where there is one, else the emulator (said here,
# explicitly: the backend itself never falls back)
if "UOPGRAD_CUDA_EMULATE" not in os.environ and not _gpu_present():
    os.environ["UOPGRAD_CUDA_EMULATE"] = "1"
