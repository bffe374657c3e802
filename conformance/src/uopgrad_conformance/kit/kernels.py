"""Every ALU op x dtype, every cast and bitcast, as a hand-built linear program rendered, compiled and run
on the backend, against REFERENCE.

The kernels bypass the scheduler and codegen (linear.py), so a failure points at the renderer, the compiler
flags or the runtime. Inputs are the edge values of each dtype (±0, ±inf, NaN, denormals, integer extremes,
over-wide shifts, division by zero). Results must match bit for bit, except the transcendental functions
(the device's math library and numpy may differ in the last places), which must agree to a few ulps. A
dtype the backend does not claim is skipped with the reason.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from uopgrad import Device, DType, GroupOp, Ops, dtypes
from uopgrad.alu import ALU
from uopgrad.backend import CompiledBackend
from uopgrad_conformance.kit.linear import elementwise, out_dtype, reference, run
from uopgrad_conformance.numerics import special_values

__all__ = ["assert_same", "backend_for", "pool"]

FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]
INTS = list(dtypes.ints)
ALL = [dtypes.bool, *INTS, *FLOATS]
TRANSCENDENTAL = {op for op, row in ALU.items() if row.libm}  # EXP2, LOG2, SIN, POW: a few ulps
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def backend_for(device: str, *dts: DType, ops: tuple[Ops, ...] = ()) -> CompiledBackend:
    """The compiled backend of `device`; skips (with the reason) when it does not claim one of `dts`, or
    declares one of `ops` not rendered natively on `dts[0]` (`Target.unsupported`: codegen decomposes it,
    so the conformance suite checks it through the front end instead)."""
    backend = Device[device]
    if not isinstance(backend, CompiledBackend):
        pytest.skip(f"{device} generates no code: the kit's kernel checks need a renderer and a compiler")
    target = backend.capabilities
    if missing := [dt.name for dt in dts if dt not in target.dtypes]:
        pytest.skip(f"not claimed: {device} does not declare {missing} in its capabilities")
    if excepted := [op.name for op in ops if (op, dts[0]) in target.unsupported]:
        pytest.skip(f"not claimed: {device} renders {excepted} on {dts[0].name} through decompositions")
    return backend


def pool(dt: DType) -> np.ndarray:
    """Edge values of `dt` (as numpy would store them): the suite's special values, and what kernels meet
    besides: for floats, ordinary values of a few more magnitudes; for integers, shift counts at and past the
    width."""
    base = special_values(dt)
    if dt == dtypes.bool:
        return base
    if dtypes.is_float(dt):
        return np.concatenate([base, np.array([7.75, -7.75, 1e-3, 100.0, 1e4], dtype=base.dtype)])
    bits, info = 8 * dt.itemsize, np.iinfo(base.dtype)
    shifts = {v for v in (bits - 1, bits, -bits) if info.min <= v <= info.max}
    return np.array(sorted(set(base.tolist()) | shifts), dtype=base.dtype)


def _pairs(dt: DType) -> tuple[np.ndarray, np.ndarray]:
    p = pool(dt)
    a, b = zip(*itertools.product(p, p))
    return np.array(a, dtype=p.dtype), np.array(b, dtype=p.dtype)


def assert_same(got: np.ndarray, want: np.ndarray, ulps: float = 0, msg: str = "") -> None:
    """Equal bit patterns (any NaN matches any NaN); with `ulps`, finite floats may differ that much."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind != "f":
        bad = got != want
    else:
        uint = UINT[got.dtype.itemsize]
        nan = np.isnan(got) & np.isnan(want)
        bad = ~nan & (got.view(uint) != want.view(uint))
        if ulps:
            with np.errstate(all="ignore"):
                close = np.isfinite(want) & (np.abs(got - want) <= ulps * np.spacing(np.abs(want)))
            bad &= ~close
    idx = np.nonzero(bad)[0]
    first = idx[:5]
    assert idx.size == 0, f"{msg}: {idx.size} mismatches at {first}...: got {got[first]} want {want[first]}"


def _binary_cases() -> list[tuple[Ops, DType]]:
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


@pytest.mark.parametrize(("op", "dt"), _binary_cases(), ids=str)
def test_kernel_binary(kit_device: str, op: Ops, dt: DType) -> None:
    """A binary ALU op on every pair of edge values."""
    backend = backend_for(kit_device, dt, ops=(op,))
    a, b = _pairs(dt)
    odt = out_dtype(op, dt)
    with np.errstate(all="ignore"):
        want = reference(op, odt, (a, dt), (b, dt))
    got = run(backend, elementwise(op, odt, [dt, dt], a.size), (a.size, odt), a, b)
    assert_same(got, want, ulps=2 if op in TRANSCENDENTAL and dtypes.is_float(dt) else 0, msg=f"{op} {dt}")


def _unary_cases() -> list[tuple[Ops, DType]]:
    unary = [op for op in ALU if op in GroupOp.Unary]  # the rows of core's ALU table, in the order of Ops
    cases = [(op, dt) for dt in ALL for op in unary if not ALU[op].float_only]
    return cases + [(op, dt) for dt in FLOATS for op in unary if ALU[op].float_only]


@pytest.mark.parametrize(("op", "dt"), _unary_cases(), ids=str)
def test_kernel_unary(kit_device: str, op: Ops, dt: DType) -> None:
    """A unary ALU op on the edge values (and a spread of ordinary values for floats)."""
    backend = backend_for(kit_device, dt, ops=(op,))
    a = pool(dt)
    if dtypes.is_float(dt):
        a = np.concatenate([a, np.linspace(-40, 40, 301).astype(a.dtype)])
    with np.errstate(all="ignore"):
        want = reference(op, dt, (a, dt))
    got = run(backend, elementwise(op, dt, [dt], a.size), (a.size, dt), a)
    assert_same(got, want, ulps=2 if op in TRANSCENDENTAL else 0, msg=f"{op} {dt}")


@pytest.mark.parametrize("dt", ALL, ids=str)
def test_kernel_where_and_mulacc(kit_device: str, dt: DType) -> None:
    """WHERE and MULACC (never fused into an fma: a*b+c rounds twice)."""
    backend = backend_for(kit_device, dt, ops=(Ops.WHERE, Ops.MULACC))
    a, b = _pairs(dt)
    cond = np.arange(a.size) % 3 == 0
    want = reference(Ops.WHERE, dt, (cond, dtypes.bool), (a, dt), (b, dt))
    got = run(backend, elementwise(Ops.WHERE, dt, [dtypes.bool, dt, dt], a.size), (a.size, dt), cond, a, b)
    assert_same(got, want, msg="WHERE")
    c = b[::-1].copy()
    with np.errstate(all="ignore"):
        want = reference(Ops.MULACC, dt, (a, dt), (b, dt), (c, dt))
    got = run(backend, elementwise(Ops.MULACC, dt, [dt, dt, dt], a.size), (a.size, dt), a, b, c)
    assert_same(got, want, msg="MULACC")


def test_kernel_threefry(kit_device: str) -> None:
    """THREEFRY on random 64-bit words and keys."""
    u64 = dtypes.uint64
    backend = backend_for(kit_device, u64)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2**64, 1000, dtype=np.uint64)
    key = rng.integers(0, 2**64, 1000, dtype=np.uint64)
    want = reference(Ops.THREEFRY, u64, (x, u64), (key, u64))
    got = run(backend, elementwise(Ops.THREEFRY, u64, [u64, u64], x.size), (x.size, u64), x, key)
    assert_same(got, want, msg="THREEFRY")


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_kernel_max_keeps_numpys_choice_of_zero_and_nan(kit_device: str, dt: DType) -> None:
    """A tie between 0.0 and -0.0, and NaNs with different bits: which operand MAX keeps is numpy's."""
    backend = backend_for(kit_device, dt, ops=(Ops.MAX,))
    npdt = dtypes.to_numpy(dt)
    neg_nan = np.array([-np.nan], dtype=npdt)[0]
    a = np.array([0.0, -0.0, np.nan, neg_nan, 1.0, np.nan], dtype=npdt)
    b = np.array([-0.0, 0.0, neg_nan, np.nan, np.nan, 1.0], dtype=npdt)
    want = reference(Ops.MAX, dt, (a, dt), (b, dt))
    got = run(backend, elementwise(Ops.MAX, dt, [dt, dt], a.size), (a.size, dt), a, b)
    uint = UINT[npdt.itemsize]
    assert (got.view(uint) == want.view(uint)).all(), (dt, got.view(uint), want.view(uint))


# out-of-range and fractional values for float -> int, and the float32 extremes for float -> half
CAST_EXTRA = [
    2.0**31,
    -(2.0**31) - 1,
    2.0**32 + 5,
    2.0**63,
    -(2.0**63),
    2.0**64 + 2**12,
    1e30,
    -1e30,
    300.7,
    -1.7,
    255.9,
    65535.5,
    4.5e15,
    3e38,
    -3e38,
]


@pytest.mark.parametrize(("src", "dst"), [(s, d) for s in ALL for d in ALL if s != d], ids=str)
def test_kernel_cast(kit_device: str, src: DType, dst: DType) -> None:
    """CAST between every pair of dtypes, as REFERENCE defines it (out-of-range float -> int wraps)."""
    backend = backend_for(kit_device, src, dst)
    a = pool(src)
    if dtypes.is_float(src):
        with np.errstate(all="ignore"):
            a = np.concatenate([a, np.array(CAST_EXTRA).astype(a.dtype)])
    with np.errstate(all="ignore"):
        want = reference(Ops.CAST, dst, (a, src))
    got = run(backend, elementwise(Ops.CAST, dst, [src], a.size), (a.size, dst), a)
    assert_same(got, want, msg=f"CAST {src} -> {dst}")


@pytest.mark.parametrize(
    ("src", "dst"), [(s, d) for s in ALL for d in ALL if s != d and s.itemsize == d.itemsize], ids=str
)
def test_kernel_bitcast(kit_device: str, src: DType, dst: DType) -> None:
    """BITCAST between every pair of dtypes of one size (bool's byte included)."""
    backend = backend_for(kit_device, src, dst)
    a = pool(src)
    want = reference(Ops.BITCAST, dst, (a, src))
    got = run(backend, elementwise(Ops.BITCAST, dst, [src], a.size), (a.size, dst), a)
    assert_same(got, want, msg=f"BITCAST {src} -> {dst}")
