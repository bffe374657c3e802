"""Host emulation of CUDA (`UOPGRAD_CUDA_EMULATE=1`): a kernel's exact CUDA source built with the host C++
compiler and run on host memory.

`EmulatedCompiler.compile` first compiles the source with NVRTC for `$UOPGRAD_CUDA_ARCH` (default sm_90), so
the real CUDA compiler checks every kernel, then builds the same text as a shared object with `$CXX`
(default `g++`), a small header (emulator.h, `HEADER`) force-included before it and a launcher appended
after it. The header gives what CUDA C++ has and host C++ lacks: the qualifiers (`__global__`, `__device__`,
`__shared__`, `__launch_bounds__`, `__restrict__`), thread-local `threadIdx`/`blockIdx`/`blockDim`/
`gridDim`, the bit-cast intrinsics, `__double2float_rz`, atomics through the `__atomic` builtins, and
libm's functions declared by hand (including <cmath> costs 0.2-0.6 s a kernel; glibc's own `__expf` and
the like are never redefined).

The launcher runs the grid as a loop: block after block, and in each block thread after thread. A kernel
that calls `__syncthreads` runs each thread of a block as a fiber (ucontext) instead: every thread runs up
to its next barrier, and only when all of them wait at the same one do they go on; a barrier that some
thread of the block returns without reaching, or threads waiting at different barriers, stop the launch
with an error naming the block, the threads and the source lines. The new kernels of one schedule are
built as one shared object (`compile_many`, `uopgrad.renderer.merge`: each helper once, kernels of distinct
names; those with barriers alone), since a compiler invocation costs far more than a small kernel; a group
that does not build is built kernel by kernel, so an error names its own source. In reversed order
(`UOPGRAD_CUDA_EMULATE=reverse`) blocks and threads run last to first, which shakes out kernels that
depend on an order CUDA does not promise.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import re
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from uopgrad.backend import CompileError, Compiler, run_compiler
from uopgrad.config import getenv_str
from uopgrad.renderer.merge import groups, merge
from uopgrad_cuda.compiler import NVRTCCompiler

__all__ = ["CXX_FLAGS", "HEADER", "EmulatedCompiler", "kernel_names", "launcher"]

# -fvisibility=hidden: a kernel binds to its own definition, never to a libc function of the same name
# (`div`, say) that dynamic symbol interposition would pick first; only the launchers are exported
CXX_FLAGS = (
    "-O1",
    "-std=c++17",
    "-fPIC",
    "-shared",
    "-fvisibility=hidden",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-fno-exceptions",
    "-fno-rtti",
    "-w",
)

# the header force-included before every kernel (a package file: C++ reads better outside a string)
HEADER = importlib.resources.files("uopgrad_cuda").joinpath("emulator.h").read_text()

# extern "C" __global__ void __launch_bounds__(128) name(   (launch bounds optional)
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(')
_HEADER = re.compile("^" + _KERNEL.pattern, re.MULTILINE)  # a kernel of a generated source, for merging


def kernel_names(src: str) -> list[str]:
    """The `extern "C" __global__` kernels `src` defines."""
    return _KERNEL.findall(src)


def launcher(src: str) -> str:
    """What is appended to `src`: `__uopgrad_launch_<name>(args, dims, flags, err, errlen)` per kernel;
    a source that calls `__syncthreads` runs its threads as fibers (flag 2)."""
    fibers = " | 2" if "__syncthreads" in src else ""
    return "".join(
        f'\nextern "C" __attribute__((visibility("default"))) int __uopgrad_launch_{k}(void** a, '
        f"const unsigned int* d, int f, char* e, unsigned long n) {{ return __uopgrad_emu::launch("
        f"{k}, a, d, f{fibers}, e, n); }}\n"
        for k in kernel_names(src)
    )


@functools.cache
def _cxx_identity(cxx: str) -> str:
    try:
        out = subprocess.run([*shlex.split(cxx), "--version"], capture_output=True, text=True, check=False)
        return out.stdout.partition("\n")[0]
    except OSError:
        return "missing"


class EmulatedCompiler(Compiler):
    """CUDA C++ -> NVRTC's cubin (checked, then dropped) -> a host shared object with the launcher. The
    disk cache key names NVRTC's key and the host compiler, its flags and the header."""

    def __init__(self, nvrtc: NVRTCCompiler, cxx: str | None = None) -> None:
        super().__init__()
        self.nvrtc = nvrtc
        self.cxx = cxx or getenv_str("CXX")
        self.flags = CXX_FLAGS
        header_digest = hashlib.sha256(HEADER.encode()).hexdigest()[:16]
        self.cache_key = (
            f"emulated|{nvrtc.cache_key}|{_cxx_identity(self.cxx)}|{' '.join(self.flags)}|{header_digest}"
        )

    def compile(self, src: str) -> bytes:
        """NVRTC's compile of `src` (its log on failure), then the host build (the host compiler's message
        on failure); the shared object's bytes."""
        self.nvrtc.compile(src)
        names = kernel_names(src)
        if not names:
            raise CompileError("CUDA emulation", 'no extern "C" __global__ kernel in the source', src)
        with tempfile.TemporaryDirectory(prefix="uopgrad-cuda-emu-") as tmp:
            header, out = Path(tmp) / "uopgrad_cuda_emu.h", Path(tmp) / "kernel.so"
            header.write_text(HEADER)
            cmd = [
                *shlex.split(self.cxx),
                *self.flags,
                "-include",
                str(header),
                "-x",
                "c++",
                "-",
                "-o",
                str(out),
            ]
            res = run_compiler(cmd, src + launcher(src), src, "host C++ compiler", "CXX")
            if res.returncode != 0:
                raise CompileError(f"CUDA emulation ({shlex.join(cmd)})", res.stderr or res.stdout, src)
            return out.read_bytes()

    def compile_many(self, srcs: Sequence[str]) -> list[bytes]:
        """The sources in groups of distinct kernel names, each built as one shared object (NVRTC checks the
        merged source too); a kernel with barriers, and every kernel of a group that does not build, alone."""
        libs: dict[int, bytes] = {}
        plain = [k for k, src in enumerate(srcs) if "__syncthreads" not in src]
        for group in groups([srcs[k] for k in plain], _HEADER):
            merged = merge([srcs[plain[i]] for i in group], _HEADER) if len(group) > 1 else None
            try:
                lib = None if merged is None else self.compile(merged[0])
            except CompileError:
                lib = None
            for i in group:
                libs[plain[i]] = lib if lib is not None else self.compile(srcs[plain[i]])
        return [libs[k] if k in libs else self.compile(src) for k, src in enumerate(srcs)]
