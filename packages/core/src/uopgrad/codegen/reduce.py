"""Reduce lowering (codegen, layer 11): a kernel-level REDUCE(value, *ranges) becomes an accumulator.

The accumulator is a DEFINE_REG holding the op's identity; inside the reduce loops it is read
(LOAD(acc, *ranges)), combined with the value and written back (STORE(acc, ...)); the loops are closed by
END(range, body), innermost first, and the REDUCE's value is the register read after the outermost END. Where
the register is declared (and so re-initialised) is decided by the linearizer: in the innermost loop its
result depends on.
"""
from __future__ import annotations

import itertools

from uopgrad.dtype import ConstType, DType, dtypes
from uopgrad.ops import Ops
from uopgrad.rewrite import PatternMatcher, UPat
from uopgrad.uop import UOp

__all__ = ["identity_element", "pm_reduce", "reduce_context"]


def identity_element(op: Ops, dtype: DType) -> ConstType:
    """The value a reduce starts from: 0 for ADD, 1 for MUL, the dtype's minimum (-inf for floats) for MAX."""
    if op is Ops.ADD:
        return dtypes.as_const(0, dtype)
    if op is Ops.MUL:
        return dtypes.as_const(1, dtype)
    if op is Ops.MAX:
        return dtypes.as_const(dtypes.min(dtype), dtype)
    raise ValueError(f"{op} is not a reduce op")


def reduce_context() -> itertools.count[int]:
    """The context of `pm_reduce`: numbers the accumulators of one kernel 0, 1, ..."""
    return itertools.count()


def _accumulate(ctx: itertools.count[int], red: UOp, x: UOp) -> UOp:
    ranges, op, dt = red.src[1:], red.arg, red.dtype
    acc = UOp(Ops.DEFINE_REG, dt, (UOp(Ops.CONST, dt, (), identity_element(op, dt.scalar())),), next(ctx))
    body = UOp(Ops.STORE, dtypes.void, (acc, UOp(op, dt, (UOp(Ops.LOAD, dt, (acc, *ranges)), x))))
    for r in reversed(ranges):
        body = UOp(Ops.END, dtypes.void, (r, body))
    return UOp(Ops.LOAD, dt, (acc, body))


pm_reduce = PatternMatcher([
    (UPat(Ops.REDUCE, src=(UPat.var("x"),), allow_any_len=True, name="red"),
     _accumulate),  # REDUCE(x, *r) -> acc=identity; for r: acc = acc OP x; read acc after END
])
