"""Every ALU op x dtype, every cast and bitcast, as C compiled and run on the CPU, against REFERENCE.

The kernels are hand-built linear programs (linear.py), so this checks the renderer, the compiler flags and
the runtime on their own; the inputs are the edge cases (±0, ±inf, NaN, denormals, integer extremes,
over-wide shifts, division by zero). Results must match bit for bit, except the transcendental functions
(libm and numpy may differ in the last place) which must agree to a few ulps.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from linear import elementwise, out_dtype, reference, run

from uopgrad import DType, Ops, dtypes
from uopgrad_cpu import CPU_DTYPES

FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]
INTS = list(dtypes.ints)
ALL = [dtypes.bool, *INTS, *FLOATS]
TRANSCENDENTAL = {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW}


def pool(dt: DType) -> np.ndarray:
    """Edge values of `dt` (as numpy would store them)."""
    npdt = dtypes.to_numpy(dt)
    if dt == dtypes.bool:
        return np.array([False, True])
    if dtypes.is_float(dt):
        info = np.finfo(npdt)
        vals = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 7.75, -7.75, 1e-3, 100.0, 1e4, float(info.max),
                float(info.smallest_subnormal), -float(info.smallest_subnormal), float(info.tiny), math.inf,
                -math.inf, math.nan]
        return np.array(vals, dtype=npdt)
    info2 = np.iinfo(npdt)
    bits = 8 * dt.itemsize
    vals2 = [0, 1, 2, 3, 7, 100, bits - 1, bits, info2.max, info2.max - 1, info2.min, info2.min + 1]
    if dtypes.is_unsigned(dt):
        vals2 += [2**(bits - 1)]
    else:
        vals2 += [-1, -2, -3, -7, -100, -bits]
    return np.array([v for v in vals2 if info2.min <= v <= info2.max], dtype=npdt)


def pairs(dt: DType) -> tuple[np.ndarray, np.ndarray]:
    p = pool(dt)
    a, b = zip(*itertools.product(p, p))
    return np.array(a, dtype=p.dtype), np.array(b, dtype=p.dtype)


def assert_same(got: np.ndarray, want: np.ndarray, dt: DType, ulps: float = 0, msg: str = "") -> None:
    """Equal bit patterns (any NaN matches any NaN); with `ulps`, finite floats may differ that much."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind != "f":
        bad = got != want
    else:
        uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
        nan = np.isnan(got) & np.isnan(want)
        bad = ~nan & (got.view(uint) != want.view(uint))
        if ulps:
            with np.errstate(all="ignore"):
                close = np.isfinite(want) & (np.abs(got - want) <= ulps * np.spacing(np.abs(want)))
            bad &= ~close
    idx = np.nonzero(bad)[0]
    first = idx[:5]
    assert idx.size == 0, f"{msg}: {idx.size} mismatches at {first}...: got {got[first]} want {want[first]}"


def binary_cases() -> list[tuple[Ops, DType]]:
    cases = []
    for dt in ALL:
        ops = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.POW]
        if dt != dtypes.bool:
            ops += [Ops.FDIV, Ops.CDIV, Ops.CMOD]
        if not dtypes.is_float(dt):
            ops += [Ops.AND, Ops.OR, Ops.XOR]
        if dtypes.is_int(dt):
            ops += [Ops.SHL, Ops.SHR]
        cases += [(op, dt) for op in ops]
    return cases


@pytest.mark.parametrize(("op", "dt"), binary_cases(), ids=str)
def test_binary(cpu, op, dt):
    a, b = pairs(dt)
    odt = out_dtype(op, dt)
    with np.errstate(all="ignore"):
        want = reference(op, odt, (a, dt), (b, dt))
    got = run(cpu, elementwise(op, odt, [dt, dt], a.size), (a.size, odt), a, b)
    ulps = 2 if op in TRANSCENDENTAL and dtypes.is_float(dt) else 0
    assert_same(got, want, odt, ulps=ulps, msg=f"{op} {dt}")


def unary_cases() -> list[tuple[Ops, DType]]:
    cases = [(op, dt) for dt in ALL for op in (Ops.NEG, Ops.TRUNC)]
    float_only = (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL)
    return cases + [(op, dt) for dt in FLOATS for op in float_only]


@pytest.mark.parametrize(("op", "dt"), unary_cases(), ids=str)
def test_unary(cpu, op, dt):
    a = pool(dt)
    if dtypes.is_float(dt):  # plus a spread of ordinary values for the transcendental functions
        a = np.concatenate([a, np.linspace(-40, 40, 301).astype(a.dtype)])
    with np.errstate(all="ignore"):
        want = reference(op, dt, (a, dt))
    got = run(cpu, elementwise(op, dt, [dt], a.size), (a.size, dt), a)
    assert_same(got, want, dt, ulps=2 if op in TRANSCENDENTAL else 0, msg=f"{op} {dt}")


@pytest.mark.parametrize("dt", ALL, ids=str)
def test_where_and_mulacc(cpu, dt):
    a, b = pairs(dt)
    cond = (np.arange(a.size) % 3 == 0)
    want = reference(Ops.WHERE, dt, (cond, dtypes.bool), (a, dt), (b, dt))
    got = run(cpu, elementwise(Ops.WHERE, dt, [dtypes.bool, dt, dt], a.size), (a.size, dt), cond, a, b)
    assert_same(got, want, dt, msg="WHERE")
    c = b[::-1].copy()
    with np.errstate(all="ignore"):
        want = reference(Ops.MULACC, dt, (a, dt), (b, dt), (c, dt))
    got = run(cpu, elementwise(Ops.MULACC, dt, [dt, dt, dt], a.size), (a.size, dt), a, b, c)
    assert_same(got, want, dt, msg="MULACC")


def test_threefry(cpu):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2**64, 1000, dtype=np.uint64)
    key = rng.integers(0, 2**64, 1000, dtype=np.uint64)
    u64 = dtypes.uint64
    want = reference(Ops.THREEFRY, u64, (x, u64), (key, u64))
    got = run(cpu, elementwise(Ops.THREEFRY, u64, [u64, u64], x.size), (x.size, u64), x, key)
    assert_same(got, want, u64, msg="THREEFRY")


def test_max_keeps_numpys_choice_of_zero_and_nan(cpu):
    # a tie between 0.0 and -0.0, and NaNs with different bits: which operand wins is numpy's, per dtype
    for dt in FLOATS:
        npdt = dtypes.to_numpy(dt)
        uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[npdt.itemsize]
        neg_nan = np.array([-np.nan], dtype=npdt)[0]
        a = np.array([0.0, -0.0, np.nan, neg_nan, 1.0, np.nan], dtype=npdt)
        b = np.array([-0.0, 0.0, neg_nan, np.nan, np.nan, 1.0], dtype=npdt)
        want = reference(Ops.MAX, dt, (a, dt), (b, dt))
        got = run(cpu, elementwise(Ops.MAX, dt, [dt, dt], a.size), (a.size, dt), a, b)
        assert (got.view(uint) == want.view(uint)).all(), (dt, got.view(uint), want.view(uint))


def cast_cases() -> list[tuple[DType, DType]]:
    return [(s, d) for s in ALL for d in ALL if s != d]


@pytest.mark.parametrize(("src", "dst"), cast_cases(), ids=str)
def test_cast(cpu, src, dst):
    a = pool(src)
    if dtypes.is_float(src):  # out-of-range and fractional values for float -> int
        extra = [2.0**31, -2.0**31 - 1, 2.0**32 + 5, 2.0**63, -2.0**63, 2.0**64 + 2**12, 1e30, -1e30, 300.7,
                 -1.7, 255.9, 65535.5, 4.5e15]
        with np.errstate(all="ignore"):
            a = np.concatenate([a, np.array(extra).astype(a.dtype)])
    with np.errstate(all="ignore"):
        want = reference(Ops.CAST, dst, (a, src))
    got = run(cpu, elementwise(Ops.CAST, dst, [src], a.size), (a.size, dst), a)
    assert_same(got, want, dst, msg=f"CAST {src} -> {dst}")


SAME_SIZE = [(s, d) for s in ALL for d in ALL
             if s != d and s.itemsize == d.itemsize and dtypes.bool not in (s, d)]


@pytest.mark.parametrize(("src", "dst"), SAME_SIZE, ids=str)
def test_bitcast(cpu, src, dst):
    a = pool(src)
    want = reference(Ops.BITCAST, dst, (a, src))
    got = run(cpu, elementwise(Ops.BITCAST, dst, [src], a.size), (a.size, dst), a)
    assert_same(got, want, dst, msg=f"BITCAST {src} -> {dst}")


def test_the_backend_claims_what_it_runs(cpu):
    caps = cpu.capabilities
    assert caps.dtypes == CPU_DTYPES and caps.loop_style and caps.compiled
    assert caps.ops == cpu.renderer.supports
    assert {Ops.MAX, Ops.CDIV, Ops.CMOD, Ops.WHERE} <= caps.ops
    assert not {Ops.FLOORDIV, Ops.FLOORMOD} & caps.ops  # floor semantics come from codegen's decomposition


def test_bfloat16_kernels_agree_with_reference_bit_for_bit():
    import ml_dtypes

    from uopgrad import Tensor
    rng = np.random.default_rng(7)
    x = rng.standard_normal(64).astype(np.float32) * 50
    y = rng.standard_normal(64).astype(np.float32)
    outs = {}
    for dev in ("CPU", "REFERENCE"):
        a = Tensor(x, device=dev, dtype=dtypes.bfloat16)
        b = Tensor(y, device=dev, dtype=dtypes.bfloat16)
        r = ((a * b + a / 3).exp2().sqrt() - b.maximum(a)).sum()  # each op rounded to bfloat16
        outs[dev] = (r.numpy(), (a * b).numpy(), a.cast(dtypes.int16).numpy())
    for got, ref in zip(outs["CPU"], outs["REFERENCE"]):
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got.view(np.uint16) if got.dtype == ml_dtypes.bfloat16 else got,
                                      ref.view(np.uint16) if ref.dtype == ml_dtypes.bfloat16 else ref)
