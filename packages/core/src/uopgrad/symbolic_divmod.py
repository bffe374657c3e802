"""Floor division and modulo of index expressions (below uop.py): `pm_div_mod`, the rules that cancel, split,
nest and factor `x // y` and `x % y` using the value ranges of x and y. Index only: the unbounded integers,
where floor division is exact and nothing wraps.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING

from uopgrad.dtype import dtypes
from uopgrad.errors import SymbolicDivisionError
from uopgrad.ops import Ops
from uopgrad.rewrite import PatternMatcher, UPat
from uopgrad.uop_index import IndexMixin

if TYPE_CHECKING:
    from uopgrad.uop import UOp

__all__ = ["pm_div_mod", "fold_divmod"]

IDX = dtypes.index


def _usum(terms: list[UOp], like: UOp) -> UOp:
    return terms[0].usum(*terms[1:]) if terms else like.const_like(0)


def _sum0(terms: list[UOp], like: UOp) -> UOp:
    """0 + t0 + t1 + ...: a sum that starts at the constant 0, node for node. Candidate forms are ranked by
    their node count (nest by factor), so the shape matters; simplification removes the zeros afterwards."""
    ret = like.const_like(0)
    for t in terms:
        ret = ret + t
    return ret


def _cancel(d: UOp, x: UOp, y: UOp) -> UOp | None:
    """x//y (x%y) when every (x, y) in the ranges gives one quotient q: q (x - q*y)."""
    x0, x1, y0, y1 = x.vmin, x.vmax, y.vmin, y.vmax
    if not all(isinstance(v, int) for v in (x0, x1, y0, y1)):
        return None
    if y0 == y1 == 0:
        what = "division" if d.op is Ops.FLOORDIV else "modulo"
        raise SymbolicDivisionError(f"{what} by zero in {d.short()}")
    if y0 * y1 > 0 and len({x0 // y0, x0 // y1, x1 // y0, x1 // y1}) == 1:
        q = x0 // y0
        return x - q * y if d.op is Ops.FLOORMOD else d.const_like(q)
    return None


def _const_divisor(  # noqa: C901 (one rule list)
    d: UOp,
    x: UOp,
    y: UOp,
    c: int,
    peeled: UOp,
    const: int,
    terms_: list[UOp],
) -> UOp | None:
    """The rules for a constant divisor c > 0; `peeled + const` is x, `terms_` the terms of `peeled`."""
    is_mod = d.op is Ops.FLOORMOD
    # (a%(k*c))//c -> (a//c)%k, (a%(k*c))%c -> a%c
    if x.op is Ops.FLOORMOD and (k := x.src[1].divides(c)) is not None:
        if is_mod:
            return x.src[0] % y
        if k.op is Ops.CONST and k.arg > 0:
            return x.src[0] // y % k
    # (a%m + b)%c -> (a+b)%c where c divides m
    if is_mod:
        stripped = [
            u.src[0] if u.op is Ops.FLOORMOD and u.src[1].divides(c) is not None else u for u in terms_
        ]
        if any(a is not b for a, b in zip(stripped, terms_)):
            return (_usum(stripped, x) + const) % y
    factors = [u.const_factor() for u in terms_]
    terms = [u.divides(f) for u, f in zip(terms_, factors)]
    if any(t is None for t in terms):
        return None
    tv: list[UOp] = [t for t in terms if t is not None]
    fn: Callable[[int, int], int] = operator.mod if is_mod else operator.floordiv
    # one term that takes two values: a line through the two results
    if len(tv) == 1 and tv[0].vmax - tv[0].vmin == 1:
        v = tv[0]
        y1, y2 = fn(factors[0] * int(v.vmin) + const, c), fn(factors[0] * int(v.vmax) + const, c)
        return (y2 - y1) * (v - v.vmin) + y1
    # x is congruent (mod c) to a sum whose range lies in one period
    choices = [(r, r - c) if (r := f % c) * 2 == c else (min(r, r - c, key=abs),) for f in factors]
    for rems in itertools.product(*choices):
        rem = _sum0([r * v for r, v in zip(rems, tv)], x) + const % c
        if rem.vmin // c == rem.vmax // c:
            if is_mod:
                return rem - rem.vmin // c * c
            quo = _sum0([(f - r) // c * v for f, r, v in zip(factors, rems, tv)], x)
            return quo + const // c + rem.vmin // c
    # a common factor g of the terms and c
    if (g := math.gcd(*factors, c)) > 1:
        div = peeled.divides(g)
        if div is not None:
            new_x = div.simplify() + (const // g) % (c // g)
            if new_x.vmin >= 0:
                return new_x % (c // g) * g + const % g if is_mod else new_x // (c // g) + const // c
    # nest by a factor f of c: x//c -> (x//f)//(c//f); x%c -> (x//f)%(c//f)*f + x%f
    results: list[tuple[int, UOp]] = []
    nests = {
        abs(f)
        for u, f in zip(terms_, factors)
        if u.op not in (Ops.CONST, Ops.VCONST) and 1 < abs(f) < c and c % f == 0
    }
    for f in nests:
        newxs: UOp | None = fold_divmod(x // f)
        if newxs is None:
            continue
        if not is_mod:
            results.append((len(newxs.toposort()) - 1, newxs // (c // f)))
        elif x.vmin >= 0 and newxs.vmin >= 0:
            b_parts = [fi % f * t for fi, t in zip(factors, tv) if fi % f]
            if const % f:
                b_parts.append(x.const_like(const % f))
            b = _usum(b_parts, x)
            if 0 <= b.vmin and b.vmax < f:
                cand = (newxs % x.ufix(c // f)) * f + b
                results.append((len(cand.toposort()) - 1, cand))
    return min(results, key=lambda r: r[0])[1] if results else None


@functools.cache
def fold_divmod(d: UOp) -> UOp | None:
    """The general rule for an index FLOORDIV/FLOORMOD node `d`, or None when nothing applies."""
    x, y = d.src
    if (ret := _cancel(d, x, y)) is not None:
        return ret
    peeled, const = x.pop_const()
    if y.op is Ops.CONST and y.arg > 0:
        terms = list(peeled.split_uop(Ops.ADD))
        if (ret := _const_divisor(d, x, y, y.arg, peeled, int(const), terms)) is not None:
            return ret
    all_uops = list(x.split_uop(Ops.ADD))
    # a common factor of x and y: x//y -> (x/g)//(y/g), x%y -> ((x/g)%(y/g))*g
    gcd = IndexMixin.gcd(*all_uops, y).simplify()
    if not (gcd.op is Ops.CONST and gcd.arg == 1):
        xg, yg = x.divide_exact(gcd), y.divide_exact(gcd)
        if xg is not None and yg is not None:
            ret = xg.alu(d.op, yg)
            return ret * gcd if d.op is Ops.FLOORMOD else ret
    # (y*q + r)//y -> q + r//y, (y*q + r)%y -> r%y for non-negative x and y
    if y.vmin < 0 or x.vmin < 0:
        return None
    quo, rem = [], []
    for u in all_uops:
        if (q := u.divide_exact(y)) is not None:
            quo.append(q)
        elif y.op is Ops.CONST and (c := u.const_factor()) % y.arg != c and (t := u.divides(c)) is not None:
            rem.append(t * (c % y.arg))
            quo.append(t * (c // y.arg) if d.op is Ops.FLOORDIV else u.const_like(0))
        else:
            rem.append(u)
    if not quo:
        return None
    new_x = _sum0(rem, x) + x.const_like(0)
    if new_x.vmin < 0:
        return None
    return new_x % y if d.op is Ops.FLOORMOD else new_x // y + _sum0(quo, x)


def _cst(name: str) -> UPat:
    return UPat(Ops.CONST, name=name)


pm_div_mod = PatternMatcher(
    [
        # (x//c + a)//d -> (x + a*c)//(c*d) for c, d > 0
        (
            (UPat.var("x", IDX) // _cst("c") + _cst("a")) // _cst("d"),
            lambda x, c, a, d: (x + a * c) // (c * d) if c.arg > 0 and d.arg > 0 else None,
        ),
        # (x+c)//d -> (x + c%d)//d + c//d for d > 0
        (
            (UPat.var("x", IDX) + _cst("c")) // _cst("d"),
            lambda x, c, d: (
                (x + c.arg % d.arg) // d + c.arg // d.arg if c.arg % d.arg != c.arg and d.arg > 0 else None
            ),
        ),
        (UPat((Ops.FLOORDIV, Ops.FLOORMOD), IDX, name="d"), fold_divmod),
    ]
)
