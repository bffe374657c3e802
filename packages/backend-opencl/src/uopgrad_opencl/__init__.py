"""uopgrad_opencl: the OpenCL backend of uopgrad (OpenCL C built and launched through pyopencl).

`CLBackend` is the `uopgrad.backends` entry point `CL`. It is core's `CompiledBackend` with this package's
four parts: `OpenCLRenderer` (renderer.py), `CLCompiler` (compiler.py), `CLAllocator` and `CLProgram`
(runtime.py), all on the device `$UOPGRAD_CL_DEVICE` chooses (runtime.py). See docs/ARCHITECTURE.md §3.
"""

from __future__ import annotations

from uopgrad.backend import CompiledBackend
from uopgrad_opencl import runtime
from uopgrad_opencl.compiler import CLCompiler
from uopgrad_opencl.renderer import OpenCLRenderer
from uopgrad_opencl.runtime import CLAllocator, CLDevice, CLProgram

__all__ = ["CLAllocator", "CLBackend", "CLCompiler", "CLDevice", "CLProgram", "OpenCLRenderer"]


class CLBackend(CompiledBackend):
    """An OpenCL device: every kernel is a `__kernel` launched on a grid of work-groups. `CL` is the device
    `$UOPGRAD_CL_DEVICE` names (default: the first), `CL:n` the n-th after it."""

    def __init__(self, device: str) -> None:
        self.dev = dev = runtime.open_device(runtime.device_position(device))
        compiler = CLCompiler(dev.context, dev.device, dev.target)
        super().__init__(
            device,
            OpenCLRenderer(dev.grid, dev.vector_width),
            compiler,
            CLAllocator(dev),
            runtime.program_class(dev, compiler),
            dev.dtypes,
        )

    def __repr__(self) -> str:
        return f"<CLBackend {self.name}: {self.dev.label}>"
