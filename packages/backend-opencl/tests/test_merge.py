"""Kernels built together (`CLCompiler.compile_many`): one program for the new kernels of a schedule,
each helper once, kernels of one name renamed apart, and a compile error that names the source that has
it."""

from __future__ import annotations

import os

import numpy as np
import pytest

import uopgrad_opencl.compiler as clc
from uopgrad import Tensor
from uopgrad.backend import CompileError
from uopgrad_opencl import CLCompiler

HELPER = "static inline float twice(float x) {\n  /* a helper every kernel calls */\n  return x * 2.0f;\n}"


def kernel(name: str, scale: float, tag: str) -> str:
    return (
        f"#pragma OPENCL FP_CONTRACT OFF\n/* {tag} */\n{HELPER}\n\n"
        f"__kernel void {name}(__global float* a) {{\n"
        f"  a[get_global_id(0)] = twice((float)get_global_id(0)) * {scale}f;\n}}\n"
    )


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources `build` was called with."""
    seen: list[str] = []
    real = clc.build

    def counting(context: object, device: object, src: str) -> object:
        seen.append(src)
        return real(context, device, src)  # type: ignore[arg-type]

    monkeypatch.setattr(clc, "build", counting)
    return seen


def launch(cl, c: CLCompiler, lib: bytes, name: str) -> np.ndarray:
    buf = cl.allocator.alloc(16)
    c.take(lib, name)(cl.dev.queue, (4,), None, buf)
    out = np.zeros(4, dtype=np.float32)
    cl.allocator.copyout(out.data.cast("B"), buf)
    return out


def test_new_kernels_build_as_one_program(cl, builds):
    tag = os.urandom(8).hex()
    srcs = [kernel(f"k{i}", i + 0.5, tag) for i in range(3)]
    c = CLCompiler(cl.dev.context, cl.dev.device)
    libs = c.compile_many(srcs)
    assert len(builds) == 1 and builds[0].count("static inline float twice") == 1
    assert builds[0].index("#pragma") == 0
    for i, lib in enumerate(libs):
        np.testing.assert_array_equal(launch(cl, c, lib, f"k{i}"), np.arange(4) * 2 * (i + 0.5))


def test_kernels_of_one_name_are_renamed_apart(cl, builds):
    tag = os.urandom(8).hex()
    srcs = [kernel("k", 1.5, tag), kernel("k", 2.5, tag), kernel("j", 3.5, tag)]
    c = CLCompiler(cl.dev.context, cl.dev.device)
    libs = c.compile_many(srcs)
    assert len(builds) == 1 and "void k_m1(" in builds[0]
    got = [launch(cl, c, lib, n) for lib, n in zip(libs, ["k", "k", "j"])]
    for out, scale in zip(got, [1.5, 2.5, 3.5]):
        np.testing.assert_array_equal(out, np.arange(4) * 2 * scale)


def test_a_compile_error_names_its_own_source(cl):
    tag = os.urandom(8).hex()
    bad = kernel("bad", 1.0, tag).replace("twice((float)", "undefined_name((float)")
    srcs = [kernel("k0", 1.0, tag), bad, kernel("k2", 1.0, tag)]
    with pytest.raises(CompileError) as info:
        CLCompiler(cl.dev.context, cl.dev.device).compile_many(srcs)
    assert info.value.src == bad


def test_a_schedule_of_new_kernels_is_one_build(cl, builds):
    """Four new kernels (three reductions named r_1, an elementwise one, one in float64 with its pragma): one
    build, and the values numpy gives."""
    k = 1 + int.from_bytes(os.urandom(3), "little") / 2**24  # a constant of the kernels: new sources
    x = np.array([1.0, 2.0, -3.0, 0.25], dtype=np.float32)
    a = Tensor(x, device="CL")
    b = (a.exp2() * (a * k).sum()).contiguous()
    c = (b.cast("float16") + 1).sum()
    d = (a.cast("float64") * k).sum()
    c.realize(d)
    assert len(builds) == 1 and "cl_khr_fp64" in builds[0]
    want = (np.exp2(x) * (x * np.float32(k)).sum()).astype(np.float16).astype(np.float32) + 1
    np.testing.assert_allclose(c.numpy(), want.sum(), rtol=2e-3)
    np.testing.assert_allclose(d.numpy(), (x.astype(np.float64) * k).sum(), rtol=1e-12)
