"""Simplification under a gate (below uop.py): an index or a condition is rewritten knowing that the gate
around it holds (`pm_simplify_valid`), and the conditions of a `where` around a load move into the load's gate
(`pm_move_where_on_load`). A gate is an AND of clauses `X < c` and `X >= c` (`(X < c) != True`) on integer
expressions; each clause narrows X, and the expression is simplified with X replaced by a variable of the
narrowed range.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from uopgrad.dtype import ConstType, dtypes
from uopgrad.ops import Ops
from uopgrad.rewrite import PatternMatcher, UPat
from uopgrad.symbolic_rules import invalid_gate

if TYPE_CHECKING:
    from uopgrad.uop import UOp

__all__ = ["pm_drop_and_clauses", "pm_move_where_on_load", "pm_simplify_valid", "uop_given_valid"]

_IRREDUCIBLE = (Ops.CONST, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.RANGE)


def parse_valid(v: UOp) -> tuple[UOp, bool, int] | None:
    """(X, True, c) for a clause X <= c, (X, False, c) for X >= c, None for anything else."""
    if (
        v.op is Ops.CMPNE
        and v.src[1].op is Ops.CONST
        and v.src[1].arg == 1
        and (s0 := v.src[0]).op is Ops.CMPLT
        and dtypes.is_int(s0.src[0].dtype)
    ):
        return s0.src[0], False, int(s0.src[1].vmin)  # (X < c) != True is X >= c
    if v.op is Ops.CMPLT and dtypes.is_int(v.src[0].dtype):
        return v.src[0], True, int(v.src[1].vmax) - 1  # X < c is X <= c-1
    return None


def _same(xs: list[UOp]) -> bool:
    return all(x is xs[0] for x in xs)


def uop_given_valid(valid: UOp, uop: UOp, try_simplex: bool = True) -> UOp:  # noqa: C901 (one algorithm)
    """`uop` simplified knowing that `valid` holds (possibly `uop` itself)."""
    bounds: defaultdict[UOp, list[ConstType | None]] = defaultdict(lambda: [None, None])
    for stmt in valid.split_uop(Ops.AND):
        if (res := parse_valid(stmt)) is not None:
            expr, is_upper, c = res
            bounds[expr][int(is_upper)] = c
    all_candidates: list[tuple[UOp, UOp]] = []
    for i, (expr, v) in enumerate(bounds.items()):
        v0 = expr.vmin if v[0] is None else v[0]
        v1 = expr.vmax if v[1] is None else v[1]
        all_candidates.append((expr, type(expr).variable(f"fake{i}", v0, v1, expr.dtype)))
        if not try_simplex:
            continue
        # each candidate is a set of narrowed subexpressions; if every one gives the same result, keep it
        candidates = [[all_candidates[-1]]]
        if expr.op is Ops.ADD and v0 == 1 and all(u.op in _IRREDUCIBLE for u in expr.split_uop(Ops.ADD)):
            # X0 + X1 + ... >= 1 with every Xi >= 0: try each Xi >= 1 on its own
            candidates.append(
                [(xi, type(xi).variable(f"fake{i}", 1, xi.vmax, xi.dtype)) for xi in expr.split_uop(Ops.ADD)]
            )
        for candidate in candidates:
            subbed = [uop.substitute({x: nx}) for x, nx in candidate]
            if any(u is uop for u in subbed):
                continue  # a narrowed expression does not occur in uop
            news = [u.simplify().substitute({nx: x}).simplify() for (x, nx), u in zip(candidate, subbed)]
            if _same(news):
                uop = news[0]
            elif uop.op is Ops.STACK and len(uop.src) == 2:
                if _same([n.src[0] for n in news]):
                    uop = uop.replace(src=(news[0].src[0], uop.src[1]))
                if _same([n.src[1] for n in news]):
                    uop = uop.replace(src=(uop.src[0], news[0].src[1]))
    # every clause at once (whole expressions only)
    sub = dict(all_candidates)
    if (s_uop := uop.substitute(sub)) is not uop:
        uop = s_uop.simplify().substitute({nx: x for x, nx in sub.items()}).simplify()
    return uop


def _priority(v: UOp, valids: list[UOp]) -> int:
    # a clause whose expression occurs inside other clauses goes first: it can simplify them
    res = parse_valid(v)
    return sum(-1 for other in valids if res is not None and res[0] in other.toposort())


def simplify_valid(valid: UOp) -> UOp | None:
    """Each clause of an AND simplified given the clauses before it."""
    if valid.op_in_backward_slice_with_self(Ops.INDEX):
        return None  # only for index arithmetic: a loaded value is no clause
    valids = list(valid.split_uop(Ops.AND))
    ret: list[UOp] = []
    for stmt in dict.fromkeys(sorted(valids, key=lambda v: _priority(v, valids))):
        if ret:
            stmt = uop_given_valid(ret[0].uprod(*ret[1:]), stmt)
        ret.append(stmt)
    return ret[0].uprod(*ret[1:]) if ret != valids else None


def _gated_given_valid(cond: UOp, x: UOp, i: UOp) -> UOp | None:
    if x.dtype.scalar() != dtypes.index:
        return None
    return cond.where(uop_given_valid(cond, x, try_simplex=False), i)


pm_simplify_valid = PatternMatcher(
    [
        (UPat(Ops.AND, name="valid"), simplify_valid),
        (invalid_gate, _gated_given_valid),
    ]
)


def _drop_and_clauses(cond: UOp, x: UOp, i: UOp) -> UOp | None:
    """Clauses of a gate on no range of the gated index are dropped."""
    xr = x.ranges
    keep = [c for c in cond.split_uop(Ops.AND) if any(r in xr for r in c.ranges)]
    if len(keep) == len(list(cond.split_uop(Ops.AND))):
        return None
    return type(x).const(dtypes.bool, True).uprod(*keep).where(x, i)


pm_drop_and_clauses = PatternMatcher([(invalid_gate, _drop_and_clauses)])


def _where_on_load(cond: UOp, buf: UOp, idx: UOp, or_cast: UOp) -> UOp | None:
    """where(c, buf[idx], 0) -> buf[idx gated by c] for the clauses of c that only depend on idx's ranges."""
    clauses, load_valid = list(cond.split_uop(Ops.AND)), idx.get_valid()
    in_load = set(load_valid.split_uop(Ops.AND))
    idx_index = {u for u in idx.toposort() if u.op is Ops.INDEX}

    def movable(c: UOp) -> bool:
        return c.ranges.keys() <= idx.ranges.keys() and all(
            u in idx_index for u in c.toposort() if u.op is Ops.INDEX
        )

    rest = [c for c in clauses if c not in in_load]
    moved, keep = [c for c in rest if movable(c)], [c for c in rest if not movable(c)]
    if len(keep) == len(clauses):
        return None
    new = buf.index(idx.get_idx().valid(load_valid.uprod(*moved)))
    ret = new.cast(or_cast.dtype) if or_cast.op is Ops.CAST else new
    return type(ret).const(dtypes.bool, True).uprod(*keep).where(ret, ret.const_like(0))


_load = UPat(Ops.INDEX, src=(UPat.var("buf"), UPat.var("idx"))).or_casted("or_cast")
pm_move_where_on_load = PatternMatcher(
    [
        (UPat.var("cond").where(_load, 0), _where_on_load),
        (
            UPat.var("cond").where(0, _load),
            lambda cond, buf, idx, or_cast: _where_on_load(cond.logical_not(), buf, idx, or_cast),
        ),
    ]
)
