"""The uopgrad_cuda package: the kit's package checks (type marker, the four modules of a backend, the entry
point, no other uopgrad package imported, the one-liner, `uopgrad devices`), plus the emulator module and no
cupy at import; without a GPU, `import uopgrad_cuda` works and `Device["CUDA"]` is a clear
error naming the missing GPU or driver and the emulation switch, never a silent fallback; NVRTC compiles to
a cubin with no GPU."""

import importlib.resources
import os
import subprocess
import sys

import pytest

from uopgrad.backend import CompileError
from uopgrad_conformance.kit.package import package_tests
from uopgrad_cuda import NVRTCCompiler

NO_EMULATION = {k: v for k, v in os.environ.items() if k != "UOPGRAD_CUDA_EMULATE"}

# the kit's checks of every backend package: no other uopgrad package imported, py.typed, the four modules,
# the entry point, the README's one-liner (emulated where there is no GPU, as conftest.py says) and
# `uopgrad devices`
globals().update(package_tests("uopgrad_cuda", device="CUDA"))


def _has_gpu() -> bool:
    code = "from uopgrad_cuda.runtime import open_gpu; open_gpu('CUDA')"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, env=NO_EMULATION).returncode == 0


def test_import_loads_no_cupy_and_the_emulator_ships():
    # a fresh interpreter, so modules imported by other tests in this run cannot hide a stray import
    code = "import sys, uopgrad_cuda; print('cupy' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, env=NO_EMULATION
    ).stdout
    assert out.strip() == "False"
    assert importlib.resources.files("uopgrad_cuda").joinpath("emulator.py").is_file()


def test_without_a_gpu_the_device_is_a_clear_error():
    if _has_gpu():
        pytest.skip("a GPU is present")
    code = (
        "from uopgrad import Device\ntry:\n  Device['CUDA']\n"
        "except Exception as e:\n  print(type(e).__name__, e)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=NO_EMULATION
    ).stdout
    assert out.startswith("NoGPUError CUDA needs an NVIDIA GPU with its driver")
    assert "UOPGRAD_CUDA_EMULATE=1" in out and ("driver" in out or "cupy" in out)


def test_a_bad_emulation_switch_is_an_error():
    code = "from uopgrad import Device; Device['CUDA']"
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "UOPGRAD_CUDA_EMULATE": "maybe"},
    )
    assert res.returncode != 0 and "UOPGRAD_CUDA_EMULATE='maybe'" in res.stderr


def test_nvrtc_compiles_a_cubin_for_the_arch_and_keys_the_cache():
    src = 'extern "C" __global__ void k(float* __restrict__ a) { a[threadIdx.x] *= 2.0f; }'
    c90, c80 = NVRTCCompiler(arch="sm_90"), NVRTCCompiler(arch="sm_80")
    elf = c90.compile(src)
    assert elf[:4] == b"\x7fELF" and elf[4] == 2  # a 64-bit ELF: a cubin, not PTX text
    assert c80.compile(src) != elf
    for c in (c90, c80):
        key = c.cache_key
        assert f"nvrtc {c.nvrtc.version[0]}." in key and c.arch in key and "--fmad=false" in key
    with pytest.raises(ValueError, match="not a GPU architecture"):
        NVRTCCompiler(arch="90")


def test_a_failed_compile_raises_with_nvrtcs_log():
    with pytest.raises(CompileError, match=r'(?s)NVRTC .*identifier "nope" is undefined.*generated source'):
        NVRTCCompiler().compile('extern "C" __global__ void k(float* a) { a[0] = nope; }')


class _FakeRuntime:
    def __init__(self, count: int | Exception) -> None:
        self.count = count

    def getDeviceCount(self) -> int:
        if isinstance(self.count, Exception):
            raise self.count
        return self.count

    def driverGetVersion(self) -> int:
        return 13000


@pytest.mark.parametrize(
    ("count", "why"),
    [(0, "the driver sees no GPU"), (RuntimeError("cudaErrorInsufficientDriver"), "no usable GPU driver")],
)
def test_each_missing_piece_is_named(monkeypatch, count, why):
    # cupy stood in for by a module whose runtime reports no GPU, or fails as it does without a driver
    import importlib
    import types

    from uopgrad_cuda import NoGPUError, runtime

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=_FakeRuntime(count)))
    real_import = importlib.import_module
    monkeypatch.setattr(
        runtime.importlib, "import_module", lambda name: fake if name == "cupy" else real_import(name)
    )
    with pytest.raises(NoGPUError, match=f"{why}.*UOPGRAD_CUDA_EMULATE=1"):
        runtime.open_gpu("CUDA")
