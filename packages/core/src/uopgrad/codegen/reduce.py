"""Reduce lowering (codegen, layer 11): a kernel-level REDUCE(value, *ranges) becomes an accumulator.

The accumulator is a DEFINE_REG holding the op's identity; inside the reduce loops it is read
(LOAD(acc, *ranges)), combined with the value and written back (STORE(acc, ...)); the loops are closed by
END(range, body), innermost first, and the REDUCE's value is the register read after the outermost END. Where
the register is declared (and so re-initialised) is decided by the linearizer: in the innermost loop its
result depends on.

`never_nan(uops)`: the values of a linear program that are never NaN, which the renderers print MAX with.
MAX's template is `a if a is NaN or a > b, else b` (numpy's maximum, bit for bit). Where `a` can never be
NaN the NaN test is dead and the template is `a > b ? a : b`: the same choice in every case (a tie keeps
b, a NaN b is kept), and on x86 the one instruction `maxps a, b`. A float MAX reduce's accumulator is such
an `a`: `Tensor.max` sends `where(x != x, -inf, x)` into it (docs/semantics.md §5), and the accumulator
starts at -inf, so it only ever holds values that are not NaN.

The facts, as a table of op -> when its result is never NaN (`_RULES`); everything else may be NaN:
a non-float, a non-NaN constant, a register whose initial value and every stored value are never NaN
(proved together: the greatest set of registers for which that holds, so a register may feed itself), a
select of two such values or `where(v != v, c, v)` with such a `c`, a MAX of two such values, a lane read
or a vector of lanes of such values, and a conversion from an integer or of such a float.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

from uopgrad.dtype import ConstType, DType, dtypes
from uopgrad.ops import Ops
from uopgrad.rewrite import PatternMatcher, UPat
from uopgrad.uop import UOp

__all__ = ["exact_max", "identity_element", "never_nan", "pm_reduce", "reduce_context", "renumber"]


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


# ---------------------------------------------------------------------- values that are never NaN
_Known = Callable[[UOp], bool]


def _nan(u: UOp) -> bool:
    """Whether CONST `u` is a NaN."""
    return isinstance(u.arg, float) and math.isnan(u.arg)


def _const(u: UOp, _known: _Known) -> bool:
    return not _nan(u)


def _register(u: UOp, known: _Known) -> bool:  # LOAD from a register: the register's fact
    return u.src[0].op is Ops.DEFINE_REG and known(u.src[0])


def _isnan_of(c: UOp, v: UOp) -> bool:
    """Whether mask `c` is `v != v` (true exactly where v is NaN)."""
    return c.op is Ops.CMPNE and c.src[0] is v and c.src[1] is v


def _where(u: UOp, known: _Known) -> bool:
    c, a, b = u.src
    if _isnan_of(c, b):  # where(v != v, a, v): v where it is not NaN, else a
        return known(a)
    if c.op is Ops.CMPEQ and c.src[0] is a and c.src[1] is a:  # where(v == v, v, b)
        return known(b)
    return known(a) and known(b)


def _all(u: UOp, known: _Known) -> bool:
    return all(known(s) for s in u.src)


def _cast(u: UOp, known: _Known) -> bool:
    return not dtypes.is_float(u.src[0].dtype) or known(u.src[0])


_RULES: dict[Ops, Callable[[UOp, _Known], bool]] = {
    Ops.CONST: _const,
    Ops.LOAD: _register,
    Ops.WHERE: _where,
    Ops.MAX: _all,  # it returns one of its operands
    Ops.STACK: _all,
    Ops.GEP: _all,
    Ops.CAST: _cast,
}


def _facts(uops: tuple[UOp, ...], regs: frozenset[UOp]) -> tuple[set[UOp], _Known]:
    """The uops never NaN if the registers `regs` never hold a NaN, and the test for any uop against them."""
    out: set[UOp] = set(regs)

    def known(u: UOp) -> bool:
        return u in out or not _float(u) or (u.op is Ops.CONST and not _nan(u))

    for u in uops:
        if u not in out and (rule := _RULES.get(u.op)) is not None and _float(u) and rule(u, known):
            out.add(u)
    return out, known


def _float(u: UOp) -> bool:
    return dtypes.is_float(u.dtype.scalar())


def _plain(u: UOp, r: UOp) -> bool:
    """Whether `u` uses register `r` only as a whole value: a LOAD of it or a STORE into it."""
    return u.op in (Ops.LOAD, Ops.STORE) and all(s is not r for s in u.src[1:])


def never_nan(uops: tuple[UOp, ...]) -> frozenset[UOp]:
    """The float uops of a linear program (in execution order) whose values are never NaN."""
    regs = frozenset(
        u
        for u in uops
        if u.op is Ops.DEFINE_REG and _float(u) and u.src and u.src[0].op is Ops.CONST and not _nan(u.src[0])
    )
    regs -= {r for u in uops for r in u.src if r in regs and not _plain(u, r)}
    while True:  # drop each register a maybe-NaN value is stored into, until none is left to drop
        facts, known = _facts(uops, regs)
        bad = {u.src[0] for u in uops if u.op is Ops.STORE and u.src[0] in regs and not known(u.src[1])}
        if not bad:
            return frozenset(facts)
        regs -= bad
