"""The CPU backend's runtime: buffers are numpy arrays in host memory, kernels are loaded with ctypes.

A buffer handle is a 64-byte aligned `numpy.uint8` array, so copies in and out are `memcpy`s and
`as_buffer` is a zero-copy view; the memory is garbage collected when the allocator lets a handle go. A
kernel's shared object is written to a private temporary file, loaded with `ctypes.CDLL` and unlinked;
ctypes releases the GIL while the kernel runs. The kernels built together (compiler.py `compile_many`)
share one shared object, each found by its name; it is loaded once while any of them is alive (the loaded
libraries are keyed by their bytes). A kernel renamed in its batch (two kernels of one name) carries the
name it has there after the shared object's bytes (`with_symbol`). Before a parallel kernel runs, team.py
sizes its OpenMP team by the cores other processes leave free.
"""

from __future__ import annotations

import _ctypes
import ctypes
import functools
import threading
import weakref
from collections.abc import Callable, Sequence

import numpy as np

from uopgrad.backend import HostAllocator, Program, Size, load_library
from uopgrad_cpu.team import Team

__all__ = ["CPUAllocator", "CPUProgram", "split_symbol", "with_symbol"]


# a kernel's bytes are a shared object, or one followed by _SYMBOL, the function's name in it and a NUL (the
# loader reads program headers only, and the runtime strips the tail before loading anyway)
_SYMBOL = b"\0uopgrad-symbol:"


def with_symbol(lib: bytes, symbol: str) -> bytes:
    """The bytes of a kernel whose function is `symbol` in shared object `lib` (not the kernel's own name:
    merging a batch renamed it)."""
    return lib + _SYMBOL + symbol.encode() + b"\0"


def split_symbol(lib: bytes, name: str) -> tuple[bytes, str]:
    """(the shared object, the function's name in it) of kernel `name`'s bytes."""
    at = lib.rfind(_SYMBOL)
    if at < 0 or not lib.endswith(b"\0"):
        return lib, name
    symbol = lib[at + len(_SYMBOL) : -1]
    if b"\0" in symbol:  # the marker's bytes inside a plain shared object, not a tail of ours
        return lib, name
    return lib[:at], symbol.decode()


class CPUAllocator(HostAllocator):
    """Host memory: core's shared host allocator, as it is."""


# id(buffer array) -> (a weak reference to it, its address as a kernel argument). The allocator hands the
# same arrays out again step after step, and reading an address (`ndarray.ctypes`) cost ~1.5 us per buffer
# per launch; the weak reference tells a reused id from the array it was read for.
_addresses: dict[int, tuple[weakref.ReferenceType[np.ndarray], ctypes.c_void_p]] = {}


def _address(b: np.ndarray) -> ctypes.c_void_p:
    if (hit := _addresses.get(key := id(b))) is not None and hit[0]() is b:
        return hit[1]
    ptr = ctypes.c_void_p(b.ctypes.data)
    _addresses[key] = (weakref.ref(b, functools.partial(_forget_address, key)), ptr)
    return ptr


def _forget_address(key: int, ref: weakref.ReferenceType[np.ndarray]) -> None:
    if (entry := _addresses.get(key)) is not None and entry[0] is ref:  # not a newer array's entry
        del _addresses[key]


# The first kernel library that brought in an OpenMP runtime, kept loaded for the life of the process.
# Without it, unloading the last kernel that links libgomp unloads libgomp too, while its pool threads are
# still parked in its code: the next time one of them runs, the process dies with SIGSEGV (an intermittent
# crash, measured at 5 of 5 runs of 200 load/launch/dlclose cycles of a parallel kernel).
_OPENMP_PIN: list[ctypes.CDLL] = []
_TEAM: list[Team] = []
_PIN_LOCK = threading.Lock()


def _pin_openmp(dll: ctypes.CDLL) -> bool:
    """Keep `dll` loaded for good if it is the first to bring in an OpenMP runtime (True: it is pinned);
    the team sizing of every parallel kernel then goes through it (team.py)."""
    if _OPENMP_PIN or not hasattr(dll, "omp_get_max_threads"):
        return False
    with _PIN_LOCK:
        if _OPENMP_PIN:
            return False
        _TEAM.append(Team(dll))
        _OPENMP_PIN.append(dll)
        return True


def _call(fn: Callable[..., None], *args: object) -> None:
    fn(*args)


def _fit_and_call(fn: Callable[..., None], *args: object) -> None:
    _TEAM[0].fit()
    fn(*args)


def _dlclose(handle: int) -> None:
    _ctypes.dlclose(handle)  # POSIX: unmaps the shared object


class _Library:
    """One loaded shared object, shared by the programs of the kernels it holds; unloaded with the last of
    them (core keeps a bounded number of kernels, so a long run over ever new shapes does not run out of
    memory mappings), except the one that pins the OpenMP runtime."""

    def __init__(self, lib: bytes, name: str) -> None:
        self.dll = load_library(lib, f"uopgrad-{name}-")
        self.parallel = hasattr(self.dll, "omp_get_max_threads")  # it links the OpenMP runtime
        if not _pin_openmp(self.dll):
            weakref.finalize(self, _dlclose, self.dll._handle)


# a shared object's bytes -> its loaded library while a program holds it (a dict compares the bytes
# themselves on a hash match, so two libraries are never confused; Python caches a bytes object's hash)
_LOADED: weakref.WeakValueDictionary[bytes, _Library] = weakref.WeakValueDictionary()
_LOAD_LOCK = threading.Lock()


def _library(lib: bytes, name: str) -> _Library:
    with _LOAD_LOCK:
        if (hit := _LOADED.get(lib)) is None:
            hit = _LOADED[lib] = _Library(lib, name)
        return hit


class CPUProgram(Program):
    """A kernel in a shared object: the C function `name(buffers..., vars...)`."""

    def __init__(self, name: str, lib: bytes) -> None:
        super().__init__(name, lib)
        so, symbol = split_symbol(lib, name)
        self._library = _library(so, name)  # held: the function below lives in its mapping
        self._fn = getattr(self._library.dll, symbol)
        self._fn.restype = None
        self._parallel = self._library.parallel

    def _args(self, bufs: Sequence[object], vals: Sequence[int]) -> list[object]:
        args: list[object] = [_address(b) for b in bufs if isinstance(b, np.ndarray)]
        if len(args) != len(bufs):
            kinds = [type(b).__name__ for b in bufs]
            raise TypeError(f"{self.name}: CPU kernels take numpy buffers, got {kinds}")
        args += [ctypes.c_int64(v) for v in vals]  # integer kernel arguments are 64-bit (render_var)
        return args

    def __call__(
        self, *bufs: object, vals: Sequence[int] = (), global_size: Size = None, local_size: Size = None
    ) -> None:
        """Run the kernel on `bufs` (numpy arrays) with the variable values `vals`."""
        if self._parallel:
            _TEAM[0].fit()
        self._fn(*self._args(bufs, vals))

    def bind(
        self, *bufs: object, vals: Sequence[int] = (), global_size: Size = None, local_size: Size = None
    ) -> Callable[[], None]:
        """The ctypes call with its arguments converted once: a replay costs the foreign call only (and, for
        a parallel kernel, the team sizing). The partial holds this program, so its shared object stays
        loaded while the launch is kept."""
        call = _fit_and_call if self._parallel else _call
        launch = functools.partial(call, self._fn, *self._args(bufs, vals))
        launch.program = self  # type: ignore[attr-defined]  # (partial objects take attributes)
        return launch
