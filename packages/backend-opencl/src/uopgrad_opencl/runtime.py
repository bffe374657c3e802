"""The OpenCL backend's runtime: the device (context and in-order queue), its buffers and kernel launches.

`UOPGRAD_CL_DEVICE` chooses the device: unset, the first device of the first platform; a number, that
position in the list of every platform's devices; any other text, the first device whose
"platform: device" name contains it (case-insensitive). `CL:n` is the n-th device after that one
(wrapping around), so `CL:1` exists on a machine with one device too: another logical device on the same
hardware. Logical devices on one physical device share its context and queue; each has its own buffers.

What a device can do is read from it: the dtypes (float64 with `cl_khr_fp64`; float16 everywhere, as bits
computed in float), the launch limits (work-items per work-group, per dimension and in all) and, on a CPU
device, the vector width the opt pass fills (its preferred float vector).

Every launch waits for its kernel (the `Program` contract); copies in and out are blocking, on the same
in-order queue.
"""

from __future__ import annotations

import ctypes
import functools
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyopencl as cl

from uopgrad import DType, dtypes
from uopgrad.backend import Allocator, Program, Size
from uopgrad.codegen import GridLimits
from uopgrad.config import getenv_str
from uopgrad.errors import BackendError
from uopgrad_opencl.compiler import CLCompiler
from uopgrad_opencl.renderer import VECTOR_WIDTHS

__all__ = [
    "DEVICE_ENV",
    "GROUP_ENV",
    "CLAllocator",
    "CLDevice",
    "CLProgram",
    "all_devices",
    "device_position",
    "open_device",
    "program_class",
    "repair_pocl_target_cpu",
    "select_device",
    "split_reduces",
]

DEVICE_ENV = "UOPGRAD_CL_DEVICE"
# "1" / "0": split big reduces over a work-group (uopgrad.codegen.group) or not; unset: on GPUs only, since a
# CPU device runs a work-group as one loop on one core, where the split measured slower (spec/opt.md §4)
GROUP_ENV = "UOPGRAD_CL_GROUP_REDUCE"


# ---------------------------------------------------------------------- choosing a device
def all_devices() -> list[cl.Device]:
    """Every device of every OpenCL platform, platforms in the ICD loader's order."""
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:  # the ICD loader found no platform at all
        raise BackendError(f"no OpenCL platform: {e} (pip install pocl-binary-distribution gives one)") from e
    found = []
    for p in platforms:
        try:
            found += p.get_devices()
        except cl.Error:  # a platform without devices of any type
            continue
    return found


def _label(d: cl.Device) -> str:
    return f"{d.platform.name.strip()}: {d.name.strip()}"


def select_device(spec: str, devices: Sequence[cl.Device]) -> int:
    """The position in `devices` that `spec` ($UOPGRAD_CL_DEVICE) names: "" the first, a number that one,
    other text the first device whose "platform: device" name contains it."""
    if not devices:
        raise BackendError("no OpenCL device is available")
    listing = "; ".join(f"{i}: {_label(d)}" for i, d in enumerate(devices))
    spec = spec.strip()
    if not spec:
        return 0
    if spec.isdigit():
        if int(spec) >= len(devices):
            raise BackendError(f"{DEVICE_ENV}={spec}: there are {len(devices)} OpenCL devices ({listing})")
        return int(spec)
    for i, d in enumerate(devices):
        if spec.lower() in _label(d).lower():
            return i
    raise BackendError(f"{DEVICE_ENV}={spec!r} names no OpenCL device ({listing})")


# ---------------------------------------------------------------------- PoCL on a CPU its LLVM predates
def _target_for_host() -> str:
    """The newest x86-64 micro-architecture level (LLVM's names) whose features this CPU has."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.partition(":")[2].split())
                    break
    except OSError:
        pass
    levels = [
        ("x86-64-v2", {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}),
        ("x86-64-v3", {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}),
        ("x86-64-v4", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
    ]
    target = "x86-64"
    for name, needs in levels:
        if not needs <= flags:
            break
        target = name
    return target


def repair_pocl_target_cpu(device: cl.Device) -> str:
    """Make PoCL build for a CPU that its LLVM does not know; returns the target CPU now used ("" if none
    was changed).

    PoCL 3.0 (the one pyopencl's wheels bundle) asks LLVM 14 for the host CPU's name; on a CPU newer than
    LLVM 14 (AMD Zen 5, for one) the answer is "generic", which PoCL passes on as `-target-cpu generic`, and
    clang rejects it: every build fails with "unknown target CPU 'generic'" (pocl/pocl#1049; later PoCL
    reads $POCL_LLVM_CPU_NAME instead). The name lives in the device object as a `char *` pointing at
    "generic", so it is replaced, once, before the first build, by the newest x86-64 level whose features
    /proc/cpuinfo lists (never a feature the CPU lacks). Only that exact case is touched."""
    if "Portable Computing Language" not in device.platform.name or platform.machine() != "x86_64":
        return ""
    if not device.version.rstrip().endswith("-generic"):  # "... HSTR: pthread-x86_64-...-generic"
        return ""
    base, size = device.int_ptr, 1024  # the target CPU's pointer sits near the start of the struct
    readable = _readable_ranges()
    if not _inside(readable, base, size):
        return ""
    words = (ctypes.c_uint64 * (size // 8)).from_address(base)
    hits = [
        i
        for i, w in enumerate(words)
        if w and _inside(readable, w, 8) and ctypes.string_at(w, 8) == b"generic\0"
    ]
    if len(hits) != 1:
        return ""
    libc = ctypes.CDLL(None)
    libc.strdup.restype, libc.strdup.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
    target = _target_for_host()
    words[hits[0]] = libc.strdup(target.encode())  # malloc'ed, as PoCL frees it with the device
    return target


def _readable_ranges() -> list[tuple[int, int]]:
    ranges = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                span, perms = line.split()[:2]
                if perms.startswith("r"):
                    lo, hi = span.split("-")
                    ranges.append((int(lo, 16), int(hi, 16)))
    except OSError:
        pass
    return ranges


def _inside(ranges: list[tuple[int, int]], addr: int, n: int) -> bool:
    return any(lo <= addr and addr + n <= hi for lo, hi in ranges)


# ---------------------------------------------------------------------- an opened device
@dataclass(frozen=True, eq=False)
class CLDevice:
    """One physical OpenCL device with a context and an in-order queue, and what it can run."""

    device: cl.Device
    context: cl.Context
    queue: cl.CommandQueue
    target: str  # the LLVM target CPU set by `repair_pocl_target_cpu`, "" when it changed nothing

    @property
    def label(self) -> str:
        """ "platform: device", for messages."""
        return _label(self.device)

    @property
    def dtypes(self) -> frozenset[DType]:
        """The dtypes the device stores and computes: bool, every integer, float16 (as bits, computed in
        float: renderer.py) and float32 always (64-bit integers are in every full-profile device), float64
        with cl_khr_fp64."""
        exts = set(self.device.extensions.split())
        out = {
            dtypes.bool,
            dtypes.float16,
            dtypes.bfloat16,
            dtypes.float32,
            *(d for d in dtypes.ints if d.itemsize < 8),
        }
        if self.device.profile == "FULL_PROFILE" or "cles_khr_int64" in exts:
            out |= {dtypes.int64, dtypes.uint64}
        if "cl_khr_fp64" in exts:
            out.add(dtypes.float64)
        return frozenset(out)

    @property
    def grid(self) -> GridLimits:
        """The launch limits: work-items per work-group from the device; work-groups up to 2^31-1 along
        each dimension (grid indices are int). A CPU device runs a work-group as one loop on one core, so
        it gets large work-groups; a GPU 128 work-items along x. On a GPU (or where GROUP_ENV is "1") its
        local memory lets a work-group split a reduce (uopgrad.codegen.group)."""
        sizes = list(self.device.max_work_item_sizes)[:3] + [1, 1, 1]
        most = int(self.device.max_work_group_size)
        is_cpu = bool(self.device.type & cl.device_type.CPU)
        return GridLimits(
            global_max=(2**31 - 1, 2**31 - 1, 2**31 - 1),
            local_max=(int(sizes[0]), int(sizes[1]), int(sizes[2])),
            local_prod_max=most,
            local_size=min(most, 1024 if is_cpu else 128),
            local_memory=int(self.device.local_mem_size) if split_reduces(is_cpu) else 0,
        )

    @property
    def vector_width(self) -> int:
        """Bytes of the vectors the opt pass fills (spec/opt.md §5): on a CPU device its preferred float
        vector (PoCL with AVX-512: 16 floats, 64 bytes), the widest the renderer takes within it; 0 on
        other devices, where each work-item's lanes and register tile would take from the grid's threads."""
        if not self.device.type & cl.device_type.CPU:
            return 0
        width = 4 * int(self.device.preferred_vector_width_float)
        return max(w for w in VECTOR_WIDTHS if w <= width)


def split_reduces(is_cpu: bool) -> bool:
    """Whether work-groups split big reduces: GROUP_ENV when it is set, else on every device but a CPU."""
    flag = getenv_str(GROUP_ENV)  # "on", "off" or "auto"
    return flag == "on" if flag != "auto" else not is_cpu


@functools.cache
def open_device(position: int) -> CLDevice:
    """The device at `position` in `all_devices()`, opened once per process."""
    device = all_devices()[position]
    target = repair_pocl_target_cpu(device)
    context = cl.Context([device])
    return CLDevice(device, context, cl.CommandQueue(context, device), target)


# ---------------------------------------------------------------------- buffers
class CLAllocator(Allocator[cl.Buffer]):
    """Device memory as `cl.Buffer`s, zeroed with `clEnqueueFillBuffer`."""

    def __init__(self, dev: CLDevice) -> None:
        super().__init__()
        self.dev = dev

    def _alloc(self, nbytes: int) -> cl.Buffer:
        try:
            buf = cl.Buffer(self.dev.context, cl.mem_flags.READ_WRITE, nbytes)
        except cl.Error as e:
            raise MemoryError(f"OpenCL device {self.dev.label}: can't allocate {nbytes} bytes: {e}") from e
        self._zero(buf)
        return buf

    def _free(self, handle: cl.Buffer, nbytes: int) -> None:
        handle.release()

    def _zero(self, handle: cl.Buffer) -> None:
        cl.enqueue_fill_buffer(self.dev.queue, handle, np.zeros(1, dtype=np.uint8), 0, handle.size)

    def copyin(self, handle: cl.Buffer, src: memoryview) -> None:
        """Host bytes into the buffer (blocking)."""
        cl.enqueue_copy(self.dev.queue, handle, src, is_blocking=True)

    def copyout(self, dst: memoryview, handle: cl.Buffer) -> None:
        """The buffer into host bytes (blocking; after every kernel enqueued before it)."""
        cl.enqueue_copy(self.dev.queue, dst, handle, is_blocking=True)


# ---------------------------------------------------------------------- kernels
class CLProgram(Program):
    """A kernel of a built program, on the device and from the compiler of the class (`program_class`)."""

    dev: ClassVar[CLDevice]
    compiler: ClassVar[CLCompiler]

    def __init__(self, name: str, lib: bytes) -> None:
        super().__init__(name, lib)
        self._kernel = self.compiler.take(lib, name)

    def __call__(
        self, *bufs: object, vals: Sequence[int] = (), global_size: Size = None, local_size: Size = None
    ) -> None:
        """Run the kernel on `bufs` (cl.Buffers): `global_size` work-groups of `local_size` work-items."""
        buffers = [b for b in bufs if isinstance(b, cl.Buffer)]
        if len(buffers) != len(bufs):
            kinds = [type(b).__name__ for b in bufs]
            raise TypeError(f"{self.name}: OpenCL kernels take cl.Buffer arguments, got {kinds}")
        groups, local = tuple(global_size or (1, 1, 1)), tuple(local_size or (1, 1, 1))
        # integer kernel arguments are 64-bit (`long`, core's render_var)
        self._kernel.set_args(*buffers, *(np.int64(v) for v in vals))
        total = tuple(g * n for g, n in zip(groups, local))
        cl.enqueue_nd_range_kernel(self.dev.queue, self._kernel, total, local).wait()


def program_class(dev: CLDevice, compiler: CLCompiler) -> type[CLProgram]:
    """`CLProgram` bound to `dev` and its compiler (core loads a kernel as `runtime(name, lib)`)."""
    return type(f"CLProgram_{id(dev):x}", (CLProgram,), {"dev": dev, "compiler": compiler})


def device_position(device_name: str) -> int:
    """Where logical device `device_name` ("CL", "CL:2") falls in `all_devices()`."""
    devices = all_devices()
    first = select_device(getenv_str(DEVICE_ENV), devices)
    index = device_name.partition(":")[2]
    return (first + int(index or 0)) % len(devices)
