"""uopgrad_cuda: the CUDA backend of uopgrad (CUDA C compiled with NVRTC and launched with cupy).

A skeleton for now: the renderer, compiler, runtime, host emulation and the `uopgrad.backends` entry point
are filled in by a later issue (docs/ARCHITECTURE.md §3).
"""

__all__: list[str] = []
