"""The C-family renderer on hand-built linear programs (spec/kernels.md §2, built with the conformance kit's
helpers as a backend's renderer tests build them): golden C for a few kernels, constants, casts, guards of
what C leaves undefined, and SSA temporaries for very long kernels."""

from __future__ import annotations

import math
import re

import pytest

from uopgrad.alu import ALU
from uopgrad.codegen import GridLimits, Program
from uopgrad.dtype import DType, dtypes
from uopgrad.ops import GroupOp, Ops
from uopgrad.renderer import CStyleRenderer, Renderer
from uopgrad.renderer.cstyle import RenderError
from uopgrad.uop import UOp
from uopgrad_conformance.kit.linear import alu, const, linear, load, param, prog, store
from uopgrad_conformance.kit.linear import render as kit_render

i32, f32, f16 = dtypes.int32, dtypes.float32, dtypes.float16


def rng(i: int, n: int | UOp, kind: str = "loop") -> UOp:
    return UOp(Ops.RANGE, i32, (n if isinstance(n, UOp) else const(i32, n),), (i, kind))


def end(r: UOp) -> UOp:
    return UOp(Ops.END, dtypes.void, (r,))


def render(name: str, *roots: UOp) -> str:
    return kit_render(CStyleRenderer(), name, *roots)


def elementwise(op: Ops, dt: DType, n: int = 16, out_dt: DType | None = None) -> str:
    out, a, b = param(0, out_dt or dt, n), param(1, dt, n), param(2, dt, n)
    r = rng(0, n)
    val = UOp(op, out_dt or dt, (load(a, r), load(b, r)))
    return render("E", store(out, r, val), end(r))


# ---------------------------------------------------------------------- golden kernels
def test_golden_elementwise():
    out, a = param(0, f32, 16), param(1, f32, 16)
    r = rng(0, 16)
    x = load(a, r)
    val = alu(Ops.MAX, alu(Ops.MUL, x, const(f32, 2.0)), const(f32, -0.0))
    assert (
        render("E_16", store(out, r, val), end(r))
        == """\
#include <math.h>

void E_16(float* restrict data0, const float* restrict data1) {
  for (int ridx0 = 0; ridx0 < 16; ridx0++) {
    const float val0 = data1[ridx0];
    const float alu0 = (val0*2.0f);
    const float alu1 = (((alu0!=alu0)||(alu0>(-0.0f)))?alu0:(-0.0f));
    data0[ridx0] = alu1;
  }
}
"""
    )


def test_golden_reduce_with_register_and_variable():
    # out[i] = sum_j a[i*n + j] for a variable n: an accumulator register per output row
    n = UOp.variable("n", 1, 64, i32)
    out, a = param(0, f32, 4), param(1, f32, 256)
    r0, r1 = rng(0, 4), rng(1, n, "reduce")
    acc = UOp(Ops.DEFINE_REG, f32, (const(f32, 0.0),), 0)
    cur = UOp(Ops.LOAD, f32, (acc, r1))
    idx = alu(Ops.ADD, alu(Ops.MUL, r0, n), r1)
    upd = UOp(Ops.STORE, dtypes.void, (acc, alu(Ops.ADD, cur, load(a, idx))))
    e1 = end(r1)
    final = UOp(Ops.LOAD, f32, (acc, e1))
    uops = linear(out, a, n, r0, acc, r1, cur, upd, e1, final, store(out, r0, final), end(r0))
    src = CStyleRenderer().render(prog("r_4_n", uops))
    assert (
        src
        == """\
#include <math.h>

void r_4_n(float* restrict data0, const float* restrict data1, const long long n) {
  for (int ridx0 = 0; ridx0 < 4; ridx0++) {
    float acc0 = 0.0f;
    for (int ridx1 = 0; ridx1 < n; ridx1++) {
      const float val0 = acc0;
      const int alu0 = (ridx0*n);
      const int alu1 = (alu0+ridx1);
      const float val1 = data1[alu1];
      const float alu2 = (val0+val1);
      acc0 = alu2;
    }
    const float val2 = acc0;
    data0[ridx0] = val2;
  }
}
"""
    )


def test_golden_gated_load_and_store():
    # out[i] = i < 8 ? a[i] : 0 (a PAD), written only where i is even
    out, a = param(0, f32, 16), param(1, f32, 8)
    r = rng(0, 16)
    in_bounds = alu(Ops.CMPLT, r, const(i32, 8))
    even = alu(Ops.CMPEQ, alu(Ops.CMOD, r, const(i32, 2)), const(i32, 0))
    src = render("gated", store(out, r, load(a, r, in_bounds), even), end(r))
    assert "    const float val0 = (alu0?data1[ridx0]:0.0f);\n" in src
    assert "    if (alu2) data0[ridx0] = val0;\n" in src
    assert "const int alu1 = (((2)==0||(2)==-1)?0:(ridx0)%(2));" in src  # the guard folds in the compiler


def test_read_only_buffers_are_const_and_unused_slots_keep_their_place():
    out, b = param(0, i32, 4), param(2, i32, 4)
    r = rng(0, 4)

    uops = linear(store(out, r, load(b, r)), end(r))
    src = CStyleRenderer().render(Program("k", uops, (0, 1, 2), (), (0,), (2,)))
    name = CStyleRenderer().function_name("k")
    assert f"void {name}(int* restrict data0, const void* data1, const int* restrict data2) {{" in src


# ---------------------------------------------------------------------- constants
@pytest.mark.parametrize(
    ("value", "dt", "text"),
    [
        (math.inf, f32, "INFINITY"),
        (-math.inf, f32, "(-INFINITY)"),
        (math.nan, f32, "NAN"),
        (-0.0, f32, "(-0.0f)"),
        (0.0, dtypes.float64, "0.0"),
        (-0.0, dtypes.float64, "(-0.0)"),
        (0.1, f32, "0.10000000149011612f"),
        (1e-45, f32, "1.401298464324817e-45f"),
        (1e300, dtypes.float64, "1e+300"),
        (math.inf, f16, "((_Float16)INFINITY)"),
        (0.5, f16, "((_Float16)0.5f)"),
        (True, dtypes.bool, "1"),
        (False, dtypes.bool, "0"),
        (-5, i32, "(-5)"),
        (-(2**31), i32, "(-2147483647-1)"),
        (-(2**63), dtypes.int64, "(-9223372036854775807ll-1)"),
        (2**64 - 1, dtypes.uint64, "18446744073709551615ull"),
        (7, dtypes.uint32, "7u"),
        (5, dtypes.int64, "5ll"),
        (-3, dtypes.int8, "((signed char)-3)"),
        (255, dtypes.uint8, "((unsigned char)255)"),
    ],
)
def test_constants(value, dt, text):
    assert CStyleRenderer().render_const(dtypes.as_const(value, dt), dt) == text


def test_negative_nan_keeps_its_sign():
    assert CStyleRenderer().render_const(-math.nan, f32) == "(-NAN)"


# ---------------------------------------------------------------------- ops, casts, guards
def test_max_matches_numpy_tie_rules():
    assert "(((val0!=val0)||(val0>val1))?val0:val1)" in elementwise(Ops.MAX, f32)
    # float16 is computed in float; numpy's half loop keeps a on a tie
    src = elementwise(Ops.MAX, f16)
    a, b = "((float)val0)", "((float)val1)"
    assert f"((_Float16)((({a}!={a})||({a}>={b}))?{a}:{b}))" in src
    assert "((val0>val1)?val0:val1)" in elementwise(Ops.MAX, i32)


def test_integer_division_is_guarded():
    assert "((val1)==0?0:(val1)==-1?-(val0):(val0)/(val1))" in elementwise(Ops.CDIV, i32)
    assert "((val1)==0?0:(val0)/(val1))" in elementwise(Ops.CDIV, dtypes.uint32)
    assert "(((val1)==0||(val1)==-1)?0:(val0)%(val1))" in elementwise(Ops.CMOD, dtypes.int64)
    assert "truncf((val0/val1))" in elementwise(Ops.CDIV, f32)
    assert "fmod(val0, val1)" in elementwise(Ops.CMOD, dtypes.float64)
    # float16: the quotient is rounded to half before it is truncated, as REFERENCE does
    assert "truncf(((float)(_Float16)(((float)val0)/((float)val1))))" in elementwise(Ops.CDIV, f16)


def test_shifts_are_guarded():
    assert "(((unsigned long long)(val1))<32u?(val0)<<(val1):0)" in elementwise(Ops.SHL, i32)
    shr8 = "(((unsigned long long)(val1))<8u?(val0)>>(val1):((val0)<0?-1:0))"
    assert shr8 in elementwise(Ops.SHR, dtypes.int8)
    assert "(((unsigned long long)(val1))<16u?(val0)>>(val1):0)" in elementwise(Ops.SHR, dtypes.uint16)


def test_helpers_are_emitted_only_when_used():
    src = elementwise(Ops.POW, i32)
    assert "static inline long long __uopgrad_ipow(" in src and "__uopgrad_upow(" not in src
    assert "__uopgrad" not in elementwise(Ops.ADD, i32)
    assert "__uopgrad_threefry(val0, val1)" in elementwise(Ops.THREEFRY, dtypes.uint64)


def test_comparisons_of_half_are_bool_and_not_rounded():
    src = elementwise(Ops.CMPLT, f16, out_dt=dtypes.bool)
    assert "const _Bool alu0 = (((float)val0)<((float)val1));" in src


@pytest.mark.parametrize(
    ("src_dt", "dst_dt", "text"),
    [
        (f32, i32, "((int)__uopgrad_f2i((double)val0))"),
        (dtypes.float64, dtypes.uint8, "((unsigned char)__uopgrad_f2i((double)val0))"),
        (f32, dtypes.bool, "(val0!=0)"),
        (i32, f16, "((_Float16)val0)"),
        (dtypes.int64, dtypes.int8, "((signed char)val0)"),
    ],
)
def test_casts(src_dt, dst_dt, text):
    out, a = param(0, dst_dt, 4), param(1, src_dt, 4)
    r = rng(0, 4)
    src = render("c", store(out, r, load(a, r).cast(dst_dt)), end(r))
    assert f"= {text};" in src
    assert ("static inline long long __uopgrad_f2i" in src) == ("f2i" in text)


def test_bitcast_goes_through_a_union():
    out, a = param(0, dtypes.uint32, 4), param(1, f32, 4)
    r = rng(0, 4)
    src = render("b", store(out, r, load(a, r).bitcast(dtypes.uint32)), end(r))
    assert "const unsigned int cast0 = ((union { float s; unsigned int d; }){ .s = val0 }).d;" in src


def test_every_claimed_op_renders():
    # the keys of code_for_op are the capability declaration: each renders for a float and an int dtype
    r = CStyleRenderer()
    assert r.supports == frozenset(r.code_for_op)
    for op in r.supports - {Ops.WHERE, Ops.MULACC, Ops.THREEFRY}:
        for dt in (f32, i32):
            if dt not in ALU[op].defined_on:  # a float-only op on i32, a bitwise op on f32
                continue
            n_src = 1 if op in GroupOp.Unary else 2
            a = param(1, dt, 4)
            rr = rng(0, 4)
            x = load(a, rr)
            out_dt = dtypes.bool if op in GroupOp.Comparison else dt
            val = UOp(op, out_dt, (x,) * n_src)
            assert "alu0" in render("k", store(param(0, out_dt, 4), rr, val), end(rr))


def test_ops_outside_supports_are_an_error():
    class Small(CStyleRenderer):
        code_for_op = {Ops.ADD: CStyleRenderer.code_for_op[Ops.ADD]}

    out, a = param(0, f32, 4), param(1, f32, 4)
    r = rng(0, 4)
    program = prog("k", linear(store(out, r, alu(Ops.MUL, load(a, r), const(f32, 2.0))), end(r)))
    with pytest.raises(RenderError, match="does not render Ops.MUL"):
        Small().render(program)


def test_unbalanced_loops_are_an_error():
    out = param(0, f32, 4)
    r = rng(0, 4)
    with pytest.raises(RenderError, match="never closed"):
        render("k", store(out, r, const(f32, 1.0)))


def test_a_kernel_of_thousands_of_ops_is_flat():
    out, a = param(0, f32, 4), param(1, f32, 4)
    r = rng(0, 4)
    x = load(a, r)
    for i in range(3000):
        x = alu(Ops.ADD, alu(Ops.MUL, x, const(f32, 1.0001)), const(f32, float(i % 7)))
    src = render("long", store(out, r, x), end(r))
    assert src.count("\n") > 6000
    assert max(line.count("(") for line in src.splitlines()) < 10  # one short statement per op


def test_variable_names_never_clash():
    out = param(0, i32, 4)
    bad = [UOp.variable(name, 0, 9, i32) for name in ("int", "data0", "x y", "n")]
    r = rng(0, 4)
    val = alu(Ops.ADD, alu(Ops.ADD, alu(Ops.ADD, bad[0], bad[1]), bad[2]), bad[3])
    src = render("v", store(out, r, val), end(r))
    assert "const long long var0, const long long var1, const long long var2, const long long n)" in src


def test_parallel_pragma_goes_on_large_output_loops_only():
    class Par(CStyleRenderer):
        parallel_pragma = "#pragma omp parallel for"

    def kernel(n: int, kind: str) -> str:
        out, a = param(0, f32, n), param(1, f32, n)
        r = rng(0, n, kind)
        return Par().render(prog("k", linear(store(out, r, load(a, r)), end(r))))

    assert "#pragma omp parallel for\n  for (int ridx0" in kernel(1 << 20, "loop")
    assert "#pragma" not in kernel(16, "loop")
    assert "#pragma" not in kernel(1 << 20, "reduce")


def test_parallel_pragma_is_not_put_on_a_loop_that_updates_an_outer_register():
    class Par(CStyleRenderer):
        parallel_pragma = "#pragma omp parallel for"
        parallel_min_work = 1

    out, a = param(0, f32, 1), param(1, f32, 64)
    r = rng(0, 64)
    acc = UOp(Ops.DEFINE_REG, f32, (const(f32, 0.0),), 0)
    cur = UOp(Ops.LOAD, f32, (acc, r))
    upd = UOp(Ops.STORE, dtypes.void, (acc, alu(Ops.ADD, cur, load(a, r))))
    e = end(r)
    final = UOp(Ops.LOAD, f32, (acc, e))
    uops = linear(out, a, acc, r, cur, upd, e, final, store(out, const(i32, 0), final))
    assert "#pragma" not in Par().render(prog("k", uops))


def test_renderer_base():
    class Grid(Renderer):
        device = "G"
        grid = GridLimits()

    assert Grid().grid is not None and CStyleRenderer().grid is None
    with pytest.raises(NotImplementedError):
        Grid().render(prog("k", ()))


def test_special_indices_come_from_the_dialect_table():
    class CL(CStyleRenderer):
        special_index = {"gidx": "get_group_id({0})", "lidx": "get_local_id({0})"}

    out = param(0, f32, 64)
    g = UOp(Ops.SPECIAL, i32, (const(i32, 64),), "gidx0")
    src = CL().render(prog("k", linear(store(out, g, const(f32, 1.0)))))
    assert "const int gidx0 = get_group_id(0);" in src
    with pytest.raises(RenderError, match="no grid index 'gidx0'"):
        CStyleRenderer().render(prog("k", linear(store(out, g, const(f32, 1.0)))))


@pytest.mark.parametrize("name", ["E_4_4", "r_16_n", "E_1_2_3"])
def test_codegen_kernel_names_are_kept(name):
    assert CStyleRenderer().function_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "long",
        "sinf",
        "my kernel!",
        "3d",
        "__x",
        "main",
        "exp2",
        "",
        "E_4_x",
        "omp_set_dynamic",
        "GOMP_parallel",
        "x" * 300,
        "é;system(1)",
        "E" + "_1" * 40,
    ],
)
def test_other_kernel_names_get_a_prefix_a_cap_and_a_hash(name):
    ident = CStyleRenderer().function_name(name)
    assert re.fullmatch(r"k_[A-Za-z0-9_]{0,32}_[0-9a-f]{8}", ident), ident
    assert CStyleRenderer().function_name(name + "!") != ident, "distinct names stay distinct"


# ---------------------------------------------------------------------- local memory and barriers (hooks)
class _SharedDialect(CStyleRenderer):
    """A dialect with local memory, spelled as tests can read it."""

    def render_local(self, name: str, dt: DType, size: int) -> str:
        return f"LOCAL {self.ctype(dt)} {name}[{size}];"

    def render_barrier(self) -> str:
        return "BARRIER();"


def _through_local() -> tuple[UOp, ...]:
    # tile[l] = in[l]; barrier; out[l] = tile[3 - l], the tile read as it is after the barrier
    out, a = param(0, dtypes.float32, 4), param(1, dtypes.float32, 4)
    tile = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(4, type(dtypes.float32.ptr().addrspace).LOCAL), (), 0)
    r = rng(0, 4)
    bar = UOp(Ops.BARRIER, dtypes.void, (store(tile, r, load(a, r)),))
    other = alu(Ops.SUB, const(dtypes.int32, 3), r)
    return linear(store(out, r, load(UOp(Ops.AFTER, tile.dtype, (tile, bar)), other)), end(r))


def test_local_memory_and_barriers_go_through_the_dialect_hooks():
    src = _SharedDialect().render(prog("k", _through_local()))
    lines = [line.strip() for line in src.splitlines()]
    assert (
        lines.index("LOCAL float temp0[4];")
        < lines.index("temp0[ridx0] = val0;")
        < lines.index("BARRIER();")
        < lines.index("const float val1 = temp0[alu0];")
    )


def test_a_dialect_without_local_memory_says_so():
    with pytest.raises(RenderError, match="CStyleRenderer has no local memory"):
        CStyleRenderer().render(prog("k", _through_local()))
    with pytest.raises(RenderError, match="has no workgroup barrier"):
        CStyleRenderer().render(prog("k", linear(UOp(Ops.BARRIER, dtypes.void, ()))))
