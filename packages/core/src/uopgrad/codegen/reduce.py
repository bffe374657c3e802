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

__all__ = ["exact_max", "identity_element", "pm_reduce", "reduce_context", "renumber"]


def identity_element(op: Ops, dtype: DType) -> ConstType:
    """The value a reduce starts from: 0 for ADD, 1 for MUL, the dtype's minimum (-inf for floats) for MAX."""
    if op is Ops.ADD:
        return dtypes.as_const(0, dtype)
    if op is Ops.MUL:
        return dtypes.as_const(1, dtype)
    if op is Ops.MAX:
        return dtypes.as_const(dtypes.min(dtype), dtype)
    raise ValueError(f"{op} is not a reduce op")


def exact_max(red: UOp, fast: UOp, only: UOp | None = None) -> UOp:
    """A float MAX reduce in any order (`fast`) has the right value; its bits can differ only where that
    value is a zero (which of 0.0 and -0.0 a tie keeps) or a NaN (which NaN comes first). There the reduce
    is done again in its own order: loops over copies of its ranges, the outermost running zero times
    unless needed (spec/opt.md §2) and, where `only` is given, unless `only` holds (a thread that stores)."""
    zero = UOp(Ops.CONST, red.dtype, (), 0.0)
    need = UOp(
        Ops.OR,
        dtypes.bool,
        (UOp(Ops.CMPNE, dtypes.bool, (fast, fast)), UOp(Ops.CMPEQ, dtypes.bool, (fast, zero))),
    )
    run = need if only is None else UOp(Ops.AND, dtypes.bool, (need, only))
    # fresh copies of its ranges and of those of the reduces nested in it, numbered after all of them (the
    # copies of its own outermost, the linearizer nests by number)
    nested = sorted(
        {r for u in red.src[0].toposort() if u.op is Ops.REDUCE for r in u.src[1:]}, key=lambda r: r.arg[0]
    )
    base = max(r.arg[0] for r in (*red.src[1:], *nested)) + 0.25
    sub: dict[UOp, UOp] = {}
    for i, r in enumerate((*red.src[1:], *nested)):
        bound = r.src[0] if i else UOp(Ops.WHERE, r.dtype, (run, r.src[0], UOp(Ops.CONST, r.dtype, (), 0)))
        sub[r] = UOp(Ops.RANGE, r.dtype, (bound,), (base + 0.01 * i, "reduce"))
    body = red.src[0].substitute(sub, walk=True)
    again = UOp(Ops.REDUCE, red.dtype, (body, *(sub[r] for r in red.src[1:])), Ops.MAX)
    return UOp(Ops.WHERE, red.dtype, (need, again, fast))


def renumber(sink: UOp) -> UOp:
    """Number the kernel's ranges 0, 1, ... in their current order (the linearizer nests by number)."""
    rs = sorted({u for u in sink.toposort() if u.op is Ops.RANGE}, key=lambda u: u.arg[0])
    if all(u.arg[0] == i for i, u in enumerate(rs)):
        return sink
    # through negative numbers first, which no range has: a range renamed to the number another still has
    # (with the same size and kind) would be that range, and the rewrite would merge the two loops
    sink = sink.substitute({u: u.replace(arg=(-1 - i, u.arg[1])) for i, u in enumerate(rs)}, walk=True)
    rs = sorted({u for u in sink.toposort() if u.op is Ops.RANGE}, key=lambda u: -u.arg[0])
    return sink.substitute({u: u.replace(arg=(-1 - u.arg[0], u.arg[1])) for u in rs}, walk=True)


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


pm_reduce = PatternMatcher(
    [
        (
            UPat(Ops.REDUCE, src=(UPat.var("x"),), allow_any_len=True, name="red"),
            _accumulate,
        ),  # REDUCE(x, *r) -> acc=identity; for r: acc = acc OP x; read acc after END
    ]
)
