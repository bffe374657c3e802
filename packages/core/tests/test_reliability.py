"""Regressions of issue 14 (reliability and security) that core alone can show; the CPU package tests the
rest (threads on first use, 64-bit arguments, kernel symbols, the disk cache, unloading kernels)."""

from __future__ import annotations

import gc
import os
import sqlite3
import stat
import threading
import warnings

import numpy as np
import pytest

import uopgrad.pipeline as pipeline_module
from uopgrad import Device, Tensor, UOp, dtypes
from uopgrad import schedule as schedule_module
from uopgrad.backend import CompileError
from uopgrad.codegen import Target
from uopgrad.config import ALLOW_DEVICE_USAGE, Context
from uopgrad.ops import Ops
from uopgrad.pipeline import clear_program_cache, lower, program_cache_info
from uopgrad.renderer import CStyleRenderer
from uopgrad.renderer.cstyle import RenderError
from uopgrad.schedule import schedule
from uopgrad.verify import VerifyError, verify


class Sneaky(int):
    """An int that prints itself as C code."""

    def __format__(self, spec: str) -> str:
        return '0; system("touch /tmp/uopgrad-pwned"); 0'

    __str__ = __repr__ = lambda self: self.__format__("")


# ---------------------------------------------------------------------- 2: constants never inject code
def test_a_constant_of_an_int_subclass_is_rejected_by_verify_and_the_renderer():
    bad = UOp(Ops.CONST, dtypes.int32, (), Sneaky(918273645))
    with pytest.raises(VerifyError, match="CONST"):
        verify(bad)
    with pytest.raises(RenderError, match="must be an int"):
        CStyleRenderer().render_const(Sneaky(918273645), dtypes.int32)


def test_a_str_constant_is_a_render_error_also_without_asserts():
    with pytest.raises(RenderError, match="must be an int"):
        CStyleRenderer().render_const("1; system(0)", dtypes.int8)
    with pytest.raises(RenderError, match="out of the range"):
        CStyleRenderer().render_const(300, dtypes.int8)


def test_realize_refuses_a_sneaky_constant():
    out = UOp.new_buffer("REFERENCE", 1, dtypes.int32)
    graph = out.store(UOp(Ops.CONST, dtypes.int32, (), Sneaky(918273645)).reshape((1,))).sink()
    with pytest.raises(VerifyError, match="CONST"):
        Device["REFERENCE"].realize(graph)


def test_a_sneaky_constant_is_refused_also_after_the_same_graph_with_a_plain_int_ran():
    # realize verifies a graph only when its structure is new to the schedule cache: the constant's type is
    # part of that structure, so the look-alike is verified (and refused), not taken for the graph that ran
    def graph(value: int) -> UOp:
        out = UOp.new_buffer("REFERENCE", 1, dtypes.int32)
        return out.store(UOp(Ops.CONST, dtypes.int32, (), value).reshape((1,))).sink()

    Device["REFERENCE"].realize(graph(918273645))
    gc.collect()  # the plain node is gone: interning would hand it back for an equal int subclass value
    sneaky = graph(Sneaky(918273645))
    assert any(type(u.arg) is Sneaky for u in sneaky.toposort())
    with pytest.raises(VerifyError, match="CONST"):
        Device["REFERENCE"].realize(sneaky)


def test_a_repeated_step_is_verified_once_and_a_new_malformed_graph_still_is(monkeypatch):
    import uopgrad.schedule as schedule_module

    calls: list[int] = []
    real = schedule_module.verify_new
    monkeypatch.setattr(schedule_module, "verify_new", lambda sink: (calls.append(1), real(sink))[1])
    w = Tensor(np.ones((3, 3), np.float32), device="REFERENCE").realize()
    for step in range(4):  # the same graph each step, on new data
        x = Tensor(np.full((2, 3), step, np.float32), device="REFERENCE")
        assert (x @ w).sum().item() == 18.0 * step
    assert len(calls) <= 2  # the first step's graph (the weights' first use may be another structure)
    a = Tensor([1.0, 2.0], device="REFERENCE").realize().uop
    out = UOp.new_buffer("REFERENCE", 2, dtypes.float32)
    with pytest.raises(VerifyError, match="invalid ADD node"):
        Device["REFERENCE"].realize(out.store(UOp(Ops.ADD, dtypes.float32, (a, a, a))).sink())


# ---------------------------------------------------------------------- 5: device usage is per thread
def test_tracing_in_one_thread_does_not_forbid_realize_in_another():
    inside, done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def tracer() -> None:
        with Context(ALLOW_DEVICE_USAGE=0):
            inside.set()
            done.wait(10)

    def worker() -> None:
        inside.wait(10)
        try:
            for i in range(20):
                np.testing.assert_equal((Tensor([1.0, 2.0], device="REFERENCE") + i).numpy(), [1 + i, 2 + i])
        except BaseException as e:  # reported by the main thread
            errors.append(e)
        finally:
            done.set()

    threads = [threading.Thread(target=tracer), threading.Thread(target=worker)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert ALLOW_DEVICE_USAGE.value == 1


# ---------------------------------------------------------------------- 6: caches are bounded
def test_program_and_schedule_caches_keep_a_bounded_number_of_entries(monkeypatch):
    monkeypatch.setattr(pipeline_module._cache, "maxsize", 5)
    monkeypatch.setattr(schedule_module._cache, "maxsize", 5)
    clear_program_cache()
    for n in range(1, 16):
        sched = schedule(((Tensor.ones(n, device="REFERENCE") * 2).contiguous()).uop.sink())
        for it in sched.items:
            lower(it, Target.for_ops(frozenset(Ops)))
    assert program_cache_info()["size"] <= 5
    assert schedule_module.schedule_cache_info()["size"] <= 5


# ---------------------------------------------------------------------- 7: the disk cache
def test_the_disk_cache_honours_xdg_cache_home(monkeypatch, tmp_path):
    from uopgrad import diskcache  # new in issue 14: imported here so the other tests run without it

    monkeypatch.delenv("UOPGRAD_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert diskcache.cache_dir() == tmp_path / "uopgrad"


def test_a_cache_directory_others_can_write_is_refused_with_a_warning(monkeypatch, tmp_path):
    from uopgrad import diskcache  # new in issue 14: imported here so the other tests run without it

    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, 0o777)
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(root))
    with pytest.warns(RuntimeWarning, match="can be written by other users"):
        diskcache.write("ab" * 32, b"payload")
    assert not list(root.iterdir()), "nothing is written into it"
    assert diskcache.read("ab" * 32) is None


def test_the_disk_cache_is_private_bounded_and_can_be_cleared(monkeypatch, tmp_path):
    from uopgrad import diskcache  # new in issue 14: imported here so the other tests run without it

    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("UOPGRAD_CACHE_MAX_BYTES", "3000")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(10):
            diskcache.write(f"{i:02d}" + "0" * 62, bytes(1000))
    assert stat.S_IMODE((tmp_path / "c").stat().st_mode) == 0o700
    info = diskcache.info()
    assert info["bytes"] <= 3000 and info["entries"] >= 1
    assert diskcache.read("09" + "0" * 62) == bytes(1000), "the newest entry is kept"
    assert diskcache.clear() == info["entries"]
    assert diskcache.info()["entries"] == 0


def test_a_corrupt_entry_is_removed(monkeypatch, tmp_path):
    from uopgrad import diskcache  # new in issue 14: imported here so the other tests run without it

    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(tmp_path))
    digest = "cd" * 32
    diskcache.write(digest, b"good")
    with sqlite3.connect(diskcache.cache_dir() / diskcache.DATABASE) as db:
        db.execute("UPDATE entries SET payload = ? WHERE digest = ?", (b"\0" * 8, digest))
    db.close()
    assert diskcache.read(digest) is None and diskcache.info()["entries"] == 0


# ---------------------------------------------------------------------- 8: malformed graphs reach no backend
def test_an_add_of_three_sources_is_a_verify_error_at_realize():
    a = Tensor([1.0, 2.0], device="REFERENCE").realize().uop
    out = UOp.new_buffer("REFERENCE", 2, dtypes.float32)
    bad = UOp(Ops.ADD, dtypes.float32, (a, a, a))
    with pytest.raises(VerifyError, match="invalid ADD node"):
        Device["REFERENCE"].realize(out.store(bad).sink())


def test_an_add_of_one_source_is_a_verify_error_not_an_internal_one():
    a = Tensor([1.0, 2.0], device="REFERENCE").realize().uop
    out = UOp.new_buffer("REFERENCE", 2, dtypes.float32)
    with pytest.raises(VerifyError, match="invalid ADD node"):
        Device["REFERENCE"].realize(out.store(UOp(Ops.ADD, dtypes.float32, (a,))).sink())


# ---------------------------------------------------------------------- 9: wrong input is refused
@pytest.mark.parametrize("name", ["CPU:abc", "CPU:-1", "CPU::", "CPU:1;touch x", "", ":1", "C PU", "CPU:"])
def test_bad_device_strings_are_value_errors(name):
    with pytest.raises(ValueError, match="not a device name"):
        Device.canonicalize(name)


def test_device_names_that_are_fine():
    assert Device.canonicalize("cpu:01") == "CPU:1"
    assert Device.canonicalize("reference:0") == "REFERENCE"


def test_a_device_that_is_not_a_string_is_a_type_error():
    with pytest.raises(TypeError, match="device is a name"):
        Tensor([1.0], device=123)  # type: ignore[arg-type]


def test_float_sizes_are_type_errors():
    with pytest.raises(TypeError, match="size must be an int"):
        Tensor.ones(12, device="REFERENCE").reshape(2.5, 4.8)  # type: ignore[arg-type]
    assert Tensor.ones(12, device="REFERENCE").reshape(np.int64(3), 4).shape == (3, 4)


def test_a_repeated_reduce_axis_is_a_value_error():
    t = Tensor.ones(2, 3, device="REFERENCE")
    with pytest.raises(ValueError, match="more than once"):
        t.sum(axis=(0, 0))
    with pytest.raises(ValueError, match="more than once"):
        t.sum(axis=(1, -1))


def test_argmax_of_an_empty_dimension_is_an_index_error():
    with pytest.raises(IndexError, match="empty"):
        Tensor.ones(0, device="REFERENCE").argmax()
    with pytest.raises(IndexError, match="empty"):
        Tensor.ones(2, 0, device="REFERENCE").argmin(axis=1)


def test_a_kernel_past_int64_is_a_value_error_at_lowering():
    sched = schedule(Tensor.ones(2**40, 2**40, device="REFERENCE").sum().uop.sink())
    kernels = [it for it in sched.items if it.src[0].op is Ops.SINK]
    with pytest.raises(ValueError, match="int64"):
        for it in kernels:
            lower(it, Target.for_ops(frozenset(Ops)))


# ---------------------------------------------------------------------- 3: variables above 2^31 (lowering)
def test_a_variable_with_bounds_past_int32_lowers_to_an_int64_argument():
    n = UOp.variable("n", 1, 2**40)
    x = Tensor([0, 1, 2], device="REFERENCE", dtype=dtypes.int64)
    t = x + Tensor(n.bind(2**33 + 3)).cast(dtypes.int64)
    kernels = [it for it in schedule(t.contiguous().uop.sink()).items if it.src[0].op is Ops.SINK]
    programs = [lower(it, Target.for_ops(frozenset(Ops))) for it in kernels]
    assert [v.dtype for p in programs for v in p.vars] == [dtypes.int64]
    assert "const long long n" in CStyleRenderer().render(programs[0])


# ---------------------------------------------------------------------- 10: bounded error messages
def test_a_compile_error_of_a_huge_source_has_a_short_message_and_a_file(tmp_path):
    src = "int x;\n" * 350_000
    err = CompileError("cc -O2", "error: something\n" * 100_000, src)
    assert len(str(err)) < 20_000
    assert err.src_path is not None and err.src_path in str(err)
    with open(err.src_path) as f:
        assert f.read() == src
    os.unlink(err.src_path)
    small = CompileError("cc", "error: x", "int y;\n")
    assert "int y;" in str(small), "a short source is still shown inline"
    os.unlink(small.src_path)  # type: ignore[arg-type]
