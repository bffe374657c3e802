"""The API of compiled backends (backend.py) without a C compiler: `Capabilities`, the on-disk compile cache,
the reusing `Allocator`, and `CompiledBackend.realize` driving schedule -> lower -> render -> compile ->
launch. The backend under test, PY, "renders" a program by pickling it and runs it with REFERENCE's
linear-program interpreter, so every step of the compiled path runs here as it does for CPU."""

from __future__ import annotations

import base64
import gc
import hashlib
import pickle
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from uopgrad.backend import (
    Allocator,
    Backend,
    Capabilities,
    CompiledBackend,
    CompileError,
    Compiler,
    Device,
    Program,
    Size,
    compile_cache_dir,
)
from uopgrad.backends.reference import REFERENCE_OPS, np_dtype, run_program
from uopgrad.codegen import GridLimits
from uopgrad.codegen import Program as KernelProgram
from uopgrad.dtype import dtypes
from uopgrad.ops import GroupOp, Ops
from uopgrad.renderer import Renderer
from uopgrad.uop import UOp

f32 = dtypes.float32


class PickleRenderer(Renderer):
    device = "PY"
    code_for_op = {op: (lambda *xs: "") for op in REFERENCE_OPS - {Ops.FLOORDIV, Ops.FLOORMOD, Ops.MAX}}

    def render(self, program: KernelProgram) -> str:
        return base64.b64encode(pickle.dumps(program)).decode()


class ByteAllocator(Allocator[bytearray]):
    def __init__(self) -> None:
        super().__init__()
        self.fresh = 0

    def _alloc(self, nbytes: int) -> bytearray:
        self.fresh += 1
        return bytearray(nbytes)

    def _zero(self, handle: bytearray) -> None:
        handle[:] = bytes(len(handle))

    def copyin(self, handle: bytearray, src: memoryview) -> None:
        handle[:] = src

    def copyout(self, dst: memoryview, handle: bytearray) -> None:
        dst[:] = handle

    def as_buffer(self, handle: bytearray) -> memoryview:
        return memoryview(handle)


class PickleProgram(Program):
    launches = 0

    def __init__(self, name: str, lib: bytes) -> None:
        super().__init__(name, lib)
        self.prg: KernelProgram = pickle.loads(base64.b64decode(lib))

    def __call__(
        self, *bufs: object, vals: Sequence[int] = (), global_size: Size = None, local_size: Size = None
    ) -> None:
        PickleProgram.launches += 1
        params = {u.arg: u for u in self.prg.uops if u.op is Ops.PARAM}
        arrays = [
            np.frombuffer(b, dtype=np_dtype(params[s].dtype.base)) if isinstance(b, bytearray) else b
            for s, b in zip(self.prg.globals, bufs)
        ]
        run_program(self.prg, arrays, {v.arg[0]: x for v, x in zip(self.prg.vars, vals)})


class PyBackend(CompiledBackend):
    def __init__(self, device: str = "PY") -> None:
        super().__init__(
            device,
            PickleRenderer(),
            Compiler(),
            ByteAllocator(),
            PickleProgram,
            frozenset({dtypes.bool, *dtypes.ints, *dtypes.floats} - {dtypes.bfloat16}),
        )


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def py():
    return PyBackend()


def filled(backend: CompiledBackend, values: list[float], dt=f32) -> UOp:
    b = UOp.new_buffer(backend.name, len(values), dt)
    backend.copyin(b, np.asarray(values, dtype=dtypes.to_numpy(dt)))
    return b


# ---------------------------------------------------------------------- capabilities
def test_capabilities_come_from_the_parts(py):
    caps = py.capabilities
    assert caps.compiled and caps.loop_style and caps.max_local_size is None
    assert caps.ops == py.renderer.supports and Ops.MAX not in caps.ops
    assert dtypes.bfloat16 not in caps.dtypes
    grid = Capabilities(frozenset({f32}), frozenset({Ops.ADD}), GridLimits())
    assert not grid.loop_style and grid.max_local_size == (1024, 1024, 64)


def test_reference_claims_everything():
    caps = Device["REFERENCE"].capabilities
    assert caps.ops == GroupOp.ALU and not caps.compiled and dtypes.bfloat16 in caps.dtypes
    assert type(Device["REFERENCE"]).capabilities is caps
    assert "capabilities" not in vars(Backend)  # the base class claims nothing for its subclasses


# ---------------------------------------------------------------------- realize
def test_realize_runs_scheduled_kernels(py):
    a, b = filled(py, [1.0, 2.0, 3.0]), filled(py, [10.0, 20.0, 30.0])
    out = UOp.new_buffer("PY", 3, f32)
    py.realize(out.store(a.reshape((3,)) * 2.0 + b.reshape((3,))).sink())
    assert py.copyout(out).tolist() == [12.0, 24.0, 36.0]


def test_ops_outside_supports_are_decomposed(py):
    # MAX is not claimed by PY: codegen rewrites it into ops that are
    a, b = filled(py, [1.0, 5.0, -2.0]), filled(py, [3.0, 4.0, -7.0])
    out = UOp.new_buffer("PY", 3, f32)
    py.realize(out.store(a.reshape((3,)).maximum(b.reshape((3,)))).sink())
    assert py.copyout(out).tolist() == [3.0, 5.0, -2.0]


def test_a_kernel_structure_is_compiled_once(py):
    launches = PickleProgram.launches
    for i in range(3):  # new buffers each time, the same structure
        a = filled(py, [float(i), 1.0])
        out = UOp.new_buffer("PY", 2, f32)
        py.realize(out.store(a.reshape((2,)) + 1.0).sink())
        assert py.copyout(out).tolist() == [i + 1.0, 2.0]
    assert len(py._kernels) == 1 and py.compiler.stats == {"compiled": 1}
    assert PickleProgram.launches == launches + 3


class OverlappingCompiler(Compiler):
    """A compiler that says it runs beside Python: logs each part it is given (and says a part came in),
    fails where told."""

    overlaps_lowering = True

    def __init__(self, log: list[str], fail: bool = False) -> None:
        super().__init__()
        self.log, self.fail, self.called = log, fail, threading.Event()

    def compile_many(self, srcs: Sequence[str]) -> list[bytes]:
        self.log.append(f"compile {len(srcs)}")
        self.called.set()
        if self.fail:  # every kernel is bad: the error must name the first in kernel order
            raise CompileError("overlapping", "error: bad", srcs[0])
        return [src.encode() for src in srcs]


def several_kernels(backend: CompiledBackend, n: int) -> tuple[UOp, list[UOp]]:
    """A sink of `n` stores of distinct structure (each its own kernel) and their outputs."""
    a = filled(backend, [1.0, 2.0, 3.0])
    outs = [UOp.new_buffer(backend.name, 3, f32) for _ in range(n)]
    stores = [o.store(a.reshape((3,)) * float(k + 2) + float(k)) for k, o in enumerate(outs)]
    return UOp.sink(*stores), outs


def test_a_realize_compiles_its_first_kernels_while_lowering_the_rest(monkeypatch, tmp_path):
    import uopgrad.program_store as store_module  # (where the backend lowers a kernel it has not stored)

    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(tmp_path))  # nothing stored: each kernel is lowered
    log: list[str] = []
    compiler = OverlappingCompiler(log)
    real_lower = store_module.lower

    def lower(*args: object) -> KernelProgram:
        if log.count("lower") == 3:  # the 4th kernel: the first 3 must be with the compiler by now
            assert compiler.called.wait(10), "the first kernels were not compiled while the rest lowered"
        log.append("lower")
        return real_lower(*args)

    monkeypatch.setattr(store_module, "lower", lower)
    py = PyBackend()
    py.compiler = compiler
    sink, outs = several_kernels(py, 5)
    py.realize(sink)
    want = [[(j + 1.0) * (k + 2) + k for j in range(3)] for k in range(5)]
    assert [py.copyout(o).tolist() for o in outs] == want
    # 5 new kernels: the first 3 go to the compiler before the last 2 are lowered, the rest after
    assert log == ["lower"] * 3 + ["compile 3"] + ["lower"] * 2 + ["compile 2"]


def test_an_overlapped_build_raises_the_first_kernels_error(monkeypatch, tmp_path):
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(tmp_path))  # nothing stored: each kernel is rendered
    log: list[str] = []
    sources: list[str] = []
    real_render = PickleRenderer.render
    monkeypatch.setattr(
        PickleRenderer, "render", lambda self, p: sources.append(real_render(self, p)) or sources[-1]
    )
    py = PyBackend()
    py.compiler = OverlappingCompiler(log, fail=True)
    sink, _ = several_kernels(py, 4)
    with pytest.raises(CompileError) as err:
        py.realize(sink)
    assert log == ["compile 2", "compile 2"] and err.value.src == sources[0]


def test_copies_between_devices(py):
    ref = Device["REFERENCE"]
    src = UOp.new_buffer("REFERENCE", 2, f32)
    ref.copyin(src, np.array([4.0, 5.0], dtype=np.float32))
    dst = UOp.new_buffer("PY", 2, f32)
    py.realize(dst.store(src.reshape((2,)).copy_to_device("PY")).sink())
    assert py.copyout(dst).tolist() == [4.0, 5.0]


def test_variables_are_kernel_arguments(py):
    n = UOp.variable("n", 1, 10, dtypes.int32)
    a = filled(py, [1.0, 2.0])
    out = UOp.new_buffer("PY", 2, f32)
    py.realize(out.store(a.reshape((2,)) * n.bind(3).cast(f32)).sink())
    assert py.copyout(out).tolist() == [3.0, 6.0]


# ---------------------------------------------------------------------- buffers and the allocator
def test_fresh_buffers_read_as_zeros_and_reuse_memory(py):
    b = filled(py, [1.0, 2.0, 3.0])
    memory = py.handle(b)
    del b
    gc.collect()
    again = UOp.new_buffer("PY", 3, f32)
    assert py.handle(again) is memory and py.copyout(again).tolist() == [0.0, 0.0, 0.0]
    assert py.allocator.fresh == 1


def test_fully_written_outputs_are_not_zeroed_first(py):
    zeroed: list[int] = []
    py.allocator._zero = lambda h: zeroed.append(len(h))  # type: ignore[method-assign]
    gc.collect()
    scratch = filled(py, [9.0, 9.0])
    del scratch
    gc.collect()  # its memory is cached for reuse
    a = filled(py, [1.0, 2.0])
    out = UOp.new_buffer("PY", 2, f32)
    py.realize(out.store(a.reshape((2,)) * 3.0).sink())
    assert py.copyout(out).tolist() == [3.0, 6.0] and zeroed == []


def test_an_in_place_update_of_a_fresh_buffer_reads_zeros(py):
    scratch = filled(py, [9.0, 9.0])
    del scratch
    gc.collect()  # its memory, holding 9s, is cached for reuse
    out = UOp.new_buffer("PY", 2, f32)
    view = out.reshape((2,))
    py.realize(out.store(view + 1.0).sink())  # reads the buffer it writes: it must start zeroed
    assert py.copyout(out).tolist() == [1.0, 1.0]


def test_the_allocator_cache_is_bounded():
    alloc = ByteAllocator()
    alloc.cache_limit = 100
    first, second = alloc.alloc(80), alloc.alloc(80)
    alloc.free(first, 80)
    alloc.free(second, 80)  # over the limit: released, not kept
    assert alloc._cached_bytes == 80 and alloc.fresh == 2
    assert alloc.alloc(80) is first and alloc.alloc(80) is not second


def test_unsupported_dtypes_are_refused(py):
    with pytest.raises(TypeError, match="PY has no dtypes.__bf16 buffers"):
        py.handle(UOp.new_buffer("PY", 2, dtypes.bfloat16))


# ---------------------------------------------------------------------- the compile cache
class CountingCompiler(Compiler):
    cache_key = "counting v1"

    def compile(self, src: str) -> bytes:
        if "bad" in src:
            raise CompileError("counting", "error: bad source", src)
        return src[::-1].encode()


def test_compile_cache_hits_across_instances_and_processes():
    first = CountingCompiler()
    assert first.compile_cached("kernel A") == b"A lenrek" and first.stats == {"compiled": 1}
    second = CountingCompiler()
    assert second.compile_cached("kernel A") == b"A lenrek" and second.stats == {"disk_hit": 1}
    code = textwrap.dedent("""
        from uopgrad.backend import Compiler
        class CountingCompiler(Compiler):
            cache_key = "counting v1"
            def compile(self, src): raise AssertionError("compiled again")
        c = CountingCompiler()
        print(c.compile_cached("kernel A"), dict(c.stats))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "b'A lenrek' {'disk_hit': 1}"


def test_cache_key_separates_compilers():
    class Other(CountingCompiler):
        cache_key = "counting v2"

    CountingCompiler().compile_cached("kernel B")
    other = Other()
    other.compile_cached("kernel B")
    assert other.stats == {"compiled": 1}


def test_cache_entries_are_written_atomically_with_a_checksum():
    CountingCompiler().compile_cached("kernel C")
    with sqlite3.connect(compile_cache_dir() / "cache.db") as db:  # one row of the cache's SQLite file
        rows = db.execute("SELECT digest, sha256, payload FROM entries").fetchall()
        assert len(rows) == 1
        digest, sha, payload = rows[0]
        assert sha == hashlib.sha256(payload).digest() and payload == b"C lenrek"
        db.execute("UPDATE entries SET payload = ? WHERE digest = ?", (payload[:4], digest))  # damaged
    db.close()
    again = CountingCompiler()
    assert again.compile_cached("kernel C") == b"C lenrek" and again.stats == {"compiled": 1}


def test_compile_errors_carry_the_numbered_source():
    with pytest.raises(CompileError) as info:
        CountingCompiler().compile_cached("line one\nbad line two")
    assert "error: bad source" in str(info.value) and "   2  bad line two" in str(info.value)
    assert info.value.src == "line one\nbad line two"


def test_is_dtype_supported_reads_the_capabilities():
    from uopgrad.backend import Device, is_dtype_supported
    from uopgrad.dtype import dtypes

    caps = Device["REFERENCE"].capabilities.dtypes
    for dt in (dtypes.float32, dtypes.uchar, dtypes.bfloat16, dtypes.float64):
        assert is_dtype_supported(dt, "REFERENCE") == (dt in caps)
    assert is_dtype_supported(dtypes.float32)  # the default device computes float32
