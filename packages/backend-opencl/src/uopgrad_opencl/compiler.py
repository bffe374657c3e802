"""The OpenCL backend's compiler: OpenCL C -> the device's program binary, built through pyopencl.

`clBuildProgram` needs a live context, so a `CLCompiler` belongs to one device. Its result is the binary
the driver hands back (`CL_PROGRAM_BINARIES`), kept in core's disk cache under a key naming the platform,
the device, the driver and the build options; the runtime loads it with `clCreateProgramWithBinary`. A
failed build raises `CompileError` with the driver's build log and the numbered source.

Options: `-w` (generated code draws warnings by design); never `-cl-fast-relaxed-math` or `-cl-mad-enable`
(NaN, inf and rounding must be REFERENCE's); `-cl-fp32-correctly-rounded-divide-sqrt` where the device
offers it (OpenCL otherwise allows float `/` and `sqrt` to be off by a few ulps).
"""
from __future__ import annotations

import pyopencl as cl

from uopgrad.backend import CompileError, Compiler

__all__ = ["CLCompiler", "build_options", "device_identity"]


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


class CLCompiler(Compiler):
    """OpenCL C -> program binary for one device (a context on it builds the source)."""

    def __init__(self, context: cl.Context, device: cl.Device, target: str = "") -> None:
        super().__init__()
        self.context, self.device = context, device
        self.options = build_options(device)
        # `target`: anything else the binary depends on (the runtime's LLVM target CPU on PoCL)
        self.cache_key = f"{device_identity(device)}|{target}|{' '.join(self.options)}"

    def compile(self, src: str) -> bytes:
        """Build `src` for the device; a failed build shows the build log and the source."""
        program = cl.Program(self.context, src)
        try:
            program.build(options=list(self.options), devices=[self.device])
        except cl.Error as e:
            raise CompileError(f"OpenCL build for {self.device.name}", _build_log(program, self.device, e),
                               src) from e
        binaries = program.get_info(cl.program_info.BINARIES)
        assert isinstance(binaries, list) and len(binaries) == 1
        return bytes(binaries[0])


def _build_log(program: cl.Program, device: cl.Device, error: cl.Error) -> str:
    """The driver's build log, or pyopencl's message when the driver gives none."""
    try:
        log = str(program.get_build_info(device, cl.program_build_info.LOG)).strip()  # type: ignore[no-untyped-call]  # pyopencl's stub leaves it untyped
    except cl.Error:
        log = ""
    return log or str(error)
