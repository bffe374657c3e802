"""The helpers generated kernels call: numpy with uopgrad's numerics (spec/reference.md) where numpy's
own differ or raise, e.g. integer division by zero is 0, shifts by too much give 0 or -1, float -> int
truncates and wraps. Every value a kernel computes is a 1-d array (one element, or one per lane)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = [
    "cast",
    "cdiv",
    "cmod",
    "floordiv",
    "floormod",
    "gload",
    "ipow",
    "neg",
    "np",
    "shl",
    "shr",
    "store",
    "threefry",
    "trunc",
]

Array = np.ndarray


def _int(x: Array) -> bool:
    return x.dtype.kind in "iub"


def _safe(b: Array) -> tuple[Array, Array]:
    zero = b == 0
    return zero, np.where(zero, np.ones_like(b), b)


def cdiv(a: Array, b: Array) -> Array:
    """C division (toward zero); x/0 is 0 for integers."""
    if not _int(a):
        return np.asarray(np.trunc(a / b))
    zero, bs = _safe(b)
    q = np.floor_divide(a, bs)
    q = np.where((np.remainder(a, bs) != 0) & ((a < 0) != (bs < 0)), q + 1, q).astype(a.dtype)
    return np.asarray(np.where(zero, np.zeros_like(q), q))


def _zero_divisor_is_zero(f: Callable[[Array, Array], Array], doc: str) -> Callable[[Array, Array], Array]:
    """numpy's `f` for floats; for integers the same with x op 0 defined as 0."""

    def op(a: Array, b: Array) -> Array:
        if not _int(a):
            return np.asarray(f(a, b))
        zero, bs = _safe(b)
        return np.where(zero, np.zeros_like(a), f(a, bs))

    op.__doc__ = doc
    return op


cmod = _zero_divisor_is_zero(np.fmod, "C remainder (the dividend's sign); x%0 is 0 for integers.")
floordiv = _zero_divisor_is_zero(
    np.floor_divide, "Floor division (numpy's for floats); x//0 is 0 for integers."
)
floormod = _zero_divisor_is_zero(np.remainder, "Floor remainder (the divisor's sign); x%0 is 0 for integers.")


def ipow(a: Array, b: Array) -> Array:
    """Powers: IEEE for floats; for integers wrapping repeated multiplication, and for a negative exponent
    the truncated real result (1 for base 1, ±1 for base -1, else 0); bools on 0/1."""
    if not _int(a):
        return np.asarray(np.power(a, b))
    if a.dtype == np.bool_:
        return np.where(b, a, np.ones_like(a))
    neg = b < 0
    r = np.power(a, np.where(neg, np.zeros_like(b), b))
    one = np.ones_like(r)
    odd = np.remainder(b, 2) != 0
    inv = np.where(a == 1, one, np.where(a == -1, np.where(odd, -one, one), np.zeros_like(r)))
    return np.asarray(np.where(neg, inv, r))


def neg(a: Array) -> Array:
    """-a (logical not for bools)."""
    return np.asarray(np.logical_not(a) if a.dtype == np.bool_ else np.negative(a))


def trunc(a: Array) -> Array:
    """Round toward zero (integers unchanged)."""
    return a if _int(a) else np.trunc(a)


def shl(a: Array, b: Array) -> Array:
    """a << b for b in 0..bits-1, else 0."""
    ok = (b >= 0) & (b < a.dtype.itemsize * 8)
    return np.where(ok, np.left_shift(a, np.where(ok, b, 0).astype(a.dtype)), np.zeros_like(a))


def shr(a: Array, b: Array) -> Array:
    """a >> b (arithmetic for signed) for b in 0..bits-1, else 0 (or -1 for a negative a)."""
    ok = (b >= 0) & (b < a.dtype.itemsize * 8)
    fill = np.where(a < 0, -np.ones_like(a), np.zeros_like(a)) if a.dtype.kind == "i" else np.zeros_like(a)
    return np.where(ok, np.right_shift(a, np.where(ok, b, 0).astype(a.dtype)), fill)


def threefry(x: Array, key: Array) -> Array:
    """Threefry-2x32 with 20 rounds of the two 32-bit halves of `x` under `key` (uint64)."""
    x, key = x.astype(np.uint64), key.astype(np.uint64)
    m = np.uint64(0xFFFFFFFF)
    k0, k1 = (key & m).astype(np.uint32), (key >> np.uint64(32)).astype(np.uint32)
    ks = (k1, k0 ^ k1 ^ np.uint32(0x1BD11BDA), k0)
    lo = (x & m).astype(np.uint32) + ks[2]
    hi = (x >> np.uint64(32)).astype(np.uint32) + ks[0]
    for i in range(5):
        for r in ((13, 15, 26, 6), (17, 29, 16, 24))[i % 2]:
            total = lo + hi
            hi = np.bitwise_xor(total, (hi << np.uint32(r)) | (hi >> np.uint32(32 - r)))
            lo = total
        lo, hi = lo + ks[i % 3], hi + ks[(i + 1) % 3] + np.uint32(i + 1)
    return (hi.astype(np.uint64) << np.uint64(32)) | lo.astype(np.uint64)


def cast(x: Array, dt: np.dtype) -> Array:
    """CAST: to bool is != 0; float -> int truncates toward zero and wraps (NaN and inf give 0)."""
    if dt == np.bool_:
        return np.asarray(x != 0)
    if x.dtype.kind == "f" and dt.kind in "iu":
        f = x.astype(np.float64)
        t = np.trunc(np.where(np.isfinite(f), f, 0.0))
        r = np.fmod(t, 2.0**64)
        r = np.where(r >= 2.0**63, r - 2.0**64, np.where(r < -(2.0**63), r + 2.0**64, r))
        return r.astype(np.int64).astype(dt)
    return x.astype(dt)


def gload(buf: Array, off: Array, gate: Array) -> Array:
    """A gated load: buf[off] where the gate is true, 0 elsewhere; gated-off lanes touch no memory."""
    if buf.size == 0:
        return np.zeros(np.broadcast(off, gate).shape, dtype=buf.dtype)
    off, gate = np.broadcast_arrays(off, gate)
    return np.where(gate, buf[np.where(gate, off, 0)], np.zeros((), dtype=buf.dtype))


def store(buf: Array, off: Array, val: Array, gate: Array | None = None) -> None:
    """buf[off] = val in every lane (whose gate is true)."""
    if gate is None:
        off, val = np.broadcast_arrays(off, val)
        buf[off] = val
        return
    off, val, gate = np.broadcast_arrays(off, val, gate)
    buf[off[gate]] = val[gate]
