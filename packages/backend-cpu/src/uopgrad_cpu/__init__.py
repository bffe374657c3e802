"""uopgrad_cpu: the CPU backend of uopgrad (C99 built by the system C compiler, loaded with ctypes).

A skeleton for now: the renderer, compiler, runtime and the `uopgrad.backends` entry point are filled in
by a later issue (ARCHITECTURE.md section 3).
"""

__all__: list[str] = []
