"""The runtime and the compiler on their own: choosing a device ($UOPGRAD_CL_DEVICE, CL:n), what it
claims, buffers (zeroed, reused, copied), launches, the build log in a failed build, the on-disk cache, and
the repair of PoCL's target CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import numpy as np
import pyopencl as cl
import pytest

from uopgrad import Ops, UOp, dtypes
from uopgrad.backend import CompileError
from uopgrad_conformance.kit.linear import const, linear, prog, run
from uopgrad_opencl import CLBackend, CLCompiler
from uopgrad_opencl.runtime import DEVICE_ENV, all_devices, device_position, select_device
from uopgrad_opencl.runtime import repair_pocl_target_cpu as repair

i32, f32 = dtypes.int32, dtypes.float32


# ---------------------------------------------------------------------- choosing a device
@dataclass
class FakePlatform:
    name: str


@dataclass
class FakeDevice:
    name: str
    platform: FakePlatform


DEVICES = [
    FakeDevice("pthread-AMD EPYC", FakePlatform("Portable Computing Language")),
    FakeDevice("NVIDIA H200", FakePlatform("NVIDIA CUDA")),
    FakeDevice("gfx90a", FakePlatform("AMD APP")),
]


@pytest.mark.parametrize(
    ("spec", "position"),
    [
        ("", 0),
        ("  ", 0),
        ("1", 1),
        ("2", 2),
        ("nvidia", 1),
        ("h200", 1),
        ("Portable", 0),
        ("AMD APP: gfx", 2),
    ],
)
def test_select_device(spec, position):
    assert select_device(spec, DEVICES) == position


@pytest.mark.parametrize(
    ("spec", "message"), [("3", "there are 3 OpenCL devices"), ("intel", "names no OpenCL device")]
)
def test_select_device_errors_list_the_devices(spec, message):
    with pytest.raises(RuntimeError, match=message) as info:
        select_device(spec, DEVICES)
    assert "1: NVIDIA CUDA: NVIDIA H200" in str(info.value)


def test_logical_devices_wrap_around_the_physical_ones(monkeypatch):
    n = len(all_devices())
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    assert device_position("CL") == 0 and device_position("CL:0") == 0
    assert device_position("CL:1") == 1 % n and device_position(f"CL:{n}") == 0
    monkeypatch.setenv(DEVICE_ENV, str(n - 1))
    assert device_position("CL") == n - 1 and device_position("CL:1") == 0


def test_the_environment_chooses_the_device_in_a_fresh_process():
    code = "from uopgrad import Device; print(Device['CL'].dev.label)"
    label = CLBackend("CL").dev.label
    env = {**os.environ, DEVICE_ENV: label.partition(": ")[2][:6], "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", "from uopgrad_opencl import CLBackend; print(CLBackend('CL').dev.label)"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == label
    env[DEVICE_ENV] = "no such device"
    bad = subprocess.run(
        [sys.executable, "-c", code.replace("Device['CL']", "__import__('uopgrad_opencl').CLBackend('CL')")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode != 0 and "names no OpenCL device" in bad.stderr


# ---------------------------------------------------------------------- what the device claims
def test_capabilities_come_from_the_device(cl):
    caps, dev = cl.capabilities, cl.dev.device
    exts = dev.extensions.split()
    assert caps.compiled and not caps.loop_style
    assert (dtypes.float64 in caps.dtypes) == ("cl_khr_fp64" in exts)
    assert {dtypes.bool, dtypes.int8, dtypes.uint32, dtypes.float16, dtypes.float32} <= caps.dtypes
    assert dtypes.bfloat16 in caps.dtypes  # as bits, computed in float (like float16)
    assert caps.grid is cl.renderer.grid
    assert caps.grid.local_prod_max == dev.max_work_group_size
    assert caps.max_local_size == tuple(dev.max_work_item_sizes[:3])
    assert caps.ops == cl.renderer.supports


def test_an_unclaimed_dtype_is_refused(cl, monkeypatch):
    import dataclasses

    less = cl.capabilities.dtypes - {dtypes.bfloat16}  # a device without it (PoCL claims every dtype)
    monkeypatch.setattr(cl, "capabilities", dataclasses.replace(cl.capabilities, dtypes=less))
    with pytest.raises(TypeError, match="CL has no .* buffers"):
        cl.handle(UOp.new_buffer("CL", 4, dtypes.bfloat16))


def test_cl_1_is_another_device_with_its_own_buffers():
    a, b = CLBackend("CL"), CLBackend("CL:1")
    assert a.name != b.name
    buf = UOp.new_buffer("CL", 3, f32)
    a.copyin(buf, np.array([1, 2, 3], dtype=np.float32))
    assert buf not in b._handles


# ---------------------------------------------------------------------- buffers and launches
def test_buffers_are_zeroed_reused_and_copied(cl):
    alloc = cl.allocator
    h = alloc.alloc(64)
    alloc.copyin(h, np.full(16, 7, dtype=np.float32).data.cast("B"))
    alloc.free(h, 64)
    again = alloc.alloc(64)
    assert again is h  # reused, and zeroed again
    out = np.ones(16, dtype=np.float32)
    alloc.copyout(out.data.cast("B"), again)
    assert (out == 0).all()
    dirty = alloc.alloc(64, zero=False)  # a fresh buffer is zeroed anyway
    alloc.copyout(out.data.cast("B"), dirty)
    assert (out == 0).all()


def test_a_grid_launch_with_a_variable(cl):
    # out[g*8 + l] = (g*8 + l) * n: 4 work-groups of 8 work-items, n a scalar argument
    n = UOp.variable("n", 1, 100, i32)
    out = UOp(Ops.PARAM, i32.ptr(32), (), 0)
    g = UOp(Ops.SPECIAL, i32, (const(i32, 4),), "gidx0")
    lid = UOp(Ops.SPECIAL, i32, (const(i32, 8),), "lidx0")
    idx = UOp(Ops.ADD, i32, (UOp(Ops.MUL, i32, (g, const(i32, 8))), lid))
    st = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, i32.ptr(), (out, idx)), UOp(Ops.MUL, i32, (idx, n))))
    p = prog("grid", linear(out, n, st), global_size=(4, 1, 1), local_size=(8, 1, 1))
    got = run(cl, p, (32, i32), vals=(3,))
    assert (got == np.arange(32) * 3).all()


def test_kernels_take_cl_buffers_only(cl):
    kernel = cl.runtime("k", cl.compiler.compile_cached("__kernel void k(__global int* a) { a[0] = 1; }"))
    with pytest.raises(TypeError, match="cl.Buffer"):
        kernel(np.zeros(4, dtype=np.int32))


# ---------------------------------------------------------------------- the compiler
def fresh(tag: str) -> str:
    return f"/* {tag} {os.urandom(8).hex()} */\n__kernel void k(__global int* a) {{ a[0] = 42; }}\n"


def test_a_failed_build_shows_the_build_log_and_the_source(cl):
    bad = "__kernel void broken(__global float* data0) {\n  data0[0] = undefined_name;\n}\n"
    with pytest.raises(CompileError) as info:
        cl.compiler.compile(bad)
    text = str(info.value)
    assert "OpenCL build" in text and "undefined_name" in text and "error" in text
    assert "   2    data0[0] = undefined_name;" in text


def test_builds_keep_ieee_semantics(cl):
    opts = cl.compiler.options
    assert "-cl-fast-relaxed-math" not in opts and "-cl-mad-enable" not in opts
    if cl.dev.device.single_fp_config & 128:  # CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT
        assert "-cl-fp32-correctly-rounded-divide-sqrt" in opts


def test_second_build_hits_the_disk_cache(cl):
    src = fresh("hit")
    first, second = CLCompiler(cl.dev.context, cl.dev.device), CLCompiler(cl.dev.context, cl.dev.device)
    lib = first.compile_cached(src)
    assert first.stats == {"compiled": 1}
    assert second.compile_cached(src) == lib and second.stats == {"disk_hit": 1}


def test_another_process_hits_the_disk_cache(cl):
    src = fresh("process")
    cl.compiler.compile_cached(src)
    code = textwrap.dedent(f"""
        import numpy as np
        from uopgrad_opencl import CLBackend
        cl = CLBackend("CL")
        lib = cl.compiler.compile_cached({src!r})
        kernel = cl.runtime("k", lib)  # nothing was built in this process: the runtime builds the source
        buf = cl.allocator.alloc(4)
        kernel(buf)
        out = np.zeros(1, dtype=np.int32)
        cl.allocator.copyout(out.data.cast("B"), buf)
        print(dict(cl.compiler.stats), out[0])
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "{'disk_hit': 1} 42"


def test_a_built_program_is_handed_to_the_runtime_once(cl):
    src = fresh("take")
    c = CLCompiler(cl.dev.context, cl.dev.device)
    lib = c.compile(src)
    assert lib == src.encode()  # the source that built: the driver's cache keeps the build
    first = c.take(lib, "k")
    again = c.take(lib, "k")  # not held twice: built anew
    assert first.program.int_ptr != again.program.int_ptr
    assert cl_kernel_names(first.program) == cl_kernel_names(again.program) == ["k"]


def cl_kernel_names(program: cl.Program) -> list[str]:
    return [k.function_name for k in program.all_kernels()]


def test_the_cache_key_names_the_device_and_options(cl):
    key = cl.compiler.cache_key
    assert cl.dev.device.name in key and cl.dev.device.driver_version in key
    assert " ".join(cl.compiler.options) in key


# ---------------------------------------------------------------------- PoCL's target CPU
def test_pocl_builds_on_this_cpu(cl):
    # the repair (if this CPU needed it) happened before the first build, and only for PoCL
    dev = cl.dev
    if dev.target:
        assert "Portable Computing Language" in dev.device.platform.name
        assert dev.target.startswith("x86-64")
    assert cl.compiler.compile(fresh("builds"))
    assert repair(dev.device) == ""  # nothing left to repair


def test_non_pocl_devices_are_never_touched():
    assert repair(DEVICES[1]) == ""  # type: ignore[arg-type]
    assert all(isinstance(d, cl.Device) for d in all_devices())
