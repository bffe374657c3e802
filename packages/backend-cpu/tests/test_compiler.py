"""The C compiler and its on-disk cache, the runtime's buffers, and kernels far longer than one C expression
could hold."""

from __future__ import annotations

import gc
import hashlib
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from uopgrad import Ops, Tensor, UOp, dtypes
from uopgrad.backend import CompileError, compile_cache_dir
from uopgrad_conformance.kit.linear import const, elementwise, linear, prog, run
from uopgrad_cpu import CCompiler, CPUBackend, CPUProgram

f32, i32 = dtypes.float32, dtypes.int32
SRC = "int answer(void) { return 42; }\n"


def fresh_source(tag: str) -> str:
    """A source no earlier run has compiled (the cache must miss)."""
    return f"/* {tag} {os.urandom(8).hex()} */\n{SRC}"


def test_flags_keep_ieee_semantics():
    flags = CCompiler().flags
    assert flags[:2] == ["-O1", "-ftree-loop-vectorize"] or flags[0] == "-O2"  # GCC's, or clang's
    assert "-march=native" in flags and "-shared" in flags
    assert "-ffast-math" not in flags
    assert {"-fwrapv", "-ffp-contract=off"} <= set(flags)
    assert "-fno-tree-slp-vectorize" in flags  # a GCC 12.2 miscompile (test_pipeline: narrowing round trips)


def test_cc_is_honoured(monkeypatch):
    monkeypatch.setenv("CC", "gcc")
    assert CCompiler().cc == "gcc"


def test_compiler_error_shows_the_source_and_the_message():
    bad = "void broken(float* restrict data0) {\n  data0[0] = undefined_name;\n}\n"
    with pytest.raises(CompileError) as info:
        CCompiler().compile(bad)
    text = str(info.value)
    assert "undefined_name" in text and "error" in text
    assert "   2    data0[0] = undefined_name;" in text  # the numbered source


def test_a_missing_compiler_is_a_compile_error():
    with pytest.raises(CompileError, match="can't run the C compiler"):
        CCompiler(cc="/nonexistent/cc").compile(SRC)


def test_second_compile_hits_the_disk_cache():
    src = fresh_source("hit")
    first, second = CCompiler(), CCompiler()
    lib = first.compile_cached(src)
    assert first.stats == {"compiled": 1}
    assert second.compile_cached(src) == lib and second.stats == {"disk_hit": 1}


def test_another_process_hits_the_disk_cache(tmp_path):
    src = fresh_source("process")
    CCompiler().compile_cached(src)
    code = textwrap.dedent(f"""
        from uopgrad_cpu import CCompiler
        c = CCompiler()
        c.compile_cached({src!r})
        print(dict(c.stats))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "{'disk_hit': 1}"


def test_concurrent_writers_never_corrupt_the_cache():
    sources = [fresh_source(f"race{i}") for i in range(3)]
    code = textwrap.dedent(f"""
        import ctypes, os, sys, tempfile
        from uopgrad_cpu import CCompiler
        for src in {sources!r}:
            lib = CCompiler().compile_cached(src)
            fd, path = tempfile.mkstemp(suffix=".so")
            os.write(fd, lib)
            os.close(fd)
            assert ctypes.CDLL(path).answer() == 42
            os.unlink(path)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(6)]
    assert [p.wait(timeout=300) for p in procs] == [0] * 6
    with sqlite3.connect(compile_cache_dir() / "cache.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        for digest, sha, payload in db.execute("SELECT digest, sha256, payload FROM entries"):
            assert sha == hashlib.sha256(payload).digest(), f"corrupt cache entry {digest}"
    db.close()


def test_a_damaged_entry_is_rebuilt():
    src = fresh_source("damaged")
    c = CCompiler()
    lib = c.compile_cached(src)
    with sqlite3.connect(compile_cache_dir() / "cache.db") as db:  # as if the disk lost part of the entry
        db.execute("UPDATE entries SET payload = substr(payload, 1, 100) WHERE payload = ?", (lib,))
    db.close()
    again = CCompiler()
    assert again.compile_cached(src) == lib and again.stats == {"compiled": 1}


def test_the_cache_key_holds_compiler_and_flags(tmp_path):
    a, b = CCompiler(), CCompiler()
    b.flags = [*b.flags, "-DEXTRA"]
    b.cache_key += " -DEXTRA"
    src = fresh_source("flags")
    a.compile_cached(src)
    b.compile_cached(src)
    assert a.stats == b.stats == {"compiled": 1}
    assert "cc" in a.cache_key and a.flags[0] in a.cache_key


def test_an_unwritable_cache_only_costs_time(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(blocker))
    with pytest.warns(RuntimeWarning, match="is not a directory"):
        assert CCompiler().compile_cached(fresh_source("unwritable"))
    assert blocker.read_text() == "not a directory"


# ---------------------------------------------------------------------- runtime
def test_program_runs_a_kernel_with_a_variable(cpu):
    # out[i] = in[i] + n for i < 8, with n a scalar argument
    n = UOp.variable("n", 0, 100, i32)
    out, a = UOp(Ops.PARAM, i32.ptr(8), (), 0), UOp(Ops.PARAM, i32.ptr(8), (), 1)
    r = UOp(Ops.RANGE, i32, (const(i32, 8),), (0, "loop"))
    load = UOp(Ops.LOAD, i32, (UOp(Ops.INDEX, i32.ptr(), (a, r)),))
    st = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, i32.ptr(), (out, r)), UOp(Ops.ADD, i32, (load, n))))
    program = prog("add_n", linear(out, a, n, st, UOp(Ops.END, dtypes.void, (r,))))
    got = run(cpu, program, (8, i32), np.arange(8, dtype=np.int32), vals=(7,))
    assert got.tolist() == list(range(7, 15))


def test_buffers_round_trip_and_start_zeroed(cpu):
    buf = UOp.new_buffer("CPU", 5, f32)
    assert cpu.copyout(buf).tolist() == [0.0] * 5
    cpu.copyin(buf, np.array([1, 2, 3, 4, 5], dtype=np.float32))
    assert cpu.copyout(buf).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    view = cpu.allocator.as_buffer(cpu.handle(buf))
    assert np.frombuffer(view, dtype=np.float32).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]  # zero-copy
    with pytest.raises(ValueError, match="copyin of 3 elements"):
        cpu.copyin(buf, np.zeros(3, dtype=np.float32))


def test_buffer_memory_is_reused_zeroed_after_its_buffer_goes():
    backend = CPUBackend("CPU")
    buf = UOp.new_buffer("CPU", 10, dtypes.float64)
    backend.copyin(buf, np.arange(10.0))
    memory = backend.handle(buf)
    del buf
    gc.collect()
    again = UOp.new_buffer("CPU", 10, dtypes.float64)
    assert backend.handle(again) is memory  # the freed memory, cleared: a fresh buffer reads zeros
    assert backend.copyout(again).tolist() == [0.0] * 10
    overwrite = UOp.new_buffer("CPU", 10, dtypes.float64)
    backend.copyin(overwrite, np.ones(10))
    assert backend.copyout(overwrite).tolist() == [1.0] * 10


def test_bfloat16_buffers_hold_the_bits(cpu):
    import ml_dtypes

    buf = UOp.new_buffer("CPU", 4, dtypes.bfloat16)
    # float32 in: rounded to nearest even (1 + 2^-8 is a tie: to 1.0; 1 + 3 * 2^-8 to 1 + 2^-6)
    cpu.copyin(buf, np.array([1.0, 1 + 2.0**-8, 1 + 3 * 2.0**-8, -np.inf], dtype=np.float32))
    out = cpu.copyout(buf)
    assert out.dtype == ml_dtypes.bfloat16  # two bytes each, as ml_dtypes (JAX, ONNX) hold them
    assert out.view(np.uint16).tolist() == [0x3F80, 0x3F80, 0x3F82, 0xFF80]


def test_buffers_are_aligned(cpu):
    for n in (1, 3, 17, 1000):
        assert cpu.allocator.alloc(n).ctypes.data % 64 == 0


def test_launching_with_foreign_buffers_is_refused():
    prg = CPUProgram("answer", CCompiler().compile_cached(SRC))
    with pytest.raises(TypeError, match="numpy buffers"):
        prg([1, 2, 3])


# ---------------------------------------------------------------------- scale
def test_a_kernel_of_thousands_of_fused_ops_compiles_and_runs(cpu):
    # 4000 dependent ops in one kernel: one statement each, where one nested C expression would be refused
    out, a = UOp(Ops.PARAM, f32.ptr(4), (), 0), UOp(Ops.PARAM, f32.ptr(4), (), 1)
    r = UOp(Ops.RANGE, i32, (const(i32, 4),), (0, "loop"))
    x = UOp(Ops.LOAD, f32, (UOp(Ops.INDEX, f32.ptr(), (a, r)),))
    want = np.arange(4, dtype=np.float32)
    for i in range(2000):
        c = float(i % 5) * 0.25
        x = UOp(Ops.ADD, f32, (UOp(Ops.MUL, f32, (x, const(f32, 0.5))), const(f32, c)))
        want = want * np.float32(0.5) + np.float32(c)
    st = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, f32.ptr(), (out, r)), x))
    program = prog("long_chain", linear(out, a, st, UOp(Ops.END, dtypes.void, (r,))))
    got = run(cpu, program, (4, f32), np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(got, want)


def test_large_output_loops_run_in_parallel_and_agree(cpu):
    n = 1 << 20
    program = elementwise(Ops.MUL, f32, [f32, f32], n, name="big_mul")
    assert "#pragma omp parallel for" in cpu.renderer.render(program)
    a = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    np.testing.assert_array_equal(run(cpu, program, (n, f32), a, a), a * a)


def test_cache_dir_default(monkeypatch):
    monkeypatch.delenv("UOPGRAD_CACHE_DIR")
    assert compile_cache_dir() == Path.home() / ".cache" / "uopgrad"


def test_only_sources_that_use_openmp_link_its_runtime():
    # -fopenmp costs a small kernel's build ~9 ms (linking libgomp): a serial kernel is built without it
    compiler = CCompiler()
    if "-fopenmp" not in compiler.flags:
        pytest.skip("the C compiler has no OpenMP")
    serial = "void serial(float* restrict a) { for (int i = 0; i < 4; i++) a[i] = 1.0f; }\n"
    parallel = serial.replace("serial", "parallel").replace("{ for", "{\n#pragma omp parallel for\n for")
    assert b"libgomp" not in compiler.compile(serial)
    assert b"libgomp" in compiler.compile(parallel)


def test_a_libm_function_kernels_do_not_declare_is_a_build_error():
    # kernels declare the libm functions they call instead of including <math.h>: an undeclared one must
    # not be called as an implicit `int f()` (a wrong value), it must fail to build
    src = "float uses_cbrt(float x) { return cbrtf(x); }\n"
    with pytest.raises(CompileError, match="implicit declaration"):
        CCompiler().compile(src)


def test_kernels_compute_the_math_they_declare():
    # every declared libm function, float and double, through the pipeline against numpy
    x = np.array([0.25, 1.5, 3.0, 7.75], dtype=np.float32)
    for dt, tol in ((np.float32, 1e-6), (np.float64, 1e-15)):
        t = Tensor(x.astype(dt), device="CPU")
        got = ((t.sqrt() + t.exp2() + t.log2() + t.sin()) * (t**1.5)).numpy()
        xd = x.astype(dt)
        want = (np.sqrt(xd) + np.exp2(xd) + np.log2(xd) + np.sin(xd)) * xd ** dt(1.5)
        np.testing.assert_allclose(got, want, rtol=tol)
