"""Backends and the device registry (layer 13): `Backend`, the API of compiled backends, and `Device`.

Backends are plugins: each contributes one entry point in the `uopgrad.backends` group, read only when a
device is first named, so `import uopgrad` imports no backend. REFERENCE ships with core and is also found
without an installed entry point (a source checkout on PYTHONPATH).

A backend that generates code subclasses `CompiledBackend` and supplies four parts (docs/ARCHITECTURE.md
§3): a renderer (`uopgrad.renderer`), a `Compiler` (source -> bytes, cached on disk), an `Allocator` and a
`Program` runtime (a loaded kernel). `realize(sink)` then runs schedule -> lower -> render -> compile ->
launch, reusing compiled kernels across calls with the same kernel structure.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib
import importlib.metadata
import os
import re
import shlex
import subprocess
import tempfile
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import numpy as np

from uopgrad import debug, diskcache, program_store
from uopgrad._util import LRU
from uopgrad.codegen import Program as KernelProgram
from uopgrad.codegen import Target
from uopgrad.codegen.group import split_partials, splits_nothing
from uopgrad.codegen.opt import OPT
from uopgrad.config import getenv_float, getenv_str
from uopgrad.dtype import DType, dtypes
from uopgrad.errors import BackendError, CompileError, ConfigError
from uopgrad.ops import Ops
from uopgrad.pipeline import GlobalCounters, count_kernel, run_schedule
from uopgrad.renderer import Renderer
from uopgrad.schedule import Schedule, schedule
from uopgrad.uop import UOp

__all__ = [
    "Allocator",
    "Backend",
    "Capabilities",
    "CompileError",
    "CompiledBackend",
    "Compiler",
    "Device",
    "DeviceRegistry",
    "ENTRY_POINT_GROUP",
    "GlobalCounters",
    "H",
    "HostAllocator",
    "PACKAGES",
    "PREFERENCE",
    "Program",
    "SOURCES",
    "Size",
    "Target",
    "checkout",
    "compile_cache_dir",
    "count_kernel",
    "install_advice",
    "install_hint",
    "is_dtype_supported",
    "load_library",
    "reduce_split",
    "run_compiler",
    "run_linear",
]

ENTRY_POINT_GROUP = "uopgrad.backends"
# Device.DEFAULT is the first installed of these, unless $UOPGRAD_DEVICE names one
PREFERENCE = ("CPU", "CL", "CUDA", "REFERENCE")
# backends that ship inside core: found even when core is used from a source tree without being installed
_BUILTIN = {"REFERENCE": "uopgrad.backends.reference:ReferenceBackend"}
# the distributions of this project's backends: the error for a device that is not installed names its package
PACKAGES = {"CPU": "uopgrad-cpu", "CL": "uopgrad-opencl", "CUDA": "uopgrad-cuda"}
# Every distribution of this repository -> its directory in a checkout. None is on the package index, so a
# hint says `pip install <that directory>` (a bare `pip install uopgrad-cpu` fails, or finds a squatter's).
SOURCES = {
    "uopgrad": "packages/core",
    "uopgrad-cpu": "packages/backend-cpu",
    "uopgrad-opencl": "packages/backend-opencl",
    "uopgrad-cuda": "packages/backend-cuda",
    "uopgrad-conformance": "conformance",
}
H = TypeVar("H")  # an allocator's handle type


# what a backend can run is its `Target` (uopgrad.codegen.target); `Capabilities(dtypes, ops, grid, compiled,
# vector_width)` is its former name, the same class (deprecated, kept for one release)
Capabilities = Target


class Backend:
    """One logical device of a backend (e.g. "REFERENCE" or "REFERENCE:1").

    The Tensor layer uses three methods: `copyin`/`copyout` move host data into and out of a BUFFER, and
    `realize` runs a SINK of STOREs into BUFFERs (and any other effects in it), after which those buffers
    hold the stored values. Buffers are BUFFER UOps; a backend keeps their storage in a weak map. Every
    backend declares its `capabilities`, the `Target` it runs (a class attribute, or set in `__init__`; a
    compiled backend's is built by its renderer)."""

    capabilities: Target
    # the code generator, for backends that render source (CompiledBackend); None where kernels are evaluated
    renderer: Renderer | None = None

    def __init__(self, device: str) -> None:
        self.name = device

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def copyin(self, buf: UOp, data: np.ndarray) -> None:
        """Fill `buf` with `data` (flattened, in C order, already of the buffer's dtype)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement copyin")

    def copyout(self, buf: UOp) -> np.ndarray:
        """The contents of `buf` as a flat host array (a copy)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement copyout")

    def realize(self, sink: UOp) -> None:
        """Run every effect in `sink` (STOREs into BUFFERs, custom-kernel CALLs, ...)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement realize")

    def run_kernel(self, item: UOp, var_vals: dict[str, int]) -> None:
        """Run one scheduled kernel CALL whose buffers live here (another device's schedule hands it over)."""
        del var_vals  # a SINK of the CALL carries its bound variables
        self.realize(item.sink())


# ---------------------------------------------------------------------- the parts of a compiled backend
def compile_cache_dir() -> Path:
    """Where compiled kernels are kept: $UOPGRAD_CACHE_DIR, else $XDG_CACHE_HOME/uopgrad, else
    ~/.cache/uopgrad (see `uopgrad.diskcache`)."""
    return diskcache.cache_dir()


@dataclass
class _LookedUp:
    """Sources, their digests and the binaries the disk cache had (`Compiler.look_up`)."""

    srcs: list[str]
    digest: dict[str, str]
    libs: dict[str, bytes]


class Compiler:
    """Source -> binary. `compile_cached` keeps each result on disk under a hash of `cache_key` (the
    compiler's identity and flags, set by subclasses) and the source, so a second process reuses it."""

    cache_key = ""
    # True where `compile_many` runs in other processes, so that starting it while Python lowers the rest
    # of a realize's kernels overlaps the two (CompiledBackend.prepare); an in-process driver would only
    # contend with the lowering
    overlaps_lowering = False

    def __init__(self) -> None:
        self.stats: Counter[str] = Counter()  # "disk_hit" / "compiled": what compile_cached did
        self._lock = threading.Lock()  # compile_cached runs on several threads at once

    def compile(self, src: str) -> bytes:
        """Compile `src` (raises CompileError with the compiler's message and the source)."""
        return src.encode()  # a backend whose driver builds source itself keeps it as it is

    def _digest(self, src: str) -> str:
        return hashlib.sha256(f"{type(self).__qualname__}\0{self.cache_key}\0{src}".encode()).hexdigest()

    def compile_cached(self, src: str) -> bytes:
        """`compile(src)`, through the on-disk cache (`uopgrad.diskcache`: checked entries, written
        atomically, so concurrent processes never read a partial one)."""
        digest = self._digest(src)
        if (lib := diskcache.read(digest)) is not None:
            with self._lock:
                self.stats["disk_hit"] += 1
            return lib
        lib = self.compile(src)
        with self._lock:
            self.stats["compiled"] += 1
        diskcache.write(digest, lib)
        return lib

    def compile_many(self, srcs: Sequence[str]) -> list[bytes]:
        """`compile` of each source, side by side (each is a separate compiler process). A compiler whose
        driver builds many kernels at once for much less than one by one overrides it (OpenCL, the CUDA
        emulator); it must raise what `compile` of the bad source raises."""
        workers = min(len(srcs), os.cpu_count() or 1)
        if workers > 1:
            with ThreadPoolExecutor(workers) as pool:
                return list(pool.map(self.compile, srcs))
        return [self.compile(src) for src in srcs]

    def compile_cached_many(self, srcs: Sequence[str]) -> list[bytes]:
        """`compile_cached` of each source: the disk cache's hits, and `compile_many` of the misses (each
        distinct source once)."""
        return self.build_looked_up(self.look_up(srcs))

    def look_up(self, srcs: Sequence[str]) -> _LookedUp:
        """The first half of `compile_cached_many`: each source's digest and the disk cache's hits. Python
        work: a caller that builds the misses on another thread does this on its own, where the GIL is
        (on a thread beside a busy one, each of its disk reads waited for the GIL: 10-20 ms apiece)."""
        digest = {src: self._digest(src) for src in srcs}
        libs: dict[str, bytes] = {}
        for src, d in digest.items():
            if (lib := diskcache.read(d)) is not None:
                libs[src] = lib
        return _LookedUp(list(srcs), digest, libs)

    def build_looked_up(self, found: _LookedUp) -> list[bytes]:
        """The second half of `compile_cached_many`: `compile_many` of the misses, stored on disk."""
        digest, libs = found.digest, found.libs
        misses = [src for src in digest if src not in libs]
        built = self.compile_many(misses) if misses else []
        diskcache.write_many([(digest[src], lib) for src, lib in zip(misses, built)])
        libs.update(zip(misses, built))
        with self._lock:
            for key, n in (("disk_hit", len(digest) - len(misses)), ("compiled", len(misses))):
                if n:
                    self.stats[key] += n
        return [libs[src] for src in found.srcs]

    def evict(self, src: str) -> None:
        """Forget the cached result of `src` (it did not load: it is compiled again)."""
        diskcache.evict(self._digest(src))


class Allocator(Generic[H]):
    """Device memory for buffers, as handles of type H. `alloc` gives zero-filled memory unless told the
    caller overwrites all of it; `free` keeps the memory for reuse by a later `alloc` of the same size (up to
    `cache_limit` bytes), so a repeated step costs no fresh pages. Subclasses implement `_alloc` (zeroed),
    `_free`, `_zero`, `copyin`, `copyout`, and `as_buffer` where the device shares host memory."""

    cache_limit = 1 << 30

    def __init__(self) -> None:
        self._cache: dict[int, list[H]] = {}
        self._cached_bytes = 0

    def alloc(self, nbytes: int, zero: bool = True) -> H:
        """A handle on `nbytes` of device memory, zeroed unless `zero` is False (reused memory is not)."""
        cached = self._cache.get(nbytes)
        if cached:
            handle = cached.pop()
            self._cached_bytes -= nbytes
            if zero:
                self._zero(handle)
            return handle
        return self._alloc(nbytes)

    def free(self, handle: H, nbytes: int) -> None:
        """Give `handle` back (its BUFFER was collected): kept for reuse while the cache has room."""
        if self._cached_bytes + nbytes <= self.cache_limit:
            self._cache.setdefault(nbytes, []).append(handle)
            self._cached_bytes += nbytes
        else:
            self._free(handle, nbytes)

    def _alloc(self, nbytes: int) -> H:
        raise NotImplementedError(f"{type(self).__name__} does not implement _alloc")

    def _free(self, handle: H, nbytes: int) -> None:
        """Release device memory for good (nothing to do where the garbage collector owns it)."""

    def _zero(self, handle: H) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement _zero")

    def copyin(self, handle: H, src: memoryview) -> None:
        """Copy host bytes into the device memory of `handle`."""
        raise NotImplementedError(f"{type(self).__name__} does not implement copyin")

    def copyout(self, dst: memoryview, handle: H) -> None:
        """Copy the device memory of `handle` into host bytes."""
        raise NotImplementedError(f"{type(self).__name__} does not implement copyout")

    def as_buffer(self, handle: H) -> memoryview | None:
        """A zero-copy host view of `handle`, or None."""
        return None


class HostAllocator(Allocator[np.ndarray]):
    """Host memory as 64-byte aligned numpy byte arrays, for every backend whose kernels run on the host.
    Fresh arrays are zeroed by calloc, so an untouched page costs nothing; copies are memcpys and
    `as_buffer` is the array's own memory."""

    align = 64  # a cache line: vector loads never straddle the start of a buffer

    def _alloc(self, nbytes: int) -> np.ndarray:
        raw = np.zeros(nbytes + self.align, dtype=np.uint8)
        start = -raw.ctypes.data % self.align
        return raw[start : start + nbytes]

    def _zero(self, handle: np.ndarray) -> None:
        handle.fill(0)

    def copyin(self, handle: np.ndarray, src: memoryview) -> None:
        """memcpy host bytes into the buffer."""
        handle[:] = np.frombuffer(src, dtype=np.uint8)

    def copyout(self, dst: memoryview, handle: np.ndarray) -> None:
        """memcpy the buffer into host bytes."""
        np.frombuffer(dst, dtype=np.uint8)[:] = handle

    def as_buffer(self, handle: np.ndarray) -> memoryview:
        """The buffer's own memory (no copy)."""
        return handle.data


def run_compiler(
    cmd: list[str], stdin: str, src: str, tool: str, env: str
) -> subprocess.CompletedProcess[str]:
    """Run a compiler process on `stdin` (UOPGRAD_COMPILE_TIMEOUT bounds it). A compiler that can't be started
    or does not finish is a CompileError that names `tool`, the variable `env` choosing it, and `src`; a
    failed build is the caller's to judge from the returned process."""
    try:
        return subprocess.run(
            cmd,
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=getenv_float("UOPGRAD_COMPILE_TIMEOUT"),
        )
    except OSError as e:
        raise CompileError(
            shlex.join(cmd),
            f"can't run the {tool} {cmd[0]!r} (the environment variable {env} chooses it): {e}",
            src,
        ) from e
    except subprocess.TimeoutExpired as e:
        raise CompileError(
            shlex.join(cmd),
            f"the {tool} did not finish in {e.timeout:g} s (UOPGRAD_COMPILE_TIMEOUT sets the limit)",
            src,
        ) from e


def load_library(lib: bytes, prefix: str) -> ctypes.CDLL:
    """A shared object loaded from its bytes, for backends whose kernels run on the host: written to a
    private temporary file, loaded with `ctypes.CDLL` and unlinked at once (the loaded mapping stays
    valid)."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(lib)
        return ctypes.CDLL(path)
    finally:
        os.unlink(path)


# A launch size of Program's: work-groups per dimension (`global_size`) or work-items per group
# (`local_size`), as tinygrad counts them; None for a kernel with no grid (a loop-style backend's)
Size = Sequence[int] | None


class Program:
    """One compiled kernel, loaded and ready to launch: `prg(*buffer_handles, vals=..., global_size=...,
    local_size=...)`. Buffers come in the kernel's `globals` order, `vals` in the order of its `vars`."""

    def __init__(self, name: str, lib: bytes) -> None:
        self.name, self.lib = name, lib

    def __call__(
        self, *bufs: object, vals: Sequence[int] = (), global_size: Size = None, local_size: Size = None
    ) -> None:
        """Launch the kernel on `bufs` with the variable values `vals`; returns when it has finished."""
        raise NotImplementedError(f"{type(self).__name__} does not implement launching")

    def bind(
        self, *bufs: object, vals: Sequence[int] = (), global_size: Size = None, local_size: Size = None
    ) -> Callable[[], None]:
        """This launch with its arguments bound now: calling the result runs it (a captured step replays
        these). Runtimes override it to convert the arguments once (CPU: the ctypes values)."""
        return functools.partial(
            self.__call__, *bufs, vals=tuple(vals), global_size=global_size, local_size=local_size
        )


@dataclass(frozen=True)
class _Kernel:
    """A kernel structure, lowered, rendered and compiled once per process and device."""

    program: KernelProgram
    src: str
    run: Program
    overwrites: frozenset[int]  # buffer slots of which the kernel writes every element


def _head(n: int) -> int:
    """How many of a realize's `n` new kernels are compiled while the rest is lowered: half, from 4 kernels
    on (a smaller part would cost a compiler process of its own for little overlap)."""
    return (n + 1) // 2 if n >= 4 else n


def _overwritten(body: UOp) -> frozenset[int]:
    """The slots a kernel body writes entirely without reading them first: STOREs into a PARAM seen through
    RESHAPEs only (no SHRINK, PAD, ...), a PARAM no stored value reads. Their buffers need no zeroing before
    the kernel runs (a buffer never written reads as zeros, also inside an in-place update like `x += 1`)."""
    stores = [st for st in body.src if st.op is Ops.STORE]
    read = {u.arg for st in stores for u in st.src[1].toposort() if u.op is Ops.PARAM}
    slots = set()
    for st in stores:
        target = st.src[0]
        while target.op is Ops.RESHAPE:
            target = target.src[0]
        if target.op is Ops.PARAM and target.arg not in read:
            slots.add(int(target.arg))
    return frozenset(slots)


def _checked_values(program: KernelProgram, var_vals: dict[str, int]) -> tuple[int, ...]:
    """The kernel's variable values, each checked against its argument's dtype (never cut to fit)."""
    vals = program.var_values(var_vals)
    for var, v in zip(program.vars, vals):
        if not dtypes.min(var.dtype) <= v <= dtypes.max(var.dtype):
            raise ValueError(
                f"variable {var.arg[0]!r} = {v} does not fit the kernel argument's {var.dtype} "
                f"(its bounds are [{var.arg[1]}, {var.arg[2]}])"
            )
    return vals


def _release(allocator: Allocator[Any], handle: object, nbytes: int, device: str) -> None:
    """A buffer's memory goes back to its allocator (the buffer was collected, or freed)."""
    GlobalCounters.mem_used -= nbytes
    GlobalCounters.mem_used_per_device[device] -= nbytes
    allocator.free(handle, nbytes)


class CompiledBackend(Backend):
    """A backend that generates code. `realize(sink)`: the scheduler splits `sink` into kernels and copies;
    each kernel is lowered for its target (`capabilities`, which the renderer builds), rendered, compiled
    (disk cache) and launched. Compiled kernels are kept per process, keyed by the kernel's structure (its
    body), never by buffers."""

    kernel_cache_size = 1024  # loaded kernels kept per device (least recently used ones are unloaded)
    renderer: Renderer  # always set: what turns its programs into source

    def __init__(
        self,
        device: str,
        renderer: Renderer,
        compiler: Compiler,
        allocator: Allocator[Any],
        runtime: type[Program],
        dtypes: frozenset[DType],
    ) -> None:
        super().__init__(device)
        self.renderer, self.compiler, self.allocator, self.runtime = renderer, compiler, allocator, runtime
        self.capabilities = renderer.target(dtypes)  # what every kernel is lowered for
        # BUFFER -> device memory; the memory goes back to the allocator when the BUFFER node is collected
        # (its finalizer, in _frees), or at `free(buf)`
        self._handles: weakref.WeakKeyDictionary[UOp, Any] = weakref.WeakKeyDictionary()
        self._frees: weakref.WeakKeyDictionary[UOp, weakref.finalize[Any, UOp]] = weakref.WeakKeyDictionary()
        self._freed: weakref.WeakSet[UOp] = weakref.WeakSet()  # given back by free(): read before written
        # kernel body -> compiled kernel, the most recently used `kernel_cache_size` of them: a run over ever
        # new shapes keeps a bounded number of loaded programs (each maps its own pages)
        self._kernels: LRU[tuple[UOp, int], _Kernel] = LRU(self.kernel_cache_size)  # (body, vector width)

    # ------------------------------------------------------------------ buffers
    def _nbytes(self, buf: UOp) -> int:
        if buf.dtype.base.scalar() not in self.capabilities.dtypes:
            raise TypeError(
                f"{self.name} has no {buf.dtype} buffers (it supports "
                f"{sorted(d.name for d in self.capabilities.dtypes)})"
            )
        return max(int(buf.arg), 1) * buf.dtype.base.itemsize

    def handle(self, buf: UOp, zero: bool = True) -> object:
        """The device memory of BUFFER `buf`, allocated on first use: zeroed, unless the caller is about to
        write every element (`zero=False`)."""
        h = self._handles.get(buf)
        if h is None:
            if buf in self._freed:
                if zero:  # read (or written in part) before anything wrote it again: its values are gone
                    raise BackendError(
                        f"{self.name}: a {buf.dtype!r} buffer of {buf.arg} elements is read "
                        "after its memory was given back (TinyJit's free_intermediates()); "
                        "call the jitted function again before reading what it computes"
                    )
                self._freed.discard(buf)
            nbytes = self._nbytes(buf)
            h = self._handles[buf] = self.allocator.alloc(nbytes, zero)
            GlobalCounters.mem_used += nbytes
            GlobalCounters.mem_used_per_device[self.name] += nbytes
            self._frees[buf] = weakref.finalize(buf, _release, self.allocator, h, nbytes, self.name)
        return h

    def free(self, buf: UOp) -> int:
        """Give the memory of BUFFER `buf` back now; the bytes given back (0 where it has none, or memory
        this backend does not own). A kernel or copy that writes all of it allocates it again; reading it
        before that raises BackendError."""
        if (fin := self._frees.pop(buf, None)) is None:
            return 0
        info = fin.peek()
        self._handles.pop(buf, None)
        self._freed.add(buf)
        fin()
        return int(info[2][2]) if info is not None else 0

    def adopt(self, buf: UOp, handle: object) -> None:
        """Make `handle` (memory this backend does not own, so nothing frees or reuses it) the storage of the
        not yet allocated BUFFER `buf` (Tensor.from_blob)."""
        if buf in self._handles:
            raise ValueError(f"BUFFER {buf.arg} already has memory")
        self._handles[buf] = handle

    def copyin(self, buf: UOp, data: np.ndarray) -> None:
        """Fill `buf` with `data` (converted to the buffer's dtype)."""
        arr = np.ascontiguousarray(np.asarray(data).reshape(-1), dtype=dtypes.to_numpy(buf.dtype.base))
        if arr.size != buf.arg:
            raise ValueError(f"copyin of {arr.size} elements into a BUFFER of {buf.arg}")
        if arr.size:
            self.allocator.copyin(self.handle(buf, zero=False), arr.view(np.uint8).data)  # (bf16: no buffer)

    def copyout(self, buf: UOp) -> np.ndarray:
        """A copy of `buf`'s contents (zeros if nothing was ever written)."""
        out = np.empty((int(buf.arg),), dtype=dtypes.to_numpy(buf.dtype.base))
        if out.size:
            self.allocator.copyout(out.view(np.uint8).data, self.handle(buf))
        return out

    # ------------------------------------------------------------------ kernels
    def kernel(self, call: UOp) -> _Kernel:
        """The compiled kernel of a scheduled kernel CALL, built once per process for each body (the kernel's
        structure: its buffers are arguments)."""
        return self.prepare([call])[call.src[0]]

    def prepare(self, calls: Sequence[UOp]) -> dict[UOp, _Kernel]:
        """Lower, render and compile the kernels of `calls` that are not built yet. The compiles run side by
        side (each is a separate compiler process), so a cold training step waits for the slowest one; where
        the compiler says it runs beside Python (`Compiler.overlaps_lowering`), the first part's compile
        starts while the rest is still being lowered. Returns the kernel of every body in `calls`."""
        todo: dict[UOp, UOp] = {}
        ready: dict[UOp, _Kernel] = {}
        target = self.capabilities
        # OPT=0 builds (and keeps) unoptimised kernels, under -1: a target without a vector width (CUDA's
        # tensor cores) has optimised kernels too
        width = target.vector_width if OPT else -1
        for call in calls:
            if (k := self._kernels.get((call.src[0], width))) is not None:
                ready[call.src[0]] = k
            else:
                todo.setdefault(call.src[0], call)
        # DEBUG>=1 says when new kernels are built and what it cost; a long build shows a progress bar
        with debug.compiling(self.name, len(todo), len(ready), self.compiler.stats) as build:
            done, libs = self._lower_and_compile(list(todo.values()), target, build)
            for body, (program, src, _), lib in zip(todo, done, libs, strict=True):
                run = self._load_program(program, src, lib)
                k = ready[body] = self._kernels[(body, width)] = _Kernel(
                    program, src, run, _overwritten(body)
                )
        program_store.store(done)  # the programs of kernels that built and loaded
        return ready

    def _lower_and_compile(
        self, calls: list[UOp], target: Capabilities, build: debug.Compiling
    ) -> tuple[list[program_store.Lowered], list[bytes]]:
        """Each call's program and source (`program_store.lowered`) and binary. A compiler that overlaps
        lowering gets the first `_head(n)` sources on a thread while the rest is lowered (the C compiler is
        another process: the cores it uses are free while Python lowers); the parts are compiled in order,
        and the first error in kernel order is the one raised, after every part has finished."""
        head = _head(len(calls)) if self.compiler.overlaps_lowering else len(calls)
        done: list[program_store.Lowered] = []
        with ThreadPoolExecutor(1) as pool:
            first = None
            for call in build.track(calls):
                done.append(program_store.lowered(self, call, target))
                debug.source(done[-1][0].name, done[-1][1])
                if len(done) == head < len(calls):  # (the disk reads here: see `look_up`)
                    first = pool.submit(
                        self.compiler.build_looked_up, self.compiler.look_up([d[1] for d in done])
                    )
            build.phase("compiling")
            sources = [d[1] for d in done]
            rest = sources[head:] if first is not None else sources
            try:
                libs, error = self.compiler.compile_cached_many(rest) if rest else [], None
            except Exception as e:  # raised once the first part is in: its error comes first
                libs, error = [], e
            libs = (first.result() if first is not None else []) + libs
            if error is not None:
                raise error
        return done, libs

    def _load_program(self, program: KernelProgram, src: str, lib: bytes) -> Program:
        """The loaded kernel. A binary that does not load (a cache entry that is garbage under a valid
        checksum, a compiler that exited 0 but wrote junk) is evicted and compiled once more."""
        name = self.renderer.function_name(program.name)
        try:
            return self.runtime(name, lib)
        except Exception:  # any loader failure: compile from source once more
            self.compiler.evict(src)
        lib = self.compiler.compile(src)
        try:
            return self.runtime(name, lib)
        except Exception as e:
            raise BackendError(
                f"{self.name}: kernel {name} compiled but does not load: {type(e).__name__}: {e}"
            ) from e

    def realize(self, sink: UOp, ahead: Sequence[UOp] = ()) -> None:
        """Run every effect in `sink`: the schedule's kernels of this device are built side by side first,
        then the driver runs every item in order, each on the device its buffers live on.

        `ahead`: graphs as `realize` takes them that are likely to be realized next (the other gradients of
        a backward whose first gradient this is). Their new kernels are built with these, side by side, in
        one batch, and nothing of them runs; one that fails to schedule or build is left for its own
        realize to report."""
        with debug.realizing(self.name, sink):
            # a malformed graph gets VerifyError naming the node; big reduces split as the target says
            sched = schedule(sink, check=True, split=reduce_split)
            debug.schedule_made(sched.items, self.name)
            plan = self._plan(sched, self._kernels_of(ahead))
            run_schedule(sched.items, sched.var_vals, self._device, plan)

    def _kernels_of(self, sinks: Sequence[UOp]) -> list[UOp]:
        """The kernel items of this device in the schedules of `sinks` (those that schedule)."""
        calls: list[UOp] = []
        for s in sinks:
            try:
                items = schedule(s, check=True, split=reduce_split).items
            except Exception:  # its own realize raises it, where it belongs
                continue
            calls += [it for it in items if it.src[0].op is Ops.SINK and self._mine(it)]
        return calls

    def _prepare(self, calls: list[UOp], ahead: list[UOp]) -> dict[UOp, _Kernel]:
        """`prepare(calls)`, with the kernels of `ahead` built in the same batch where they all build."""
        if ahead:
            try:
                ready = self.prepare(calls + ahead)
            except Exception:  # an error of `calls` is raised again below
                pass
            else:
                return {c.src[0]: ready[c.src[0]] for c in calls}
        return self.prepare(calls)

    def _plan(
        self, sched: Schedule, ahead: list[UOp] | None = None
    ) -> tuple[Callable[[UOp, dict[str, int]], None] | None, ...]:
        """The launch of each of the schedule's kernels on this device, by position (None for the rest):
        this backend's `run_kernel`, its kernels built first. Kept in `sched.memo`, shared by every schedule
        of the same cache entry, whose items differ only in their buffers: a repeated step's realize skips
        `prepare` and the device lookups. Each launch still finds its kernel in the kernel cache (a cleared or
        bounded cache builds it again), so a plan never runs a kernel the cache let go."""
        width = self.capabilities.vector_width if OPT else -1  # (as `prepare` keys its kernels)
        if (hit := sched.memo.get((self, width))) is None:
            mine = tuple(it.src[0].op is Ops.SINK and self._mine(it) for it in sched.items)
            ready = self._prepare([it for it, m in zip(sched.items, mine) if m], ahead or [])
            sched.memo[(self, width)] = (mine, len(ready))
        else:
            mine, n = cast("tuple[tuple[bool, ...], int]", hit)
            if ahead:
                self._prepare([], ahead)
            with debug.compiling(self.name, 0, n, self.compiler.stats):  # DEBUG's summary: kernels reused
                pass
        run = self.run_kernel
        return tuple(run if m else None for m in mine)

    def _handles_of(self, k: _Kernel, bufs: Sequence[UOp]) -> list[object]:
        got = self._handles.get  # the common case: allocated already
        return [
            h if (h := got(bufs[s])) is not None else self.handle(bufs[s], zero=s not in k.overwrites)
            for s in k.program.globals
        ]

    def run_kernel(self, item: UOp, var_vals: dict[str, int]) -> None:
        """Launch one scheduled kernel CALL on this device's buffers."""
        width = self.capabilities.vector_width if OPT else -1
        self._launch(self._kernels.get((item.src[0], width)) or self.kernel(item), item, var_vals)

    def _launch(self, k: _Kernel, item: UOp, var_vals: dict[str, int]) -> None:
        handles = self._handles_of(k, item.src[1:])
        vals = _checked_values(k.program, var_vals) if k.program.vars else ()
        start = time.perf_counter()
        k.run(*handles, vals=vals, global_size=k.program.global_size, local_size=k.program.local_size)
        count_kernel(self.name, k.program, var_vals, time.perf_counter() - start)

    def bind_kernel(
        self, item: UOp, var_vals: dict[str, int], bufs: Sequence[UOp] | None = None
    ) -> Callable[[], None]:
        """The launch of kernel CALL `item` on `bufs` (default: its own buffers) with every argument bound
        now: calling the result runs the kernel, with no lookups and no checks (a captured step's replay).
        The caller keeps the BUFFERs alive as long as it keeps the launch."""
        width = self.capabilities.vector_width if OPT else -1
        k = self._kernels.get((item.src[0], width)) or self.kernel(item)
        handles = self._handles_of(k, item.src[1:] if bufs is None else bufs)
        return k.run.bind(
            *handles,
            vals=_checked_values(k.program, var_vals),
            global_size=k.program.global_size,
            local_size=k.program.local_size,
        )

    def _mine(self, item: UOp) -> bool:
        return len(item.src) < 2 or item.src[1].device == self.name

    def _device(self, name: str) -> Backend:
        return self if name in ("", self.name) else Device[name]


_DEVICE_NAME = re.compile(r"([A-Za-z][A-Za-z0-9_]*)(?::([0-9]{1,6}))?")


@dataclass(frozen=True)
class _Plugin:
    name: str  # device base name, e.g. "CPU"
    value: str  # "module:attr" of the Backend subclass
    dist: str  # the distribution that provides it, for error messages


def checkout() -> Path | None:
    """The repository checkout this core runs from (an editable or source-tree install), else None."""
    here = Path(__file__).resolve().parents  # <root>/packages/core/src/uopgrad/backend.py
    root = here[4] if len(here) > 4 else None
    return root if root is not None and (root / SOURCES["uopgrad"] / "pyproject.toml").is_file() else None


def install_hint(dist: str, extra: str = "") -> str:
    """The command that installs `dist` (a key of SOURCES, with an optional `[extra]`): from the checkout
    core runs from, its directory by absolute path; else the directory relative to a checkout's root."""
    root = checkout()
    path = str(root / SOURCES[dist]) if root is not None else f"./{SOURCES[dist]}"
    return f"pip install {shlex.quote(f'{path}[{extra}]' if extra else path)}"


def install_advice(dist: str, extra: str = "") -> str:
    """`install_hint` in backquotes, for a message; where core was installed from a wheel, also where the
    relative path holds and how to get wheels."""
    note = "" if checkout() is not None else " (run in a checkout of uopgrad; `nox -s wheels` builds wheels)"
    return f"`{install_hint(dist, extra)}`{note}"


class _ReduceSplit:
    """The scheduler's split policy: partials per output of a reduce on `device`, as its target decides
    (uopgrad.codegen.group.split_partials); `never_splits(device)` where that is 1 for every reduce."""

    def __call__(self, device: str, n: int, outs: int, op: Ops, dt: DType) -> int:
        return split_partials(Device[device].capabilities, n, outs, op, dt)

    def never_splits(self, device: str) -> bool:
        return splits_nothing(Device[device].capabilities)


reduce_split = _ReduceSplit()


class DeviceRegistry:
    """The device registry: `Device["CPU:1"]` gives the backend object, `Device.DEFAULT` the default name."""

    def __init__(self) -> None:
        self._plugins: dict[str, _Plugin] | None = None
        self._classes: dict[str, type[Backend]] = {}
        self._instances: dict[str, Backend] = {}
        self._default: str | None = None
        # one backend object per device, also when threads name a device for the first time at once: a
        # second object would hold none of the first one's buffers (reads of them would give zeros)
        self._lock = threading.RLock()

    def _discover(self) -> dict[str, _Plugin]:
        with self._lock:
            return self._discover_locked()

    def _discover_locked(self) -> dict[str, _Plugin]:
        if self._plugins is None:
            plugins: dict[str, _Plugin] = {}
            for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
                dist = ep.dist.name if ep.dist is not None else "<unknown distribution>"
                new = _Plugin(ep.name.upper(), ep.value, dist)
                old = plugins.get(new.name)
                if old is not None and old.value != new.value:
                    raise BackendError(
                        f"backend {new.name} is provided twice: by {old.dist} ({old.value}) "
                        f"and by {new.dist} ({new.value}); uninstall one of them"
                    )
                plugins[new.name] = new
            for name, value in _BUILTIN.items():
                plugins.setdefault(name, _Plugin(name, value, "uopgrad"))
            self._plugins = plugins
        return self._plugins

    def plugins(self) -> dict[str, tuple[str, str]]:
        """Every installed backend: name -> (entry point "module:attr", distribution), without loading any."""
        return {name: (p.value, p.dist) for name, p in self._discover().items()}

    def installed(self) -> list[str]:
        """Names of the installed backends (preferred ones first)."""
        names = list(self._discover())
        return sorted(names, key=lambda n: (PREFERENCE.index(n) if n in PREFERENCE else len(PREFERENCE), n))

    @staticmethod
    def canonicalize(name: str) -> str:
        """Upper-case the backend part; ":0" is the backend itself, ":<n>" another device of the backend.
        Anything else (`CPU:abc`, `CPU:-1`, `CPU::`, a number) is an error, never a new device."""
        if not isinstance(name, str):
            raise TypeError(
                f"a device is a name such as 'CPU' or 'CPU:1', not {type(name).__name__} {name!r}"
            )
        m = _DEVICE_NAME.fullmatch(name)
        if m is None:
            raise ValueError(
                f"{name!r} is not a device name: a backend name with an optional ':<index>' "
                f"(a non-negative integer), such as 'CPU' or 'CPU:1'"
            )
        base, index = m.group(1).upper(), m.group(2)
        return base if index is None or int(index) == 0 else f"{base}:{int(index)}"

    @property
    def DEFAULT(self) -> str:
        """$UOPGRAD_DEVICE if set, else the first installed of CPU, CL, CUDA, REFERENCE."""
        if self._default is None:
            env = getenv_str("UOPGRAD_DEVICE")  # a ConfigError where it is not a device name
            if env:
                if (name := self.canonicalize(env)).partition(":")[0] not in self._discover():
                    raise ConfigError(
                        f"environment variable UOPGRAD_DEVICE={env!r} names no installed "
                        f"backend (installed: {', '.join(self.installed())})"
                    )
                self._default = name
            else:
                installed = self._discover()
                self._default = next((n for n in PREFERENCE if n in installed), None) or self.installed()[0]
        return self._default

    @DEFAULT.setter
    def DEFAULT(self, name: str) -> None:
        self._default = self.canonicalize(name)

    def _load(self, base: str) -> type[Backend]:
        if base in self._classes:
            return self._classes[base]
        plugins = self._discover()
        if base not in plugins:
            installed = ", ".join(self.installed())
            hint = f"; {install_advice(PACKAGES[base])} provides it" if base in PACKAGES else ""
            raise BackendError(f"unknown device {base!r}: the installed backends are {installed}{hint}")
        plugin = plugins[base]
        module_name, _, attr = plugin.value.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split(".") if attr else ():
                obj = getattr(obj, part)
        except Exception as e:  # a broken plugin must not look like a crash of uopgrad itself
            raise BackendError(
                f"backend {base} (entry point {plugin.value!r} from {plugin.dist}) failed to "
                f"load: {type(e).__name__}: {e}"
            ) from e
        if not (isinstance(obj, type) and issubclass(obj, Backend)):
            raise BackendError(
                f"backend {base} (entry point {plugin.value!r} from {plugin.dist}) is "
                f"{obj!r}, not a subclass of uopgrad.backend.Backend"
            )
        self._classes[base] = obj
        return obj

    def __getitem__(self, name: str) -> Backend:
        device = self.canonicalize(name)
        if (backend := self._instances.get(device)) is not None:
            return backend
        with self._lock:
            if device not in self._instances:
                self._instances[device] = self._load(device.partition(":")[0])(device)
            return self._instances[device]

    def __contains__(self, name: str) -> bool:
        return self.canonicalize(name).partition(":")[0] in self._discover()

    def __repr__(self) -> str:
        return f"<Device registry: {', '.join(self.installed())}>"


Device = DeviceRegistry()


def is_dtype_supported(dtype: DType, device: str | None = None) -> bool:
    """Whether `device` (default: Device.DEFAULT) can hold and compute `dtype`, from its capabilities,
    so that code can skip a dtype the way tinygrad's `is_dtype_supported` lets it."""
    return dtype in Device[device or Device.DEFAULT].capabilities.dtypes


def run_linear(linear: UOp, var_vals: dict[str, int] | None = None) -> None:
    """Run a schedule made without running it (`Tensor.linear_with_vars`: LINEAR of kernel and copy CALLs)
    in order, each item on the device its buffers live on (tinygrad's name)."""
    run_schedule(linear.src, dict(var_vals or {}), lambda name: Device[name])
