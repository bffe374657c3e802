"""The kernel of a float max (spec/opt.md §2): a plain maximum on the accumulator, which is never NaN
(codegen/reduce.py `never_nan`), the NaN sum and the maximum in one loop over a row (codegen/linearize.py
`fuse_loops`), and `m ? x : 0` as a mask AND."""

from __future__ import annotations

import re

import numpy as np
import pytest

from uopgrad import Ops, Tensor, UOp, dtypes
from uopgrad.backends.reference import REFERENCE_OPS
from uopgrad.codegen import Program, Target
from uopgrad.codegen.linearize import linearize
from uopgrad.codegen.reduce import never_nan
from uopgrad.pipeline import lower
from uopgrad.renderer import CStyleRenderer
from uopgrad.renderer.vector import GCCVectorRenderer
from uopgrad.schedule import schedule
from uopgrad_conformance.kit.linear import alu, const, linear, load, param, prog, store

pytestmark = pytest.mark.usefixtures("reference_default")
f32 = dtypes.float32
# a select that tests its first operand for NaN, as MAX's template does: `((a!=a)|(a>b))`
NAN_TESTING_MAX = re.compile(r"\(\((\w+)!=\1\)\|+\(\1>")


def program(out: Tensor, width: int) -> Program:
    return lower(schedule(out.uop.sink()).kernels[-1], Target(frozenset(), REFERENCE_OPS, vector_width=width))


def rows(n: int = 64, cols: int = 1024) -> Tensor:
    return Tensor(np.ones((n, cols), np.float32)).realize()


@pytest.mark.parametrize("width", [16, 32, 64])
def test_a_row_max_takes_a_plain_maximum_on_its_accumulator(width: int):
    src = GCCVectorRenderer().render(program(rows().max(axis=-1), width))
    assert not NAN_TESTING_MAX.search(src)  # no NaN test on the accumulator, in lanes or in the redo
    assert f"__uopgrad_vmax_float_{width // 4}(" in src
    assert (
        f"#define __uopgrad_vmax_float_{width // 4}(a, b) ((__uopgrad_float_{width // 4})__builtin_ia32_max"
        in src
    )


def test_the_plain_maximum_is_a_select_where_the_target_has_no_instruction_for_it():
    name, _ = "__uopgrad_vmax_float_8", None
    helper = GCCVectorRenderer.helpers[name]
    # without AVX the macro is the comparison's select: the same choice as the instruction
    assert "#else\n#define __uopgrad_vmax_float_8(a, b) __uopgrad_vsel(" in helper
    assert "((a)>(b))" in helper


def test_an_elementwise_maximum_keeps_its_nan_test():
    a, b = rows(), rows()
    src = GCCVectorRenderer().render(program(a.maximum(b), 32))
    assert "!=" in src.split("void ", 1)[1] and "__uopgrad_vmax" not in src.split("void ", 1)[1]


def test_the_nan_sum_and_the_maximum_read_a_row_in_one_loop():
    prg = program(rows().max(axis=-1), 32)
    loops = [u for u in prg.uops if u.op is Ops.RANGE and u.src[0].op is Ops.CONST and u.arg[-1] == "reduce"]
    assert len(loops) == 1  # beside the output loop and the redo (whose bound is a WHERE)
    ends = [u for u in prg.uops if u.op is Ops.END and u.src[0] is loops[0]]
    assert len(ends) == 1 and len(ends[0].src) == 1 + 2 * 2  # the stores of both reduces' 2 accumulators
    inputs = [u for u in prg.uops if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.dtype.count == 8]
    assert len(inputs) == 2  # each vector of the row is loaded once, for both


def test_the_max_of_a_matrix_reads_it_once_in_one_loop_nest():
    prg = program(rows(64, 1024).max(), 32)
    loops = [u for u in prg.uops if u.op is Ops.RANGE and u.src[0].op is Ops.CONST]
    # the NaN sum's loops fused into the maximum's, then the redo's inner loop (the outer one's bound is a
    # WHERE)
    assert [int(r.src[0].arg) for r in loops] == [64, 1024 // 16, 1024]
    assert sum(u.op is Ops.END and u.src[0] in loops for u in prg.uops) == 3  # one END per loop
    inputs = [u for u in prg.uops if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.dtype.count == 8]
    assert len(inputs) == 2


def _two_sums(dependent: bool) -> UOp:
    """out[0] = sum_j a[j] * (sum_i a[i] if dependent else 2), the two sums over ranges of one size."""
    out, a = param(0, f32, 1), param(1, f32, 16)
    results = []
    for n in range(2):
        r = UOp(Ops.RANGE, dtypes.int32, (const(dtypes.int32, 16),), (n, "reduce"))
        acc = UOp(Ops.DEFINE_REG, f32, (const(f32, 0.0),), n)
        x = load(a, r) if n == 0 else alu(Ops.MUL, load(a, r), results[0] if dependent else const(f32, 2.0))
        e = UOp(
            Ops.END,
            dtypes.void,
            (r, UOp(Ops.STORE, dtypes.void, (acc, alu(Ops.ADD, UOp(Ops.LOAD, f32, (acc, r)), x)))),
        )
        results.append(UOp(Ops.LOAD, f32, (acc, e)))
    return UOp(Ops.SINK, dtypes.void, (store(out, const(dtypes.int32, 0), alu(Ops.ADD, *results)),))


@pytest.mark.parametrize("dependent", [False, True])
def test_reduce_loops_are_fused_unless_one_needs_the_others_result(dependent: bool):
    uops = linearize(_two_sums(dependent))
    loops = [u for u in uops if u.op is Ops.RANGE]
    assert len(loops) == (2 if dependent else 1)
    assert sum(u.op is Ops.END for u in uops) == len(loops)  # one END closes a fused loop


def test_a_select_of_zero_is_a_mask_and():
    src = GCCVectorRenderer().render(program(rows().max(axis=-1), 32))
    assert re.search(r"\(\(__uopgrad_float_8\)\(\(\(__uopgrad_int_8\)\(val\d+\)\)&\(alu\d+\)\)\)", src)


def _max_reduce(masked: bool) -> tuple[tuple[UOp, ...], UOp, UOp]:
    """acc = -inf; for i: acc = max(acc, x[i]) (masked: where(x != x, -inf, x[i])); out[0] = acc."""
    out, a = param(0, f32, 1), param(1, f32, 16)
    r = UOp(Ops.RANGE, dtypes.int32, (const(dtypes.int32, 16),), (0, "reduce"))
    acc = UOp(Ops.DEFINE_REG, f32, (const(f32, float("-inf")),), 0)
    x = load(a, r)
    if masked:
        x = alu(Ops.WHERE, alu(Ops.CMPNE, x, x), const(f32, float("-inf")), x)
    mx = alu(Ops.MAX, UOp(Ops.LOAD, f32, (acc, r)), x)
    e = UOp(Ops.END, dtypes.void, (r, UOp(Ops.STORE, dtypes.void, (acc, mx))))
    final = UOp(Ops.LOAD, f32, (acc, e))
    return linear(out, a, acc, r, mx, e, final, store(out, const(dtypes.int32, 0), final)), acc, mx


def test_a_register_is_never_nan_only_when_nothing_maybe_nan_is_stored_into_it():
    uops, acc, mx = _max_reduce(masked=True)
    facts = never_nan(uops)
    assert acc in facts and mx in facts
    uops, acc, mx = _max_reduce(masked=False)  # a NaN of the data reaches the accumulator
    facts = never_nan(uops)
    assert acc not in facts and mx not in facts
    assert not any(u.op is Ops.LOAD and u.src[0] is acc for u in facts)


def test_the_scalar_maximum_drops_the_nan_test_only_on_a_never_nan_operand():
    masked = CStyleRenderer().render(prog("r_1", _max_reduce(masked=True)[0]))
    plain = CStyleRenderer().render(prog("r_1", _max_reduce(masked=False)[0]))
    assert not NAN_TESTING_MAX.search(masked) and re.search(r"\(\((val\d+)>(alu\d+)\)\?\1:\2\)", masked)
    assert NAN_TESTING_MAX.search(plain)
