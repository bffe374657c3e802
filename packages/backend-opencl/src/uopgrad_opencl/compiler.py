"""The OpenCL backend's compiler: OpenCL C built for one device through pyopencl (`clBuildProgram`).

Building needs a live context, so a `CLCompiler` belongs to one device. `compile` builds the source (a
failed build raises `CompileError` with the driver's build log and the numbered source) and hands the built
program to the runtime in the same process (`take`); what it returns, and what core's disk cache keeps
under a key naming the platform, device, driver and build options, is the source that built. A later
process that hits the cache builds that source again in the runtime, where the driver's own cache makes it
cheap (PoCL: ~20 ms from ~/.cache/pocl, against ~150 ms cold). Program binaries (`CL_PROGRAM_BINARIES`)
are never fetched: on PoCL that is a second code generation per kernel (~70 ms), and the kernel is
generated again for its work-group size at its first launch anyway.

The kernels of one schedule that are not built yet are built as one program (`compile_many`,
`uopgrad.renderer.merge`):
PoCL spends ~0.45 s on any build however small, so eight kernels built together cost about what one does
alone. A merged source holds each helper and pragma once, and the kernels, renamed where two share a name;
when it does not build, each kernel is built on its own, so a compile error names the source that has it.

Options: `-w` (generated code draws warnings by design); never `-cl-fast-relaxed-math` or `-cl-mad-enable`
(NaN, inf and rounding must be REFERENCE's); `-cl-fp32-correctly-rounded-divide-sqrt` where the device
offers it (OpenCL otherwise allows float `/` and `sqrt` to be off by a few ulps).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Sequence

import pyopencl as cl

from uopgrad.backend import CompileError, Compiler
from uopgrad.renderer.merge import merge

__all__ = ["CLCompiler", "build", "build_options", "device_identity"]

_KERNEL = re.compile(r"^__kernel\s+void\s+(\w+)\s*\(", re.MULTILINE)


def build_options(device: cl.Device) -> tuple[str, ...]:
    """The options every program is built with on `device`."""
    exact = device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT
    # -w: generated code draws warnings by design (guards such as `(b==0||b==-1)` on a constant b fold
    # away); pyopencl would turn each into a CompilerWarning
    return ("-w", *(("-cl-fp32-correctly-rounded-divide-sqrt",) if exact else ()))


def device_identity(device: cl.Device) -> str:
    """What tells compiled binaries apart: platform, device, driver and OpenCL versions."""
    platform = device.platform
    return "|".join([platform.name, platform.version, device.name, device.version, device.driver_version])


def build(context: cl.Context, device: cl.Device, src: str) -> cl.Program:
    """`src` built for `device`; a failed build raises CompileError with the build log and the source."""
    program = cl.Program(context, src)
    try:
        program.build(options=list(build_options(device)), devices=[device])
    except cl.Error as e:
        raise CompileError(f"OpenCL build for {device.name}", _build_log(program, device, e), src) from e
    return program


class CLCompiler(Compiler):
    """OpenCL C -> a program built for one device (a context on it builds the source)."""

    def __init__(self, context: cl.Context, device: cl.Device, target: str = "") -> None:
        super().__init__()
        self.context, self.device = context, device
        self.options = build_options(device)
        # `target`: anything else a build depends on (the runtime's LLVM target CPU on PoCL)
        # "source": what the disk cache holds (earlier versions cached program binaries under other keys)
        self.cache_key = f"source|{device_identity(device)}|{target}|{' '.join(self.options)}"
        # by digest of the source: built, not yet taken (the program, the kernel's name in it if renamed)
        self._built: dict[str, tuple[cl.Program, str | None]] = {}
        self._built_lock = threading.Lock()

    def compile(self, src: str) -> bytes:
        """Build `src` for the device (a failed build shows the build log and the source); returns the
        source, and keeps the built program for `take`."""
        program = build(self.context, self.device, src)
        lib = src.encode()
        with self._built_lock:
            self._built[hashlib.sha256(lib).hexdigest()] = (program, None)
        return lib

    def compile_many(self, srcs: Sequence[str]) -> list[bytes]:
        """Build the sources as one program (`uopgrad.renderer.merge`); when that does not build, source by
        source (which raises the error of the source that has it)."""
        merged = merge(srcs, _KERNEL) if len(srcs) > 1 else None
        try:
            program = None if merged is None else build(self.context, self.device, merged[0])
        except CompileError:
            program = None
        if program is None or merged is None:
            return [self.compile(src) for src in srcs]
        with self._built_lock:
            for src, name in zip(srcs, merged[1]):
                self._built[hashlib.sha256(src.encode()).hexdigest()] = (program, name)
        return [src.encode() for src in srcs]

    def take(self, lib: bytes, name: str) -> cl.Kernel:
        """Kernel `name` of `lib` (what `compile` returned): from the program built in this process, handed
        over once, or else built now (a disk-cache hit: the driver's own cache usually has it)."""
        with self._built_lock:
            built = self._built.pop(hashlib.sha256(lib).hexdigest(), None)
        if built is None:
            return cl.Kernel(build(self.context, self.device, lib.decode()), name)
        return cl.Kernel(built[0], built[1] or name)


def _build_log(program: cl.Program, device: cl.Device, error: cl.Error) -> str:
    """The driver's build log, or pyopencl's message when the driver gives none."""
    try:
        log = str(program.get_build_info(device, cl.program_build_info.LOG)).strip()  # type: ignore[no-untyped-call]  # pyopencl's stub leaves it untyped
    except cl.Error:
        log = ""
    return log or str(error)
