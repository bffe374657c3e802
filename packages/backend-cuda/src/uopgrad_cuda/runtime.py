"""The CUDA backend's runtimes: a GPU through cupy, or the host emulation of one.

On a GPU (cupy imported lazily, on the first `CUDA` device): device memory from a cupy `MemoryPool`, one
`Stream` per device on which every copy and kernel is queued, the cubin NVRTC compiled for the device's own
architecture loaded as a cupy `Module`, launches through cupy's `Function`, and `Event`s for timing
(`CUDAProgram.last_ms`). Copies out wait for the stream; every launch waits for its kernel (the `Program`
contract). cupy gives all of it; nothing here calls the driver by hand.

Without a GPU, `CUDA` is an error that says what is missing and how to emulate one; it never falls back.
With `UOPGRAD_CUDA_EMULATE=1` buffers are host memory and each kernel runs through the emulator's launcher
(emulator.py); `UOPGRAD_CUDA_EMULATE=reverse` runs blocks and threads in reversed order.
"""

from __future__ import annotations

import ctypes
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from uopgrad.backend import Allocator, HostAllocator, Program, Size, install_advice, load_library
from uopgrad.config import getenv_str

__all__ = [
    "ARCH_ENV",
    "EMULATE_ENV",
    "CUDAAllocator",
    "CUDAProgram",
    "DevicePointer",
    "EmulatedAllocator",
    "EmulatedProgram",
    "GPU",
    "NoGPUError",
    "emulation",
    "open_gpu",
]

EMULATE_ENV = "UOPGRAD_CUDA_EMULATE"
ARCH_ENV = "UOPGRAD_CUDA_ARCH"


class NoGPUError(RuntimeError):
    """The CUDA device was asked for where there is no GPU, driver or cupy (the message says how to emulate
    one)."""


def emulation() -> str | None:
    """The emulation mode `$UOPGRAD_CUDA_EMULATE` asks for: None (off), "forward" or "reverse"."""
    value = getenv_str(EMULATE_ENV)  # "off", "on" or "reverse" (uopgrad.config: a ConfigError otherwise)
    return None if value == "off" else "forward" if value == "on" else "reverse"


# ---------------------------------------------------------------------- the host emulation
class EmulatedAllocator(HostAllocator):
    """Host memory as 256-byte aligned numpy byte arrays (cudaMalloc's alignment)."""

    align = 256


class EmulatedProgram(Program):
    """A kernel of the emulator's shared object: `__uopgrad_launch_<name>` runs its grid on the host."""

    reverse: ClassVar[bool] = False

    def __init__(self, name: str, lib: bytes) -> None:
        super().__init__(name, lib)
        self._dll = load_library(lib, f"uopgrad-cuda-{name}-")
        self._fn = getattr(self._dll, f"__uopgrad_launch_{name}")
        self._fn.restype = ctypes.c_int

    def __call__(
        self, *bufs: object, vals: Sequence[int] = (), global_size: Size = None, local_size: Size = None
    ) -> None:
        """Run the kernel's grid on `bufs` (numpy byte arrays); a barrier error raises RuntimeError."""
        if not all(isinstance(b, np.ndarray) for b in bufs):
            kinds = [type(b).__name__ for b in bufs]
            raise TypeError(f"{self.name}: emulated CUDA kernels take host buffers, got {kinds}")
        values: list[Any] = [ctypes.c_void_p(b.ctypes.data) for b in bufs if isinstance(b, np.ndarray)]
        values += [ctypes.c_int64(v) for v in vals]  # integer kernel arguments are 64-bit (render_var)
        args = (ctypes.c_void_p * max(len(values), 1))(*(ctypes.addressof(v) for v in values))
        dims = (ctypes.c_uint * 6)(*_dims(global_size), *_dims(local_size))
        err = ctypes.create_string_buffer(1024)
        if self._fn(args, dims, int(self.reverse), err, len(err)) != 0:
            raise RuntimeError(
                f"CUDA kernel {self.name} (emulated, grid {tuple(dims)[:3]}, block "
                f"{tuple(dims)[3:]}): {err.value.decode(errors='replace')}"
            )


def _dims(size: Sequence[int] | None) -> tuple[int, int, int]:
    d = [*(size or ()), 1, 1, 1]
    return int(d[0]), int(d[1]), int(d[2])


# ---------------------------------------------------------------------- a GPU through cupy
@dataclass(frozen=True, eq=False)
class GPU:
    """One CUDA device opened through cupy: its memory pool and stream, and what NVRTC compiles for."""

    index: int
    name: str
    arch: str  # the device's own architecture, e.g. "sm_90": cubins for it need no JIT
    driver: int  # the driver's CUDA version, e.g. 13000
    cupy: Any  # the cupy module
    pool: Any  # cupy.cuda.MemoryPool
    stream: Any  # cupy.cuda.Stream


def _no_gpu(why: str) -> NoGPUError:
    return NoGPUError(
        f"CUDA needs an NVIDIA GPU with its driver and cupy: {why}. On a machine without one, "
        f"set {EMULATE_ENV}=1 to run CUDA kernels on the host (NVRTC still compiles each one)"
    )


_opened: dict[int, GPU] = {}


def open_gpu(device_name: str) -> GPU:
    """The GPU that `device_name` ("CUDA", "CUDA:1") names: CUDA:n is device n modulo the device count."""
    try:  # lazily: importing cupy costs ~0.5 s, and machines without a GPU never need it
        cupy: Any = importlib.import_module("cupy")
    except ImportError as e:
        raise _no_gpu(
            f"cupy is not installed ({e}): {install_advice('uopgrad-cuda', 'cuda13')} for a CUDA 13 "
            f"driver, {install_advice('uopgrad-cuda', 'cuda12')} for a CUDA 12 one"
        ) from e
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
        driver = int(cupy.cuda.runtime.driverGetVersion())
    except Exception as e:  # cupy's CUDARuntimeError, e.g. cudaErrorInsufficientDriver without a driver
        raise _no_gpu(f"no usable GPU driver ({type(e).__name__}: {e})") from e
    if count == 0:
        raise _no_gpu("the driver sees no GPU")
    index = int(device_name.partition(":")[2] or 0) % count
    if index not in _opened:
        with cupy.cuda.Device(index):
            props = cupy.cuda.runtime.getDeviceProperties(index)
            name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
            arch = f"sm_{cupy.cuda.Device(index).compute_capability}"
            _opened[index] = GPU(
                index, name, arch, driver, cupy, cupy.cuda.MemoryPool(), cupy.cuda.Stream(non_blocking=True)
            )
    return _opened[index]


class _Memory(Protocol):
    size: int


class DevicePointer(Protocol):
    """What the allocator uses of a cupy `MemoryPointer`."""

    mem: _Memory

    def memset_async(self, value: int, size: int, stream: object) -> None:
        """Fill `size` bytes with `value` on `stream`."""

    def copy_from_host_async(self, src: int, size: int, stream: object) -> None:
        """Copy `size` bytes from host address `src` on `stream`."""

    def copy_to_host_async(self, dst: int, size: int, stream: object) -> None:
        """Copy `size` bytes to host address `dst` on `stream`."""


class CUDAAllocator(Allocator[DevicePointer]):
    """Device memory from the GPU's cupy memory pool (`MemoryPointer`s), zeroed and copied on its stream."""

    def __init__(self, gpu: GPU) -> None:
        super().__init__()
        self.gpu = gpu

    def _alloc(self, nbytes: int) -> DevicePointer:
        with self.gpu.cupy.cuda.Device(self.gpu.index):
            try:
                mem: DevicePointer = self.gpu.pool.malloc(nbytes)
            except self.gpu.cupy.cuda.memory.OutOfMemoryError as e:
                raise MemoryError(f"CUDA device {self.gpu.name}: can't allocate {nbytes} bytes: {e}") from e
        self._zero(mem)
        return mem

    # no `_free`: the pool takes the memory back when the last reference to its MemoryPointer goes

    def _zero(self, handle: DevicePointer) -> None:
        handle.memset_async(0, handle.mem.size, self.gpu.stream)

    def copyin(self, handle: DevicePointer, src: memoryview) -> None:
        """Host bytes into device memory (waits for the copy: `src` may be reused right after)."""
        arr = np.frombuffer(src, dtype=np.uint8)
        handle.copy_from_host_async(arr.ctypes.data, arr.nbytes, self.gpu.stream)
        self.gpu.stream.synchronize()

    def copyout(self, dst: memoryview, handle: DevicePointer) -> None:
        """Device memory into host bytes, after everything queued before it."""
        arr = np.frombuffer(dst, dtype=np.uint8)
        handle.copy_to_host_async(arr.ctypes.data, arr.nbytes, self.gpu.stream)
        self.gpu.stream.synchronize()


class CUDAProgram(Program):
    """A kernel of a cubin, loaded on the GPU of the class (`gpu_program_class`) with cupy."""

    gpu: ClassVar[GPU]

    def __init__(self, name: str, lib: bytes) -> None:
        super().__init__(name, lib)
        cp = self.gpu.cupy
        with cp.cuda.Device(self.gpu.index):
            self._module = cp.cuda.function.Module()
            self._module.load(lib)
            self._fn = self._module.get_function(name)
        self.last_ms = 0.0  # the last launch's time on the GPU, from events around it

    def __call__(
        self, *bufs: object, vals: Sequence[int] = (), global_size: Size = None, local_size: Size = None
    ) -> None:
        """Launch on `bufs` (cupy MemoryPointers) and wait for the kernel."""
        cp, stream = self.gpu.cupy, self.gpu.stream
        if not all(isinstance(b, cp.cuda.MemoryPointer) for b in bufs):
            kinds = [type(b).__name__ for b in bufs]
            raise TypeError(f"{self.name}: CUDA kernels take cupy MemoryPointers, got {kinds}")
        args = [cp.ndarray((b.mem.size,), cp.uint8, b) for b in bufs if isinstance(b, cp.cuda.MemoryPointer)]
        with cp.cuda.Device(self.gpu.index):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            self._fn(
                _dims(global_size), _dims(local_size), (*args, *(np.int64(v) for v in vals)), stream=stream
            )
            end.record(stream)
            end.synchronize()
            self.last_ms = float(cp.cuda.get_elapsed_time(start, end))


def gpu_program_class(gpu: GPU) -> type[CUDAProgram]:
    """`CUDAProgram` bound to `gpu` (core loads a kernel as `runtime(name, lib)`)."""
    return type(f"CUDAProgram_{gpu.index}", (CUDAProgram,), {"gpu": gpu})


def emulated_program_class(reverse: bool) -> type[EmulatedProgram]:
    """`EmulatedProgram` running blocks and threads in reversed order when `reverse`."""
    return type(
        "EmulatedProgramReversed" if reverse else "EmulatedProgramForward",
        (EmulatedProgram,),
        {"reverse": reverse},
    )
