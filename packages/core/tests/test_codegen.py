"""Codegen (uopgrad.codegen, spec/kernels.md §2), tested end to end without a compiler: programs are
scheduled, lowered and run as linear programs on REFERENCE, and compared with REFERENCE's direct
evaluation of the same graph. Each case runs loop-style with every op native, loop-style with a C-like op set
(so decompositions run), and grid-style with a small grid (so gpudims merges, splits and pads)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import rnd

from uopgrad import GroupOp, Ops, UOp, dtypes
from uopgrad.alu import ALU
from uopgrad.backend import Device
from uopgrad.backends.reference import REFERENCE_OPS, evaluate, run_program, run_schedule
from uopgrad.codegen import GridLimits, Program, Target
from uopgrad.codegen.program import check, pm_spec_program
from uopgrad.config import Context
from uopgrad.dtype import DType
from uopgrad.pipeline import lower
from uopgrad.schedule import schedule
from uopgrad.tensor import Tensor
from uopgrad.verify import VerifyError

DEV = "REFERENCE"
# a C-like backend: no MAX, no floor division, no POW, ... (each is decomposed)
DECOMPOSED = frozenset(
    {Ops.MAX, Ops.FLOORDIV, Ops.FLOORMOD, Ops.POW, Ops.SUB, Ops.NEG, Ops.CMPEQ, Ops.FDIV, Ops.MULACC}
)
C_LIKE = REFERENCE_OPS - DECOMPOSED
REF, C_TARGET = Target.for_ops(REFERENCE_OPS), Target.for_ops(C_LIKE)  # loop-style targets for lowering
MODES = {
    "loop": {},
    "decomposed": {"ops": C_LIKE},
    "grid": {"ops": C_LIKE, "grid": GridLimits(global_max=(3, 2, 65535), local_size=8)},
}


pytestmark = pytest.mark.usefixtures("reference_default")


def check_lowered(*outs: UOp, exact: bool = False, rtol: float = 1e-5) -> None:
    """schedule -> lower -> run on REFERENCE, in every mode, equals REFERENCE's direct evaluation."""
    want = evaluate(*outs)
    for mode, kw in MODES.items():
        s = schedule(outs[0].sink(*outs[1:]))
        run_schedule(s, **kw)
        for u, w in zip(outs, want):
            got = evaluate(s.outputs[u])[0]
            assert got.shape == w.shape and got.dtype == w.dtype, mode
            if exact or got.dtype.kind in "biu":
                np.testing.assert_array_equal(got, w, err_msg=mode)
            else:
                tol = max(rtol, 1e-3) if got.dtype == np.float16 else rtol
                np.testing.assert_allclose(got, w, rtol=tol, atol=1e-6, equal_nan=True, err_msg=mode)


def buffer(values: np.ndarray, dt: DType) -> UOp:
    buf = UOp.new_buffer(DEV, values.size, dt)
    Device[DEV].copyin(buf, values.reshape(-1))
    return buf.reshape(values.shape)


# ---------------------------------------------------------------------- every ALU op x dtypes
DTYPES = [
    dtypes.float32,
    dtypes.float16,
    dtypes.float64,
    dtypes.int32,
    dtypes.int8,
    dtypes.uint8,
    dtypes.int64,
    dtypes.uint32,
    dtypes.bool,
]


def _defined(op: Ops, dt: DType) -> bool:
    """Whether REFERENCE defines `op` on `dt` (spec/reference.md §3; a float-only op by its row of `ALU`)."""
    if ALU[op].float_only:
        return dtypes.is_float(dt)
    if op in (Ops.SHL, Ops.SHR, Ops.CDIV, Ops.CMOD, Ops.FLOORDIV, Ops.FLOORMOD):
        return dtypes.is_int(dt)
    if op in (Ops.AND, Ops.OR, Ops.XOR):
        return not dtypes.is_float(dt)
    return not (op in (Ops.SUB, Ops.FDIV) and dt == dtypes.bool)


def _operands(op: Ops, dt: DType) -> tuple[UOp, ...]:
    """Operands for `op` on `dt`: with ±0, negatives, a divisor without zeros, shift counts below 5."""
    rng = np.random.default_rng(op.value)
    if dt == dtypes.bool:
        a, b = buffer(rng.random(12) > 0.5, dt), buffer(rng.random(12) > 0.5, dt)
    elif dtypes.is_float(dt):
        va = rng.standard_normal(12) * 3
        va[:4] = [0.0, -0.0, 2.0, -2.0]
        a, b = buffer(va, dt), buffer(rng.standard_normal(12) * 3, dt)
    else:
        lo = 0 if dtypes.is_unsigned(dt) else -20
        a, b = buffer(rng.integers(lo, 20, 12), dt), buffer(rng.integers(lo, 20, 12), dt)
    if op in GroupOp.Unary:
        return (a,)
    if op is Ops.WHERE:
        return (a.ne(a.const_like(0)) if dt != dtypes.bool else a, a, b)
    if op is Ops.MULACC:
        return (a, b, a)
    if op in (Ops.SHL, Ops.SHR):
        return (a, b % b.const_like(5) if dtypes.is_unsigned(dt) else (b.cast(dtypes.int32) % 5).cast(dt))
    if op in (Ops.CDIV, Ops.CMOD, Ops.FLOORDIV, Ops.FLOORMOD):
        return (a, b.eq(0).where(b.const_like(3), b))
    if op is Ops.POW and dtypes.is_int(dt):
        return (a, b % b.const_like(4))
    if op is Ops.POW and dtypes.is_float(dt):
        return (a, b.cast(dtypes.int32).cast(dt) * 0.5)
    return (a, b)


ALU_CASES = [
    (op, dt)
    for op in sorted(GroupOp.ALU - {Ops.THREEFRY}, key=lambda o: o.value)
    for dt in DTYPES
    if _defined(op, dt)
]


@pytest.mark.parametrize("op,dt", ALU_CASES, ids=[f"{op.name}-{dt.name}" for op, dt in ALU_CASES])
def test_alu_op(op: Ops, dt: DType):
    srcs = _operands(op, dt)
    out_dt = dtypes.bool if op in GroupOp.Comparison else srcs[-1].dtype
    check_lowered(UOp(op, out_dt, srcs), rtol=2e-3 if op is Ops.POW else 1e-5)


@pytest.mark.parametrize(
    "src,dst",
    [
        (dtypes.float32, dtypes.int32),
        (dtypes.int32, dtypes.float16),
        (dtypes.float16, dtypes.uint8),
        (dtypes.int64, dtypes.bool),
        (dtypes.bool, dtypes.float64),
        (dtypes.float32, dtypes.bfloat16),
    ],
)
def test_cast_and_bitcast(src: DType, dst: DType):
    a = buffer(np.array([0.0, -1.7, 2.5, 100.3, -0.0, 7.0]), src)
    check_lowered(a.cast(dst), exact=True)
    if src.itemsize == dst.itemsize:
        check_lowered(a.bitcast(dst), exact=True)


@pytest.mark.parametrize("op", [Ops.POW, Ops.MAX])
def test_decomposed_special_values(op: Ops):
    special = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, np.inf, -np.inf, np.nan, 7.5]
    b, e = np.meshgrid(special, special, indexing="ij")
    u = UOp(op, dtypes.float32, (buffer(b, dtypes.float32), buffer(e, dtypes.float32)))
    check_lowered(u, rtol=1e-5)


# ---------------------------------------------------------------------- movement ops, reduces, programs
MOVEMENT = {
    "reshape": lambda x: x.reshape(3, 8) + 1,
    "reshape_split_merge": lambda x: x.reshape(2, 2, 6).permute(2, 0, 1).reshape(12, 2) * 2,
    "permute": lambda x: x.T * 1,
    "expand": lambda x: x[:, :1].expand(4, 6) + x,
    "pad": lambda x: x.pad(((1, 2), (0, 3))) + 1,
    "pad_reduce": lambda x: x.pad(((1, 1), (2, 0))).sum(0),
    "shrink": lambda x: x[1:3, 2:5] * 3,
    "flip": lambda x: x.flip(0).flip(1) + 0,
    "all_six": lambda x: x.T.flip(0).pad(((1, 1), (0, 2)))[1:, 1:4].reshape(1, 21).expand(2, 21) + 1,
}


@pytest.mark.parametrize("name", list(MOVEMENT))
def test_movement_ops(name: str):
    check_lowered(MOVEMENT[name](rnd(4, 6)).uop, exact=True)


@pytest.mark.parametrize("axes", [(0,), (1,), (2,), (0, 2), (1, 2), (0, 1, 2), None])
@pytest.mark.parametrize("fn", ["sum", "max", "prod"])
def test_reduce_over_any_axes(fn: str, axes: tuple[int, ...] | None):
    x = rnd(2, 3, 4)
    check_lowered(getattr(x, fn)(axes).uop)


@pytest.mark.parametrize("fn", ["sum", "max", "prod"])
def test_empty_and_size_zero_reduces(fn: str):
    def red(t: Tensor, axis: int) -> Tensor:  # Tensor.max raises on an empty axis: build the MAX reduce
        return t._reduce(Ops.MAX, axis, False) if fn == "max" else getattr(t, fn)(axis)

    e = Tensor(np.zeros((0, 3), np.float32))
    check_lowered(red(e, 0).uop, (e + 1).uop)
    check_lowered(red(Tensor(np.zeros((2, 0), np.int32)), 1).uop)


def test_matmul_softmax_and_friends():
    x, w = rnd(4, 6), rnd(6, 5, seed=1)
    check_lowered((x @ w).uop, ((x @ w).relu().T + 1).uop)
    check_lowered(x.softmax().uop, x.log_softmax(0).uop, (x - x.mean()).uop)
    check_lowered(x.sum(1).sum(0).uop, (x.max(0) + x.prod(0)).uop, ((x > 0).max(1)).uop)
    check_lowered((Tensor.arange(12) * 2).uop, Tensor(np.arange(-6, 6).astype(np.int32)).sum().uop)


def test_mlp_gradients():
    rng = np.random.default_rng(4)
    x = Tensor(rng.standard_normal((6, 5)).astype(np.float32))
    w1 = Tensor(rng.standard_normal((5, 7)).astype(np.float32), requires_grad=True)
    w2 = Tensor(rng.standard_normal((7, 3)).astype(np.float32), requires_grad=True)
    loss = ((x @ w1).relu() @ w2).log_softmax().mean()
    g1, g2 = loss.gradient(w1, w2)
    check_lowered(loss.uop, g1.uop, g2.uop)


def test_symbolic_size():
    n = UOp.variable("n", 1, 8)
    x = Tensor(np.arange(8, dtype=np.float32))
    check_lowered((x[: n.bind(5)] * 2).uop, exact=True)


def test_custom_kernel_with_two_stores_in_order():
    a = Tensor(np.arange(4, dtype=np.float32))

    def fxn(o1: UOp, o2: UOp, x: UOp) -> UOp:
        first = o1.store(x * 2)
        return first.sink(o2.store(o1.after(first) + x))  # the second nest reads what the first wrote

    o1, o2, _ = Tensor.empty(4).custom_kernel(Tensor.empty(4), a, fxn=fxn)
    check_lowered(o2.uop, exact=True)
    assert evaluate(o2.uop)[0].tolist() == [0, 3, 6, 9]
    (k,) = schedule(o2.uop.sink()).kernels
    uops = lower(k, REF).uops
    assert any(u.op is Ops.AFTER for u in uops)  # the reads of o1 wait for the first nest


# ---------------------------------------------------------------------- the Program record and its form
def kernel_of(t: Tensor) -> UOp:
    (k,) = schedule(t.uop.sink()).items
    return k


def test_program_fields():
    x, y = rnd(3, 4), rnd(3, 4, seed=1)
    prg = lower(kernel_of((x * y).sum(1)), REF)
    assert isinstance(prg, Program) and prg.name == "r_3"
    assert prg.globals == (0, 1, 2) and prg.outs == (0,) and prg.ins == (1, 2) and prg.vars == ()
    assert prg.global_size is None and prg.local_size is None
    check(prg.uops, pm_spec_program)
    pos = {u: i for i, u in enumerate(prg.uops)}
    assert all(pos[s] < i for i, u in enumerate(prg.uops) for s in u.src)  # sources come first


def test_golden_elementwise_program():
    x = Tensor(np.zeros((3, 4), np.float32))
    prg = lower(kernel_of(x * 2 + 1), REF)
    assert prg.name == "E_3_4"
    assert prg.listing() == "\n".join(
        [
            "   0 PARAM       dtypes.float.ptr(12)   () 0",
            "   1 PARAM       dtypes.float.ptr(12)   () 1",
            "   2 CONST       dtypes.int             () 3",
            "   3 CONST       dtypes.int             () 4",
            "   4 CONST       dtypes.float           () 2.0",
            "   5 CONST       dtypes.float           () 1.0",
            "   6 RANGE       dtypes.int             (2) (0, 'loop')",
            "   7 MUL         dtypes.int             (6, 3)",
            "   8 RANGE       dtypes.int             (3) (1, 'loop')",
            "   9 ADD         dtypes.int             (7, 8)",
            "  10 INDEX       dtypes.float.ptr(12)   (0, 9)",
            "  11 INDEX       dtypes.float.ptr(12)   (1, 9)",
            "  12 LOAD        dtypes.float           (11)",
            "  13 MUL         dtypes.float           (12, 4)",
            "  14 ADD         dtypes.float           (13, 5)",
            "  15 STORE       dtypes.void            (10, 14)",
            "  16 END         dtypes.void            (8, 15)",
            "  17 END         dtypes.void            (6, 16)",
        ]
    )


def test_golden_reduce_program():
    x = Tensor(np.zeros((3, 4), np.float32))
    prg = lower(kernel_of(x._reduce(Ops.MAX, 1, False)), REF)  # the bare reduce, not Tensor.max
    assert prg.listing() == "\n".join(
        [
            "   0 PARAM       dtypes.float.ptr(3)    () 0",
            "   1 PARAM       dtypes.float.ptr(12)   () 1",
            "   2 CONST       dtypes.int             () 3",
            "   3 CONST       dtypes.float           () -inf",
            "   4 CONST       dtypes.int             () 4",
            "   5 RANGE       dtypes.int             (2) (0, 'loop')",
            "   6 DEFINE_REG  dtypes.float           (3) 0",  # re-initialised for every output element
            "   7 INDEX       dtypes.float.ptr(3)    (0, 5)",
            "   8 MUL         dtypes.int             (5, 4)",  # hoisted out of the reduce loop
            "   9 RANGE       dtypes.int             (4) (1, 'reduce')",
            "  10 LOAD        dtypes.float           (6, 9)",
            "  11 ADD         dtypes.int             (8, 9)",
            "  12 INDEX       dtypes.float.ptr(12)   (1, 11)",
            "  13 LOAD        dtypes.float           (12)",
            "  14 MAX         dtypes.float           (10, 13)",
            "  15 STORE       dtypes.void            (6, 14)",
            "  16 END         dtypes.void            (9, 15)",
            "  17 LOAD        dtypes.float           (6, 16)",  # the accumulator, read after its loop
            "  18 STORE       dtypes.void            (7, 17)",
            "  19 END         dtypes.void            (5, 18)",
        ]
    )


def test_pad_becomes_gated_loads_and_decompositions_leave_no_missing_op():
    x = rnd(4, 6)
    prg = lower(kernel_of(x.pad(((1, 1), (0, 0))).relu()), C_TARGET)
    loads = [u for u in prg.uops if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]
    assert loads and all(len(u.src) == 2 and u.src[1].dtype == dtypes.bool for u in loads)
    ints = Tensor(np.arange(-6, 6).astype(np.int32))
    prg = lower(kernel_of((ints // 4) % 3 + ints.maximum(0) ** 2), C_TARGET)
    assert not {u.op for u in prg.uops} & DECOMPOSED


def test_floor_division_of_non_negative_indices_is_plain_c_division():
    prg = lower(kernel_of(rnd(4, 6).T.reshape(24) + 1), C_TARGET)
    assert {Ops.CDIV, Ops.CMOD} <= {u.op for u in prg.uops}
    assert not any(u.op is Ops.WHERE and u.dtype == dtypes.int32 for u in prg.uops)  # no sign correction


def test_index_dtype_is_int64_only_when_needed():
    big = UOp.param(1, dtypes.float32.ptr(2**33))
    k = UOp.param(0, dtypes.float32.ptr(2**33)).store(big * 2).sink()
    assert {u.dtype for u in lower(k, REF).uops if u.op is Ops.RANGE} == {dtypes.int64}
    small = UOp.param(0, dtypes.float32.ptr(16)).store(UOp.param(1, dtypes.float32.ptr(16)) * 2).sink()
    assert {u.dtype for u in lower(small, REF).uops if u.op is Ops.RANGE} == {dtypes.int32}


def test_grid_mapping():
    prg = lower(kernel_of(rnd(2, 3, 4, 64) * 2), Target.for_ops(REFERENCE_OPS, GridLimits(local_size=32)))
    specials = {u.arg for u in prg.uops if u.op is Ops.SPECIAL}
    assert specials == {"gidx0", "lidx0", "gidx1", "gidx2"} and not any(u.op is Ops.RANGE for u in prg.uops)
    assert prg.local_size == (32, 1, 1)
    assert prg.global_size == (2, 4, 6)  # x is the contiguous axis (64 = 2 groups of 32); the outer two merge
    padded = lower(kernel_of(rnd(7) + 1), Target.for_ops(REFERENCE_OPS, GridLimits(local_size=8)))
    assert padded.local_size == (8, 1, 1) and padded.global_size == (1, 1, 1)
    assert all(len(u.src) == 3 for u in padded.uops if u.op is Ops.STORE)  # threads past 7 store nothing
    with pytest.raises(RuntimeError, match="does not fit"):
        lower(
            kernel_of(rnd(40) + 1),
            Target.for_ops(REFERENCE_OPS, GridLimits(global_max=(2, 2, 2), local_size=1)),
        )


def test_verify_between_passes_and_on_the_program():
    with Context(VERIFY=1):
        for k in schedule(rnd(3, 4).softmax(1).sum().uop.sink()).kernels:
            lower(k, Target.for_ops(C_LIKE, GridLimits()))
    bad = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.CONST, dtypes.int32, (), 0),))
    with pytest.raises(VerifyError, match="LOAD"):
        check([bad], pm_spec_program)


def test_reference_reports_an_out_of_bounds_access():
    p0 = UOp(Ops.PARAM, dtypes.float32.ptr(2), (), 0)
    off, one = UOp(Ops.CONST, dtypes.int32, (), 5), UOp(Ops.CONST, dtypes.float32, (), 1.0)
    index = UOp(Ops.INDEX, p0.dtype, (p0, off))
    store = UOp(Ops.STORE, dtypes.void, (index, one))
    prg = Program("oob", (p0, off, one, index, store), (0,), (), (0,), ())
    with pytest.raises(IndexError, match="offset 5"):
        run_program(prg, [np.zeros(2, np.float32)])


def test_programs_are_cached_by_structure():
    a, b = rnd(3, 4), rnd(3, 4, seed=1)
    assert lower(kernel_of(a + 1), REF) is lower(kernel_of(b + 1), REF)


def test_gradient_of_a_2001_op_chain_lowers():
    x = Tensor(np.linspace(0.5, 1.5, 16).astype(np.float32), requires_grad=True)
    y = x
    for i in range(2001):
        y = [
            lambda t: t * 1.001,
            lambda t: t + 0.01,
            lambda t: t.sin(),
            lambda t: t.exp2() * 0.5,
            lambda t: t.sqrt(),
        ][i % 5](y)
    (g,) = y.sum().gradient(x)
    s = schedule(g.uop.sink())
    start = time.perf_counter()
    programs = [lower(k, C_TARGET) for k in s.kernels]
    print(
        f"lowering the gradient of a 2001-op chain ({sum(len(p.uops) for p in programs)} uops): "
        f"{time.perf_counter() - start:.2f}s"
    )
    run_schedule(s, ops=C_LIKE)
    np.testing.assert_allclose(evaluate(s.outputs[g.uop])[0], evaluate(g.uop)[0], rtol=1e-4)


def test_constants_under_broadcast_views_are_folded_in_the_kernel():
    x = Tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), requires_grad=True)
    ((x - 0.5) ** 2).sum().backward()  # d/dx = where((x-.5) == 0 & 2 == 0, 2, 2 * (x-.5) ** (2 - 1))
    assert x.grad is not None
    prg = lower(schedule(x.grad.uop.sink()).kernels[-1], REF)
    alus = [u for u in prg.uops if u.op in GroupOp.ALU]
    assert not [u.short() for u in alus if all(s.op is Ops.CONST for s in u.src)]
    assert not any(u.op in (Ops.WHERE, Ops.CMPNE, Ops.CMPEQ) for u in alus)  # e is 2: the 0**0 guard is gone
    np.testing.assert_array_equal(x.grad.numpy(), 2 * (x.numpy() - np.float32(0.5)))
