"""REFERENCE's numerics (layer 14): numpy dtypes, casts and bitcasts, `reference_alu` (the ALU table of
`uopgrad.alu` on arrays), reduces and movement ops on arrays. This is where the numerics every backend must
share (spec/reference.md) live in code; the graph evaluator and the linear-program interpreter both compute
with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import numpy as np

from uopgrad.alu import ALU, Alu
from uopgrad.dtype import DType, dtypes
from uopgrad.ops import Ops

__all__ = [
    "REFERENCE_OPS",
    "Array",
    "bitcast",
    "cast",
    "finish",
    "float32_to_bf16_bits",
    "movement",
    "np_dtype",
    "reduce",
    "reference_alu",
    "round_bf16",
]

Array: TypeAlias = np.ndarray


# ---------------------------------------------------------------------- dtypes
def np_dtype(dt: DType) -> np.dtype:
    """The numpy dtype REFERENCE stores `dt` in (bfloat16 lives in float32, rounded after every op)."""
    s = dt.base.scalar()
    if s == dtypes.bfloat16:
        return np.dtype(np.float32)
    if s == dtypes.void:
        raise TypeError("void has no values")
    return dtypes.to_numpy(s)


def float32_to_bf16_bits(a: Array) -> Array:
    """The bfloat16 bits of float32 values that are bfloat16 values: their high halves (exact, NaN payloads
    kept, unlike a conversion, which makes every NaN the same); a NaN whose payload is all in the low half
    gets the quiet bit, so it stays a NaN."""
    bits = (np.ascontiguousarray(a, dtype=np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    lost = np.isnan(a) & ((bits & np.uint16(0x7F)) == 0)
    return np.where(lost, bits | np.uint16(0x40), bits).astype(np.uint16)


def round_bf16(a: Array) -> Array:
    """Round float32 values to the nearest bfloat16 (ties to even); inf and NaN are kept."""
    f = np.ascontiguousarray(a, dtype=np.float32)
    bits = f.view(np.uint32)
    rounded = (
        ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
        << np.uint32(16)
    ).view(np.float32)
    return np.where(np.isfinite(f), rounded, f)


def finish(out: object, dt: DType) -> Array:
    """`out` as an array of `dt`'s storage dtype."""
    arr = np.asarray(out)
    npdt = np_dtype(dt)
    if arr.dtype != npdt:
        arr = arr.astype(npdt)
    return round_bf16(arr) if dt.base.scalar() == dtypes.bfloat16 else arr


def _float_to_int(a: Array, npdt: np.dtype) -> Array:
    """Truncate toward zero, then wrap modulo 2**bits like integer overflow; NaN and ±inf give 0."""
    f = a.astype(np.float64)
    t = np.trunc(np.where(np.isfinite(f), f, 0.0))
    r = np.fmod(t, 2.0**64)  # exact: t is integral and the modulus a power of two
    r = np.where(r >= 2.0**63, r - 2.0**64, r)
    r = np.where(r < -(2.0**63), r + 2.0**64, r)
    return r.astype(np.int64).astype(npdt)  # int64 -> narrower ints wraps (two's complement)


def cast(a: Array, dt: DType) -> Array:
    """CAST: to bool is `!= 0` (NaN is True); float -> int truncates toward zero (see `_float_to_int`);
    every other conversion is numpy's (ints wrap, floats round to nearest, overflow gives ±inf)."""
    npdt = np_dtype(dt)
    if npdt == np.bool_:
        return np.asarray(a != 0)
    if a.dtype.kind == "f" and npdt.kind in "iu":
        return _float_to_int(a, npdt)
    return finish(a.astype(npdt), dt)


def bitcast(a: Array, src: DType, dt: DType) -> Array:
    """BITCAST between dtypes of one size: the same bits read as `dt`."""
    if src.base.itemsize != dt.base.itemsize:
        raise TypeError(f"BITCAST from {src} to {dt}: the item sizes differ")
    bits = np.ascontiguousarray(a)
    if src.base.scalar() == dtypes.bfloat16:
        bits = (bits.astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    if dt.base.scalar() == dtypes.bfloat16:
        return (bits.view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    return bits.view(np_dtype(dt))


# ---------------------------------------------------------------------- the ALU table on arrays
def _kinds(xs: Sequence[Array]) -> list[str]:
    return [str(x.dtype) for x in xs]


def _on_arrays(row: Alu) -> Callable[..., Array]:
    """A row of `uopgrad.alu.ALU` on operand arrays: floats if any operand is a float, else ints (all-bool
    operands as 0/1 ints, then `!= 0`); where C leaves an integer result undefined, the row's defined value
    (the operands there replaced by ones so that numpy computes nothing undefined)."""

    def run(*xs: Array) -> Array:
        kinds = [x.dtype.kind for x in xs]
        if "f" in kinds:
            if row.floats is None:
                raise TypeError(f"needs integer or bool operands, got {_kinds(xs)}")
            return np.asarray(row.floats(*xs))
        if row.ints is None:
            raise TypeError(f"needs float operands, got {_kinds(xs)}")
        if kinds.count("b") == len(kinds):
            if row.bools is not None:
                return np.asarray(row.bools(*xs))
            return np.asarray(run(*(x.astype(np.int8) for x in xs)) != 0)
        if (u := row.undefined) is None:
            return np.asarray(row.ints(*xs))
        a, b = xs
        if not (bad := u.where(a, b, a.dtype.itemsize * 8)).any():  # the usual case: nothing to replace
            return np.asarray(row.ints(a, b))
        out = np.asarray(row.ints(a, np.where(bad, np.ones_like(b), b)))
        return np.asarray(np.where(bad, np.asarray(u.value(a, b)).astype(out.dtype), out))

    return run


# One function per ALU op, the numpy reading of its row of `uopgrad.alu.ALU` (results are then stored in the
# node's dtype).
reference_alu: dict[Ops, Callable[..., Array]] = {op: _on_arrays(row) for op, row in ALU.items()}


# ---------------------------------------------------------------------- reduce and movement
def reduce(a: Array, op: Ops, axes: Sequence[int], dt: DType) -> Array:
    """REDUCE over `axes`, keeping them as size 1. Empty: sum 0, prod 1, max -inf (ints: dtype minimum)."""
    ax = tuple(axes)
    if a.dtype == np.bool_:
        fn = {Ops.ADD: np.any, Ops.MAX: np.any, Ops.MUL: np.all}.get(op)
        if fn is None:
            raise TypeError(f"no {op} reduce")
        return np.asarray(fn(a, axis=ax, keepdims=True))
    npdt = np_dtype(dt)
    if op is Ops.ADD:
        out = np.sum(a, axis=ax, keepdims=True, dtype=npdt)
    elif op is Ops.MUL:
        out = np.prod(a, axis=ax, keepdims=True, dtype=npdt)
    elif op is Ops.MAX:
        out = np.max(a.astype(npdt), axis=ax, keepdims=True, initial=dtypes.min(dt.base.scalar()))
    else:
        raise TypeError(f"no {op} reduce")
    return finish(out, dt)


def movement(op: Ops, a: Array, arg: Sequence[Any], fill: int = 0) -> Array:
    """A movement op with a concrete argument (shape, ((begin, end), ...), order or flip flags); PAD fills
    with `fill` (zero of the dtype for values, -1 for index arrays)."""
    if op is Ops.RESHAPE:
        return a.reshape(arg)
    if op is Ops.EXPAND:
        return np.broadcast_to(a, arg)
    if op is Ops.PERMUTE:
        return np.transpose(a, arg)
    if op is Ops.PAD:
        return np.pad(a, arg, constant_values=np.array(fill).astype(a.dtype))
    if op is Ops.SHRINK:
        return a[tuple(slice(b, e) for b, e in arg)]
    if op is Ops.FLIP:
        return a[tuple(slice(None, None, -1) if f else slice(None) for f in arg)]
    raise TypeError(f"{op} is not a movement op")


REFERENCE_OPS: frozenset[Ops] = frozenset(reference_alu)  # every ALU op: nothing is decomposed for REFERENCE
