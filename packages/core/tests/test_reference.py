"""The REFERENCE backend's pinned semantics (spec/reference.md) and the device registry (uopgrad.backend)."""

from __future__ import annotations

import importlib.metadata
import math
import subprocess
import sys

import numpy as np
import pytest

from uopgrad import Ops, UOp, dtypes
from uopgrad.backend import Backend, Device, DeviceRegistry
from uopgrad.backends.reference import ReferenceBackend, evaluate
from uopgrad.dtype import truncate
from uopgrad.errors import EmptyReduceError
from uopgrad.tensor import Tensor

DEV = "REFERENCE"


pytestmark = pytest.mark.usefixtures("reference_default")


def t(values, dtype) -> UOp:
    """A realized tensor's UOp (a BUFFER view) holding `values`."""
    return Tensor(np.array(values), dtype=dtype).uop


def ev(u: UOp):
    return evaluate(u)[0]


def alu(op: Ops, *srcs: UOp) -> np.ndarray:
    return ev(srcs[0].alu(op, *srcs[1:]))


# ---------------------------------------------------------------------- integer division and remainder

INT_DTYPES = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64]


@pytest.mark.parametrize("dt", INT_DTYPES)
def test_floor_division_and_modulo_round_toward_minus_infinity(dt):
    a, b = t([-7, 7, -7, 7, 6, -6], dt), t([2, 2, -2, -2, 3, 3], dt)
    np.testing.assert_array_equal(alu(Ops.FLOORDIV, a, b), [-4, 3, 3, -4, 2, -2])
    np.testing.assert_array_equal(alu(Ops.FLOORMOD, a, b), [1, 1, -1, -1, 0, 0])
    # and through the Tensor operators
    x, y = Tensor([-7, 7, -7, 7], dtype=dt), Tensor([2, 2, -2, -2], dtype=dt)
    np.testing.assert_array_equal((x // y).numpy(), [-4, 3, 3, -4])
    np.testing.assert_array_equal((x % y).numpy(), [1, 1, -1, -1])


@pytest.mark.parametrize("dt", INT_DTYPES)
def test_c_division_and_remainder_truncate(dt):
    a, b = t([-7, 7, -7, 7], dt), t([2, 2, -2, -2], dt)
    np.testing.assert_array_equal(alu(Ops.CDIV, a, b), [-3, 3, 3, -3])
    np.testing.assert_array_equal(alu(Ops.CMOD, a, b), [-1, 1, -1, 1])


@pytest.mark.parametrize("op", [Ops.FLOORDIV, Ops.FLOORMOD, Ops.CDIV, Ops.CMOD, Ops.FDIV])
def test_integer_division_by_zero_is_zero(op):
    out = alu(op, t([5, -5, 0], dtypes.int32), t([0, 0, 0], dtypes.int32))
    np.testing.assert_array_equal(out, [0, 0, 0])


def test_unsigned_division():
    a, b = t([7, 255], dtypes.uint8), t([2, 16], dtypes.uint8)
    np.testing.assert_array_equal(alu(Ops.FLOORDIV, a, b), [3, 15])
    np.testing.assert_array_equal(alu(Ops.FLOORMOD, a, b), [1, 15])


def test_int_min_divided_by_minus_one_wraps():
    lo = -(2**31)
    np.testing.assert_array_equal(alu(Ops.FLOORDIV, t([lo], dtypes.int32), t([-1], dtypes.int32)), [lo])
    np.testing.assert_array_equal(alu(Ops.FLOORMOD, t([lo], dtypes.int32), t([-1], dtypes.int32)), [0])


def test_float_floor_division_and_modulo():
    a, b = t([-7.0, 7.0, -7.5, 1.0, 1.0], dtypes.float32), t([2.0, -2.0, 2.0, 0.0, np.inf], dtypes.float32)
    np.testing.assert_array_equal(alu(Ops.FLOORDIV, a, b)[:3], [-4.0, -4.0, -4.0])
    mod = alu(Ops.FLOORMOD, a, b)
    np.testing.assert_array_equal(mod[:3], [1.0, -1.0, 0.5])
    assert math.isnan(mod[3])  # x % 0.0
    assert mod[4] == 1.0  # 1 % inf keeps the dividend (same signs)


# ---------------------------------------------------------------------- casts


def test_float_to_int_casts_truncate_toward_zero():
    x = t([-1.7, 1.7, -0.5, 0.5, 2.9, -2.9, -0.0], dtypes.float32)
    np.testing.assert_array_equal(ev(x.cast(dtypes.int32)), [-1, 1, 0, 0, 2, -2, 0])
    np.testing.assert_array_equal(Tensor([-1.7, 2.9]).int().numpy(), [-1, 2])


def test_float_to_int_out_of_range_wraps_and_nan_inf_give_zero():
    x = t([300.0, -1.0, 256.0, np.nan, np.inf, -np.inf], dtypes.float64)
    np.testing.assert_array_equal(ev(x.cast(dtypes.uint8)), [44, 255, 0, 0, 0, 0])
    np.testing.assert_array_equal(ev(t([2.0**31], dtypes.float64).cast(dtypes.int32)), [-(2**31)])
    big = t([2.0**64 + 2.0**12], dtypes.float64)
    np.testing.assert_array_equal(ev(big.cast(dtypes.int64)), [2**12])


def test_casts_to_bool_and_between_ints_and_floats():
    np.testing.assert_array_equal(
        ev(t([0.0, -0.0, 2.0, np.nan], dtypes.float32).cast(dtypes.bool)), [False, False, True, True]
    )
    np.testing.assert_array_equal(ev(t([300, -1], dtypes.int32).cast(dtypes.uint8)), [44, 255])
    np.testing.assert_array_equal(ev(t([True, False], dtypes.bool).cast(dtypes.float32)), [1.0, 0.0])
    assert ev(t([1e10], dtypes.float64).cast(dtypes.float16))[0] == np.inf
    out = ev(t([16777217], dtypes.int32).cast(dtypes.float32))
    assert out.dtype == np.float32 and out[0] == 16777216.0


def test_bfloat16_rounds_to_nearest_even():
    x = t([1.0 + 2**-8, 1.0 + 3 * 2**-8, 3.0e38, np.nan], dtypes.float32)
    out = ev(x.cast(dtypes.bfloat16))
    np.testing.assert_array_equal(out[:2], [1.0, 1.0 + 2**-6])
    assert out[2] == truncate(dtypes.bfloat16, float(np.float32(3.0e38)))  # the scalar rounding of dtype.py
    assert np.isnan(out[3])
    s = ev(x.cast(dtypes.bfloat16) + x.cast(dtypes.bfloat16))  # arithmetic rounds again
    assert s[0] == 2.0


def test_bitcast():
    bits = ev(t([1.0, -2.0], dtypes.float32).bitcast(dtypes.int32))
    np.testing.assert_array_equal(bits, [0x3F800000, -0x40000000])
    np.testing.assert_array_equal(ev(t([0x3F800000], dtypes.uint32).bitcast(dtypes.float32)), [1.0])
    np.testing.assert_array_equal(
        ev(t([1.0], dtypes.float32).cast(dtypes.bfloat16).bitcast(dtypes.uint16)), [0x3F80]
    )
    with pytest.raises(RuntimeError, match="BITCAST"):
        ev(UOp(Ops.BITCAST, dtypes.int64, (t([1.0], dtypes.float32),)))


# ---------------------------------------------------------------------- max, special values, overflow


def test_max_propagates_nan_from_either_side():
    a, b = t([np.nan, 1.0, 2.0], dtypes.float32), t([1.0, np.nan, 3.0], dtypes.float32)
    out = alu(Ops.MAX, a, b)
    assert np.isnan(out[0]) and np.isnan(out[1]) and out[2] == 3.0
    assert np.isnan(Tensor([1.0, np.nan, 3.0]).max().item())
    assert np.isnan(Tensor([1.0, np.nan]).maximum(0.0).numpy()[1])


def test_empty_reductions():
    assert Tensor.zeros(0).sum().item() == 0.0
    assert Tensor.zeros(0).prod().item() == 1.0
    # a REDUCE of MAX over nothing is its identity, the dtype's lowest value; Tensor.max raises there instead
    # (docs/semantics.md §5), so the node is built with the private _reduce
    assert Tensor.zeros(0)._reduce(Ops.MAX, None, False).item() == -math.inf
    assert Tensor.zeros(0, dtype=dtypes.int32)._reduce(Ops.MAX, None, False).item() == -(2**31)
    assert Tensor.zeros(0, dtype=dtypes.uint8)._reduce(Ops.MAX, None, False).item() == 0
    assert Tensor.zeros(0, dtype=dtypes.int32).sum().item() == 0
    np.testing.assert_array_equal(Tensor.zeros(3, 0).sum(1).numpy(), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(Tensor.zeros(2, 0)._reduce(Ops.MAX, 1, False).numpy(), [-np.inf, -np.inf])
    for shape, axis in [((0,), None), ((2, 0), 1)]:
        with pytest.raises(EmptyReduceError, match="empty"):
            Tensor.zeros(*shape).max(axis)


def test_inf_nan_and_negative_zero():
    x = Tensor([0.0, -0.0, 1.0, -1.0, np.inf])
    r = x.reciprocal().numpy()
    np.testing.assert_array_equal(r, [np.inf, -np.inf, 1.0, -1.0, 0.0])
    assert np.signbit((Tensor([0.0]) * -1).numpy()[0])  # -0.0 survives negation
    assert np.signbit(Tensor([-0.0]).contiguous().numpy()[0])
    out = Tensor([-1.0, 0.0, np.inf]).sqrt().numpy()
    assert np.isnan(out[0]) and out[1] == 0.0 and out[2] == np.inf
    np.testing.assert_array_equal(Tensor([0.0, np.inf]).log2().numpy(), [-np.inf, np.inf])
    np.testing.assert_array_equal(Tensor([-np.inf, np.inf]).exp2().numpy(), [0.0, np.inf])
    assert np.isnan((Tensor([np.inf]) - np.inf).item())
    assert np.isnan(Tensor([np.nan]).sin().item())


def test_comparisons_with_nan():
    a, b = t([np.nan, 1.0], dtypes.float32), t([np.nan, 1.0], dtypes.float32)
    np.testing.assert_array_equal(alu(Ops.CMPLT, a, b), [False, False])
    np.testing.assert_array_equal(alu(Ops.CMPNE, a, b), [True, False])
    np.testing.assert_array_equal(alu(Ops.CMPEQ, a, b), [False, True])


def test_integer_overflow_wraps():
    np.testing.assert_array_equal((Tensor([2**31 - 1], dtype=dtypes.int32) + 1).numpy(), [-(2**31)])
    np.testing.assert_array_equal((Tensor([100], dtype=dtypes.int8) * 3).numpy(), [44])
    np.testing.assert_array_equal((Tensor([0], dtype=dtypes.uint8) - 1).numpy(), [255])
    np.testing.assert_array_equal((-Tensor([-128], dtype=dtypes.int8)).numpy(), [-128])
    np.testing.assert_array_equal(Tensor([100, 100], dtype=dtypes.int8).sum(dtype=dtypes.int8).numpy(), -56)


def test_integer_pow():
    b, e = t([2, 3, 1, -1, -1, 0, 2, 0], dtypes.int32), t([10, 2, -3, -3, -2, -1, -1, 0], dtypes.int32)
    np.testing.assert_array_equal(alu(Ops.POW, b, e), [1024, 9, 1, -1, 1, 0, 0, 1])
    np.testing.assert_array_equal(alu(Ops.POW, t([3], dtypes.int8), t([5], dtypes.int8)), [-13])  # 243 wraps


def test_float_pow():
    base, exponent = t([0.0, -2.0, 2.0, -8.0], dtypes.float32), t([0.0, 0.5, -1.0, 1.0 / 3], dtypes.float32)
    out = alu(Ops.POW, base, exponent)
    assert out[0] == 1.0 and np.isnan(out[1]) and out[2] == 0.5 and np.isnan(out[3])


def test_shifts():
    a = t([1, 1, 1, -8, -8, 8], dtypes.int32)
    left, right = t([3, 32, -1, 1, 0, 0], dtypes.int32), t([0, 0, 0, 1, 40, 40], dtypes.int32)
    np.testing.assert_array_equal(alu(Ops.SHL, a, left), [8, 0, 0, -16, -8, 8])
    np.testing.assert_array_equal(alu(Ops.SHR, a, right), [1, 1, 1, -4, -1, 0])
    np.testing.assert_array_equal(alu(Ops.SHR, t([255], dtypes.uint8), t([4], dtypes.uint8)), [15])


def test_bitwise_and_bool_arithmetic():
    np.testing.assert_array_equal(alu(Ops.AND, t([12], dtypes.int32), t([10], dtypes.int32)), [8])
    np.testing.assert_array_equal(alu(Ops.OR, t([12], dtypes.int32), t([10], dtypes.int32)), [14])
    np.testing.assert_array_equal(alu(Ops.XOR, t([12], dtypes.int32), t([10], dtypes.int32)), [6])
    p, q = t([True, True, False, False], dtypes.bool), t([True, False, True, False], dtypes.bool)
    np.testing.assert_array_equal(alu(Ops.ADD, p, q), [True, True, True, False])
    np.testing.assert_array_equal(alu(Ops.MUL, p, q), [True, False, False, False])
    np.testing.assert_array_equal(alu(Ops.SUB, p, q), [False, True, True, False])
    np.testing.assert_array_equal(alu(Ops.NEG, p), [False, False, True, True])
    with pytest.raises(RuntimeError, match="AND"):
        alu(Ops.AND, t([1.0], dtypes.float32), t([1.0], dtypes.float32))


def _threefry_py(x: int, key: int) -> int:
    m = 0xFFFFFFFF
    rotl = lambda v, r: ((v << r) | (v >> (32 - r))) & m  # noqa: E731
    x0, x1, k0, k1 = x & m, x >> 32, key & m, key >> 32
    ks = [k1, k0 ^ k1 ^ 0x1BD11BDA, k0]
    a, b = (x0 + ks[2]) & m, (x1 + ks[0]) & m
    for i in range(5):
        for r in [(13, 15, 26, 6), (17, 29, 16, 24)][i % 2]:
            a, b = (a + b) & m, ((a + b) & m) ^ rotl(b, r)
        a, b = (a + ks[i % 3]) & m, (b + ks[(i + 1) % 3] + i + 1) & m
    return (b << 32) | a


def test_threefry_matches_a_python_implementation():
    xs, key = [0, 1, 2**40 + 5, 2**64 - 1], 0x1234_5678_9ABC_DEF0
    out = alu(
        Ops.THREEFRY,
        t(np.array(xs, dtype=np.uint64), dtypes.uint64),
        t(np.array([key] * 4, dtype=np.uint64), dtypes.uint64),
    )
    assert [int(v) for v in out] == [_threefry_py(x, key) for x in xs]


def test_unary_ops_need_floats():
    with pytest.raises(RuntimeError, match=r"SIN.*int"):
        ev(UOp(Ops.SIN, dtypes.int32, (t([1], dtypes.int32),)))


# ---------------------------------------------------------------------- reduce and movement


def test_reduces_over_axes():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7
    u = t(x, dtypes.float32)
    np.testing.assert_array_equal(ev(u._rop(Ops.ADD, (0, 2))), x.sum((0, 2), keepdims=True))
    np.testing.assert_array_equal(ev(u._rop(Ops.MAX, (1,))), x.max(1, keepdims=True))
    np.testing.assert_allclose(ev(u._rop(Ops.MUL, (2,))), x.prod(2, keepdims=True))
    b = t([[True, False], [False, False]], dtypes.bool)
    np.testing.assert_array_equal(ev(b._rop(Ops.ADD, (1,))), [[True], [False]])
    np.testing.assert_array_equal(ev(b._rop(Ops.MUL, (0,))), [[False, False]])


def test_movement_ops_match_numpy():
    x = np.arange(24).reshape(2, 3, 4)
    u = t(x, dtypes.int32)
    np.testing.assert_array_equal(ev(u.reshape(4, 6)), x.reshape(4, 6))
    np.testing.assert_array_equal(ev(u.permute(2, 0, 1)), x.transpose(2, 0, 1))
    np.testing.assert_array_equal(ev(u.shrink(((1, 2), (0, 2), (1, 4)))), x[1:2, 0:2, 1:4])
    np.testing.assert_array_equal(ev(u.flip(0, 2)), x[::-1, :, ::-1])
    np.testing.assert_array_equal(ev(u.pad(((0, 1), (2, 0), (0, 0)))), np.pad(x, ((0, 1), (2, 0), (0, 0))))
    np.testing.assert_array_equal(
        ev(u.shrink(((0, 1), None, None)).expand(3, 3, 4)), np.broadcast_to(x[0:1], (3, 3, 4))
    )


def test_symbolic_sizes_evaluate_with_the_bound_value():
    v = UOp.variable("v", 1, 4)
    x = Tensor([10, 20, 30, 40])
    out = x.uop.shrink(((0, v.bind(2)),))
    np.testing.assert_array_equal(ev(out), [10, 20])
    np.testing.assert_array_equal(ev(out * 2 + v.bind(2)), [22, 42])
    with pytest.raises(RuntimeError, match="not bound"):
        ev(x.uop.shrink(((0, v),)))


def test_a_long_chain_evaluates_without_recursion():
    x = Tensor([1.0, 2.0])
    for _ in range(10_000):
        x = x + 1.0
    limit = sys.getrecursionlimit()
    assert limit <= 10_000
    np.testing.assert_array_equal(x.numpy(), [10_001.0, 10_002.0])


def test_unsupported_ops_name_the_op_and_node():
    r = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 4),), 0)
    with pytest.raises(RuntimeError, match=r"can't evaluate Ops.RANGE.*UOp\(Ops.RANGE"):
        ev(r)


# ---------------------------------------------------------------------- effects: STORE, AFTER, COPY


def test_store_into_views_of_a_buffer():
    b = Tensor.zeros(2, 4).contiguous().realize()
    b[:, 0:2] = Tensor([[1.0, 2.0], [3.0, 4.0]])
    b[1, ::-2] = Tensor([7.0, 8.0])  # a flipped, strided view (PAD in the view chain)
    b.T[3, 0] = 9.0  # through a PERMUTE
    np.testing.assert_array_equal(b.numpy(), [[1, 2, 0, 9], [3, 8, 0, 7]])


def test_plain_buffer_reads_see_the_contents_from_before_the_run():
    for after_first in (False, True):
        b = Tensor([1.0, 2.0, 3.0]).realize()
        buf = b.uop
        after = buf.after(buf.store(buf.const_like(5.0)))
        roots = (after, buf * 1.0) if after_first else (buf * 1.0, after)
        out = dict(zip(roots, evaluate(*roots)))
        np.testing.assert_array_equal(out[buf * 1.0], [1, 2, 3])  # a plain read, in either order
        np.testing.assert_array_equal(out[after], [5, 5, 5])  # a read through AFTER sees the write
        np.testing.assert_array_equal(b.numpy(), [5, 5, 5])  # and the write was committed


def test_copy_between_logical_devices():
    x = Tensor([1.0, 2.0])
    y = x.to("REFERENCE:1")
    assert y.device == "REFERENCE:1" and y.uop.op is Ops.COPY
    np.testing.assert_array_equal((y * 2).numpy(), [2.0, 4.0])
    assert (y * 2).realize().uop.base.device == "REFERENCE:1"


# ---------------------------------------------------------------------- FUNCTION, TUPLE, GETTUPLE, CALL


def p(slot: int, shape=(3,), dtype=dtypes.float32) -> UOp:
    return UOp.param(slot, dtype, shape, DEV)


def test_function_binds_params_to_arguments():
    a, b = Tensor([1.0, 2.0, 3.0]), Tensor([10.0, 20.0, 30.0])
    f = (p(0) + p(1) * 2.0).call(a.uop, b.uop)
    assert f.op is Ops.FUNCTION
    np.testing.assert_array_equal(ev(f.gettuple(0)), [21, 42, 63])
    np.testing.assert_array_equal(ev(f.gettuple(0) + 1.0), [22, 43, 64])


def test_function_with_several_outputs():
    a, b = Tensor([1.0, 2.0, 3.0]), Tensor([10.0, 20.0, 30.0])
    f = UOp.maketuple(p(0) + p(1), p(0) * p(1), p(1)).call(a.uop, b.uop)
    out = ev(f)
    assert isinstance(out, tuple) and len(out) == 3
    np.testing.assert_array_equal(out[1], [10, 40, 90])
    s, m = evaluate(f.gettuple(0), f.gettuple(1))
    np.testing.assert_array_equal(s, [11, 22, 33])
    np.testing.assert_array_equal(m, [10, 40, 90])


def test_nested_functions():
    inner = (p(0) * p(1)).call  # inner(x, y) = x * y
    # outer(a, b) = inner(a + 1, b) + a: the inner call's arguments are the outer body's params
    outer_body = inner(p(0) + 1.0, p(1)).gettuple(0) + p(0)
    a, b = Tensor([1.0, 2.0, 3.0]), Tensor([10.0, 20.0, 30.0])
    out = outer_body.call(a.uop, b.uop).gettuple(0)
    np.testing.assert_array_equal(ev(out), [21.0, 62.0, 123.0])
    # the same inner FUNCTION node used by two different outer calls evaluates per call
    out2 = outer_body.call(b.uop, a.uop).gettuple(0)
    r1, r2 = evaluate(out, out2)
    np.testing.assert_array_equal(r2, [11 * 1 + 10, 21 * 2 + 20, 31 * 3 + 30])


def test_function_params_with_a_symbolic_scalar():
    v = UOp.variable("v", 0, 9)
    body = p(0) * UOp.param(1, dtypes.index, (), None, (0, 9), "v").cast(dtypes.float32)
    out = body.call(Tensor([1.0, 2.0, 3.0]).uop, v.bind(4)).gettuple(0)
    np.testing.assert_array_equal(ev(out), [4.0, 8.0, 12.0])


def add_mul_kernel(c: UOp, d: UOp, a: UOp, b: UOp) -> UOp:
    return UOp.sink(c.store(a + b), d.store(a * b))


def test_custom_kernel_call_writes_into_its_argument_buffers():
    a, b = Tensor([[1.0, 2.0], [3.0, 4.0]]), Tensor([[10.0, 20.0], [30.0, 40.0]])
    c, d, a2, _ = Tensor.custom_kernel(Tensor.empty(2, 2), Tensor.empty(2, 2), a, b, fxn=add_mul_kernel)
    k = c.uop.src[1]
    assert k.op is Ops.CALL and k.src[0].op is Ops.SINK and c.uop.op is Ops.AFTER
    np.testing.assert_array_equal(c.numpy(), [[11, 22], [33, 44]])
    np.testing.assert_array_equal(d.numpy(), [[10, 40], [90, 160]])
    np.testing.assert_array_equal(a2.numpy(), a.numpy())  # an argument it only read is unchanged


def test_custom_kernel_into_a_view_and_a_partial_store():
    def kernel(out: UOp, x: UOp) -> UOp:
        return out.shrink(((1, 3),)).store(x.shrink(((0, 2),)) * 2.0).sink()

    buf = Tensor([0.0, 0.0, 0.0, 0.0]).realize()
    out, _ = buf.custom_kernel(Tensor([5.0, 6.0, 7.0, 8.0]), fxn=kernel)
    np.testing.assert_array_equal(out.numpy(), [0.0, 10.0, 12.0, 0.0])
    np.testing.assert_array_equal(buf.numpy(), [0.0, 10.0, 12.0, 0.0])  # written into the buffer itself


def test_a_call_that_is_not_a_kernel_is_an_error():
    k = UOp(Ops.CALL, dtypes.void, (UOp(Ops.PROGRAM), Tensor([1.0]).uop))
    with pytest.raises(RuntimeError, match="SINK of STOREs"):
        ev(k)


# ---------------------------------------------------------------------- the device registry


def test_canonical_device_names():
    assert Device.canonicalize("reference") == "REFERENCE"
    assert Device.canonicalize("Reference:0") == "REFERENCE"
    assert Device.canonicalize("reference:1") == "REFERENCE:1"
    with pytest.raises(ValueError):
        Device.canonicalize(":1")


def test_reference_is_installed_and_logical_devices_are_distinct():
    assert "REFERENCE" in Device.installed()
    assert isinstance(Device["reference"], ReferenceBackend)
    assert Device["REFERENCE:1"] is not Device["REFERENCE"]
    assert Device["REFERENCE:1"].name == "REFERENCE:1"
    assert Device["REFERENCE:0"] is Device["REFERENCE"]


def test_unknown_device_lists_the_installed_backends():
    with pytest.raises(RuntimeError, match=r"unknown device 'NOPE'.*REFERENCE"):
        Device["nope"]
    with pytest.raises(RuntimeError, match=r"unknown device 'NOPE'.*REFERENCE"):
        Tensor([1.0]).to("nope:1")


def test_rounding_noise_scatters_float_results_within_an_ulp_and_only_while_set():
    """Monte Carlo arithmetic (conformance's estimate of a program's rounding error): under
    `rounding_noise`, float results move by about an ulp per rounding, differently per seed; integer
    results and runs outside the context are untouched."""
    from uopgrad.backends.evaluator import rounding_noise

    x = np.linspace(0.5, 2.0, 64, dtype=np.float32)

    def run() -> tuple[np.ndarray, np.ndarray]:
        f = Tensor(x, device=DEV)
        i = Tensor(np.arange(64, dtype=np.int32), device=DEV)
        return (f * 3 + 1).numpy(), (i * 3 + 1).numpy()

    plain_f, plain_i = run()
    with rounding_noise(np.random.default_rng(0)):
        noisy_f, noisy_i = run()
    with rounding_noise(np.random.default_rng(1)):
        other_f, _ = run()
    again_f, _ = run()
    np.testing.assert_array_equal(noisy_i, plain_i)
    np.testing.assert_array_equal(again_f, plain_f)  # the context is gone again
    assert not np.array_equal(noisy_f, plain_f) and not np.array_equal(noisy_f, other_f)
    ulps = np.abs(noisy_f.view(np.int32).astype(np.int64) - plain_f.view(np.int32).astype(np.int64))
    assert ulps.max() <= 4  # two roundings (MUL, ADD), each scaled by 1 ± ulp and rounded again


def test_default_device_from_the_environment(monkeypatch):
    reg = DeviceRegistry()
    monkeypatch.setenv("UOPGRAD_DEVICE", "reference:2")
    assert reg.DEFAULT == "REFERENCE:2"
    reg2 = DeviceRegistry()
    monkeypatch.delenv("UOPGRAD_DEVICE")
    assert reg2.DEFAULT in reg2.installed()


class _FakeDist:
    def __init__(self, name):
        self.name = name


def _fake_entry_points(*eps):
    def entry_points(group=None):
        return [ep for ep in eps if ep.group == group]

    return entry_points


def _ep(name, value, dist):
    ep = importlib.metadata.EntryPoint(name, value, "uopgrad.backends")
    return ep._for(_FakeDist(dist)) if hasattr(ep, "_for") else ep


class FakeBackend(Backend):
    pass


def test_plugins_come_from_entry_points(monkeypatch):
    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        _fake_entry_points(_ep("fake", f"{__name__}:FakeBackend", "uopgrad-fake")),
    )
    reg = DeviceRegistry()
    assert reg.installed() == ["REFERENCE", "FAKE"]
    assert isinstance(reg["fake:3"], FakeBackend) and reg["fake:3"].name == "FAKE:3"


def test_duplicate_backend_names_are_an_error(monkeypatch):
    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        _fake_entry_points(_ep("DUP", "pkg_a:A", "dist-a"), _ep("dup", "pkg_b:B", "dist-b")),
    )
    with pytest.raises(RuntimeError, match=r"DUP is provided twice.*dist-a.*dist-b"):
        DeviceRegistry().installed()


def test_a_broken_plugin_gives_a_clear_error(monkeypatch):
    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        _fake_entry_points(
            _ep("broken", "no_such_module_anywhere:X", "dist-broken"), _ep("notabackend", "math:pi", "dist-x")
        ),
    )
    reg = DeviceRegistry()
    with pytest.raises(RuntimeError, match=r"BROKEN.*dist-broken.*failed to load.*ModuleNotFoundError"):
        reg["broken"]
    with pytest.raises(RuntimeError, match="not a subclass"):
        reg["notabackend"]


def test_importing_uopgrad_imports_no_backend():
    code = (
        "import sys, uopgrad, uopgrad.tensor\n"
        "ref = 'uopgrad.backends.reference'\n"
        "bad = [m for m in sys.modules if m.startswith('uopgrad_') or m == ref]\n"
        "assert not bad, bad\n"
        "from uopgrad.tensor import Tensor\n"
        "Tensor([1.0], device='REFERENCE').numpy()\n"
        "assert 'uopgrad.backends.reference' in sys.modules\n"
    )
    src = str(__import__("pathlib").Path(__file__).resolve().parents[1] / "src")
    env = {**__import__("os").environ, "PYTHONPATH": src}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
