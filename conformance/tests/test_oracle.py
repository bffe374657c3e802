"""An oracle for the oracle: REFERENCE's numerics (spec/reference.md §3, §4), op by op and cast by cast,
against numpy and ml_dtypes computed directly here, never through REFERENCE. Every backend is judged
against REFERENCE, so a rule of REFERENCE that drifts from the spec must fail here.

Where the spec is not what numpy does, the oracle computes the spec's rule itself (on Python integers)
and a test below pins the difference: integer division by zero and `INT_MIN // -1`, integer POW with a
negative exponent, float -> int out of range and NaN, and float64 -> bfloat16 (via float32: two
roundings, where ml_dtypes rounds once)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from uopgrad import DType, Ops, Tensor, dtypes
from uopgrad_conformance.cases import ALU_SPECS, AluSpec, alu_inputs, cast_inputs
from uopgrad_conformance.numerics import ALL_DTYPES, compare, host_dtype, name

ml_dtypes = pytest.importorskip(
    "ml_dtypes", reason="the bfloat16 oracle needs ml_dtypes (nox -s tests installs it)"
)
BF16 = np.dtype(ml_dtypes.bfloat16)


# ---------------------------------------------------------------------- integers by the spec's rules
def _wrap(v: int, dt: DType) -> int:
    bits = 8 * dt.itemsize
    v %= 1 << bits
    return v - (1 << bits) if dt in dtypes.sints and v >= 1 << (bits - 1) else v


def _cdiv(a: int, b: int) -> int:
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _ipow(a: int, b: int, dt: DType) -> int:
    if b < 0:
        return 1 if a == 1 else (-1 if b % 2 else 1) if a == -1 else 0
    return pow(a % (1 << 64), b, 1 << 64)


def _shl(a: int, b: int, dt: DType) -> int:
    return a << b if 0 <= b < 8 * dt.itemsize else 0


def _shr(a: int, b: int, dt: DType) -> int:
    return a >> b if 0 <= b < 8 * dt.itemsize else (-1 if a < 0 else 0)


_INT: dict[Ops, Callable[..., int]] = {
    Ops.ADD: lambda dt, a, b: a + b,
    Ops.SUB: lambda dt, a, b: a - b,
    Ops.MUL: lambda dt, a, b: a * b,
    Ops.NEG: lambda dt, a: -a,
    Ops.MAX: lambda dt, a, b: max(a, b),
    Ops.TRUNC: lambda dt, a: a,
    Ops.CDIV: lambda dt, a, b: _cdiv(a, b),
    Ops.FDIV: lambda dt, a, b: _cdiv(a, b),
    Ops.CMOD: lambda dt, a, b: 0 if b == 0 else a - b * _cdiv(a, b),
    Ops.FLOORDIV: lambda dt, a, b: 0 if b == 0 else a // b,
    Ops.FLOORMOD: lambda dt, a, b: 0 if b == 0 else a % b,
    Ops.POW: lambda dt, a, b: _ipow(a, b, dt),
    Ops.AND: lambda dt, a, b: a & b,
    Ops.OR: lambda dt, a, b: a | b,
    Ops.XOR: lambda dt, a, b: a ^ b,
    Ops.SHL: lambda dt, a, b: _shl(a, b, dt),
    Ops.SHR: lambda dt, a, b: _shr(a, b, dt),
    Ops.MULACC: lambda dt, a, b, c: a * b + c,
    Ops.CMPLT: lambda dt, a, b: a < b,
    Ops.CMPNE: lambda dt, a, b: a != b,
    Ops.CMPEQ: lambda dt, a, b: a == b,
    Ops.WHERE: lambda dt, c, a, b: a if c else b,
}
_BOOL: dict[Ops, Callable[..., bool]] = {
    Ops.ADD: lambda a, b: a or b,
    Ops.SUB: lambda a, b: a != b,
    Ops.MUL: lambda a, b: a and b,
    Ops.NEG: lambda a: not a,
    Ops.MAX: lambda a, b: a or b,
    Ops.POW: lambda a, b: bool(int(a) ** int(b)),
    Ops.AND: lambda a, b: a and b,
    Ops.OR: lambda a, b: a or b,
    Ops.XOR: lambda a, b: a != b,
    Ops.TRUNC: lambda a: a,
}

# ---------------------------------------------------------------------- floats by numpy / ml_dtypes
_FLOAT: dict[Ops, Callable[..., np.ndarray]] = {
    Ops.ADD: np.add,
    Ops.SUB: np.subtract,
    Ops.MUL: np.multiply,
    Ops.NEG: np.negative,
    Ops.MAX: np.maximum,
    Ops.FDIV: np.true_divide,
    Ops.CDIV: lambda a, b: np.trunc(np.true_divide(a, b)),
    Ops.CMOD: np.fmod,
    Ops.FLOORDIV: np.floor_divide,
    Ops.FLOORMOD: np.remainder,
    Ops.POW: np.power,
    Ops.EXP2: np.exp2,
    Ops.LOG2: np.log2,
    Ops.SIN: np.sin,
    Ops.SQRT: np.sqrt,
    Ops.RECIPROCAL: np.reciprocal,
    Ops.TRUNC: np.trunc,
    Ops.CMPLT: np.less,
    Ops.CMPNE: np.not_equal,
    Ops.CMPEQ: np.equal,
    Ops.WHERE: np.where,
    Ops.MULACC: lambda a, b, c: np.add(np.multiply(a, b), c),
}


def oracle(spec: AluSpec, dt: DType, arrays: list[np.ndarray]) -> np.ndarray:
    """The spec's result of `spec.op` on `arrays`, computed without REFERENCE."""
    op = spec.op
    if dtypes.is_float(dt):
        # numpy computes float16 ops in float16 (each ufunc rounds once); bfloat16 is "computed in float32,
        # rounded once" per op (spec/reference.md §1): the float32 result rounded by ml_dtypes
        with np.errstate(all="ignore"):
            out = np.asarray(_FLOAT[op](*arrays))
            if dt == dtypes.bfloat16 and out.dtype == np.float32:
                out = out.astype(BF16).astype(np.float32)
        return out
    cmp = op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)
    rows = zip(*[a.tolist() for a in arrays])
    if dt == dtypes.bool and not cmp and op is not Ops.WHERE:
        return np.array([_BOOL[op](*r) for r in rows], dtype=bool)
    vals = [_INT[op](dt, *r) for r in rows]
    if cmp:
        return np.array(vals, dtype=bool)
    return np.array([v if dt == dtypes.bool else _wrap(int(v), dt) for v in vals], dtype=host_dtype(dt))


def _reference(expr: str, arrays: list[np.ndarray], dts: list[DType]) -> np.ndarray:
    ns = {n: Tensor(a, device="REFERENCE", dtype=d) for n, a, d in zip("abc", arrays, dts)}
    ns.update(Tensor=Tensor, Ops=Ops)
    return np.asarray(eval(expr, ns).numpy())


_LABELS = "below, 'got' is REFERENCE and 'REFERENCE' is the oracle"
_CHECKED = [(s, dt) for s in ALU_SPECS if s.op is not Ops.THREEFRY for dt in s.dtypes]  # THREEFRY: no numpy


@pytest.mark.parametrize(("spec", "dt"), _CHECKED, ids=[f"{s.op.name}-{name(d)}" for s, d in _CHECKED])
def test_reference_alu_matches_the_oracle(spec: AluSpec, dt: DType) -> None:
    # an op newer than the oracle's tables is skipped, saying so: the tables stay independent of core's
    if spec.op not in (_FLOAT.keys() if dtypes.is_float(dt) else _INT.keys() | _BOOL.keys()):
        pytest.skip(f"the independent oracle has no row for {spec.op.name} on {name(dt)}")
    # the suite's inputs (special values, random values) plus the ones it keeps out of process: (min, -1)
    ins = alu_inputs(spec, dt, np.random.default_rng(7))
    arrays = ins.arrays
    if dt in dtypes.sints and spec.arity == 2:
        lo = np.array([dtypes.min(dt)] * 2 + [0], dtype=host_dtype(dt))
        m1 = np.array([-1, 0, 0], dtype=lo.dtype)
        arrays = [np.concatenate([arrays[0], lo]), np.concatenate([arrays[1], m1])]
    out_dt = dtypes.bool if spec.op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt
    got = _reference(spec.expressions(dt)[0], arrays, ins.dtypes)
    want = oracle(spec, dt, arrays)
    cmp = compare(got, want, out_dt, 0, 0.0, spec.signed_zero, arrays)
    assert cmp.ok, cmp.message(f"REFERENCE's {spec.op.name} on {name(dt)} is not the spec's ({_LABELS})")


# ---------------------------------------------------------------------- casts
def cast_oracle(x: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    """spec/reference.md §4, on numpy and Python integers."""
    if dst == dtypes.bool:
        return np.asarray(x != 0)
    if dtypes.is_float(src) and dtypes.is_int(dst):
        vals = [
            0 if not math.isfinite(v) else _wrap(int(math.trunc(v)), dst)
            for v in x.astype(np.float64).tolist()
        ]
        return np.array(vals, dtype=host_dtype(dst))
    with np.errstate(all="ignore"):
        if dst == dtypes.bfloat16:  # via float32, then round to nearest even
            return x.astype(np.float32).astype(BF16).astype(np.float32)
        return x.astype(host_dtype(dst))


_PAIRS = [(s, d) for s in ALL_DTYPES for d in ALL_DTYPES if s != d]


@pytest.mark.parametrize(("src", "dst"), _PAIRS, ids=[f"{name(s)}-{name(d)}" for s, d in _PAIRS])
def test_reference_cast_matches_the_oracle(src: DType, dst: DType) -> None:
    x = cast_inputs(src, dst, np.random.default_rng(3))
    got = np.asarray(Tensor(x, device="REFERENCE", dtype=src).cast(dst).numpy())
    cmp = compare(got, cast_oracle(x, src, dst), dst, 0, 0.0, True, [x])
    assert cmp.ok, cmp.message(f"REFERENCE's cast {name(src)} -> {name(dst)} is not the spec's ({_LABELS})")


# ---------------------------------------------------------------------- where the spec is not numpy
def test_spec_differences_from_numpy_are_pinned() -> None:
    i32 = dtypes.int32
    with np.errstate(all="ignore"):
        # float -> int: numpy gives INT_MIN for NaN and out of range; the spec gives 0 and the wrap
        x = np.array([np.nan, np.inf, 2.0**32 + 5, -1.0], dtype=np.float64)
        assert np.asarray(x.astype(np.int32)).tolist()[0] == -(2**31)
        assert Tensor(x, device="REFERENCE").cast(i32).numpy().tolist() == [0, 0, 5, -1]
    # an integer to a negative power: numpy raises, the spec truncates the real result
    with pytest.raises(ValueError):
        np.power(np.array([2], dtype=np.int32), np.array([-1], dtype=np.int32))
    a, b = (
        Tensor(np.array(v, dtype=np.int32), device="REFERENCE") for v in ([2, -1, 1, -1], [-1, -3, -5, -2])
    )
    assert Tensor(a.uop.alu(Ops.POW, b.uop)).numpy().tolist() == [0, -1, 1, 1]
    # bfloat16 CDIV truncates the float32 quotient (one op, one rounding), float16 CDIV the float16 one
    one, tenth = np.array([1.0], dtype=np.float32), np.array([0.100097656], dtype=np.float32)
    bq = Tensor(one, device="REFERENCE", dtype=dtypes.bfloat16).uop.alu(
        Ops.CDIV, Tensor(tenth, device="REFERENCE", dtype=dtypes.bfloat16).uop
    )
    assert Tensor(bq).numpy().tolist() == [9.0]
    assert float(np.trunc(one.astype(BF16) / tenth.astype(BF16))[0]) == 10.0  # bf16 arithmetic: 10
    # float64 -> bfloat16 rounds twice (via float32): a tie after the first rounding goes to even
    v = np.array([1 + 2.0**-8 + 2.0**-30])
    assert float(v.astype(BF16)[0]) == 1 + 2.0**-7  # ml_dtypes rounds once
    assert float(Tensor(v, device="REFERENCE").cast(dtypes.bfloat16).numpy()[0]) == 1.0
