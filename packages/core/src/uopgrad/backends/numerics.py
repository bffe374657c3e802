"""REFERENCE's numerics (layer 14): numpy dtypes, casts and bitcasts, the ALU table `reference_alu`, reduces
and movement ops on arrays. This is where the numerics every backend must share (spec/reference.md) live in
code; the graph evaluator and the linear-program interpreter both compute with it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import numpy as np

from uopgrad.dtype import DType, dtypes
from uopgrad.ops import Ops

__all__ = ["REFERENCE_OPS", "Array", "bitcast", "cast", "finish", "float32_to_bf16_bits", "movement",
           "np_dtype", "reduce", "reference_alu", "round_bf16"]

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
    rounded = (((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
               << np.uint32(16)).view(np.float32)
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
    r = np.fmod(t, 2.0 ** 64)  # exact: t is integral and the modulus a power of two
    r = np.where(r >= 2.0 ** 63, r - 2.0 ** 64, r)
    r = np.where(r < -(2.0 ** 63), r + 2.0 ** 64, r)
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


# ---------------------------------------------------------------------- the ALU table
def _is_float(a: Array) -> bool:
    return a.dtype.kind == "f"


def _need_int(*xs: Array) -> None:
    if any(x.dtype.kind not in "iub" for x in xs):
        raise TypeError(f"needs integer or bool operands, got {[str(x.dtype) for x in xs]}")


def _need_float(*xs: Array) -> None:
    if any(not _is_float(x) for x in xs):
        raise TypeError(f"needs float operands, got {[str(x.dtype) for x in xs]}")


def _arith(f: Callable[..., Array]) -> Callable[..., Array]:
    """Bool arithmetic runs on 0/1 integers; the result is True where it is nonzero."""
    def run(*xs: Array) -> Array:
        if all(x.dtype == np.bool_ for x in xs):
            return np.asarray(f(*(x.astype(np.int8) for x in xs)) != 0)
        return np.asarray(f(*xs))
    return run


def _safe(b: Array) -> tuple[Array, Array]:
    """(b == 0, b with its zeros replaced by 1): integer division by zero is defined as 0."""
    zero = b == 0
    return zero, np.where(zero, np.ones_like(b), b)


def _division(a: Array, b: Array, on_floats: Callable[[Array, Array], Array],
              on_ints: Callable[[Array, Array], Array]) -> Array:
    """A division-like op: numpy's float semantics, or the integer rule on a divisor with no zeros,
    where a zero divisor gives 0."""
    if _is_float(a) or _is_float(b):
        return np.asarray(on_floats(a, b))
    _need_int(a, b)
    zero, bs = _safe(b)
    out = on_ints(a, bs)
    return np.asarray(np.where(zero, np.zeros_like(out), out))


def _trunc_div(a: Array, b: Array) -> Array:
    q = np.floor_divide(a, b)
    inexact = np.not_equal(np.remainder(a, b), 0)
    return np.asarray(np.where(inexact & ((a < 0) != (b < 0)), q + 1, q))


def _cdiv(a: Array, b: Array) -> Array:
    """C division: the quotient truncated toward zero."""
    return _division(a, b, lambda x, y: np.trunc(x / y), _trunc_div)


def _cmod(a: Array, b: Array) -> Array:
    """C remainder: the sign of the dividend."""
    return _division(a, b, np.fmod, np.fmod)


def _floordiv(a: Array, b: Array) -> Array:
    """Floor division: the quotient rounded toward -inf."""
    return _division(a, b, np.floor_divide, np.floor_divide)


def _floormod(a: Array, b: Array) -> Array:
    """Floor remainder: the sign of the divisor (a == (a // b) * b + a % b)."""
    return _division(a, b, np.remainder, np.remainder)


def _fdiv(a: Array, b: Array) -> Array:
    return np.asarray(np.true_divide(a, b) if _is_float(a) or _is_float(b) else _cdiv(a, b))


def _pow(a: Array, b: Array) -> Array:
    """IEEE pow for floats. For ints: wrapping repeated multiplication; a negative exponent gives the
    truncated real result (1 for base 1, ±1 for base -1, else 0)."""
    if _is_float(a) or _is_float(b):
        return np.asarray(np.power(a, b))
    _need_int(a, b)
    neg = b < 0
    r = np.power(a, np.where(neg, np.zeros_like(b), b))
    odd = np.remainder(b, 2) != 0
    one = np.ones_like(r)
    inv = np.where(a == 1, one, np.where(a == -1, np.where(odd, -one, one), np.zeros_like(r)))
    return np.asarray(np.where(neg, inv, r))


def _shift(a: Array, b: Array, left: bool) -> Array:
    """Shifts by 0..bits-1; a shift by any other amount gives 0 (or -1 for a right shift of a negative)."""
    _need_int(a, b)
    bits = a.dtype.itemsize * 8
    ok = (b >= 0) & (b < bits)
    amount = np.where(ok, b, np.zeros_like(b)).astype(a.dtype)
    if left:
        return np.asarray(np.where(ok, np.left_shift(a, amount), np.zeros_like(a)))
    fill = np.where(a < 0, -np.ones_like(a), np.zeros_like(a)) if a.dtype.kind == "i" else np.zeros_like(a)
    return np.asarray(np.where(ok, np.right_shift(a, amount), fill))


def _bitwise(f: Callable[[Array, Array], Array]) -> Callable[[Array, Array], Array]:
    def run(a: Array, b: Array) -> Array:
        _need_int(a, b)
        return f(a, b)
    return run


def _threefry(x: Array, key: Array) -> Array:
    """Threefry-2x32 (20 rounds) of the two 32-bit halves of `x` under `key`, as tinygrad decomposes it."""
    x, key = x.astype(np.uint64), key.astype(np.uint64)
    lo = np.uint64(0xFFFFFFFF)
    x0, x1 = (x & lo).astype(np.uint32), (x >> np.uint64(32)).astype(np.uint32)
    k0, k1 = (key & lo).astype(np.uint32), (key >> np.uint64(32)).astype(np.uint32)
    ks = (k1, k0 ^ k1 ^ np.uint32(0x1BD11BDA), k0)
    lo32: Array = x0 + ks[2]
    hi32: Array = x1 + ks[0]
    for i in range(5):
        for r in ((13, 15, 26, 6), (17, 29, 16, 24))[i % 2]:
            lo32, hi32 = lo32 + hi32, (lo32 + hi32) ^ ((hi32 << np.uint32(r)) | (hi32 >> np.uint32(32 - r)))
        lo32, hi32 = lo32 + ks[i % 3], hi32 + ks[(i + 1) % 3] + np.uint32(i + 1)
    return np.asarray((hi32.astype(np.uint64) << np.uint64(32)) | lo32.astype(np.uint64))


def _where(c: Array, a: Array, b: Array) -> Array:
    return np.asarray(np.where(c.astype(np.bool_), a, b))


def _mulacc(a: Array, b: Array, c: Array) -> Array:
    return _arith(np.add)(_arith(np.multiply)(a, b), c)


def _unary_float(f: Callable[[Array], Array]) -> Callable[[Array], Array]:
    def run(a: Array) -> Array:
        _need_float(a)
        return f(a)
    return run


# One row per ALU op: the numpy meaning of the op on operand arrays (results are then stored in the node's
# dtype). Adding an op means adding a row here (docs/style.md P7).
reference_alu: dict[Ops, Callable[..., Array]] = {
    Ops.ADD: _arith(np.add),
    Ops.SUB: _arith(np.subtract),
    Ops.MUL: _arith(np.multiply),
    Ops.NEG: lambda a: np.logical_not(a) if a.dtype == np.bool_ else np.negative(a),
    Ops.MAX: np.maximum,  # NaN-propagating
    Ops.CMPLT: np.less,
    Ops.CMPNE: np.not_equal,
    Ops.CMPEQ: np.equal,
    Ops.FDIV: _fdiv,
    Ops.CDIV: _cdiv,
    Ops.CMOD: _cmod,
    Ops.FLOORDIV: _floordiv,
    Ops.FLOORMOD: _floormod,
    Ops.POW: _arith(_pow),
    Ops.AND: _bitwise(np.bitwise_and),
    Ops.OR: _bitwise(np.bitwise_or),
    Ops.XOR: _bitwise(np.bitwise_xor),
    Ops.SHL: lambda a, b: _shift(a, b, True),
    Ops.SHR: lambda a, b: _shift(a, b, False),
    Ops.THREEFRY: _threefry,
    Ops.EXP2: _unary_float(np.exp2),
    Ops.LOG2: _unary_float(np.log2),
    Ops.SIN: _unary_float(np.sin),
    Ops.SQRT: _unary_float(np.sqrt),
    Ops.RECIPROCAL: _unary_float(np.reciprocal),
    Ops.TRUNC: lambda a: np.trunc(a) if _is_float(a) else a,
    Ops.WHERE: _where,
    Ops.MULACC: _mulacc,
}


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
