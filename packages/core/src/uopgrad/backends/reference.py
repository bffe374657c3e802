"""REFERENCE (layer 14): a numpy evaluator of tensor graphs, the definition other backends are checked by.

Each node is evaluated once, in an iterative post-order walk, to a numpy array (a tuple for TUPLE/FUNCTION,
None for effects). The numerics every backend must share are written in spec/reference.md; the ALU table
below is where they live in code. Writes (STORE, custom-kernel CALLs) are copy-on-write during one run:
a plain BUFFER read sees the contents from before the run, a read through AFTER sees the writes, and the
written buffers are committed when the run ends.
"""
from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np

from uopgrad import debug
from uopgrad.backend import Backend, Device
from uopgrad.codegen import GridLimits, Program, lower
from uopgrad.config import DEBUG
from uopgrad.dtype import DType, PtrDType, dtypes
from uopgrad.ops import GroupOp, Ops
from uopgrad.schedule import Schedule
from uopgrad.uop import UOp

__all__ = ["REFERENCE_OPS", "ReferenceBackend", "bitcast", "cast", "evaluate", "movement", "np_dtype",
           "float32_to_bf16_bits", "reduce", "reference_alu", "round_bf16", "run_program", "run_schedule"]

Array: TypeAlias = np.ndarray
# what a node evaluates to: an array, a tuple (TUPLE, FUNCTION) or None (effects, DEVICE, ...)
Value: TypeAlias = "np.ndarray | tuple[Value, ...] | None"
# BUFFER UOp -> flat contents (C order). Weak: the storage goes when the last reference to the BUFFER does.
_storage: weakref.WeakKeyDictionary[UOp, Array] = weakref.WeakKeyDictionary()


# ---------------------------------------------------------------------- dtypes
def np_dtype(dt: DType) -> np.dtype:
    """The numpy dtype REFERENCE stores `dt` in (bfloat16 lives in float32, rounded after every op)."""
    s = dt.base.scalar()
    if s == dtypes.bfloat16:
        return np.dtype(np.float32)
    if s == dtypes.void:
        raise TypeError("void has no values")
    return dtypes.to_numpy(s)


def round_bf16(a: Array) -> Array:
    """Round float32 values to the nearest bfloat16 (ties to even); inf and NaN are kept."""
    f = np.ascontiguousarray(a, dtype=np.float32)
    bits = f.view(np.uint32)
    rounded = (((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
               << np.uint32(16)).view(np.float32)
    return np.where(np.isfinite(f), rounded, f)


def float32_to_bf16_bits(a: Array) -> Array:
    """The bfloat16 bits of float32 values that are bfloat16 values: their high halves (exact, NaN payloads
    kept, unlike a conversion, which makes every NaN the same); a NaN whose payload is all in the low half
    gets the quiet bit, so it stays a NaN."""
    bits = (np.ascontiguousarray(a, dtype=np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    lost = np.isnan(a) & ((bits & np.uint16(0x7F)) == 0)
    return np.where(lost, bits | np.uint16(0x40), bits).astype(np.uint16)


def _finish(out: object, dt: DType) -> Array:
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
    return _finish(a.astype(npdt), dt)


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
# dtype). Adding an op means adding a row here (style.md P7).
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
    return _finish(out, dt)


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


# ---------------------------------------------------------------------- the evaluator
# nodes whose sources are not values: they are evaluated without visiting their sources
_LEAVES = frozenset({Ops.CONST, Ops.VCONST, Ops.BUFFER, Ops.BIND, Ops.DEFINE_VAR, Ops.PARAM, Ops.DEVICE,
                     Ops.UNIQUE, Ops.LUNIQUE, Ops.NOOP})
# ops that a STORE target or an AFTER may be a view through; AFTER itself is transparent for views
_VIEWS = GroupOp.Movement


def _arr(v: Value) -> Array:
    if not isinstance(v, np.ndarray):
        raise TypeError(f"expected an array value, got {type(v).__name__}")
    return v


def _is_reference(device: object) -> bool:
    return isinstance(device, str) and device.partition(":")[0] == "REFERENCE"


def _schedule(root: UOp) -> list[UOp]:
    """Sources before consumers (iterative post-order); leaves are not entered, calls only via their args."""
    done: dict[UOp, None] = {}
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if node in done:
            continue
        if expanded:
            done[node] = None
            continue
        stack.append((node, True))
        srcs = () if node.op in _LEAVES else node.src[1:] if node.op in GroupOp.Call else node.src
        stack.extend((s, False) for s in reversed(srcs) if s not in done)
    return list(done)


class _Frame:
    """The state of one body: node values, PARAM arguments (by slot), and copy-on-write targets."""

    __slots__ = ("args", "live", "memo", "written")

    def __init__(self, args: Iterable[Value]) -> None:
        self.memo: dict[UOp, Value] = {}
        self.args: list[Value] = list(args)
        self.written: set[int] = set()       # PARAM slots stored into (their args entry is a private copy)
        self.live: dict[UOp, Array] = {}     # other store targets: the written copy of their value


class Evaluator:
    """Evaluates graphs for one run; `commit()` writes the buffers it stored into back to their storage."""

    def __init__(self, roots: Sequence[UOp]) -> None:
        self.live_buffers: dict[UOp, Array] = {}
        self.var_vals: dict[UOp, int] = {}
        for root in roots:
            for u in root.toposort():
                if u.op is Ops.BIND:
                    self.var_vals[u.src[0]] = u.src[1].arg

    def evaluate(self, root: UOp, frame: _Frame) -> Value:
        """The value of `root` in `frame` (every node once, iteratively)."""
        for u in _schedule(root):
            if u not in frame.memo:
                frame.memo[u] = self._node(u, frame)
        return frame.memo[root]

    def commit(self) -> None:
        """Make this run's writes visible: REFERENCE buffers are replaced, foreign ones copied in."""
        for buf, arr in self.live_buffers.items():
            if _is_reference(buf.device):
                _storage[buf] = arr
            else:
                Device[str(buf.device)].copyin(buf, arr)
        self.live_buffers.clear()

    def _node(self, u: UOp, frame: _Frame) -> Value:
        if u.op in GroupOp.ALU:
            return self._alu(u, frame)
        handler = _HANDLERS.get(u.op)
        if handler is None:
            raise RuntimeError(f"REFERENCE can't evaluate {u.op}: {u.short()}")
        try:
            return handler(self, u, frame)
        except (TypeError, ValueError) as e:
            raise RuntimeError(f"REFERENCE can't evaluate {u.op} ({e}): {u.short()}") from e

    def _alu(self, u: UOp, frame: _Frame) -> Array:
        vals: list[Array] = []
        try:
            vals = [_arr(frame.memo[s]) for s in u.src]
            if u.dtype.count != 1:
                raise TypeError(f"vector dtype {u.dtype}")
            out = reference_alu[u.op](*vals)
        except (TypeError, ValueError, KeyError) as e:
            raise RuntimeError(f"REFERENCE can't evaluate {u.op} on {[str(v.dtype) for v in vals]} ({e}): "
                               f"{u.short()}") from e
        return _finish(out, u.dtype)

    # -------------------------------------------------------------- leaves
    def _const(self, u: UOp, frame: _Frame) -> Array:
        value = np.array(u.arg).astype(np_dtype(u.dtype))
        return _finish(np.full((u.dtype.count,), value) if u.dtype.count > 1 else value, u.dtype)

    def _vconst(self, u: UOp, frame: _Frame) -> Array:
        return np.array(u.arg, dtype=np_dtype(u.dtype))

    def _stack(self, u: UOp, frame: _Frame) -> Array:
        if not u.src:
            return np.zeros((0,), dtype=np_dtype(u.dtype))
        return np.stack([_arr(frame.memo[s]) for s in u.src]).astype(np_dtype(u.dtype))

    def _define_var(self, u: UOp, frame: _Frame) -> Array:
        if u not in self.var_vals:
            raise RuntimeError(f"variable {u.arg[0]!r} is not bound anywhere in the graph: {u.short()}")
        return np.array(self.var_vals[u], dtype=np_dtype(u.dtype))

    def _bind(self, u: UOp, frame: _Frame) -> Array:
        return np.array(u.src[1].arg, dtype=np_dtype(u.dtype))

    def _param(self, u: UOp, frame: _Frame) -> Value:
        if not 0 <= u.arg < len(frame.args):
            raise RuntimeError(f"PARAM slot {u.arg} has no argument ({len(frame.args)} given): {u.short()}")
        return frame.args[int(u.arg)]

    def _read_buffer(self, buf: UOp) -> Array:
        """The contents from before this run (fresh buffers read as zeros)."""
        if not _is_reference(buf.device):
            return Device[str(buf.device)].copyout(buf)
        arr = _storage.get(buf)
        return np.zeros((buf.arg,), dtype=np_dtype(buf.dtype)) if arr is None else arr

    def _buffer(self, u: UOp, frame: _Frame) -> Array:
        return self._read_buffer(u)

    def _none(self, u: UOp, frame: _Frame) -> None:
        return None

    # -------------------------------------------------------------- values
    def _marg(self, u: UOp, frame: _Frame) -> tuple[Any, ...]:
        """A movement op's argument with every symbolic size evaluated."""
        if u.op in (Ops.PERMUTE, Ops.FLIP):
            return tuple(u.arg)
        vecs = [tuple(int(x) for x in np.atleast_1d(_arr(frame.memo[s]))) for s in u.src[1:]]
        return vecs[0] if u.op in (Ops.RESHAPE, Ops.EXPAND) else tuple(zip(vecs[0], vecs[1]))

    def _movement(self, u: UOp, frame: _Frame) -> Array:
        return movement(u.op, _arr(frame.memo[u.src[0]]), self._marg(u, frame))

    def _reduce(self, u: UOp, frame: _Frame) -> Array:
        return reduce(_arr(frame.memo[u.src[0]]), u.arg[0], u.arg[1], u.dtype)

    def _cast(self, u: UOp, frame: _Frame) -> Array:
        return cast(_arr(frame.memo[u.src[0]]), u.dtype)

    def _bitcast(self, u: UOp, frame: _Frame) -> Array:
        return bitcast(_arr(frame.memo[u.src[0]]), u.src[0].dtype, u.dtype)

    def _copy(self, u: UOp, frame: _Frame) -> Array:
        return np.array(frame.memo[u.src[0]], copy=True, order="C")

    def _same(self, u: UOp, frame: _Frame) -> Value:
        return frame.memo[u.src[0]]

    def _tuple(self, u: UOp, frame: _Frame) -> Value:
        return tuple(frame.memo[s] for s in u.src)

    def _gettuple(self, u: UOp, frame: _Frame) -> Value:
        holder = frame.memo[u.src[0]]
        if not isinstance(holder, tuple):
            raise RuntimeError(f"GETTUPLE of {u.src[0].op}, which has no tuple value: {u.short()}")
        return holder[int(u.arg)]

    # -------------------------------------------------------------- effects
    def _resolve(self, target: UOp) -> tuple[list[UOp], UOp]:
        """The movement ops from `target` down to the node that holds the storage (AFTERs are transparent)."""
        chain: list[UOp] = []
        node = target
        while node.op in _VIEWS or node.op is Ops.AFTER:
            if node.op is not Ops.AFTER:
                chain.append(node)
            node = node.src[0]
        return chain, node

    def _current(self, base: UOp, frame: _Frame) -> Array:
        """The storage of `base` as it is now, writes of this run included."""
        if base.op is Ops.BUFFER:
            return self.live_buffers[base] if base in self.live_buffers else self._read_buffer(base)
        value = self._param(base, frame) if base.op is Ops.PARAM else \
            frame.live[base] if base in frame.live else frame.memo[base]
        if not isinstance(value, np.ndarray):
            raise RuntimeError(f"{base.op} holds no array to view or to store into: {base.short()}")
        return value

    def _set_storage(self, base: UOp, frame: _Frame, arr: Array) -> None:
        if base.op is Ops.BUFFER:
            self.live_buffers[base] = arr
        elif base.op is Ops.PARAM:
            frame.args[base.arg] = arr
            frame.written.add(base.arg)
        else:
            frame.live[base] = arr

    def _writable(self, base: UOp, frame: _Frame) -> Array:
        """A fresh C-contiguous copy of `base`'s storage that becomes its storage. Every write copies, so an
        array handed out earlier in the run (a value, or a view read through AFTER) never changes under it."""
        arr = np.array(self._current(base, frame), copy=True, order="C")
        self._set_storage(base, frame, arr)
        return arr

    def store(self, target: UOp, value: Value, frame: _Frame) -> None:
        """Write `value` into the elements of `target`, a view (movement ops, AFTERs) of some storage."""
        chain, base = self._resolve(target)
        current = self._current(base, frame)
        value = np.asarray(value)
        if all(m.op is Ops.RESHAPE for m in chain):  # the whole storage is replaced
            full = np.broadcast_to(value, _arr(frame.memo[target]).shape).astype(current.dtype)
            self._set_storage(base, frame, np.array(full, copy=True, order="C").reshape(current.shape))
            return
        arr = self._writable(base, frame)
        idx = np.arange(arr.size).reshape(arr.shape)
        for m in reversed(chain):
            idx = movement(m.op, idx, self._marg(m, frame), fill=-1)  # PAD cells map to -1: not written
        val = np.broadcast_to(value, idx.shape).astype(arr.dtype)
        flat = arr.reshape(-1)  # a view: arr is C-contiguous
        keep = idx >= 0
        flat[idx[keep]] = val[keep]

    def _store(self, u: UOp, frame: _Frame) -> None:
        if len(u.src) != 2:
            raise RuntimeError(f"REFERENCE runs STORE(target, value), not {len(u.src)} sources: {u.short()}")
        self.store(u.src[0], frame.memo[u.src[1]], frame)

    def _after(self, u: UOp, frame: _Frame) -> Value:
        chain, base = self._resolve(u.src[0])
        arr = self._current(base, frame)
        for m in reversed(chain):
            arr = movement(m.op, arr, self._marg(m, frame))
        return arr

    def _function(self, u: UOp, frame: _Frame) -> Value:
        # a FUNCTION is a value: its body runs in its own frame, once per FUNCTION node and frame; an assign
        # to a PARAM inside it is written back into the argument, as the compiled backends (which inline the
        # body) and the reference do
        inner = _Frame(frame.memo[s] for s in u.src[1:])
        out = self.evaluate(u.src[0], inner)
        self._write_back(u.src[1:], inner, frame)
        return out

    def _write_back(self, args: Sequence[UOp], inner: _Frame, frame: _Frame) -> None:
        """The arguments a body stored into get the values it wrote."""
        for slot in sorted(inner.written):
            written = np.asarray(inner.args[slot]).reshape(_arr(frame.memo[args[slot]]).shape)
            self.store(args[slot], written, frame)

    def _call(self, u: UOp, frame: _Frame) -> None:
        body, args = u.src[0], u.src[1:]
        if body.op is not Ops.SINK:
            raise RuntimeError(f"REFERENCE runs CALLs of a SINK of STOREs (custom kernels), not of "
                               f"{body.op}: {u.short()}")
        params = {p.arg: p for p in body.toposort(enter_calls=False) if p.op is Ops.PARAM}
        values: list[Value] = []
        for i, a in enumerate(args):
            v = _arr(frame.memo[a])
            p = params.get(i)
            if p is not None and isinstance(p.dtype, PtrDType):
                if p.dtype.size not in (-1, v.size):
                    raise RuntimeError(f"custom kernel argument {i} has {v.size} elements but its PARAM "
                                       f"points to {p.dtype.size}: {u.short()}")
                v = v.reshape(-1)
            values.append(v)
        inner = _Frame(values)
        self.evaluate(body, inner)
        self._write_back(args, inner, frame)  # the kernel wrote into these arguments


_Handler = Callable[[Evaluator, UOp, _Frame], Value]
# How each non-ALU op is evaluated (ALU ops go through `reference_alu`); ops missing here are an error
_HANDLERS: dict[Ops, _Handler] = {
    Ops.CONST: Evaluator._const, Ops.VCONST: Evaluator._vconst, Ops.STACK: Evaluator._stack,
    Ops.DEFINE_VAR: Evaluator._define_var, Ops.BIND: Evaluator._bind, Ops.PARAM: Evaluator._param,
    Ops.BUFFER: Evaluator._buffer, Ops.DEVICE: Evaluator._none, Ops.UNIQUE: Evaluator._none,
    Ops.LUNIQUE: Evaluator._none, Ops.NOOP: Evaluator._none, Ops.SINK: Evaluator._none,
    Ops.GROUP: Evaluator._none,
    **{op: Evaluator._movement for op in GroupOp.Movement},
    Ops.REDUCE: Evaluator._reduce, Ops.CAST: Evaluator._cast, Ops.BITCAST: Evaluator._bitcast,
    Ops.CONTIGUOUS: Evaluator._copy, Ops.COPY: Evaluator._copy,
    Ops.CONTIGUOUS_BACKWARD: Evaluator._same, Ops.DETACH: Evaluator._same,
    Ops.TUPLE: Evaluator._tuple, Ops.GETTUPLE: Evaluator._gettuple,
    Ops.STORE: Evaluator._store, Ops.AFTER: Evaluator._after,
    Ops.FUNCTION: Evaluator._function, Ops.CALL: Evaluator._call,
}


def _export(v: Value) -> Value:
    if isinstance(v, tuple):
        return tuple(_export(x) for x in v)
    return None if v is None else np.array(v, copy=True)


def evaluate(*roots: UOp) -> list[Value]:
    """The values of `roots` (arrays; tuples for TUPLE/FUNCTION; None for effects), evaluated together as one
    run on REFERENCE; the run's writes are committed."""
    ev = Evaluator(roots)
    frame = _Frame(())
    with np.errstate(all="ignore"):
        out = [_export(ev.evaluate(r, frame)) for r in roots]
    ev.commit()
    return out


class ReferenceBackend(Backend):
    """REFERENCE: evaluates tensor graphs with numpy. Every REFERENCE:n device shares one storage map."""

    def copyin(self, buf: UOp, data: np.ndarray) -> None:
        """Fill `buf` (a copy of `data`, converted to the buffer's storage dtype)."""
        arr = np.array(data, copy=True).reshape(-1)
        if arr.size != buf.arg:
            raise ValueError(f"copyin of {arr.size} elements into a BUFFER of {buf.arg}")
        _storage[buf] = cast(arr, buf.dtype)

    def copyout(self, buf: UOp) -> np.ndarray:
        """A copy of `buf`'s contents (zeros if nothing was ever written)."""
        arr = _storage.get(buf)
        out = np.zeros((buf.arg,), dtype=np_dtype(buf.dtype)) if arr is None else np.array(arr, copy=True)
        if buf.dtype.base.scalar() == dtypes.bfloat16:
            return float32_to_bf16_bits(out).view(dtypes.to_numpy(dtypes.bfloat16))
        return out

    def realize(self, sink: UOp) -> None:
        """Evaluate `sink` and commit its writes."""
        with debug.realizing(self.name, sink):
            start = time.perf_counter()
            evaluate(sink)
            if DEBUG >= 1:
                debug.log(1, f"{self.name:<10} evaluated {len(sink.src)} output(s) in "
                             f"{(time.perf_counter() - start) * 1e3:.3f} ms")


# ====================================================================== linear programs (codegen's output)
# REFERENCE also executes the linear programs of spec/kernels.md §2, so codegen is tested end to end without a
# compiler. A program runs once over "lanes": one lane for a loop-style program, one per thread of the whole
# grid for a grid-style one (all threads in lockstep: a value is an array over the lanes, SPECIALs give each
# lane its indices). Loops step one iteration at a time; ALU ops are the table above, on those arrays. Values
# are never 0-d: numpy computes some ops on 0-d arrays by another code path than on arrays (float32 pow).

REFERENCE_OPS: frozenset[Ops] = frozenset(reference_alu)  # every ALU op: nothing is decomposed for REFERENCE


def _lane_indices(prg: Program) -> tuple[int, dict[str, Array]]:
    """The number of lanes and the value of each SPECIAL (`gidx<d>`, `lidx<d>`) in every lane."""
    if prg.global_size is None or prg.local_size is None:
        return 1, {}
    sizes = [*prg.local_size, *prg.global_size]
    ids = np.arange(int(np.prod(sizes)), dtype=np.int64)
    out: dict[str, Array] = {}
    for name, n in zip(["lidx0", "lidx1", "lidx2", "gidx0", "gidx1", "gidx2"], sizes):
        out[name], ids = ids % n, ids // n
    return int(np.prod(sizes)), out


def _scalar(v: Array, what: UOp) -> int:
    flat = np.asarray(v).reshape(-1)
    if flat.size > 1 and not np.all(flat == flat[0]):
        raise RuntimeError(f"a loop bound differs between threads: {what.short()}")
    return int(flat[0])


def _memory(prg: Program, u: UOp, index: tuple[Array, Array], gate: Array | None) -> tuple[Array, ...]:
    """(buffer, offsets, lanes that access memory) of a LOAD/STORE; an offset out of bounds in a lane that
    accesses memory is an error (it names the kernel and the uop)."""
    buf, off = index
    g = np.asarray(True) if gate is None else np.asarray(gate, dtype=np.bool_)
    off, g = np.broadcast_arrays(np.asarray(off).astype(np.int64), g)
    bad = g & ((off < 0) | (off >= buf.size))
    if np.any(bad):
        raise IndexError(f"kernel {prg.name}: {u.op.name} at offset {int(off[bad].reshape(-1)[0])} of a "
                         f"buffer of {buf.size} elements: {u.short()}")
    return buf, np.where(g, off, 0), g


def run_program(prg: Program, buffers: Sequence[Array], var_vals: Mapping[str, int] | None = None) -> None:
    """Run `prg` on flat arrays (`buffers[slot]`, in each buffer's storage dtype), writing them in place;
    `var_vals` gives the DEFINE_VARs by name."""
    uops = prg.uops
    pos = {u: i for i, u in enumerate(uops)}
    srcs = [tuple(pos[s] for s in u.src) for u in uops]
    ends = {srcs[i][0]: i for i, u in enumerate(uops) if u.op is Ops.END}
    lanes, special = _lane_indices(prg)
    vals: list[Any] = [None] * len(uops)
    regs: dict[int, Array] = {}
    bounds: dict[int, int] = {}
    pc = 0
    with np.errstate(all="ignore"):
        while pc < len(uops):
            u, s = uops[pc], srcs[pc]
            op = u.op
            if op in GroupOp.ALU:
                vals[pc] = _finish(reference_alu[op](*(np.asarray(vals[i]) for i in s)), u.dtype)
            elif op is Ops.RANGE:
                bounds[pc] = _scalar(vals[s[0]], u)
                if bounds[pc] <= 0:
                    pc = ends[pc] + 1
                    continue
                vals[pc] = np.zeros((1,), dtype=np_dtype(u.dtype))
            elif op is Ops.END:
                r = s[0]
                nxt = int(vals[r][0]) + 1
                if nxt < bounds[r]:
                    vals[r] = np.full((1,), nxt, dtype=np_dtype(uops[r].dtype))
                    pc = r + 1
                    continue
            elif op is Ops.LOAD and uops[s[0]].op is Ops.DEFINE_REG:
                vals[pc] = regs[s[0]]
            elif op is Ops.LOAD:
                buf, off, g = _memory(prg, u, vals[s[0]], vals[s[1]] if len(s) > 1 else None)
                got = buf[off] if buf.size else np.zeros(off.shape, dtype=buf.dtype)
                vals[pc] = got if len(s) == 1 else np.where(g, got, np.zeros((), dtype=buf.dtype))
            elif op is Ops.STORE and uops[s[0]].op is Ops.DEFINE_REG:
                regs[s[0]] = vals[s[1]]
            elif op is Ops.STORE:
                buf, off, g = _memory(prg, u, vals[s[0]], vals[s[2]] if len(s) > 2 else None)
                value, off, g = np.broadcast_arrays(np.asarray(vals[s[1]], dtype=buf.dtype), off, g)
                buf[off[g]] = value[g]
            else:
                vals[pc] = _linear_leaf(u, s, vals, buffers, var_vals or {}, special, regs, pc)
            pc += 1



def _linear_leaf(u: UOp, s: tuple[int, ...], vals: list[Any], buffers: Sequence[Array],
                 var_vals: Mapping[str, int], special: Mapping[str, Array], regs: dict[int, Array],
                 pc: int) -> object:
    """The value of a non-ALU, non-control uop of a linear program."""
    op = u.op
    if op is Ops.CONST:
        return _finish(np.array([u.arg]).astype(np_dtype(u.dtype)), u.dtype)
    if op is Ops.PARAM:
        return buffers[u.arg]
    if op is Ops.DEFINE_VAR:
        if u.arg[0] not in var_vals:
            raise RuntimeError(f"no value for the variable {u.arg[0]!r}")
        return np.full((1,), var_vals[u.arg[0]], dtype=np_dtype(u.dtype))
    if op is Ops.SPECIAL:
        return special[u.arg].astype(np_dtype(u.dtype))
    if op is Ops.INDEX:
        return (vals[s[0]], vals[s[1]])
    if op is Ops.AFTER:
        return vals[s[0]]
    if op is Ops.DEFINE_REG:
        regs[pc] = vals[s[0]]
        return None
    if op is Ops.CAST:
        return cast(np.asarray(vals[s[0]]), u.dtype)
    if op is Ops.BITCAST:
        x = np.asarray(vals[s[0]])
        return bitcast(x, u.src[0].dtype, u.dtype).reshape(x.shape)
    raise RuntimeError(f"REFERENCE can't run {u.op} in a linear program: {u.short()}")


def _read(buf: UOp) -> Array:
    """The current contents of a BUFFER, on any device (fresh REFERENCE buffers read as zeros)."""
    if not _is_reference(buf.device):
        return np.asarray(Device[str(buf.device)].copyout(buf))
    arr = _storage.get(buf)
    return np.zeros((buf.arg,), dtype=np_dtype(buf.dtype)) if arr is None else arr


def _write(buf: UOp, arr: Array) -> None:
    if _is_reference(buf.device):
        _storage[buf] = arr
    else:
        Device[str(buf.device)].copyin(buf, arr)


def run_schedule(sched: Schedule, lower_kernels: bool = True, ops: frozenset[Ops] = REFERENCE_OPS,
                 grid: GridLimits | None = None) -> None:
    """Run a schedule's items in order on REFERENCE storage: copies copy; kernels are lowered with `ops` (and
    `grid`) and run as linear programs, or, with `lower_kernels=False`, evaluated as custom kernels."""
    for item in sched.items:
        body, bufs = item.src[0], item.src[1:]
        if body.op is Ops.COPY:
            _write(bufs[0], cast(np.array(_read(bufs[1]), copy=True), bufs[0].dtype))
        elif lower_kernels:
            prg = lower(item, ops, grid)
            arrays = [np.array(_read(b), copy=True) for b in bufs]
            run_program(prg, arrays, sched.var_vals)
            for slot in prg.outs:
                _write(bufs[slot], arrays[slot])
        else:
            ev = Evaluator(())
            variables = [u for u in body.toposort() if u.op is Ops.DEFINE_VAR]
            ev.var_vals.update({u: sched.var_vals[u.arg[0]] for u in variables})
            with np.errstate(all="ignore"):
                ev.evaluate(item, _Frame(()))
            ev.commit()
