"""The ALU table (layer 4): `ALU`, one row per ALU op with its meaning on integers and on floats, and
`exec_alu`, an op's value on Python scalars (constant folding). REFERENCE's numerics (backends/numerics.py)
apply the same rows to numpy arrays, so C division, modulo, shifts and integer pow are defined here only:
the row functions are written with Python's operators and numpy ufuncs, which mean the same on a Python int
(exact, unbounded) and on an integer array (wrapping at its width). spec/symbolic.md §1 and
spec/reference.md §3 are the two readings of this table. Each row also carries the facts the other lists
of ALU ops derive from (the dtypes it is defined on, float-only, libm), so a new op is one row here
(docs/where-to-add.md §1).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypeVar

import numpy as np

from uopgrad.dtype import ConstType, DType, dtypes, truncate
from uopgrad.ops import GroupOp, Ops

__all__ = ["ALU", "FOLDED", "Alu", "Undefined", "cdiv", "cmod", "exec_alu"]

# An operand of a row: a Python number or a numpy array; every row function takes either (dynamic by design).
Value: TypeAlias = Any
Fn: TypeAlias = Callable[..., Value]


# ---------------------------------------------------------------------- integer meanings, scalar or array
# C's integer meanings return what they are given: an int for ints, an array (wrapping) for arrays
_IntOrArray = TypeVar("_IntOrArray", int, np.ndarray)


def _cdivmod(a: _IntOrArray, b: _IntOrArray) -> tuple[_IntOrArray, _IntOrArray]:
    """C's quotient (rounded toward zero) and remainder (the sign of a): Python's floor divmod moved one step
    toward zero where b does not divide a and the signs differ. a == b*q + r either way."""
    q, r = divmod(a, b)
    step = (r != 0) & ((a < 0) != (b < 0))
    return q + step, r - b * step


def cdiv(a: _IntOrArray, b: _IntOrArray) -> _IntOrArray:
    """C division: the quotient rounded toward zero."""
    return _cdivmod(a, b)[0]


def cmod(a: _IntOrArray, b: _IntOrArray) -> _IntOrArray:
    """C remainder: the sign of the dividend, a == b*cdiv(a, b) + cmod(a, b)."""
    return _cdivmod(a, b)[1]


def _ipow(a: Value, b: Value) -> Value:
    """Integer power (b >= 0), wrapping on arrays; a huge Python int is not worth folding."""
    if isinstance(a, int) and abs(a) > 1 and b > 4096:
        raise OverflowError(f"{a} ** {b} is too large to fold")
    return a**b


def _as_left(a: Value, b: Value) -> Value:
    """A shift count in the shifted value's dtype (numpy refuses to shift uint64 by int64)."""
    return b.astype(a.dtype) if isinstance(b, np.ndarray) else b


def _max(a: Value, b: Value) -> Value:
    return np.maximum(a, b) if isinstance(a, np.ndarray) else max(a, b)


def _where(c: Value, a: Value, b: Value) -> Value:
    return np.where(c.astype(np.bool_), a, b) if isinstance(c, np.ndarray) else (a if c else b)


def _same(a: Value) -> Value:
    return a


def _mulacc(a: Value, b: Value, c: Value) -> Value:
    return a * b + c


def _neg_pow(a: Value, b: Value) -> Value:
    """REFERENCE's integer a ** b for b < 0, the truncated real result: 1 for base 1, ±1 for -1, else 0."""
    return np.where(a == 1, 1, np.where(a == -1, np.where(np.remainder(b, 2) != 0, -1, 1), 0))


def _threefry(x: Value, key: Value) -> Value:
    """Threefry-2x32 (20 rounds) of the two 32-bit halves of `x` under `key`, as tinygrad decomposes it."""
    x, key = x.astype(np.uint64), key.astype(np.uint64)
    lo = np.uint64(0xFFFFFFFF)
    x0, x1 = (x & lo).astype(np.uint32), (x >> np.uint64(32)).astype(np.uint32)
    k0, k1 = (key & lo).astype(np.uint32), (key >> np.uint64(32)).astype(np.uint32)
    ks = (k1, k0 ^ k1 ^ np.uint32(0x1BD11BDA), k0)
    lo32 = x0 + ks[2]
    hi32 = x1 + ks[0]
    for i in range(5):
        for r in ((13, 15, 26, 6), (17, 29, 16, 24))[i % 2]:
            lo32, hi32 = lo32 + hi32, (lo32 + hi32) ^ ((hi32 << np.uint32(r)) | (hi32 >> np.uint32(32 - r)))
        lo32, hi32 = lo32 + ks[i % 3], hi32 + ks[(i + 1) % 3] + np.uint32(i + 1)
    return (hi32.astype(np.uint64) << np.uint64(32)) | lo32.astype(np.uint64)


# ---------------------------------------------------------------------- the table
@dataclass(frozen=True, slots=True)
class Undefined:
    """Operands where C leaves an integer result undefined: constant folding raises `error` (the node stays),
    REFERENCE gives `value` (spec/reference.md §3)."""

    where: Callable[[Value, Value, int], Value]  # (a, b, bits) -> bool, or a bool mask on arrays
    value: Callable[[Value, Value], Value]  # REFERENCE's result there, on arrays (cast to the result dtype)
    error: type[ArithmeticError]
    why: str  # formatted with a, b and bits


@dataclass(frozen=True, slots=True)
class Alu:
    """One ALU op. `ints` is its meaning on integers (Python ints or integer arrays; bool arrays run as 0/1
    ints, then `!= 0`), `bools` replaces it on bools where that is not the meaning, `floats` is IEEE
    (numpy, on float64 scalars or float arrays). None: the op means nothing there (TypeError).

    The row is also what the rest of the repository derives its lists of ops from: `defined_on` (the
    dtypes the conformance suite and the tests run it on), `float_only`, and `libm` (its error bound)."""

    ints: Fn | None
    floats: Fn | None
    bools: Fn | None = None
    undefined: Undefined | None = None
    on_values: bool = False  # comparisons and WHERE: computed on the operands whatever the result dtype
    fold: Literal["always", "floats", "never"] = "always"  # what constant folding computes
    on: frozenset[DType] | None = None  # the dtypes it is defined on where that is not what ints/floats say
    libm: bool = False  # a libm function (not correctly rounded): the transcendental error bound

    @property
    def defined_on(self) -> frozenset[DType]:
        """The value dtypes the op is defined on (spec/reference.md §3): `on`, else the integers and bool
        where it has an integer meaning and the floats where it has a float one."""
        if self.on is not None:
            return self.on
        return (_INTEGRAL if self.ints is not None else frozenset()) | (
            _FLOATS if self.floats is not None else frozenset()
        )

    @property
    def float_only(self) -> bool:
        """Whether the op means something on floats only (EXP2, SQRT, ...)."""
        return bool(self.defined_on) and self.defined_on <= _FLOATS


_FLOATS: frozenset[DType] = frozenset(dtypes.floats)
_INTEGRAL: frozenset[DType] = frozenset((dtypes.bool, *dtypes.ints))
_NUMBERS: frozenset[DType] = frozenset((*dtypes.ints, *dtypes.floats))  # not bool


def _div(why: str = "integer division or modulo by zero") -> Undefined:
    return Undefined(lambda a, b, bits: b == 0, lambda a, b: 0, ZeroDivisionError, why)


def _shift(value: Fn) -> Undefined:
    return Undefined(
        lambda a, b, bits: (b < 0) | (b >= bits),
        value,
        ArithmeticError,
        "shift count {b} is outside [0, {bits})",
    )


_NEG_POW = Undefined(lambda a, b, bits: b < 0, _neg_pow, ArithmeticError, "{a} ** {b} has no integer value")
_SHR_FILL = _shift(lambda a, b: np.where(a < 0, -1, 0))  # the sign bits shifted on: -1 for a negative

# One row per ALU op (docs/style.md P7), in the order of `Ops` (test_uop.py holds the enum to it); adding an
# op is a row here, then the enum, renderer and gradient (docs/where-to-add.md §1).
ALU: dict[Ops, Alu] = {
    Ops.EXP2: Alu(None, np.exp2, libm=True),
    Ops.LOG2: Alu(None, np.log2, libm=True),
    Ops.SIN: Alu(None, np.sin, libm=True),
    Ops.SQRT: Alu(None, np.sqrt),
    Ops.RECIPROCAL: Alu(None, np.reciprocal),
    Ops.NEG: Alu(operator.neg, np.negative, bools=np.logical_not),
    Ops.TRUNC: Alu(_same, np.trunc),
    Ops.ADD: Alu(operator.add, np.add),
    Ops.MUL: Alu(operator.mul, np.multiply),
    Ops.SHL: Alu(
        lambda a, b: a << _as_left(a, b), None, undefined=_shift(lambda a, b: 0), on=frozenset(dtypes.ints)
    ),
    Ops.SHR: Alu(lambda a, b: a >> _as_left(a, b), None, undefined=_SHR_FILL, on=frozenset(dtypes.ints)),
    Ops.CDIV: Alu(cdiv, lambda a, b: np.trunc(np.divide(a, b)), undefined=_div(), on=_NUMBERS),
    Ops.MAX: Alu(_max, np.maximum),  # NaN-propagating
    Ops.CMOD: Alu(cmod, np.fmod, undefined=_div(), on=_NUMBERS),
    Ops.CMPLT: Alu(operator.lt, operator.lt, on_values=True),
    Ops.CMPNE: Alu(operator.ne, operator.ne, on_values=True),
    Ops.CMPEQ: Alu(operator.eq, operator.eq, on_values=True),
    Ops.XOR: Alu(operator.xor, None),
    Ops.OR: Alu(operator.or_, None),
    Ops.AND: Alu(operator.and_, None),
    # kernel-level ops, left for the backend: never folded. THREEFRY hashes uint64 words (any operand's bits)
    Ops.THREEFRY: Alu(_threefry, _threefry, bools=_threefry, fold="never", on=frozenset({dtypes.uint64})),
    Ops.SUB: Alu(operator.sub, np.subtract),
    # an integer FDIV is C division; only lowering makes one, so constant folding leaves it
    Ops.FDIV: Alu(cdiv, np.divide, undefined=_div(), fold="floats", on=_NUMBERS),
    Ops.POW: Alu(_ipow, np.power, undefined=_NEG_POW, libm=True),
    Ops.FLOORDIV: Alu(operator.floordiv, np.floor_divide, undefined=_div(), on=_NUMBERS),
    Ops.FLOORMOD: Alu(operator.mod, np.remainder, undefined=_div("integer modulo by zero"), on=_NUMBERS),
    Ops.WHERE: Alu(_where, _where, on_values=True),
    Ops.MULACC: Alu(_mulacc, _mulacc, fold="never", on=_NUMBERS),  # kernel-level: a*b+c, rounded twice
}
FOLDED: frozenset[Ops] = frozenset(op for op, row in ALU.items() if row.fold != "never")

# exec_alu's two meanings by result dtype: True for IEEE floats, False for integers (int, index and bool)
_IS_FLOAT: dict[DType, bool] = {
    **dict.fromkeys((*dtypes.ints, dtypes.index, dtypes.bool), False),
    **dict.fromkeys(dtypes.floats, True),
}
_NOTHING = Alu(None, None, fold="never")  # what exec_alu reads for an op outside the table


# ---------------------------------------------------------------------- the table on Python scalars
def exec_alu(op: Ops, dtype: DType, operands: Sequence[ConstType]) -> ConstType:
    """The value of `op` on constant operands, truncated to the result `dtype` (ints wrap, floats round).

    Comparisons and WHERE act on the operand values; other ops use integer semantics for int, index and
    bool results (FLOORDIV/FLOORMOD round toward -inf, CDIV/CMOD toward zero, bool NEG is `not`) and
    IEEE float64 semantics, rounded, for float results. Where the value is undefined it raises
    ArithmeticError (integer division by zero, a negative integer exponent, a shift count outside the
    width); an op that means nothing for `dtype` (a float AND) raises TypeError.
    """
    row = ALU.get(op, _NOTHING)
    dt = dtype.scalar()
    vals = [float(v) if isinstance(v, float) else v for v in operands]  # FloatConst compares by bits
    if row.on_values and row.ints is not None:
        out = row.ints(*vals)
        return out if op in GroupOp.Comparison else truncate(dt, out)
    is_float = _IS_FLOAT.get(dt)
    if is_float:
        if row.floats is None or row.fold == "never":
            raise TypeError(f"{op} has no value on {dtype}")
        with np.errstate(all="ignore"):
            return truncate(dt, float(row.floats(*(np.float64(v) for v in vals))))
    if is_float is None or any(isinstance(v, float) for v in vals):
        raise TypeError(f"{op} has no value on {dtype} operands {vals}")
    fn = row.bools if row.bools is not None and dt == dtypes.bool else row.ints
    if fn is None or row.fold != "always":
        raise TypeError(f"{op} has no value on {dtype}")
    if (u := row.undefined) is not None and u.where(vals[0], vals[1], bits := 8 * dt.itemsize):
        raise u.error(u.why.format(a=vals[0], b=vals[1], bits=bits))
    return truncate(dt, fn(*vals))
