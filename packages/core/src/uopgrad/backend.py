"""Backends and the device registry (layer 13): `Backend`, the API of compiled backends, and `Device`.

Backends are plugins: each contributes one entry point in the `uopgrad.backends` group, read only when a
device is first named, so `import uopgrad` imports no backend. REFERENCE ships with core and is also found
without an installed entry point (a source checkout on PYTHONPATH).

A backend that generates code subclasses `CompiledBackend` and supplies four parts (ARCHITECTURE §3): a
renderer (`uopgrad.renderer`), a `Compiler` (source -> bytes, cached on disk), an `Allocator` and a
`Program` runtime (a loaded kernel). `realize(sink)` then runs schedule -> lower -> render -> compile ->
launch, reusing compiled kernels across calls with the same kernel structure.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import tempfile
import threading
import time
import weakref
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

from uopgrad import debug
from uopgrad.codegen import GridSpec, lower
from uopgrad.codegen import Program as KernelProgram
from uopgrad.config import getenv_str
from uopgrad.dtype import DType, dtypes
from uopgrad.ops import GroupOp, Ops
from uopgrad.renderer import Renderer
from uopgrad.schedule import schedule
from uopgrad.uop import UOp

__all__ = ["Allocator", "Backend", "Capabilities", "CompileError", "CompiledBackend", "Compiler", "Device",
           "DeviceRegistry", "ENTRY_POINT_GROUP", "H", "PACKAGES", "PREFERENCE", "Program",
           "compile_cache_dir"]

ENTRY_POINT_GROUP = "uopgrad.backends"
# Device.DEFAULT is the first installed of these, unless $UOPGRAD_DEVICE names one
PREFERENCE = ("CPU", "CL", "CUDA", "REFERENCE")
# backends that ship inside core: found even when core is used from a source tree without being installed
_BUILTIN = {"REFERENCE": "uopgrad.backends.reference:ReferenceBackend"}
# the distributions of this project's backends: the error for a device that is not installed names its package
PACKAGES = {"CPU": "uopgrad-cpu", "CL": "uopgrad-opencl", "CUDA": "uopgrad-cuda"}
H = TypeVar("H")  # an allocator's handle type
# every dtype a value can have (REFERENCE stores all of them)
_VALUE_DTYPES = frozenset({dtypes.bool, *dtypes.ints, *dtypes.floats})


@dataclass(frozen=True)
class Capabilities:
    """What a backend can run, for codegen (what to decompose, how to launch) and the conformance suite
    (which op x dtype cases to check)."""

    dtypes: frozenset[DType]
    ops: frozenset[Ops]                # ALU ops rendered natively; codegen decomposes the others
    grid: GridSpec | None = None       # None: loop-style; else grid-style with these launch limits
    compiled: bool = True              # generates and compiles code (False for REFERENCE)

    @property
    def loop_style(self) -> bool:
        """True when output dimensions are loops, not grid indices."""
        return self.grid is None

    @property
    def max_local_size(self) -> tuple[int, ...] | None:
        """Per-dimension maximum of the local (workgroup) size, None for loop-style backends."""
        return None if self.grid is None else self.grid.local_max


class Backend:
    """One logical device of a backend (e.g. "REFERENCE" or "REFERENCE:1").

    The Tensor layer uses three methods: `copyin`/`copyout` move host data into and out of a BUFFER, and
    `realize` runs a SINK of STOREs into BUFFERs (and any other effects in it), after which those buffers
    hold the stored values. Buffers are BUFFER UOps; a backend keeps their storage in a weak map."""

    # every op and dtype: REFERENCE evaluates the tensor IR directly
    capabilities = Capabilities(_VALUE_DTYPES, GroupOp.ALU, None, compiled=False)

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


# ---------------------------------------------------------------------- the parts of a compiled backend
class CompileError(RuntimeError):
    """The compiler rejected generated source; the message holds its output and the numbered source."""

    def __init__(self, compiler: str, message: str, src: str) -> None:
        numbered = "\n".join(f"{i:4d}  {line}" for i, line in enumerate(src.splitlines(), 1))
        super().__init__(f"{compiler} failed:\n{message.rstrip()}\n--- generated source ---\n{numbered}")
        self.message, self.src = message, src


def compile_cache_dir() -> Path:
    """Where compiled kernels are kept: $UOPGRAD_CACHE_DIR, else ~/.cache/uopgrad."""
    env = getenv_str("UOPGRAD_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "uopgrad"


class Compiler:
    """Source -> binary. `compile_cached` keeps each result on disk under a hash of `cache_key` (the
    compiler's identity and flags, set by subclasses) and the source, so a second process reuses it."""

    cache_key = ""

    def __init__(self) -> None:
        self.stats: Counter[str] = Counter()  # "disk_hit" / "compiled": what compile_cached did
        self._lock = threading.Lock()  # compile_cached runs on several threads at once

    def compile(self, src: str) -> bytes:
        """Compile `src` (raises CompileError with the compiler's message and the source)."""
        return src.encode()  # a backend whose driver builds source itself keeps it as it is

    def compile_cached(self, src: str) -> bytes:
        """`compile(src)`, through the on-disk cache. Entries are written to a temporary file and renamed
        into place (atomic), and carry a checksum, so concurrent processes never read a partial entry."""
        digest = hashlib.sha256(f"{type(self).__qualname__}\0{self.cache_key}\0{src}".encode()).hexdigest()
        path = compile_cache_dir() / digest[:2] / digest
        try:
            blob = path.read_bytes()
            if blob[:32] == hashlib.sha256(blob[32:]).digest():
                with self._lock:
                    self.stats["disk_hit"] += 1
                return blob[32:]
        except OSError:
            pass
        lib = self.compile(src)
        with self._lock:
            self.stats["compiled"] += 1
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(hashlib.sha256(lib).digest() + lib)
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        except OSError:
            pass  # an unwritable cache only costs time
        return lib


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


class Program:
    """One compiled kernel, loaded and ready to launch: `prg(*buffer_handles, vals=..., global_size=...,
    local_size=...)`. Buffers come in the kernel's `globals` order, `vals` in the order of its `vars`."""

    def __init__(self, name: str, lib: bytes) -> None:
        self.name, self.lib = name, lib

    def __call__(self, *bufs: object, vals: Sequence[int] = (), global_size: Sequence[int] | None = None,
                 local_size: Sequence[int] | None = None) -> None:
        """Launch the kernel on `bufs` with the variable values `vals`; returns when it has finished."""
        raise NotImplementedError(f"{type(self).__name__} does not implement launching")


@dataclass(frozen=True)
class _Kernel:
    """A kernel structure, lowered, rendered and compiled once per process and device."""

    program: KernelProgram
    src: str
    run: Program
    overwrites: frozenset[int]  # buffer slots of which the kernel writes every element


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


class CompiledBackend(Backend):
    """A backend that generates code. `realize(sink)`: the scheduler splits `sink` into kernels and copies;
    each kernel is lowered for this renderer's capabilities, rendered, compiled (disk cache) and launched.
    Compiled kernels are kept per process, keyed by the kernel's structure (its body), never by buffers."""

    def __init__(self, device: str, renderer: Renderer, compiler: Compiler, allocator: Allocator[Any],
                 runtime: type[Program], dtypes: frozenset[DType]) -> None:
        super().__init__(device)
        self.renderer, self.compiler, self.allocator, self.runtime = renderer, compiler, allocator, runtime
        self.capabilities = Capabilities(dtypes, renderer.supports, renderer.grid, compiled=True)
        # BUFFER -> device memory; the memory goes back to the allocator when the BUFFER node is collected
        self._handles: weakref.WeakKeyDictionary[UOp, Any] = weakref.WeakKeyDictionary()
        self._kernels: dict[UOp, _Kernel] = {}

    # ------------------------------------------------------------------ buffers
    def _nbytes(self, buf: UOp) -> int:
        if buf.dtype.base.scalar() not in self.capabilities.dtypes:
            raise TypeError(f"{self.name} has no {buf.dtype} buffers (it supports "
                            f"{sorted(d.name for d in self.capabilities.dtypes)})")
        return max(int(buf.arg), 1) * buf.dtype.base.itemsize

    def handle(self, buf: UOp, zero: bool = True) -> object:
        """The device memory of BUFFER `buf`, allocated on first use: zeroed, unless the caller is about to
        write every element (`zero=False`)."""
        h = self._handles.get(buf)
        if h is None:
            nbytes = self._nbytes(buf)
            h = self._handles[buf] = self.allocator.alloc(nbytes, zero)
            weakref.finalize(buf, self.allocator.free, h, nbytes)
        return h

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
        self.prepare([call])
        return self._kernels[call.src[0]]

    def prepare(self, calls: Sequence[UOp]) -> None:
        """Lower, render and compile the kernels of `calls` that are not built yet. The compiles run side by
        side (each is a separate compiler process), so a cold training step waits for the slowest one."""
        todo: dict[UOp, UOp] = {}
        for call in calls:
            if call.src[0] not in self._kernels:
                todo.setdefault(call.src[0], call)
        programs = [lower(call, self.renderer.supports, self.renderer.grid) for call in todo.values()]
        sources = [self.renderer.render(program) for program in programs]
        for program, src in zip(programs, sources):
            debug.source(program.name, src)
        workers = min(len(sources), os.cpu_count() or 1)
        if workers > 1:
            with ThreadPoolExecutor(workers) as pool:
                libs = list(pool.map(self.compiler.compile_cached, sources))
        else:
            libs = [self.compiler.compile_cached(src) for src in sources]
        for body, program, src, lib in zip(todo, programs, sources, libs):
            run = self.runtime(self.renderer.function_name(program.name), lib)
            self._kernels[body] = _Kernel(program, src, run, _overwritten(body))

    def realize(self, sink: UOp) -> None:
        """Run every effect in `sink`: scheduled kernels are launched in order, copies are copied."""
        with debug.realizing(self.name, sink):
            self._realize(sink)

    def _realize(self, sink: UOp) -> None:
        sched = schedule(sink)
        debug.schedule_made(sched.items, self.name)
        self.prepare([it for it in sched.items if it.src[0].op is Ops.SINK and self._runs(it)])
        for item in sched.items:
            body, bufs = item.src[0], item.src[1:]
            if body.op is Ops.COPY:
                self._copy(bufs[0], bufs[1])
                continue
            if body.op is not Ops.SINK:
                raise RuntimeError(f"{self.name} can't run a CALL of {body.op}: {item.short()}")
            if not self._runs(item):  # a kernel of another device in this graph runs there
                self._device(bufs[0]).realize(item.sink())
                continue
            k = self._kernels[body]
            handles = [self.handle(bufs[s], zero=s not in k.overwrites) for s in k.program.globals]
            start = time.perf_counter()
            k.run(*handles, vals=k.program.var_values(sched.var_vals), global_size=k.program.global_size,
                  local_size=k.program.local_size)
            debug.kernel_ran(item, self.name, time.perf_counter() - start, k.program.global_size,
                             k.program.local_size)

    def _runs(self, item: UOp) -> bool:
        """Whether a kernel item is this device's (its buffers live here)."""
        return len(item.src) < 2 or item.src[1].device == self.name

    def _device(self, buf: UOp) -> Backend:
        return self if buf.device == self.name else Device[str(buf.device)]

    def _copy(self, dst: UOp, src: UOp) -> None:
        """COPY: the contents of `src` into `dst`, each on its own device (this one or another)."""
        self._device(dst).copyin(dst, self._device(src).copyout(src))


@dataclass(frozen=True)
class _Plugin:
    name: str   # device base name, e.g. "CPU"
    value: str  # "module:attr" of the Backend subclass
    dist: str   # the distribution that provides it, for error messages


class DeviceRegistry:
    """The device registry: `Device["CPU:1"]` gives the backend object, `Device.DEFAULT` the default name."""

    def __init__(self) -> None:
        self._plugins: dict[str, _Plugin] | None = None
        self._classes: dict[str, type[Backend]] = {}
        self._instances: dict[str, Backend] = {}
        self._default: str | None = None

    def _discover(self) -> dict[str, _Plugin]:
        if self._plugins is None:
            plugins: dict[str, _Plugin] = {}
            for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
                dist = ep.dist.name if ep.dist is not None else "<unknown distribution>"
                new = _Plugin(ep.name.upper(), ep.value, dist)
                old = plugins.get(new.name)
                if old is not None and old.value != new.value:
                    raise RuntimeError(f"backend {new.name} is provided twice: by {old.dist} ({old.value}) "
                                       f"and by {new.dist} ({new.value}); uninstall one of them")
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
        """Upper-case the backend part; ":0" is the backend itself, other suffixes are separate devices."""
        base, sep, index = name.partition(":")
        if not base:
            raise ValueError(f"{name!r} is not a device name")
        return base.upper() if not sep or index in ("", "0") else f"{base.upper()}:{index}"

    @property
    def DEFAULT(self) -> str:  # noqa: N802  (tinygrad's spelling)
        """$UOPGRAD_DEVICE if set, else the first installed of CPU, CL, CUDA, REFERENCE."""
        if self._default is None:
            env = getenv_str("UOPGRAD_DEVICE")
            if env:
                self._default = self.canonicalize(env)
            else:
                installed = self._discover()
                self._default = next((n for n in PREFERENCE if n in installed), None) or self.installed()[0]
        return self._default

    @DEFAULT.setter
    def DEFAULT(self, name: str) -> None:  # noqa: N802
        self._default = self.canonicalize(name)

    def _load(self, base: str) -> type[Backend]:
        if base in self._classes:
            return self._classes[base]
        plugins = self._discover()
        if base not in plugins:
            installed = ", ".join(self.installed())
            hint = f"; `pip install {PACKAGES[base]}` provides it" if base in PACKAGES else ""
            raise RuntimeError(f"unknown device {base!r}: the installed backends are {installed}{hint}")
        plugin = plugins[base]
        module_name, _, attr = plugin.value.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split(".") if attr else ():
                obj = getattr(obj, part)
        except Exception as e:  # a broken plugin must not look like a crash of uopgrad itself
            raise RuntimeError(f"backend {base} (entry point {plugin.value!r} from {plugin.dist}) failed to "
                               f"load: {type(e).__name__}: {e}") from e
        if not (isinstance(obj, type) and issubclass(obj, Backend)):
            raise RuntimeError(f"backend {base} (entry point {plugin.value!r} from {plugin.dist}) is "
                               f"{obj!r}, not a subclass of uopgrad.backend.Backend")
        self._classes[base] = obj
        return obj

    def __getitem__(self, name: str) -> Backend:
        device = self.canonicalize(name)
        if device not in self._instances:
            self._instances[device] = self._load(device.partition(":")[0])(device)
        return self._instances[device]

    def __contains__(self, name: str) -> bool:
        return self.canonicalize(name).partition(":")[0] in self._discover()

    def __repr__(self) -> str:
        return f"<Device registry: {', '.join(self.installed())}>"


Device = DeviceRegistry()
