"""The CUDA backend's compiler: CUDA C++ -> a cubin (ELF) for one GPU architecture, with NVRTC.

NVRTC is the library `nvidia-cuda-nvrtc` installs (13.x; the `cuda12` extra brings 12.x for CUDA 12 drivers);
it needs no GPU and no driver, so every kernel is compiled by the real CUDA compiler also where none is
present (the emulator then runs the same source on the host). It is loaded with ctypes: its C API is five
calls, and cupy's wrapper of it needs a driver.

Options: `-arch=sm_XX` gives a cubin for that architecture, never PTX, which an older driver than the
compiler's would refuse to JIT; `--fmad=false` keeps `a*b+c` rounded twice, as REFERENCE computes it
(NVRTC fuses it otherwise); `-w` because generated code draws warnings by design. Float `/` and `sqrt` are
correctly rounded and denormals kept by NVRTC's defaults (`-prec-div`, `-prec-sqrt`, `-ftz=false`), which are
spelled out so that no default can change them.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import re
import sys
import threading

from uopgrad.backend import CompileError, Compiler
from uopgrad.config import getenv_path
from uopgrad.errors import ConfigError

__all__ = ["NVRTC_ENV", "NVRTCCompiler", "NVRTCLibrary", "nvrtc_library"]

NVRTC_ENV = "UOPGRAD_NVRTC"  # a path to libnvrtc.so.N, to override the search
FLAGS = ("--fmad=false", "--prec-div=true", "--prec-sqrt=true", "--ftz=false", "-w")
_ARCH = re.compile(r"sm_\d+[af]?")


def _candidates() -> list[str]:
    """libnvrtc from the pip wheels (CUDA 13's nvidia/cu13, CUDA 12's nvidia/cuda_nvrtc), newest major first,
    then the system's."""
    found: list[str] = []
    for site in sys.path:
        for pattern in ("nvidia/cu*/lib/libnvrtc.so.*", "nvidia/cuda_nvrtc/lib/libnvrtc.so.*"):
            found += [
                p for p in glob.glob(os.path.join(site, pattern)) if re.search(r"libnvrtc\.so\.\d+$", p)
            ]
    found.sort(key=lambda p: -int(p.rpartition(".")[2]))
    return [*dict.fromkeys(found), "libnvrtc.so"]


class NVRTCLibrary:
    """libnvrtc loaded with ctypes: the calls that compile a program and read its log and cubin."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lib = lib = ctypes.CDLL(path)
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        self.version = (major.value, minor.value)

    def _check(self, status: int, call: str) -> None:
        if status != 0:
            msg = self.lib.nvrtcGetErrorString(status)
            raise RuntimeError(f"{call} failed: {msg.decode() if msg else status}")

    def compile(self, src: str, options: list[str]) -> tuple[bytes | None, str]:
        """(the cubin, or None if the compile failed; NVRTC's log)."""
        lib, prog = self.lib, ctypes.c_void_p()
        self._check(
            lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"kernel.cu", 0, None, None),
            "nvrtcCreateProgram",
        )
        try:
            opts = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
            status = lib.nvrtcCompileProgram(prog, len(options), opts)
            size = ctypes.c_size_t()
            self._check(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
            log = ctypes.create_string_buffer(size.value)
            self._check(lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
            text = log.value.decode(errors="replace")
            if status != 0:
                return None, text or lib.nvrtcGetErrorString(status).decode()
            self._check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
            cubin = ctypes.create_string_buffer(size.value)
            self._check(lib.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
            return cubin.raw, text
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


@functools.cache
def nvrtc_library(major: int | None = None) -> NVRTCLibrary:
    """The NVRTC to compile with: $UOPGRAD_NVRTC, else the newest found (of CUDA major `major` if given)."""
    env = getenv_path(NVRTC_ENV)
    paths = [str(env)] if env else [p for p in _candidates() if major is None or p.endswith(f".so.{major}")]
    errors = []
    for path in paths:
        try:
            return NVRTCLibrary(path)
        except (OSError, AttributeError) as e:  # not a library; a library without NVRTC's functions
            errors.append(f"{path}: {e}")
    if env is not None:
        raise ConfigError(
            f"environment variable {NVRTC_ENV}={str(env)!r} is not valid: {NVRTC_ENV} takes "
            f"the path of a libnvrtc.so (unset: the newest found): " + "; ".join(errors)
        )
    wanted = f"CUDA {major}'s NVRTC" if major is not None else "NVRTC"
    raise RuntimeError(
        f"{wanted} is not installed (pip install 'nvidia-cuda-nvrtc==13.*', or the cuda12 "
        f"extra for a CUDA 12 driver; or set {NVRTC_ENV}): " + "; ".join(errors or paths)
    )


class NVRTCCompiler(Compiler):
    """CUDA C++ -> a cubin (ELF bytes) for `arch` (e.g. "sm_90"). The disk cache key names the NVRTC version,
    the arch and the flags. A failed compile raises `CompileError` with NVRTC's log and the source."""

    def __init__(self, arch: str = "sm_90", nvrtc: NVRTCLibrary | None = None) -> None:
        super().__init__()
        if not _ARCH.fullmatch(arch):
            raise ValueError(f"{arch!r} is not a GPU architecture such as 'sm_90'")
        self.arch, self.nvrtc = arch, nvrtc or nvrtc_library()
        self.options = [f"-arch={arch}", *FLAGS]
        version = ".".join(map(str, self.nvrtc.version))
        self.cache_key = f"cubin|nvrtc {version}|{arch}|{' '.join(self.options)}"
        self.compiled = 0  # kernels NVRTC compiled in this process (cache hits are not compiles)
        self._count_lock = threading.Lock()

    def compile(self, src: str) -> bytes:
        """The cubin of `src`; NVRTC's log and the numbered source in the error when it does not compile."""
        cubin, log = self.nvrtc.compile(src, self.options)
        if cubin is None:
            version = ".".join(map(str, self.nvrtc.version))
            raise CompileError(f"NVRTC {version} ({' '.join(self.options)})", log, src)
        with self._count_lock:
            self.compiled += 1
        return cubin


def is_cubin(lib: bytes) -> bool:
    """Whether `lib` is an ELF image (a cubin, or the emulator's shared object)."""
    return lib[:4] == b"\x7fELF"
