"""uopgrad_opencl: the OpenCL backend of uopgrad (OpenCL C built and launched through pyopencl).

A skeleton for now: the renderer, compiler, runtime and the `uopgrad.backends` entry point are filled in
by a later issue (ARCHITECTURE.md section 3).
"""

__all__: list[str] = []
